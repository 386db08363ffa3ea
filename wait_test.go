package floodgate_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/testkit"
)

func waitLimiter(t *testing.T, clock clock.Clock, limits ...floodgate.Limit) *floodgate.PolicyLimiter {
	t.Helper()
	store := memstore.New(memstore.Options{Clock: clock, SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(store, floodgate.Policy{Name: "wait", Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// A Wait whose units cannot pass before the deadline returns at once, with
// ErrWaitDeadline, and charges nothing.
func TestWaitPastTheDeadlineChargesNothing(t *testing.T) {
	clock := floodgatetest.NewClock(floodgatetest.Start)
	lim := waitLimiter(t, clock, floodgate.PerMinute(1))
	ctx := context.Background()
	if _, err := floodgate.Wait(ctx, lim, "k"); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Hour) // the clock stands still: a wait of a minute would fit
	defer cancel()
	short, cancel2 := context.WithTimeout(ctx, 30*time.Second)
	defer cancel2()
	_, err := floodgate.WaitN(short, lim, "k", 1)
	if !errors.Is(err, floodgate.ErrWaitDeadline) {
		t.Fatalf("WaitN = %v, want ErrWaitDeadline", err)
	}
	r, err := lim.ReserveN(dctx, "k", 1)
	if err != nil || !r.OK || r.Delay != time.Minute {
		t.Fatalf("after the refused wait: %+v, %v; want a wait of exactly 1m (nothing charged)", r, err)
	}
	if _, err := floodgate.WaitN(ctx, lim, "k", 2); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Errorf("a cost above capacity: %v, want ErrInvalidCost", err)
	}
	if _, err := lim.ReserveN(ctx, "k", -1); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Errorf("a negative cost: %v, want ErrInvalidCost", err)
	}
}

// A Wait whose context ends while it waits gives its units back.
func TestWaitCancelledGivesBack(t *testing.T) {
	clock := floodgatetest.NewClock(floodgatetest.Start)
	lim := waitLimiter(t, clock, floodgate.PerHour(1))
	ctx := context.Background()
	if _, err := floodgate.Allow(ctx, lim, "k"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := floodgate.Wait(wctx, lim, "k")
		done <- err
	}()
	// The waiter has booked the next unit once a reservation waits two hours.
	testkit.Eventually(t, 10*time.Second, "the waiter's reservation", func() bool {
		res, _ := lim.AllowN(ctx, "k", 0)
		return res.ResetAfter == 2*time.Hour
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	if res, _ := lim.AllowN(ctx, "k", 0); res.ResetAfter != time.Hour {
		t.Fatalf("after the cancelled wait the key resets in %s, want 1h: the unit was not given back", res.ResetAfter)
	}
}

// Wait admits at once when the units fit, and a window limit waits by
// asking again: on a clock that stands still, a deadline before the
// window's end is refused at once.
func TestWaitOnWindows(t *testing.T) {
	clock := floodgatetest.NewClock(floodgatetest.Start)
	lim := waitLimiter(t, clock, floodgate.PerMinute(2).WithAlgorithm(floodgate.FixedWindow))
	ctx := context.Background()
	for range 2 {
		if res, err := floodgate.Wait(ctx, lim, "k"); err != nil || !res.Allowed {
			t.Fatalf("%+v, %v", res, err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := floodgate.Wait(short, lim, "k"); !errors.Is(err, floodgate.ErrWaitDeadline) {
		t.Fatalf("Wait = %v, want ErrWaitDeadline", err)
	}
	if res, _ := lim.AllowN(ctx, "k", 0); res.Remaining != 0 {
		t.Fatalf("remaining %d after the refused wait", res.Remaining)
	}
}

// Racing reservations on memory are dense and never over-admit.
func TestRaceReservationsMemory(t *testing.T) {
	clock := floodgatetest.NewClock(floodgatetest.Start)
	lim := waitLimiter(t, clock, floodgate.PerSecond(100).WithBurst(10))
	floodgatetest.RaceReservations(t, 10, 10*time.Millisecond, 8, 50, lim)
}

// WaitN from many goroutines with a real clock: every waiter is served,
// and the units they were granted, at the instants their reservations
// named, fit the limit.
func TestWaitManyWaiters(t *testing.T) {
	lim := waitLimiter(t, nil, floodgate.PerSecond(1000).WithBurst(5))
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := floodgate.Wait(ctx, lim, "k"); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// stallingStore answers every reservation only when the caller gives up,
// as a Redis that hangs does behind a context-bound client.
type stallingStore struct{ *memstore.Store }

func (s stallingStore) Reserve(ctx context.Context, set *algo.Set, key string, cost int64, maxWait time.Duration) (algo.Verdict, algo.Ticket, error) {
	<-ctx.Done()
	return algo.Verdict{}, algo.Ticket{}, ctx.Err()
}

// timeoutStore fails every reservation as a network client does whose read
// deadline is the context's: with its own error, not the context's.
type timeoutStore struct{ *memstore.Store }

func (s timeoutStore) Reserve(ctx context.Context, set *algo.Set, key string, cost int64, maxWait time.Duration) (algo.Verdict, algo.Ticket, error) {
	return algo.Verdict{}, algo.Ticket{}, errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout")
}

// passedCtx is a context whose deadline has passed while its Err is still
// nil: the instant between a read deadline firing and the context's timer.
type passedCtx struct{ context.Context }

func (passedCtx) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// An engine error at the deadline, before the context reports it, is the
// deadline's: ErrWaitDeadline and context.DeadlineExceeded, not a bare
// network error.
func TestWaitDeadlineBeforeTheContextSaysSo(t *testing.T) {
	store := timeoutStore{memstore.New(memstore.Options{SweepInterval: -1})}
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(store, floodgate.Policy{Name: "wait", Limits: []floodgate.Limit{floodgate.PerSecond(10)}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = floodgate.Wait(passedCtx{context.Background()}, lim, "k")
	if !errors.Is(err, floodgate.ErrWaitDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want ErrWaitDeadline and context.DeadlineExceeded", err)
	}
	// Without a deadline the engine's error is its own.
	if _, err := floodgate.Wait(context.Background(), lim, "k"); errors.Is(err, floodgate.ErrWaitDeadline) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait without a deadline = %v, want the engine's error alone", err)
	}
}

// A deadline that comes while the engine is asked is a wait that did not
// fit, as one found too long before asking: ErrWaitDeadline either way
// (and the context's own error is still there for errors.Is).
func TestWaitDeadlineDuringTheCall(t *testing.T) {
	store := stallingStore{memstore.New(memstore.Options{SweepInterval: -1})}
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(store, floodgate.Policy{Name: "wait", Limits: []floodgate.Limit{floodgate.PerSecond(10)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = floodgate.Wait(ctx, lim, "k")
	if !errors.Is(err, floodgate.ErrWaitDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want ErrWaitDeadline wrapping the context's deadline", err)
	}
	// A caller that cancels is not told about a deadline.
	cctx, ccancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, ccancel)
	if _, err := floodgate.Wait(cctx, lim, "k"); errors.Is(err, floodgate.ErrWaitDeadline) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel = %v, want context.Canceled alone", err)
	}
}
