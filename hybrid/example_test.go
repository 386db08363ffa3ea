package hybrid_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/hybrid"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
)

// A service runs 4 instances behind a round-robin balancer. Each keeps half
// of every limit locally (headroom 2 over its quarter share); Redis keeps
// the exact limit across all four.
func Example() {
	client := redis.NewClient(&redis.Options{
		Addr: redisAddr(), // your Redis, e.g. localhost:6379
		// Let deadlines cut short a round trip to a stalled Redis.
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	global, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		panic(err)
	}
	defer global.Close()
	local := memstore.New(memstore.Options{})
	defer local.Close()

	store, err := hybrid.New(local, global, hybrid.Options{
		Fraction: hybrid.FractionFor(4, 2), // 0.5
		Guard: failover.GuardOptions{
			Timeout:      50 * time.Millisecond,
			ContextBound: true, // redisstore returns as soon as a call's context ends
		},
	})
	if err != nil {
		panic(err)
	}
	lim, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerMinute(600)}})
	if err != nil {
		panic(err)
	}
	res, err := floodgate.Allow(context.Background(), lim, "user:42")
	fmt.Println(res.Allowed, res.Source, res.Limit, err)
	// Output:
	// true hybrid:global 600/min <nil>
}

// What each part decides. An in-memory store stands in for Redis here so
// the example runs anywhere; a key over its local share is denied without
// asking the global store, and when the global store fails the local
// verdict stands.
func ExampleNew() {
	mem := memstore.New(memstore.Options{})
	defer mem.Close()
	global := &flaky{Store: mem}
	local := memstore.New(memstore.Options{})
	defer local.Close()
	store, err := hybrid.New(local, global, hybrid.Options{Fraction: 0.5})
	if err != nil {
		panic(err)
	}
	lim, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerMinute(4)}})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	show := func(res floodgate.Result, err error) { fmt.Println(res.Allowed, res.Remaining, res.Source, err) }

	show(floodgate.Allow(ctx, lim, "a")) // the local share of 2 passes it; Redis decides
	show(floodgate.Allow(ctx, lim, "a"))
	show(floodgate.Allow(ctx, lim, "a")) // over the local share: Redis is not asked
	global.down = true
	show(floodgate.Allow(ctx, lim, "b")) // Redis down: the local verdict stands
	// Output:
	// true 3 hybrid:global <nil>
	// true 2 hybrid:global <nil>
	// false 0 hybrid:local <nil>
	// true 1 local-fallback <nil>
}

// flaky is a store that can be switched off.
type flaky struct {
	floodgate.Store
	down bool
}

func (f *flaky) Decide(ctx context.Context, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	if f.down {
		return algo.Verdict{}, fmt.Errorf("connection refused")
	}
	return f.Store.Decide(ctx, set, key, cost)
}

func (f *flaky) Reserve(ctx context.Context, set *algo.Set, key string, cost int64, maxWait time.Duration) (algo.Verdict, algo.Ticket, error) {
	if f.down {
		return algo.Verdict{}, algo.Ticket{}, fmt.Errorf("connection refused")
	}
	return f.Store.Reserve(ctx, set, key, cost, maxWait)
}

func ExampleFractionFor() {
	fmt.Println(hybrid.FractionFor(10, 2))  // 10 replicas, headroom 2
	fmt.Println(hybrid.FractionFor(3, 1.5)) // 3 replicas, headroom 1.5
	fmt.Println(hybrid.FractionFor(1, 2))   // a single instance holds it all
	fmt.Println(hybrid.FractionFor(20, 0))  // default headroom
	// Output:
	// 0.2
	// 0.5
	// 1
	// 0.1
}
