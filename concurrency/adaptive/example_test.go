package adaptive_test

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/adaptive"
)

// The limit starts low while the Gradient measures the resource's latency
// when nothing queues, then follows the latency of the work it admits.
func ExampleGradient() {
	g, err := adaptive.NewGradient(adaptive.GradientOptions{})
	if err != nil {
		panic(err)
	}
	lim, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Name: "db", Controller: g})
	if err != nil {
		panic(err)
	}
	res, p := lim.Acquire(context.Background(), "")
	// ... the query ...
	p.ReleaseWith(concurrency.Success) // Dropped for a timeout or an overload error
	fmt.Println(res.Allowed, res.Limit)
	// Output: true 3
}
