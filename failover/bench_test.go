package failover_test

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/memstore"
)

// BenchmarkDecide measures what a Guard adds to a decision, with an
// in-memory store standing in for Redis: "direct" is the store alone,
// "guarded" goes through the timeout and breaker, "guarded-bounded" does
// so for a Bounded store (no goroutine per call), "open" is a decision
// while the breaker is open (the policy alone).
func BenchmarkDecide(b *testing.B) {
	mem := memstore.New(memstore.Options{})
	b.Cleanup(func() { mem.Close() })
	guarded, err := failover.New(mem, failover.Options{Mode: failover.FailOpen})
	if err != nil {
		b.Fatal(err)
	}
	bounded, err := failover.New(&fakeRemote{mem: mem}, failover.Options{Mode: failover.FailOpen, Guard: failover.GuardOptions{ContextBound: true}})
	if err != nil {
		b.Fatal(err)
	}
	remote := &fakeRemote{mem: mem, unblock: make(chan struct{})}
	remote.set(failing)
	open, err := failover.New(remote, failover.Options{Mode: failover.FailOpen})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		store floodgate.Store
	}{{"direct", mem}, {"guarded", guarded}, {"guarded-bounded", bounded}, {"open", open}} {
		b.Run(bc.name, func(b *testing.B) {
			lim, err := floodgate.New(bc.store, floodgate.Policy{Name: "bench", Limits: []floodgate.Limit{floodgate.PerSecond(100_000_000)}})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					floodgate.Allow(ctx, lim, "k")
				}
			})
		})
	}
}
