package memstore_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestDefaultClockUnderCPUSaturation decides on one hot key while more busy
// goroutines than GOMAXPROCS keep every CPU saturated. The store's default
// clock must keep up. Over the real-clock interval from the limiter's start
// to the end, a limiter admits at most burst + rate × elapsed: it never sees
// more time pass than really did. And it must admit nearly as much as a
// limiter on the system clock, which the same goroutines ask in the same
// moments: what a limiter can admit depends on when it is asked, and the
// goroutines lose the CPU for a while now and then, to the busy ones here
// and to other processes on a shared machine.
func TestDefaultClockUnderCPUSaturation(t *testing.T) {
	ctx := context.Background()
	l := floodgate.PerSecond(1000).WithBurst(10)
	const run = 1500 * time.Millisecond

	stop := make(chan struct{})
	var busy sync.WaitGroup
	for range 4 * runtime.GOMAXPROCS(0) {
		busy.Add(1)
		go func() {
			defer busy.Done()
			x := uint64(1)
			for {
				select {
				case <-stop:
					return
				default:
				}
				for range 1 << 16 { // pure CPU, no function calls to yield at
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
		}()
	}
	defer func() { close(stop); busy.Wait() }()

	start := time.Now()
	lim := newLimiter(t, newStore(t, memstore.Options{}), l)
	exact := newLimiter(t, newStore(t, memstore.Options{Clock: clock.System}), l)
	deadline := start.Add(run)
	var admitted, reference atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				res, err := floodgate.Allow(ctx, lim, "hot")
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
				if res, _ := floodgate.Allow(ctx, exact, "hot"); res.Allowed {
					reference.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	allows := l.Capacity() + int64(float64(l.Rate)*elapsed.Seconds()/l.Period.Seconds())
	got, want := admitted.Load(), reference.Load()
	t.Logf("admitted %d, on the system clock %d, allowed %d in %s", got, want, allows, elapsed)
	if got > allows {
		t.Fatalf("admitted %d in %s, more than the %d the limit allows", got, elapsed, allows)
	}
	if got*10 < want*9 {
		t.Fatalf("admitted %d, under 90%% of the %d a limiter on the system clock admitted meanwhile: the clock lagged", got, want)
	}
}

// TestCoarseClockConcurrentReads reads one clock.Coarse from many goroutines,
// each of which refreshes it now and then. Every goroutine must see time
// that never runs backwards and never leads the system clock.
func TestCoarseClockConcurrentReads(t *testing.T) {
	c := clock.NewCoarse(100 * time.Microsecond)
	defer c.Stop()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prev := int64(0)
			for range 200_000 {
				got := c.UnixNano()
				if real := clock.System.UnixNano(); got > real {
					t.Errorf("coarse clock %d leads the system clock %d", got, real)
					return
				}
				if got < prev {
					t.Errorf("coarse clock went back from %d to %d", prev, got)
					return
				}
				prev = got
			}
		}()
	}
	wg.Wait()
}
