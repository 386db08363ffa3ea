package metrics_test

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/metrics"
)

// BenchmarkAllow compares a decision on the bare memory limiter with the
// same decision through the metrics wrapper, on one key that stays allowed
// (a rate the benchmark cannot exhaust), so both do the same engine work.
// docs/BENCHMARKS.md reports the ratio.
func BenchmarkAllow(b *testing.B) {
	for _, bc := range []struct {
		name string
		wrap bool
	}{{"bare", false}, {"metrics", true}} {
		b.Run(bc.name, func(b *testing.B) {
			lim := benchLimiter(b, bc.wrap)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := lim.Allow(ctx, "user:42"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAllowParallel is BenchmarkAllow from GOMAXPROCS goroutines, so
// the wrapper's shared counters are contended as in a server.
func BenchmarkAllowParallel(b *testing.B) {
	for _, bc := range []struct {
		name string
		wrap bool
	}{{"bare", false}, {"metrics", true}} {
		b.Run(bc.name, func(b *testing.B) {
			lim := benchLimiter(b, bc.wrap)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if _, err := lim.Allow(ctx, "user:42"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

func benchLimiter(b *testing.B, wrap bool) floodgate.Limiter {
	b.Helper()
	s := memstore.New(memstore.Options{})
	b.Cleanup(func() { s.Close() })
	lim := floodgate.Limiter(newLimiter(b, s, "api", floodgate.PerSecond(1e9).WithBurst(1<<40)))
	if wrap {
		m, _ := newMetrics(b, metrics.Options{})
		lim = m.Limiter(lim)
		// The first decision creates the source's counters; time the ones
		// after it.
		if _, err := lim.Allow(context.Background(), "user:42"); err != nil {
			b.Fatal(err)
		}
	}
	return lim
}

// TestAllocsPerDecision: a counted decision allocates nothing the bare one
// does not.
func TestAllocsPerDecision(t *testing.T) {
	ctx := context.Background()
	m, _ := newMetrics(t, metrics.Options{})
	lim := m.Limiter(newLimiter(t, memStore(t, memstore.Options{}), "api", floodgate.PerSecond(1e9).WithBurst(1<<40)))
	for _, cost := range []int64{1, 0} {
		if _, err := lim.AllowN(ctx, "k", cost); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(200, func() { lim.AllowN(ctx, "k", cost) }); n != 0 {
			t.Errorf("cost %d: %v allocations per decision; want 0", cost, n)
		}
	}
}
