package concurrency_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/testkit"
)

func liveHeap() uint64 {
	for range 3 {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestLocalSweepsAbandonedLeases: leases on many distinct keys that nobody
// renews, releases or asks for again are dropped by the janitor once they
// run out, and the memory they took is given back. (They stayed until their
// key was acquired again: 405,481 abandoned leases held 262 MB for good.)
func TestLocalSweepsAbandonedLeases(t *testing.T) {
	var now atomic.Int64
	now.Store(1e18)
	// The janitor as production runs it, on a clock moved by hand; its
	// interval short so that the test does not wait for it.
	store := concurrency.NewLocalWith(concurrency.LocalOptions{Clock: clock.Func(now.Load), SweepInterval: time.Millisecond})
	l := newLimiter(t, store, concurrency.Options{Name: "leases", Limit: 1})
	ctx := context.Background()
	const n = 100000
	before := liveHeap()
	for i := range n {
		if res, _ := l.AcquireLease(ctx, "client:"+strconv.Itoa(i), 30*time.Second); !res.Allowed {
			t.Fatalf("lease %d: %+v", i, res)
		}
	}
	held := liveHeap()
	if store.Len() != n {
		t.Fatalf("%d holds, want %d", store.Len(), n)
	}
	now.Add(int64(29 * time.Second))
	store.Sweep() // what the janitor does: nothing has run out yet
	if store.Len() != n {
		t.Fatalf("%d holds before their leases ran out, want %d", store.Len(), n)
	}
	now.Add(int64(time.Second))
	testkit.Eventually(t, 30*time.Second, "the janitor drops the leases that ran out", func() bool { return store.Len() == 0 })
	after := liveHeap()
	t.Logf("live heap: %d KiB before, %d KiB holding %d leases, %d KiB after they ran out", before>>10, held>>10, n, after>>10)
	if after > before+(held-before)/10 {
		t.Fatalf("the heap kept %d KiB of %d KiB of leases that ran out", (after-before)>>10, (held-before)>>10)
	}
	if res, _ := l.AcquireLease(ctx, "client:1", time.Second); !res.Allowed || store.InFlight("leases", "client:1") != 1 {
		t.Fatalf("a key whose lease ran out: %+v", res)
	}
}

// TestLocalMaxKeys: a full Local refuses new holders with ErrStoreFull and
// never evicts one, so a key at its limit stays at its limit; holds whose
// lease ran out make room, as do releases.
func TestLocalMaxKeys(t *testing.T) {
	var now atomic.Int64
	now.Store(1e18)
	store := concurrency.NewLocalWith(concurrency.LocalOptions{Clock: clock.Func(now.Load), MaxKeys: 4, SweepInterval: -1})
	l := newLimiter(t, store, concurrency.Options{Limit: 2})
	ctx := context.Background()
	lease := func(key string, ttl time.Duration) (concurrency.Result, concurrency.Lease) {
		t.Helper()
		return l.AcquireLease(ctx, key, ttl)
	}
	_, a1 := lease("a", time.Minute)
	_, a2 := lease("a", time.Minute)
	lease("b", time.Second)
	res, p := l.Acquire(ctx, "c") // a Permit of this process: no expiry
	if !res.Allowed || store.Len() != 4 {
		t.Fatalf("filling: %+v, %d holds", res, store.Len())
	}
	full := func(key string) {
		t.Helper()
		res, _ := lease(key, time.Minute)
		if res.Allowed || res.Reason != concurrency.ReasonError || !errors.Is(res.Err(), concurrency.ErrStoreFull) {
			t.Fatalf("%s on a full store: %+v", key, res)
		}
	}
	full("d") // a new key
	full("b") // a new holder of a key below its limit
	if res, _ := lease("a", time.Minute); res.Allowed || res.Reason != concurrency.ReasonFull || res.InFlight != 2 {
		t.Fatalf("a key at its limit on a full store: %+v", res)
	}
	// Holders keep their slots: they renew, and a release makes room.
	if err := l.RenewLease(ctx, a1); err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseLease(ctx, a2); err != nil {
		t.Fatal(err)
	}
	if res, _ := lease("d", time.Minute); !res.Allowed {
		t.Fatalf("after a release: %+v", res)
	}
	full("e")
	// b's lease runs out: the next newcomer takes its place.
	now.Add(int64(2 * time.Second))
	if res, _ := lease("e", time.Minute); !res.Allowed || store.InFlight(concurrency.DefaultName, "b") != 0 {
		t.Fatalf("after a lease ran out: %+v", res)
	}
	full("f")
	if store.Len() != 4 || store.InFlight(concurrency.DefaultName, "a") != 1 || store.InFlight(concurrency.DefaultName, "c") != 1 {
		t.Fatalf("%d holds; a %d, c %d", store.Len(), store.InFlight(concurrency.DefaultName, "a"), store.InFlight(concurrency.DefaultName, "c"))
	}
	p.Release()
	if res, _ := lease("f", time.Minute); !res.Allowed {
		t.Fatalf("after the Permit's release: %+v", res)
	}
}
