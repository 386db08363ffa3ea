package concurrency_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/testkit"
)

func newLimiter(t *testing.T, s concurrency.Store, o concurrency.Options) *concurrency.Limiter {
	t.Helper()
	l, err := concurrency.New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestNewRejects(t *testing.T) {
	local := concurrency.NewLocal()
	for name, c := range map[string]struct {
		s concurrency.Store
		o concurrency.Options
	}{
		"no store":       {nil, concurrency.Options{Limit: 1}},
		"no limit":       {local, concurrency.Options{}},
		"negative limit": {local, concurrency.Options{Limit: -1}},
		"both":           {local, concurrency.Options{Limit: 2, Controller: fixed(3)}},
		"neg waiting":    {local, concurrency.Options{Limit: 1, MaxWaiting: -1}},
		"neg wait":       {local, concurrency.Options{Limit: 1, MaxWaiting: 1, MaxWait: -time.Second}},
		"neg poll":       {local, concurrency.Options{Limit: 1, PollInterval: -1}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := concurrency.New(c.s, c.o); !errors.Is(err, concurrency.ErrInvalid) {
				t.Fatalf("New = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestFullAndRelease(t *testing.T) {
	ctx := context.Background()
	store := concurrency.NewLocal()
	l := newLimiter(t, store, concurrency.Options{Name: "t", Limit: 2})
	r1, p1 := l.Acquire(ctx, "k")
	r2, p2 := l.Acquire(ctx, "k")
	r3, p3 := l.Acquire(ctx, "k")
	if !r1.Allowed || !r2.Allowed || r2.InFlight != 2 || r2.Limit != 2 {
		t.Fatalf("first two: %+v %+v", r1, r2)
	}
	if r3.Allowed || r3.Reason != concurrency.ReasonFull || p3 != nil || !errors.Is(r3.Err(), concurrency.ErrFull) {
		t.Fatalf("third: %+v %v", r3, p3)
	}
	p3.Release() // a nil Permit's Release does nothing
	if r, _ := l.Acquire(ctx, "other"); !r.Allowed {
		t.Fatalf("another key shares slots: %+v", r)
	}
	p1.Release()
	p1.Release() // the second Release must not free p2's slot
	if got := store.InFlight("t", "k"); got != 1 {
		t.Fatalf("in flight after double release = %d, want 1", got)
	}
	if r, p := l.Acquire(ctx, "k"); !r.Allowed {
		t.Fatalf("after release: %+v", r)
	} else {
		p.Release()
	}
	p2.Release()
	if got := store.InFlight("t", "k"); got != 0 {
		t.Fatalf("in flight = %d, want 0", got)
	}
}

func TestNamesDoNotShareSlots(t *testing.T) {
	store := concurrency.NewLocal()
	a := newLimiter(t, store, concurrency.Options{Name: "a", Limit: 1})
	b := newLimiter(t, store, concurrency.Options{Name: "b", Limit: 1})
	if r, _ := a.Acquire(context.Background(), "k"); !r.Allowed {
		t.Fatal(r)
	}
	if r, _ := b.Acquire(context.Background(), "k"); !r.Allowed {
		t.Fatalf("limiter b refused by a's slot: %+v", r)
	}
}

func TestPanicReleases(t *testing.T) {
	store := concurrency.NewLocal()
	l := newLimiter(t, store, concurrency.Options{Limit: 1})
	func() {
		defer func() { recover() }()
		_, p := l.Acquire(context.Background(), "")
		defer p.Release()
		panic("boom")
	}()
	if r, _ := l.Acquire(context.Background(), ""); !r.Allowed {
		t.Fatalf("slot not freed by the panicking holder: %+v", r)
	}
}

func TestCanceledBeforeAcquire(t *testing.T) {
	l := newLimiter(t, concurrency.NewLocal(), concurrency.Options{Limit: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r, p := l.Acquire(ctx, ""); r.Allowed || p != nil || r.Reason != concurrency.ReasonCanceled {
		t.Fatalf("canceled: %+v", r)
	}
}

// TestNeverOverAdmits races many holders on a few keys and checks, with
// counters of its own, that no key ever has more than its limit.
func TestNeverOverAdmits(t *testing.T) {
	const limit, keys, workers, rounds = 3, 4, 32, 200
	store := concurrency.NewLocal()
	l := newLimiter(t, store, concurrency.Options{Limit: limit, MaxWaiting: 8, MaxWait: time.Minute})
	var inFlight [keys]atomic.Int32
	var over, admitted atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				k := (w + i) % keys
				res, p := l.Acquire(context.Background(), string(rune('a'+k)))
				if !res.Allowed {
					continue
				}
				admitted.Add(1)
				if inFlight[k].Add(1) > limit {
					over.Add(1)
				}
				inFlight[k].Add(-1)
				p.Release()
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
	for k := range keys {
		if n := store.InFlight(concurrency.DefaultName, string(rune('a'+k))); n != 0 {
			t.Fatalf("key %d: %d slots still held", k, n)
		}
	}
}

// TestModel runs random acquisitions and releases against a counter per
// key: every answer must be the model's.
func TestModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		limit := 1 + rng.IntN(4)
		l := newLimiter(t, concurrency.NewLocal(), concurrency.Options{Limit: limit})
		held := map[string][]*concurrency.Permit{}
		for step := range 200 {
			key := string(rune('a' + rng.IntN(3)))
			if rng.IntN(2) == 0 || len(held[key]) == 0 {
				res, p := l.Acquire(context.Background(), key)
				want := len(held[key]) < limit
				if res.Allowed != want {
					t.Fatalf("trial %d step %d: key %s holding %d of %d: allowed %v", trial, step, key, len(held[key]), limit, res.Allowed)
				}
				if want {
					held[key] = append(held[key], p)
					if res.InFlight != len(held[key]) {
						t.Fatalf("InFlight %d, model %d", res.InFlight, len(held[key]))
					}
				}
				continue
			}
			i := rng.IntN(len(held[key]))
			p := held[key][i]
			p.Release()
			if rng.IntN(3) == 0 {
				p.Release()
			}
			held[key] = append(held[key][:i], held[key][i+1:]...)
		}
	}
}

func TestQueueFIFO(t *testing.T) {
	l := newLimiter(t, concurrency.NewLocal(), concurrency.Options{Limit: 1, MaxWaiting: 3, MaxWait: time.Minute, PollInterval: time.Hour})
	ctx := context.Background()
	_, first := l.Acquire(ctx, "")
	order := make(chan int, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		// Waiters join one at a time, so the queue's order is known.
		wg.Go(func() {
			res, p := l.Acquire(ctx, "")
			if !res.Allowed {
				t.Errorf("waiter %d: %+v", i, res)
				return
			}
			order <- i
			p.Release()
		})
		waitQueued(t, l, i+1)
	}
	if res, _ := l.Acquire(ctx, ""); res.Reason != concurrency.ReasonQueueFull {
		t.Fatalf("fourth waiter: %+v, want queue-full", res)
	}
	first.Release()
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d served in place %d", got, want)
		}
		want++
	}
}

func TestQueueTimeoutAndCancel(t *testing.T) {
	l := newLimiter(t, concurrency.NewLocal(), concurrency.Options{Limit: 1, MaxWaiting: 2, MaxWait: 20 * time.Millisecond})
	_, p := l.Acquire(context.Background(), "")
	defer p.Release()
	res, _ := l.Acquire(context.Background(), "")
	if res.Reason != concurrency.ReasonTimeout || res.Waited < 20*time.Millisecond || !errors.Is(res.Err(), concurrency.ErrTimeout) {
		t.Fatalf("timeout: %+v", res)
	}
	l2 := newLimiter(t, concurrency.NewLocal(), concurrency.Options{Limit: 1, MaxWaiting: 2, MaxWait: time.Hour})
	_, p2 := l2.Acquire(context.Background(), "")
	defer p2.Release()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan concurrency.Result)
	go func() { r, _ := l2.Acquire(ctx, ""); done <- r }()
	waitQueued(t, l2, 1)
	cancel()
	if r := <-done; r.Reason != concurrency.ReasonCanceled {
		t.Fatalf("cancel: %+v", r)
	}
	// The canceled waiter left the queue: a new one is its head.
	go func() { r, p := l2.Acquire(context.Background(), ""); p.Release(); done <- r }()
	waitQueued(t, l2, 1)
	p2.Release()
	if r := <-done; !r.Allowed {
		t.Fatalf("after cancel: %+v", r)
	}
}

// waitQueued waits until n requests wait in l's queue: a full key refuses
// a probe with queue-full exactly then, when MaxWaiting is n.
func waitQueued(t *testing.T, l *concurrency.Limiter, n int) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "requests queued", func() bool { return l.Waiting() == n })
}

