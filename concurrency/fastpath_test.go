package concurrency_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/concurrency"
)

// named hides a Local behind the Store interface, so that a Limiter over it
// takes the general path: a token per holder, named in the store, and no
// hand-off from a release to a waiter.
type named struct{ concurrency.Store }

// step is what a scripted request saw.
type step struct {
	Allowed  bool
	Reason   concurrency.Reason
	Limit    int
	InFlight int
}

func stepOf(r concurrency.Result) step { return step{r.Allowed, r.Reason, r.Limit, r.InFlight} }

// script drives l through admissions, a refusal, a queue that fills, a
// release that serves the waiter, a cancellation and a timeout, and
// returns what every request saw. held reports the holders of key "" in
// the store after each release.
func script(t *testing.T, l, short *concurrency.Limiter, held func() int, do bool) []step {
	t.Helper()
	ctx := context.Background()
	var steps []step
	// acquire asks l (or short), by Acquire or by Do; Do's work waits for
	// its release to be closed.
	acquire := func(l *concurrency.Limiter, ctx context.Context) (concurrency.Result, func()) {
		if !do {
			res, p := l.Acquire(ctx, "")
			return res, p.Release
		}
		got := make(chan concurrency.Result, 1)
		release := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			res := l.Do(ctx, "", func(res concurrency.Result) concurrency.Outcome {
				got <- res
				<-release
				return concurrency.Success
			})
			if !res.Allowed {
				got <- res
			}
		}()
		res := <-got
		return res, func() { close(release); <-done }
	}
	r1, rel1 := acquire(l, ctx)
	r2, rel2 := acquire(l, ctx)
	steps = append(steps, stepOf(r1), stepOf(r2))
	// The third waits: the queue holds one.
	third := make(chan concurrency.Result, 1)
	var rel3 func()
	go func() {
		r, rel := acquire(l, ctx)
		rel3 = rel
		third <- r
	}()
	waitQueued(t, l, 1)
	r4, _ := acquire(l, ctx)
	steps = append(steps, stepOf(r4))
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	r5, _ := acquire(l, canceled)
	steps = append(steps, stepOf(r5))
	rel1()
	r3 := <-third
	steps = append(steps, stepOf(r3), step{InFlight: held()})
	rel2()
	steps = append(steps, step{InFlight: held()})
	rel3()
	steps = append(steps, step{InFlight: held()})

	// short has one slot and waits a millisecond.
	s1, srel := acquire(short, ctx)
	s2, _ := acquire(short, ctx)
	srel()
	steps = append(steps, stepOf(s1), stepOf(s2))
	return steps
}

// TestCountedAndNamedAgree: a Limiter over a Local (counted slots, hand-off
// to waiters, Do without a Permit) answers a scripted sequence exactly as
// one over the same store seen only as a Store (tokens), by Acquire and by
// Do.
func TestCountedAndNamedAgree(t *testing.T) {
	opts := concurrency.Options{Limit: 2, MaxWaiting: 1, MaxWait: time.Hour, PollInterval: time.Hour}
	shortOpts := concurrency.Options{Name: "short", Limit: 1, MaxWaiting: 1, MaxWait: time.Millisecond}
	want := []step{
		{true, concurrency.ReasonNone, 2, 1},
		{true, concurrency.ReasonNone, 2, 2},
		{false, concurrency.ReasonQueueFull, 2, -1},
		{false, concurrency.ReasonCanceled, 2, -1},
		{true, concurrency.ReasonNone, 2, 2}, // the waiter, served by the first release
		{InFlight: 2}, {InFlight: 1}, {InFlight: 0},
		{true, concurrency.ReasonNone, 1, 1},
		{false, concurrency.ReasonTimeout, 1, -1},
	}
	for _, do := range []bool{false, true} {
		var runs [2][]step
		for i, wrap := range []func(*concurrency.Local) concurrency.Store{
			func(s *concurrency.Local) concurrency.Store { return s },
			func(s *concurrency.Local) concurrency.Store { return named{s} },
		} {
			store := concurrency.NewLocal()
			l := newLimiter(t, wrap(store), opts)
			short := newLimiter(t, wrap(store), shortOpts)
			runs[i] = script(t, l, short, func() int { return store.InFlight(concurrency.DefaultName, "") }, do)
		}
		for i := range want {
			if runs[0][i] != want[i] || runs[1][i] != want[i] {
				t.Errorf("do=%v step %d: counted %+v, named %+v, want %+v", do, i, runs[0][i], runs[1][i], want[i])
			}
		}
	}
}

