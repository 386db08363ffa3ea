package memstore_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestDefaultClockUnderCPUSaturation decides on one hot key while more busy
// goroutines than GOMAXPROCS keep every CPU saturated. The store's default
// clock must keep up: over the real-clock interval from the limiter's start
// to the end, a limiter admits at most burst + rate × elapsed (it never sees
// more time pass than really did) and, with demand far above the rate, at
// least most of what it allows until the deciders' deadline. The burst
// covers the moments when the busy goroutines hold every CPU and no decider
// runs; a clock that lags only loses what the limit would have admitted
// during its lag.
func TestDefaultClockUnderCPUSaturation(t *testing.T) {
	ctx := context.Background()
	l := floodgate.PerSecond(1000).WithBurst(100)
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
	s := newStore(t, memstore.Options{})
	lim := newLimiter(t, s, l)
	deadline := start.Add(run)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				res, err := lim.Allow(ctx, "hot")
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	allows := func(d time.Duration) int64 {
		return l.Capacity() + int64(float64(l.Rate)*d.Seconds()/l.Period.Seconds())
	}
	got := admitted.Load()
	t.Logf("admitted %d; the limit allows %d until the deadline, %d until the end", got, allows(run), allows(elapsed))
	if got > allows(elapsed) {
		t.Fatalf("admitted %d in %s, more than the %d the limit allows", got, elapsed, allows(elapsed))
	}
	if got*10 < allows(run)*9 {
		t.Fatalf("admitted %d in %s, under 90%% of the %d the limit allows: the clock lagged", got, run, allows(run))
	}
}

// TestCoarseClockConcurrentReads reads one CoarseClock from many goroutines,
// each of which refreshes it now and then. Every goroutine must see time
// that never runs backwards and never leads the system clock.
func TestCoarseClockConcurrentReads(t *testing.T) {
	c := floodgate.NewCoarseClock(100 * time.Microsecond)
	defer c.Stop()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prev := int64(0)
			for range 200_000 {
				got := c.UnixNano()
				if real := floodgate.SystemClock.UnixNano(); got > real {
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
