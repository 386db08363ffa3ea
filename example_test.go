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
		res, _ := lim.Allow(ctx, "user:42")
		fmt.Printf("allowed=%v remaining=%d retry=%s limit=%s\n", res.Allowed, res.Remaining, res.RetryAfter, res.Limit)
	}
	clock.Advance(500 * time.Millisecond)
	res, _ := lim.Allow(ctx, "user:42")
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
		res, _ := lim.Allow(ctx, key)
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
