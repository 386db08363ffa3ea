package status

import (
	"context"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/metrics"
)

// BenchmarkAllow compares a decision on the memory limiter bare, through
// the status recorder, and as the daemon makes it (metrics wrapper) with
// and without the recorder. Keys cycle over 1000 users so the recorder's
// summaries see both hits and replacements. docs/operating.md reports the
// ratios (benchstat).
func BenchmarkAllow(b *testing.B) {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i*i%997)
	}
	for _, bc := range []struct {
		name            string
		metrics, status bool
	}{
		{"wrap=bare", false, false},
		{"wrap=status", false, true},
		{"wrap=metrics", true, false},
		{"wrap=metrics+status", true, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			lim := benchLimiter(b)
			if bc.metrics {
				m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{})
				if err != nil {
					b.Fatal(err)
				}
				lim = m.Limiter(lim)
			}
			if bc.status {
				lim = New(Options{}).Limiter(lim)
			}
			ctx := context.Background()
			for _, k := range keys {
				lim.Allow(ctx, k)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := lim.Allow(ctx, keys[i%len(keys)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

var _ floodgate.Limiter = (*limiter)(nil)
