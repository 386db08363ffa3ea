package floodgate_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
)

// A policy of a burst limit and a sustained limit: both must pass.
func ExampleNew() {
	ctx := context.Background()
	clock := floodgatetest.NewClock(floodgatetest.Start) // a pinned clock keeps the output stable
	store := memstore.New(memstore.Options{Clock: clock})
	defer store.Close()

	lim, err := floodgate.New(store, floodgate.Policy{
		Name:   "api",
		Limits: []floodgate.Limit{floodgate.PerSecond(2), floodgate.PerHour(1000)},
	})
	if err != nil {
		panic(err)
	}
	for i := 0; i < 3; i++ {
		res, _ := floodgate.Allow(ctx, lim, "user:42")
		fmt.Printf("allowed=%v remaining=%d retry=%s limit=%s\n", res.Allowed, res.Remaining, res.RetryAfter, res.Limit)
	}
	clock.Advance(500 * time.Millisecond)
	res, _ := floodgate.Allow(ctx, lim, "user:42")
	fmt.Printf("after 500ms: allowed=%v\n", res.Allowed)
	// Output:
	// allowed=true remaining=1 retry=0s limit=2/s
	// allowed=true remaining=0 retry=0s limit=2/s
	// allowed=false remaining=0 retry=500ms limit=2/s
	// after 500ms: allowed=true
}

// Overrides give named keys their own limits; tiers pick limits by a
// property of the key.
func ExamplePolicy_overridesAndTiers() {
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	defer store.Close()

	lim, err := floodgate.New(store, floodgate.Policy{
		Name:      "jobs",
		Limits:    []floodgate.Limit{floodgate.PerSecond(10)},
		Overrides: map[string][]floodgate.Limit{"batch_worker": {floodgate.PerSecond(500)}},
		Tiers:     map[string][]floodgate.Limit{"pro": {floodgate.PerSecond(100)}},
		TierOf: func(key string) string {
			if len(key) > 4 && key[:4] == "pro:" {
				return "pro"
			}
			return ""
		},
	})
	if err != nil {
		panic(err)
	}
	for _, key := range []string{"free:1", "pro:7", "batch_worker"} {
		res, _ := floodgate.Allow(ctx, lim, key)
		fmt.Printf("%s: %s, %d remaining\n", key, res.Limit, res.Remaining)
	}
	// Output:
	// free:1: 10/s, 9 remaining
	// pro:7: 100/s, 99 remaining
	// batch_worker: 500/s, 499 remaining
}

// A chain checks global, per-user and per-IP limits in order; a denial
// anywhere refunds the links that had passed.
func ExampleAllowAll() {
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	mk := func(name string, l floodgate.Limit) floodgate.Limiter {
		lim, err := floodgate.New(store, floodgate.Policy{Name: name, Limits: []floodgate.Limit{l}})
		if err != nil {
			panic(err)
		}
		return lim
	}
	global, perUser, perIP := mk("global", floodgate.PerSecond(1000)), mk("user", floodgate.PerSecond(100)), mk("ip", floodgate.PerSecond(1))

	for i := 0; i < 2; i++ {
		res, check, err := floodgate.AllowAll(ctx,
			floodgate.Check{Limiter: global, Cost: 1},
			floodgate.Check{Limiter: perUser, Key: "alice", Cost: 1},
			floodgate.Check{Limiter: perIP, Key: "192.0.2.1", Cost: 1},
		)
		fmt.Println(res.Allowed, "check", check, res.Policy, err)
	}
	// Output:
	// true check 2 ip <nil>
	// false check 2 ip <nil>
}

// WaitAll waits until a whole chain passes: here the per-IP limit of 5 a
// second holds the sixth request for about 200 ms, while the global and
// per-user limits are charged only once it passes.
func ExampleWaitAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	mk := func(name string, l floodgate.Limit) floodgate.Limiter {
		lim, err := floodgate.New(store, floodgate.Policy{Name: name, Limits: []floodgate.Limit{l}})
		if err != nil {
			panic(err)
		}
		return lim
	}
	global, perUser, perIP := mk("global", floodgate.PerSecond(1000)), mk("user", floodgate.PerSecond(100)), mk("ip", floodgate.PerSecond(5))
	for range 6 {
		res, _, err := floodgate.WaitAll(ctx,
			floodgate.Check{Limiter: global},
			floodgate.Check{Limiter: perUser, Key: "alice"},
			floodgate.Check{Limiter: perIP, Key: "192.0.2.1"},
		)
		fmt.Println(res.Allowed, res.Policy, err)
	}
	// Output:
	// true ip <nil>
	// true ip <nil>
	// true ip <nil>
	// true ip <nil>
	// true ip <nil>
	// true ip <nil>
}

// Reserve books units for the instant they fit and says when that is;
// Cancel gives back what no later reservation relies on.
func ExamplePolicyLimiter_ReserveN() {
	ctx := context.Background()
	clock := floodgatetest.NewClock(floodgatetest.Start)
	store := memstore.New(memstore.Options{Clock: clock})
	defer store.Close()
	lim, err := floodgate.New(store, floodgate.Policy{Name: "upstream", Limits: []floodgate.Limit{floodgate.PerSecond(10)}})
	if err != nil {
		panic(err)
	}
	lim.AllowN(ctx, "api.example.com", 10) // the burst is used up
	for range 3 {
		r, _ := lim.ReserveN(ctx, "api.example.com", 1)
		fmt.Printf("ok=%v use in %s\n", r.OK, r.Delay)
	}
	last, _ := lim.ReserveN(ctx, "api.example.com", 2)
	last.Cancel(ctx) // the last in line: all of it comes back
	next, _ := lim.ReserveN(ctx, "api.example.com", 1)
	fmt.Printf("after the cancel: use in %s\n", next.Delay)

	// A deadline bounds the wait: what would come later is not taken.
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r, _ := lim.ReserveN(short, "api.example.com", 10)
	fmt.Printf("10 more within 1s: ok=%v (they would wait %s)\n", r.OK, r.Delay)
	// Output:
	// ok=true use in 100ms
	// ok=true use in 200ms
	// ok=true use in 300ms
	// after the cancel: use in 400ms
	// 10 more within 1s: ok=false (they would wait 1.4s)
}

// Wait blocks until the units pass: a client of a rate-limited API spaces
// its calls instead of being refused.
func ExampleWait() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	lim, err := floodgate.New(store, floodgate.Policy{Name: "calls", Limits: []floodgate.Limit{floodgate.PerSecond(50).WithBurst(1)}})
	if err != nil {
		panic(err)
	}
	for i := range 3 {
		if _, err := floodgate.Wait(ctx, lim, "api.example.com"); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("call", i+1) // at most one call every 20ms
	}
	// Output:
	// call 1
	// call 2
	// call 3
}
