package concurrency_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/concurrency"
)

// TestTryAcquire: over a Local, TryAcquire takes a free slot and its Permit
// gives it back; a full key answers false at once and takes nothing.
func TestTryAcquire(t *testing.T) {
	store := concurrency.NewLocal()
	l := newLimiter(t, store, concurrency.Options{Limit: 2, MaxWaiting: 4})
	p1, ok1 := l.TryAcquire("k")
	p2, ok2 := l.TryAcquire("k")
	if !ok1 || !ok2 || p1 == nil || p2 == nil {
		t.Fatalf("two slots of two: %v %v", ok1, ok2)
	}
	if p, ok := l.TryAcquire("k"); ok || p != nil {
		t.Fatal("a third slot of two was taken")
	}
	if n := store.InFlight(concurrency.DefaultName, "k"); n != 2 {
		t.Fatalf("%d held, want 2", n)
	}
	if l.Waiting() != 0 {
		t.Fatalf("TryAcquire joined the queue: %d waiting", l.Waiting())
	}
	p1.Release()
	if _, ok := l.TryAcquire("k"); !ok {
		t.Fatal("a released slot was not taken")
	}
	if _, ok := l.TryAcquire("other"); !ok {
		t.Fatal("another key's slot was not taken")
	}
}

// TestTryAcquireKeepsTheLine: a slot that frees while a request waits for
// it goes to the waiter, not to a TryAcquire that comes after. The limit is
// raised by hand (a Controller), so that a slot is free with a waiter still
// in the queue (PollInterval an hour: nothing wakes it).
func TestTryAcquireKeepsTheLine(t *testing.T) {
	ctl := &recorder{limit: 1}
	l := newLimiter(t, concurrency.NewLocal(), concurrency.Options{Controller: ctl, MaxWaiting: 1, MaxWait: time.Minute, PollInterval: time.Hour})
	held, ok := l.TryAcquire("k")
	if !ok {
		t.Fatal("the first slot was not taken")
	}
	got := make(chan *concurrency.Permit)
	go func() {
		_, p := l.Acquire(context.Background(), "k")
		got <- p
	}()
	waitQueued(t, l, 1)
	ctl.mu.Lock()
	ctl.limit = 2
	ctl.mu.Unlock()
	if _, ok := l.TryAcquire("k"); ok {
		t.Fatal("TryAcquire took the slot a queued request waits for")
	}
	held.Release() // wakes the waiter
	if p := <-got; p == nil {
		t.Fatal("the waiter got no slot")
	} else {
		p.Release()
	}
}

// callCounter is a Store that is not a Local: a Local underneath, its
// calls counted.
type callCounter struct {
	*concurrency.Local
	calls atomic.Int64
}

func (c *callCounter) Acquire(ctx context.Context, name, key, token string, limit int, ttl time.Duration) (concurrency.Grant, error) {
	c.calls.Add(1)
	return c.Local.Acquire(ctx, name, key, token, limit, ttl)
}

// TestTryAcquireAsksNoOtherStore: over a store that is not a Local (one
// that may go to the network), TryAcquire answers false without a call.
func TestTryAcquireAsksNoOtherStore(t *testing.T) {
	s := &callCounter{Local: concurrency.NewLocal()}
	l := newLimiter(t, s, concurrency.Options{Limit: 1})
	if _, ok := l.TryAcquire("k"); ok {
		t.Fatal("TryAcquire took a slot of a store that is not a Local")
	}
	if n := s.calls.Load(); n != 0 {
		t.Fatalf("TryAcquire called the store %d times", n)
	}
	if res, p := l.Acquire(context.Background(), "k"); !res.Allowed || s.calls.Load() != 1 {
		t.Fatalf("Acquire: %+v, %d calls", res, s.calls.Load())
	} else {
		p.Release()
	}
}

// TestTryAcquireNeverOverAdmits: TryAcquire and Acquire (with a queue)
// racing on few keys never hold more than the limit (run with -race).
func TestTryAcquireNeverOverAdmits(t *testing.T) {
	const limit, keys, workers, rounds = 2, 3, 16, 300
	store := concurrency.NewLocal()
	l := newLimiter(t, store, concurrency.Options{Limit: limit, MaxWaiting: 4, MaxWait: time.Minute})
	var inFlight [keys]atomic.Int32
	var over, tried atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				k := (w + i) % keys
				key := string(rune('a' + k))
				var p *concurrency.Permit
				if w%2 == 0 {
					var ok bool
					if p, ok = l.TryAcquire(key); !ok {
						continue
					}
					tried.Add(1)
				} else {
					var res concurrency.Result
					if res, p = l.Acquire(context.Background(), key); !res.Allowed {
						continue
					}
				}
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
	if tried.Load() == 0 {
		t.Fatal("TryAcquire took nothing")
	}
	for k := range keys {
		if n := store.InFlight(concurrency.DefaultName, string(rune('a'+k))); n != 0 {
			t.Fatalf("key %d: %d slots still held", k, n)
		}
	}
}
