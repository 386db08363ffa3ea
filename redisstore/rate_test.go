package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// TestValidateGCRAInterval: GCRA's interval is Period/Rate rounded up to
// the microsecond, so a limit whose rounding costs more than 1% of its
// rate is rejected, and one that costs less is kept at a rate slightly
// below the configured one, never above.
func TestValidateGCRAInterval(t *testing.T) {
	for _, c := range []struct {
		l    floodgate.Limit
		want int64 // µs; 0: rejected
	}{
		{floodgate.PerSecond(1_000_000), 1},
		{floodgate.PerSecond(600_000), 0},   // 1.67µs → 2µs: 20% slower
		{floodgate.PerSecond(500_001), 2},   // 1.999996µs → 2µs
		{floodgate.PerSecond(1_009_000), 1}, // 0.991µs → 1µs: 0.9% slower
		{floodgate.PerSecond(1_010_101), 0}, // 0.990µs → 1µs: 1.01% slower
		{floodgate.PerSecond(3), 333_334},
		{floodgate.PerSecond(10_000), 100},
		{floodgate.PerSecond(99_010), 0},  // 10.0999µs → 11µs: 8.9% slower
		{floodgate.PerSecond(9_901), 101}, // 100.9999µs → 101µs
		{floodgate.Limit{Rate: 3, Period: 1001 * time.Nanosecond}, 0},
		{floodgate.Limit{Rate: 1 << 62, Period: 1<<63 - 1}, 0},
		{floodgate.PerDay(1).WithBurst(1 << 40), 0}, // the bucket spans beyond 2^52µs
	} {
		err := validateLimit(c.l)
		switch {
		case c.want == 0 && !errors.Is(err, floodgate.ErrInvalidLimit):
			t.Errorf("%s: %v, want ErrInvalidLimit", c.l, err)
		case c.want == 0 && !strings.Contains(err.Error(), "rate"):
			t.Errorf("%s: %q does not say what to do", c.l, err)
		case c.want != 0 && err != nil:
			t.Errorf("%s: %v", c.l, err)
		case c.want != 0 && intervalMicros(c.l.Spec()) != c.want:
			t.Errorf("%s: interval %dµs, want %d", c.l, intervalMicros(c.l.Spec()), c.want)
		}
	}
}

// TestHighRateGCRAOnRedisClock counts, on Redis's own clock, what high-rate
// limits admit: never more than the burst plus the rate over the time the
// test ran, as measured around it (which includes more time than Redis saw).
func TestHighRateGCRAOnRedisClock(t *testing.T) {
	client := standalone(t)
	s := newStore(t, client, Options{})
	for _, l := range []floodgate.Limit{floodgate.PerSecond(500_001), floodgate.PerSecond(10_000)} {
		t.Run(l.String(), func(t *testing.T) {
			cost := max(l.Rate/500, 1)
			lim := floodgatetest.NewLimiter(t, s, "rate "+l.String(), l)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			until := start.Add(time.Second)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(until) {
						res, err := lim.AllowN(context.Background(), "k", cost)
						if err != nil {
							t.Error(err)
							return
						}
						if res.Allowed {
							admitted.Add(cost)
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			bound := l.Burst + int64(float64(l.Rate)*elapsed.Seconds())
			if l.Burst == 0 {
				bound += l.Rate
			}
			if got := admitted.Load(); got > bound {
				t.Errorf("admitted %d in %s, more than burst + rate × time = %d (%.2f×)", got, elapsed, bound, float64(got)/float64(bound))
			} else {
				t.Logf("admitted %d in %s; bound %d", got, elapsed, bound)
			}
		})
	}
}
