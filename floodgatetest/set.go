package floodgatetest

import (
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
)

// NewSet compiles limits into the algo.Set a Store receives, as a Limiter
// does for a policy named policy (set name "" for its defaults). Engine
// tests use it to call a Store directly.
func NewSet(policy, name string, limits ...floodgate.Limit) (*algo.Set, error) {
	ts := make([]algo.Transition, len(limits))
	for i, l := range limits {
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("limit %d (%s): %w", i+1, l, err)
		}
		t, err := algo.New(l.Spec())
		if err != nil {
			return nil, err
		}
		ts[i] = t
	}
	return algo.NewSet(policy, name, ts)
}
