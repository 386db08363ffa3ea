package hybrid

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

func TestScaleLimit(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		berlin = time.FixedZone("CET", 3600)
	}
	for _, tc := range []struct {
		name string
		in   floodgate.Limit
		f    float64
		want floodgate.Limit
	}{
		{"whole", floodgate.PerSecond(10).WithBurst(20), 1, floodgate.PerSecond(10).WithBurst(20)},
		{"half", floodgate.PerSecond(10), 0.5, floodgate.PerSecond(5)},
		{"rounds up", floodgate.PerSecond(10), 0.34, floodgate.PerSecond(4)},
		{"at least one", floodgate.PerMinute(3), 0.01, floodgate.PerMinute(1)},
		{"burst scaled", floodgate.PerSecond(10).WithBurst(30), 0.5, floodgate.PerSecond(5).WithBurst(15)},
		{"burst at least one", floodgate.PerHour(1000).WithBurst(2), 0.1, floodgate.PerHour(100).WithBurst(1)},
		{"token bucket", floodgate.PerSecond(8).WithBurst(4).WithAlgorithm(floodgate.TokenBucket), 0.25,
			floodgate.PerSecond(2).WithBurst(1).WithAlgorithm(floodgate.TokenBucket)},
		{"window", floodgate.PerMinute(100).WithAlgorithm(floodgate.SlidingWindow), 0.2,
			floodgate.PerMinute(20).WithAlgorithm(floodgate.SlidingWindow)},
		{"window with burst = rate", floodgate.PerMinute(100).WithBurst(100).WithAlgorithm(floodgate.FixedWindow), 0.2,
			floodgate.PerMinute(20).WithAlgorithm(floodgate.FixedWindow)},
		{"calendar window", floodgate.PerDay(1000).AlignedTo(berlin), 0.5, floodgate.PerDay(500).AlignedTo(berlin)},
		{"sliding log", floodgate.PerSecond(1000).WithAlgorithm(floodgate.SlidingLog), 0.1,
			floodgate.PerSecond(100).WithAlgorithm(floodgate.SlidingLog)},
	} {
		if got := scaleLimit(tc.in, tc.f); got != tc.want {
			t.Errorf("%s: scaleLimit(%s, %g) = %s, want %s", tc.name, tc.in, tc.f, got, tc.want)
		}
		if err := scaleLimit(tc.in, tc.f).Validate(); err != nil {
			t.Errorf("%s: the share is invalid: %v", tc.name, err)
		}
	}
}

func TestScaleCountHuge(t *testing.T) {
	const n = 1<<62 + 1 // beyond a float64's exact integers
	if got := scaleCount(n, 0.5); got < n/2 || got > n/2+1<<10 {
		t.Errorf("scaleCount(2^62+1, 0.5) = %d", got)
	}
	if got := scaleCount(n, 0.9999999999999999); got > n {
		t.Errorf("scaleCount(2^62+1, ~1) = %d, above n", got)
	}
}
