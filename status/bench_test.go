package status

import (
	"context"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/metrics"
)

// passthrough is a wrapper that records nothing: the cost of a wrapper
// layer alone (an interface call and a Result copy), which the recorder
// pays like any wrapper.
type passthrough struct{ floodgate.Limiter }

func (p passthrough) AllowN(ctx context.Context, key string, cost int64) (floodgate.Result, error) {
	return p.Limiter.AllowN(ctx, key, cost)
}

// BenchmarkAllow compares a decision on the memory limiter bare, through a
// wrapper that does nothing, through the status recorder, and as the
// daemon makes it (metrics wrapper) with and without the recorder; on one
// key (the recorder's counters always hit) and on 1000 keys cycling
// through counters of 8 per shard (they always miss); status+hot with the
// first 10 keys among the heavy hitters whose last decisions are kept. docs/operating.md
// says how to compare them with benchstat.
func BenchmarkAllow(b *testing.B) {
	for _, nkeys := range []int{1, 1000} {
		keys := make([]string, nkeys)
		for i := range keys {
			keys[i] = "user:" + strconv.Itoa(i*i%997)
		}
		for _, bc := range []struct {
			name                       string
			pass, metrics, status, hot bool
		}{
			{"wrap=bare", false, false, false, false},
			{"wrap=passthrough", true, false, false, false},
			{"wrap=status", false, false, true, false},
			{"wrap=status+hot", false, false, true, true},
			{"wrap=metrics", false, true, false, false},
			{"wrap=metrics+status", false, true, true, false},
		} {
			b.Run("keys="+strconv.Itoa(nkeys)+"/"+bc.name, func(b *testing.B) {
				lim := benchLimiter(b)
				if bc.pass {
					lim = passthrough{lim}
				}
				if bc.metrics {
					m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{})
					if err != nil {
						b.Fatal(err)
					}
					lim = m.Limiter(lim)
				}
				if bc.status {
					s := New(Options{})
					lim = s.Limiter(lim)
					if bc.hot {
						// The first keys are heavy hitters whose decisions
						// are kept (with one key, every decision is).
						var top []Count
						for _, k := range keys[:min(len(keys), DefaultTop)] {
							top = append(top, Count{Key: k})
						}
						s.policies[lim.Name()].refreshHot(top)
					}
				}
				ctx := context.Background()
				for _, k := range keys {
					floodgate.Allow(ctx, lim, k)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if _, err := floodgate.Allow(ctx, lim, keys[i%len(keys)]); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}
