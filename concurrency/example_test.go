package concurrency_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/concurrency"
)

// At most two reports are built at once; a third caller is refused and
// told why.
func Example() {
	lim, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Name: "reports", Limit: 2})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	_, a := lim.Acquire(ctx, "")
	res, b := lim.Acquire(ctx, "")
	fmt.Println(res.Allowed, res.InFlight, "of", res.Limit)

	res, _ = lim.Acquire(ctx, "")
	fmt.Println(res.Allowed, res.Reason, res.Err())

	a.Release()
	a.Release() // only the first Release counts
	res, c := lim.Acquire(ctx, "")
	fmt.Println(res.Allowed, res.InFlight)
	b.Release()
	c.Release()
	// Output:
	// true 2 of 2
	// false full concurrency: every slot of the key is taken; retry when work in flight finishes, or give the limiter a wait queue (Options.MaxWaiting)
	// true 2
}

// A wait queue holds callers that find every slot taken, for at most
// MaxWait each.
func ExampleOptions_backlog() {
	lim, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Limit: 1, MaxWaiting: 10, MaxWait: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	_, held := lim.Acquire(ctx, "user:1")
	go func() {
		time.Sleep(10 * time.Millisecond) // the work of the first holder
		held.Release()
	}()
	res, p := lim.Acquire(ctx, "user:1") // waits for the release
	defer p.Release()
	fmt.Println(res.Allowed)
	// Output: true
}

// A front end holds a slot for a client in another process: the client
// renews its lease by token and releases it when done; a client that dies
// loses the slot when the lease runs out.
func ExampleLimiter_AcquireLease() {
	lim, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Name: "jobs", Limit: 1})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	res, lease := lim.AcquireLease(ctx, "tenant:7", 30*time.Second)
	fmt.Println(res.Allowed)
	fmt.Println(lim.RenewLease(ctx, lease))
	fmt.Println(lim.ReleaseLease(ctx, lease))
	fmt.Println(lim.RenewLease(ctx, lease))
	// Output:
	// true
	// <nil>
	// <nil>
	// concurrency: the lease no longer holds a slot (it expired or was released); acquire a new one
}
