package floodgate_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// WaitAll gives up at once, charging nothing, when the chain cannot pass
// before the deadline; refuses a cost that can never pass; and when its
// context ends while it sleeps returns the context's error, with nothing
// held on any link.
func TestWaitAllChargesNothingUntilItPasses(t *testing.T) {
	clock := floodgatetest.NewClock(floodgatetest.Start) // stands still: nothing refills
	global := waitLimiter(t, clock, floodgate.PerMinute(10))
	user := waitLimiter(t, clock, floodgate.PerHour(1))
	ctx := context.Background()
	chain := func(cost int64) []floodgate.Check {
		return []floodgate.Check{{Limiter: global, Cost: cost}, {Limiter: user, Key: "u", Cost: cost}}
	}
	globalLeft := func() int64 {
		t.Helper()
		r, err := floodgate.PeekN(ctx, global, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		return r.Remaining
	}

	if res, i, err := floodgate.WaitAll(ctx, chain(1)...); err != nil || !res.Allowed || i != 1 {
		t.Fatalf("the first request: %+v, %d, %v", res, i, err)
	}
	if got := globalLeft(); got != 9 {
		t.Fatalf("global has %d left after one request, want 9", got)
	}

	short, cancel := context.WithTimeout(ctx, time.Minute) // the user's limit refills in an hour
	defer cancel()
	_, i, err := floodgate.WaitAll(short, chain(1)...)
	if !errors.Is(err, floodgate.ErrWaitDeadline) || i != 1 {
		t.Fatalf("a wait past the deadline: %d, %v; want check 1 and ErrWaitDeadline", i, err)
	}
	if got := globalLeft(); got != 9 {
		t.Fatalf("global has %d left after a refused wait, want 9 (refunded)", got)
	}

	if _, i, err := floodgate.WaitAll(ctx, chain(2)...); !errors.Is(err, floodgate.ErrInvalidCost) || i != 1 {
		t.Fatalf("a cost above the user's capacity: %d, %v; want check 1 and ErrInvalidCost", i, err)
	}

	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, _, err := floodgate.WaitAll(cctx, chain(1)...)
		done <- err
	}()
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: %v", err)
	}
	if got := globalLeft(); got != 9 {
		t.Fatalf("global has %d left after a cancelled wait, want 9", got)
	}
}

// Waiters on a chain all pass in the end, and together no faster than its
// tightest link allows: the chain is charged only when every link passes.
func TestWaitAllManyWaiters(t *testing.T) {
	const rate, waiters, each = 20, 8, 5
	global := waitLimiter(t, nil, floodgate.PerSecond(rate))
	users := waitLimiter(t, nil, floodgate.PerSecond(rate/2))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, waiters*each)
	for w := range waiters {
		wg.Go(func() {
			key := []string{"a", "b"}[w%2]
			for range each {
				res, _, err := floodgate.WaitAll(ctx, floodgate.Check{Limiter: global}, floodgate.Check{Limiter: users, Key: key})
				if err == nil && !res.Allowed {
					err = errors.New("WaitAll returned a denial without an error")
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// 40 admissions: the global link holds 20 at once and refills 20 a
	// second, each user's 10 and 10 a second, so the last one cannot
	// have passed before a second had gone by.
	if el := time.Since(start); el < time.Second {
		t.Fatalf("%d requests passed in %s: more than the limits allow", waiters*each, el)
	}
}
