package clock

import (
	"math"
	"testing"
	"time"
)

func TestCoarseClockLagsNeverLeads(t *testing.T) {
	c := NewCoarse(100 * time.Microsecond)
	defer c.Stop()
	prev := int64(math.MinInt64)
	for i := 0; i < 100_000; i++ {
		got := c.UnixNano()
		if real := System.UnixNano(); got > real {
			t.Fatalf("coarse clock %d leads the system clock %d", got, real)
		}
		if got < prev {
			t.Fatalf("coarse clock went back from %d to %d", prev, got)
		}
		prev = got
	}
	c.Stop()
	c.Stop() // idempotent
}