// TestHandOffRespectsLoweredLimit: a release hands its slot to a waiter
// only while the limit has room for it; after the Controller lowered the
// limit below the holders, the slot is freed instead.
func TestHandOffRespectsLoweredLimit(t *testing.T) {
	rec := &recorder{limit: 2}
	store := concurrency.NewLocal()
	l := newLimiter(t, store, concurrency.Options{Controller: rec, MaxWaiting: 1, MaxWait: time.Hour, PollInterval: time.Hour})
	ctx := context.Background()
	_, p1 := l.Acquire(ctx, "")
	_, p2 := l.Acquire(ctx, "")
	type answer struct {
		r concurrency.Result
		p *concurrency.Permit
	}
	got := make(chan answer, 1)
	go func() {
		r, p := l.Acquire(ctx, "")
		got <- answer{r, p}
	}()
	waitQueued(t, l, 1)
	rec.mu.Lock()
	rec.limit = 1
	rec.mu.Unlock()
	p1.Release()
	// A hand-off would have kept two holders, one over the limit.
	if n := store.InFlight(concurrency.DefaultName, ""); n != 1 {
		t.Fatalf("after the first release %d holders, want 1 (limit 1)", n)
	}
	p2.Release()
	a := <-got
	if !a.r.Allowed || a.r.InFlight != 1 || a.r.Limit != 1 {
		t.Fatalf("waiter: %+v", a.r)
	}
	a.p.Release()
	if n := store.InFlight(concurrency.DefaultName, ""); n != 0 {
		t.Fatalf("%d holders left", n)
	}
}

// TestHandOffUnderChurn races holders that wait, time out and give up on
// one key of a Local, by Acquire and by Do: no admission is ever over the
// limit, and every slot and waiter is gone at the end.
func TestHandOffUnderChurn(t *testing.T) {
	const limit, workers, rounds = 2, 16, 300
	store := concurrency.NewLocal()
	l := newLimiter(t, store, concurrency.Options{Limit: limit, MaxWaiting: 6, MaxWait: 200 * time.Microsecond, PollInterval: time.Millisecond})
	var inFlight, over, admitted atomic.Int32
	work := func() {
		admitted.Add(1)
		if inFlight.Add(1) > limit {
			over.Add(1)
		}
		inFlight.Add(-1)
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range rounds {
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(8) == 0 {
					cancel()
				}
				if rng.IntN(2) == 0 {
					l.Do(ctx, "", func(concurrency.Result) concurrency.Outcome { work(); return concurrency.Success })
				} else if res, p := l.Acquire(ctx, ""); res.Allowed {
					work()
					p.Release()
				}
				cancel()
			}
		})
	}
	wg.Wait()
	if over.Load() != 0 {
		t.Fatalf("%d admissions above the limit", over.Load())
	}
	if admitted.Load() == 0 {
		t.Fatal("nothing admitted")
	}
	if n, w := store.InFlight(concurrency.DefaultName, ""), l.Waiting(); n != 0 || w != 0 {
		t.Fatalf("%d holders and %d waiters left", n, w)
	}
}

// TestDoReleasesOnPanic: Do frees the slot when work panics, and reports
// nothing to the Controller.
func TestDoReleasesOnPanic(t *testing.T) {
	rec := &recorder{limit: 1}
	for _, store := range []concurrency.Store{concurrency.NewLocal(), named{concurrency.NewLocal()}} {
		l := newLimiter(t, store, concurrency.Options{Controller: rec})
		func() {
			defer func() { recover() }()
			l.Do(context.Background(), "", func(concurrency.Result) concurrency.Outcome { panic("boom") })
		}()
		if r, p := l.Acquire(context.Background(), ""); !r.Allowed {
			t.Fatalf("%T: slot not freed by the panicking work: %+v", store, r)
		} else {
			p.Release()
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.samples) != 2 {
		t.Fatalf("samples %+v, want the two Releases' only", rec.samples)
	}
}

// TestEmptiedKeysAreForgotten: a Local keeps a key emptied of holders for
// a while (a busy key empties between most requests), but only the latest
// few: slots taken and freed on as many keys as clients care to name cost
// no memory once freed.
func TestEmptiedKeysAreForgotten(t *testing.T) {
	store := concurrency.NewLocal()
	l := newLimiter(t, store, concurrency.Options{Limit: 1})
	work := func(concurrency.Result) concurrency.Outcome { return concurrency.Success }
	l.Do(context.Background(), "warm", work)
	before := liveHeap()
	for i := range 100_000 {
		if !l.Do(context.Background(), "client:"+strconv.Itoa(i), work).Allowed {
			t.Fatal("refused")
		}
	}
	after := liveHeap()
	if grew := int64(after) - int64(before); grew > 1<<20 {
		t.Fatalf("heap grew %d bytes after 100,000 keys were freed", grew)
	}
	if n := store.Len(); n != 0 {
		t.Fatalf("%d holds left", n)
	}
}