func TestLeases(t *testing.T) {
	var now atomic.Int64
	now.Store(1e18)
	store := concurrency.NewLocalClock(clock.Func(now.Load))
	l := newLimiter(t, store, concurrency.Options{Limit: 1, MaxWaiting: 1, MaxWait: time.Minute, PollInterval: time.Millisecond})
	ctx := context.Background()
	if r, _ := l.AcquireLease(ctx, "k", 0); r.Reason != concurrency.ReasonError || !errors.Is(r.Err(), concurrency.ErrInvalid) {
		t.Fatalf("ttl 0: %+v", r)
	}
	res, lease := l.AcquireLease(ctx, "k", time.Second)
	if !res.Allowed || lease.Token == "" {
		t.Fatalf("lease: %+v", res)
	}
	now.Add(int64(900 * time.Millisecond))
	if err := l.RenewLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(900 * time.Millisecond)) // 1.8 s after the grant, 0.9 s after the renewal
	probe := newLimiter(t, store, concurrency.Options{Limit: 1})
	if r, _ := probe.Acquire(context.Background(), "k"); r.Allowed {
		t.Fatalf("renewed lease lost its slot: %+v", r)
	}
	// A holder that stops renewing loses the slot; a waiter gets it.
	got := make(chan concurrency.Result)
	go func() { r, p := l.Acquire(context.Background(), "k"); p.Release(); got <- r }()
	waitQueued(t, l, 1)
	now.Add(int64(200 * time.Millisecond))
	if r := <-got; !r.Allowed {
		t.Fatalf("slot of an expired lease: %+v", r)
	}
	if err := l.RenewLease(ctx, lease); !errors.Is(err, concurrency.ErrLeaseLost) {
		t.Fatalf("renew after expiry = %v, want ErrLeaseLost", err)
	}
	if err := l.ReleaseLease(ctx, lease); err != nil {
		t.Fatalf("release of an expired lease: %v", err)
	}
	_, l2 := l.AcquireLease(ctx, "k", time.Second)
	if err := l.ReleaseLease(ctx, l2); err != nil {
		t.Fatal(err)
	}
	if err := l.RenewLease(ctx, l2); !errors.Is(err, concurrency.ErrLeaseLost) {
		t.Fatalf("renew after release = %v", err)
	}
}

