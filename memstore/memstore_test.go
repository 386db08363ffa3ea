package memstore_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
)

func newStore(t *testing.T, o memstore.Options) *memstore.Store {
	t.Helper()
	s := memstore.New(o)
	t.Cleanup(func() { s.Close() })
	return s
}

func newLimiter(t *testing.T, s floodgate.Store, limits ...floodgate.Limit) *floodgate.PolicyLimiter {
	t.Helper()
	lim, err := floodgate.New(s, floodgate.Policy{Name: "test", Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestNoOverAdmission races many goroutines on one key with the real clock
// and checks that no more passed than the limit allows in the elapsed time:
// burst + rate × elapsed, elapsed as the limiter's clock tells it (read
// before the first request and after the last: a coarse clock may stand
// behind the wall clock when the run starts, and the limit is kept on its
// time). A limiter that lets a caller apply a timestamp older than the
// state it updates over-admits here.
func TestNoOverAdmission(t *testing.T) {
	ctx := context.Background()
	for _, l := range []floodgate.Limit{
		floodgate.PerSecond(1000).WithBurst(50),
		floodgate.PerSecond(1000).WithAlgorithm(floodgate.FixedWindow),
		floodgate.PerSecond(1000).WithAlgorithm(floodgate.SlidingWindow),
		floodgate.PerSecond(1000).WithAlgorithm(floodgate.SlidingLog),
	} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			for _, ck := range []struct {
				name  string
				clock clock.Clock
			}{{"system", clock.System}, {"coarse", nil}} {
				t.Run(ck.name, func(t *testing.T) {
					if ck.clock == nil {
						// The coarse clock a store makes for itself when
						// given none, made here so the test can read it.
						c := clock.NewCoarse(0)
						t.Cleanup(c.Stop)
						ck.clock = c
					}
					lim := newLimiter(t, newStore(t, memstore.Options{Clock: ck.clock}), l)
					var admitted atomic.Int64
					clockStart := ck.clock.UnixNano()
					start := time.Now()
					deadline := start.Add(300 * time.Millisecond)
					var wg sync.WaitGroup
					for g := 0; g < 16; g++ {
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
							}
						}()
					}
					wg.Wait()
					elapsed := time.Duration(ck.clock.UnixNano() - clockStart)
					// Fixed windows admit up to 2×rate around a boundary; the
					// others admit at most a burst plus the refill.
					bound := l.Capacity() + int64(float64(l.Rate)*elapsed.Seconds()/l.Period.Seconds()) + 1
					if l.Algorithm == floodgate.FixedWindow || l.Algorithm == floodgate.SlidingWindow {
						bound += l.Rate
					}
					if got := admitted.Load(); got > bound || got == 0 {
						t.Fatalf("admitted %d in %s, want 1..%d", got, elapsed, bound)
					}
				})
			}
		})
	}
}

