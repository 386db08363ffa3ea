package floodgatetest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// RaceReservations has workers goroutines per limiter reserve one unit at a
// time, n times each, all at once on a clock that stands still, and checks
// the instants granted: every reservation is taken, and, sorted, the k-th
// unit waits exactly max(0, k−capacity+1) intervals. So racing callers,
// also of several limiters over stores that share their state (instances
// over one Redis), neither over-admit nor leave a gap. lims decide one
// policy whose only limit is a token bucket of the given capacity, whose
// interval is interval in the engine's arithmetic (Redis rounds it up to a
// whole microsecond).
func RaceReservations(t *testing.T, capacity int64, interval time.Duration, workers, n int, lims ...floodgate.Limiter) {
	t.Helper()
	var mu sync.Mutex
	var delays []time.Duration
	var wg sync.WaitGroup
	errs := make(chan error, len(lims)*workers)
	for _, l := range lims {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range n {
					r, err := l.ReserveN(context.Background(), "racer", 1)
					if err != nil {
						errs <- err
						return
					}
					if !r.OK {
						errs <- errNotOK
						return
					}
					mu.Lock()
					delays = append(delays, r.Delay)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.Sort(delays)
	for k, d := range delays {
		want := time.Duration(max(0, int64(k)-capacity+1)) * interval
		if d != want {
			t.Fatalf("unit %d of %d waits %s, want %s", k, len(delays), d, want)
		}
	}
}

type reserveError string

func (e reserveError) Error() string { return string(e) }

const errNotOK = reserveError("a reservation without a deadline was refused")