type fixed int

func (f fixed) Limit() int               { return int(f) }
func (fixed) Observe(concurrency.Sample) {}

type recorder struct {
	mu      sync.Mutex
	limit   int
	samples []concurrency.Sample
}

func (r *recorder) Limit() int { r.mu.Lock(); defer r.mu.Unlock(); return r.limit }
func (r *recorder) Observe(s concurrency.Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
}

func TestControllerSeesOutcomes(t *testing.T) {
	rec := &recorder{limit: 2}
	l := newLimiter(t, concurrency.NewLocal(), concurrency.Options{Controller: rec})
	ctx := context.Background()
	_, p1 := l.Acquire(ctx, "")
	r2, p2 := l.Acquire(ctx, "")
	if r2.Limit != 2 || r2.InFlight != 2 {
		t.Fatalf("%+v", r2)
	}
	if r, _ := l.Acquire(ctx, ""); r.Allowed {
		t.Fatal("controller limit not applied")
	}
	p1.ReleaseWith(concurrency.Dropped)
	p2.ReleaseWith(concurrency.Ignore)
	p2.Release()
	rec.mu.Lock()
	samples := rec.samples
	rec.limit = 0 // below 1 counts as 1
	rec.mu.Unlock()
	if len(samples) != 1 || samples[0].Outcome != concurrency.Dropped || samples[0].InFlight != 1 {
		t.Fatalf("samples %+v", samples)
	}
	if l.Limit() != 1 {
		t.Fatalf("Limit = %d", l.Limit())
	}
}

func TestReasonNames(t *testing.T) {
	for r, want := range map[concurrency.Reason]string{
		concurrency.ReasonFull: "full", concurrency.ReasonQueueFull: "queue-full",
		concurrency.ReasonFailClosed: "fail-closed", concurrency.Reason(99): "reason(99)",
	} {
		if r.String() != want {
			t.Errorf("%d: %q", r, r.String())
		}
	}
}
