package metrics_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/metrics"
	"github.com/floodgate-go/floodgate/testkit"
)

// BenchmarkAllow compares a decision on the bare memory limiter with the
// same decision through the metrics wrapper, on one key that stays allowed
// (a rate the benchmark cannot exhaust), so both do the same engine work.
// Besides wall time it reports cpu-ns/op, the CPU time of the benchmark's
// thread per decision, which other processes on a shared machine inflate
// far less. docs/BENCHMARKS.md reports the ratio.
func BenchmarkAllow(b *testing.B) {
	for _, bc := range []struct {
		name string
		wrap bool
	}{{"wrap=bare", false}, {"wrap=metrics", true}} {
		b.Run(bc.name, func(b *testing.B) {
			lim := benchLimiter(b, bc.wrap)
			ctx := context.Background()
			b.ReportAllocs()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cpu0, ok := testkit.ThreadCPU()
			n := 0
			for b.Loop() {
				if _, err := floodgate.Allow(ctx, lim, "user:42"); err != nil {
					b.Fatal(err)
				}
				n++
			}
			if cpu1, ok1 := testkit.ThreadCPU(); ok && ok1 && n > 0 {
				b.ReportMetric(float64(cpu1-cpu0)/float64(n), "cpu-ns/op")
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
	}{{"wrap=bare", false}, {"wrap=metrics", true}} {
		b.Run(bc.name, func(b *testing.B) {
			lim := benchLimiter(b, bc.wrap)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if _, err := floodgate.Allow(ctx, lim, "user:42"); err != nil {
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
		if _, err := floodgate.Allow(context.Background(), lim, "user:42"); err != nil {
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
