package floodgatetest

import (
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// NewLimiter returns the limiter floodgate.New builds for a policy of name
// and limits over store, and fails t if it cannot: the one line most tests
// of a store or a front end start with.
func NewLimiter(t testing.TB, store floodgate.Store, name string, limits ...floodgate.Limit) *floodgate.PolicyLimiter {
	t.Helper()
	lim, err := floodgate.New(store, floodgate.Policy{Name: name, Limits: limits})
	if err != nil {
		t.Fatalf("floodgate.New(%q, %v): %v", name, limits, err)
	}
	return lim
}

// MemLimiter is NewLimiter over a memstore of its own (system clock,
// default options), closed when t ends: for tests of a front end, where
// the engine is not what is tested.
func MemLimiter(t testing.TB, name string, limits ...floodgate.Limit) *floodgate.PolicyLimiter {
	t.Helper()
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	return NewLimiter(t, store, name, limits...)
}