func TestMaxKeysEvictsLeastDebt(t *testing.T) {
	ctx := context.Background()
	clock := floodgatetest.NewClock(floodgatetest.Start)
	s := newStore(t, memstore.Options{Clock: clock, MaxKeys: 64, Shards: 1, SweepInterval: -1})
	lim := newLimiter(t, s, floodgate.PerMinute(1))
	// "debtor" carries an hour of debt; every flood key a minute at most.
	hourly, err := floodgate.New(s, floodgate.Policy{Name: "hourly", Limits: []floodgate.Limit{floodgate.PerHour(1)}})
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := floodgate.Allow(ctx, hourly, "debtor"); !res.Allowed {
		t.Fatal("first request denied")
	}
	for i := 0; i < 10_000; i++ {
		if i%100 == 0 {
			clock.Advance(time.Millisecond)
		}
		if _, err := floodgate.Allow(ctx, lim, "flood:"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		if n := s.Len(); n > 64 {
			t.Fatalf("store holds %d entries, bound is 64", n)
		}
	}
	if s.Evictions() == 0 {
		t.Fatal("a full store evicted nothing")
	}
	// Each eviction removes the least-debt entry of its sample, and the
	// debtor is never that: every other entry carries less.
	if res, _ := floodgate.Allow(ctx, hourly, "debtor"); res.Allowed {
		t.Fatal("the key with the most debt was evicted and its limit forgotten")
	}
}

func TestSweepDropsIdleState(t *testing.T) {
	ctx := context.Background()
	clock := floodgatetest.NewClock(floodgatetest.Start)
	s := newStore(t, memstore.Options{Clock: clock, SweepInterval: -1})
	gcra := newLimiter(t, s, floodgate.PerSecond(10))
	fixed, _ := floodgate.New(s, floodgate.Policy{Name: "fixed", Limits: []floodgate.Limit{floodgate.PerSecond(10).WithAlgorithm(floodgate.FixedWindow)}})
	sliding, _ := floodgate.New(s, floodgate.Policy{Name: "sliding", Limits: []floodgate.Limit{floodgate.PerSecond(10).WithAlgorithm(floodgate.SlidingWindow)}})
	slog, _ := floodgate.New(s, floodgate.Policy{Name: "log", Limits: []floodgate.Limit{floodgate.PerSecond(10).WithAlgorithm(floodgate.SlidingLog)}})
	for i := 0; i < 1000; i++ {
		k := strconv.Itoa(i)
		for _, l := range []*floodgate.PolicyLimiter{gcra, fixed, sliding, slog} {
			if _, err := floodgate.Allow(ctx, l, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := s.Len(); n != 4000 {
		t.Fatalf("Len = %d, want 4000", n)
	}
	if n := s.Sweep(); n != 0 {
		t.Fatalf("sweep of fresh state dropped %d entries", n)
	}
	// A GCRA key of 10/s charged once is full again after 100 ms; a fixed
	// window at its end; a sliding log one period after its admission; a
	// sliding window two periods after its window began.
	clock.Advance(100 * time.Millisecond)
	if n := s.Sweep(); n != 1000 {
		t.Fatalf("after 100ms sweep dropped %d, want the 1000 GCRA keys", n)
	}
	clock.Advance(900 * time.Millisecond)
	if n := s.Sweep(); n != 2000 {
		t.Fatalf("after 1s sweep dropped %d, want 2000 (fixed window and log)", n)
	}
	clock.Advance(time.Second)
	if n := s.Sweep(); n != 1000 {
		t.Fatalf("after 2s sweep dropped %d, want the 1000 sliding-window keys", n)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("Len after sweeps = %d", n)
	}
}

func TestJanitorRuns(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, memstore.Options{SweepInterval: time.Millisecond})
	lim := newLimiter(t, s, floodgate.Every(time.Millisecond))
	for i := 0; i < 100; i++ {
		floodgate.Allow(ctx, lim, strconv.Itoa(i))
	}
	// The janitor must drop the keys by itself; poll for it, bounded.
	deadline := time.Now().Add(10 * time.Second)
	for s.Len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("janitor left %d idle entries after 10s", s.Len())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestDecideDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, memstore.Options{})
	for _, limits := range [][]floodgate.Limit{
		{floodgate.PerSecond(1000)},
		{floodgate.PerSecond(1000), floodgate.PerHour(100000).WithAlgorithm(floodgate.SlidingWindow)},
		{floodgate.PerSecond(1000).WithAlgorithm(floodgate.FixedWindow)},
	} {
		lim := newLimiter(t, s, limits...)
		floodgate.Allow(ctx, lim, "existing")
		if n := testing.AllocsPerRun(1000, func() { floodgate.Allow(ctx, lim, "existing") }); n != 0 {
			t.Errorf("%v: %v allocations per decision on an existing key, want 0", limits, n)
		}
	}
}

func TestConcurrentMixedOperations(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, memstore.Options{MaxKeys: 500, Shards: 4, SweepInterval: time.Millisecond})
	lim := newLimiter(t, s, floodgate.PerSecond(100), floodgate.PerMinute(1000).WithAlgorithm(floodgate.SlidingLog))
	var wg sync.WaitGroup
	deadline := time.Now().Add(200 * time.Millisecond)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				k := strconv.Itoa((g*7919 + i) % 2000)
				var err error
				switch i % 10 {
				case 0:
					err = lim.RefundN(ctx, k, 1)
				case 1:
					err = lim.Reset(ctx, k)
				default:
					_, err = lim.AllowN(ctx, k, int64(i%3))
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if n := s.Len(); n > 500 {
		t.Fatalf("Len = %d above MaxKeys", n)
	}
}

// TestLockFreeUpdatesSurviveRebuilds races lock-free decisions on a few
// keys against inserts, deletions and sweeps that keep rebuilding the same
// table. Time stands still, so each key must admit exactly its capacity: an
// update lost to a rebuild would admit more, a decision lost to a frozen
// slot would admit less.
func TestLockFreeUpdatesSurviveRebuilds(t *testing.T) {
	ctx := context.Background()
	clock := floodgatetest.NewClock(floodgatetest.Start)
	s := newStore(t, memstore.Options{Clock: clock, Shards: 1, MaxKeys: -1, SweepInterval: -1})
	const capacity = 100_000
	lim := newLimiter(t, s, floodgate.PerHour(capacity))
	churn, err := floodgate.New(s, floodgate.Policy{Name: "churn", Limits: []floodgate.Limit{floodgate.PerHour(1)}})
	if err != nil {
		t.Fatal(err)
	}
	hot := []string{"a", "b", "c", "d"}
	var admitted [4]atomic.Int64
	stop := make(chan struct{})
	var churnWG sync.WaitGroup
	var rounds atomic.Int64
	churnWG.Add(1)
	go func() {
		defer churnWG.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			// New keys grow the table (a rebuild at every doubling); deleting
			// them and sweeping rebuilds it again to drop the tombstones.
			for i := 0; i < 20; i++ {
				floodgate.Allow(ctx, churn, strconv.Itoa(i))
			}
			for i := 0; i < 20; i++ {
				churn.Reset(ctx, strconv.Itoa(i))
			}
			s.Sweep()
			rounds.Add(1)
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	var wg sync.WaitGroup
	for g := 0; g < len(hot); g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < capacity+1000; i++ {
				if i%2000 == 0 {
					// Wait for the churn to finish a round, so that rebuilds
					// keep interleaving with the charges however the
					// goroutines are scheduled.
					for r0 := rounds.Load(); rounds.Load() == r0; runtime.Gosched() {
						if time.Now().After(deadline) {
							t.Error("the churn made no progress in 30s")
							return
						}
					}
				}
				j := (g + i) % len(hot)
				res, err := floodgate.Allow(ctx, lim, hot[j])
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted[j].Add(1)
				}
			}
		}(g)
	}
	wg.Wait()
	close(stop)
	churnWG.Wait()
	for j := range hot {
		if got := admitted[j].Load(); got != capacity {
			t.Errorf("key %s admitted %d, want exactly %d", hot[j], got, capacity)
		}
	}
}
