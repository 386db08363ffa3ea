package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/testenv"
)

func TestKeyLayout(t *testing.T) {
	set, err := newSet("api", "tier:pro", []floodgate.Limit{
		floodgate.PerSecond(10),
		floodgate.PerMinute(100).WithAlgorithm(floodgate.SlidingLog),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Key("fg:", set, "user:42", 0), "fg:{api:tier%3Apro:user:42}:0g"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	if got, want := Key("fg:", set, "user:42", 1), "fg:{api:tier%3Apro:user:42}:1l"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	odd, _ := newSet("a:b{c}%", "", []floodgate.Limit{floodgate.PerSecond(1)})
	if got, want := Key("", odd, "k", 0), "{a%3Ab%7Bc%7D%25::k}:0g"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
}

// TestSlotOf checks the engine's hash slots against testenv's independent
// implementation, braces included.
func TestSlotOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := "ab{}:x"
	for range 5000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if got, want := slotOf(b), testenv.KeySlot(string(b)); got != want {
			t.Fatalf("slotOf(%q) = %d, want %d", b, got, want)
		}
	}
}

// TestKeysShareSlot checks that every key of a decision, over every limit
// of its set, hashes to one slot, whatever the key holds.
func TestKeysShareSlot(t *testing.T) {
	limits := []floodgate.Limit{
		floodgate.PerSecond(10), floodgate.PerMinute(100).WithAlgorithm(floodgate.FixedWindow),
		floodgate.PerHour(1000).WithAlgorithm(floodgate.SlidingWindow), floodgate.PerMinute(50).WithAlgorithm(floodgate.SlidingLog),
	}
	for _, policy := range []string{"api", "we{ird", "we}ird"} {
		set, err := newSet(policy, "override:x}y", limits)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"k", "{", "}", "a}b", "{x}", "", strings.Repeat("z", 192)} {
			slot := testenv.KeySlot(Key(DefaultPrefix, set, key, 0))
			for i := range limits {
				if s := testenv.KeySlot(Key(DefaultPrefix, set, key, i)); s != slot {
					t.Errorf("policy %q key %q: limit %d in slot %d, limit 0 in %d", policy, key, i, s, slot)
				}
			}
		}
	}
}

func TestValidateLimit(t *testing.T) {
	s := &Store{}
	for _, c := range []struct {
		name string
		l    floodgate.Limit
		ok   bool
	}{
		{"one per microsecond", floodgate.Limit{Rate: 1_000_000, Period: time.Second}, true},
		{"just below a microsecond", floodgate.Limit{Rate: 1_000_001, Period: time.Second}, true},
		{"half a microsecond", floodgate.Limit{Rate: 2_000_000, Period: time.Second}, false},
		{"interval not whole microseconds", floodgate.PerSecond(3), true},
		{"interval rounded up by 20%", floodgate.PerSecond(600_000), false},
		{"window of whole microseconds", floodgate.Limit{Rate: 5, Period: 1500 * time.Microsecond, Algorithm: floodgate.FixedWindow}, true},
		{"window not whole microseconds", floodgate.Limit{Rate: 5, Period: 1500 * time.Nanosecond, Algorithm: floodgate.FixedWindow}, false},
		{"sliding log not whole microseconds", floodgate.Limit{Rate: 5, Period: time.Second + 1, Algorithm: floodgate.SlidingLog}, false},
		{"large sliding window", floodgate.Limit{Rate: 1_000_000, Period: time.Hour, Algorithm: floodgate.SlidingWindow}, true},
		{"sliding window beyond 2^52", floodgate.Limit{Rate: 1_000_000, Period: 24 * time.Hour, Algorithm: floodgate.SlidingWindow}, false},
		{"large fixed window", floodgate.Limit{Rate: 1 << 40, Period: 24 * time.Hour, Algorithm: floodgate.FixedWindow}, true},
		{"fixed window beyond 2^52", floodgate.Limit{Rate: 1<<52 + 1, Period: 24 * time.Hour, Algorithm: floodgate.FixedWindow}, false},
	} {
		err := s.ValidateLimit(c.l)
		if c.ok && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if !c.ok && !errors.Is(err, floodgate.ErrInvalidLimit) {
			t.Errorf("%s: error %v, want one wrapping ErrInvalidLimit", c.name, err)
		}
	}
	// New asks the store, so such a policy fails at construction.
	_, err := floodgate.New(s, floodgate.Policy{Name: "fine", Limits: []floodgate.Limit{{Rate: 2_000_000, Period: time.Second}}})
	if !errors.Is(err, floodgate.ErrInvalidLimit) || !strings.Contains(err.Error(), "1µs") {
		t.Errorf("floodgate.New = %v, want an ErrInvalidLimit naming the resolution", err)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New(nil) succeeded")
	}
	for _, o := range []Options{{MaxBatch: -1}, {Flushers: -1}, {MaxPending: -1}} {
		if _, err := New(client, o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
}

// TestTTLIsExpiry checks, on Redis's own clock, that each key lives exactly
// as long as its state carries information: for an allowed request that is
// its ResetAfter, rounded up to the millisecond.
func TestTTLIsExpiry(t *testing.T) {
	client := standalone(t)
	s := newStore(t, client, Options{})
	ctx := context.Background()
	for _, l := range []floodgate.Limit{
		floodgate.PerMinute(10),
		floodgate.PerSecond(3).WithBurst(7).WithAlgorithm(floodgate.TokenBucket),
		floodgate.PerHour(10).WithAlgorithm(floodgate.FixedWindow),
		floodgate.PerDay(10).AlignedTo(time.FixedZone("X", -3*3600-1800)),
		floodgate.PerMinute(10).WithAlgorithm(floodgate.SlidingWindow),
		floodgate.PerMinute(10).WithAlgorithm(floodgate.SlidingLog),
	} {
		t.Run(l.String(), func(t *testing.T) {
			lim := newLimiter(t, s, "ttl "+l.String(), l)
			res, err := lim.AllowN(ctx, "k", 3)
			if err != nil || !res.Allowed {
				t.Fatalf("AllowN = %+v, %v", res, err)
			}
			key := Key(DefaultPrefix, lim.LimitsFor("k").Engine(), "k", 0)
			pttl, err := client.PTTL(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			want := (res.ResetAfter + time.Millisecond - 1).Truncate(time.Millisecond)
			// The key ages between the decision and PTTL; allow 250 ms for a
			// loaded machine.
			if pttl > want || pttl < want-250*time.Millisecond {
				t.Errorf("PTTL %s = %s, want %s (ResetAfter %s)", key, pttl, want, res.ResetAfter)
			}
			// A refund of everything drops the state.
			if err := lim.RefundN(ctx, "k", 3); err != nil {
				t.Fatal(err)
			}
			if n := client.Exists(ctx, key).Val(); n != 0 {
				t.Errorf("key %s still exists after a full refund", key)
			}
		})
	}
}

// TestNoScriptCallAboveCapacity: a cost no limit can ever admit is answered
// by the policy without a round trip to Redis.
func TestNoScriptCallAboveCapacity(t *testing.T) {
	client := standalone(t)
	calls := countScripts(client)
	lim := newLimiter(t, newStore(t, client, Options{}), "cap", floodgate.PerSecond(10), floodgate.PerMinute(5))
	res, err := lim.AllowN(context.Background(), "k", 6)
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed || res.RetryAfter != floodgate.RetryNever || res.Source != floodgate.SourcePolicy {
		t.Errorf("AllowN(6) = %+v, want a denial that never passes from the policy", res)
	}
	if n := calls.calls.Load(); n != 0 {
		t.Errorf("%d script calls for a cost above capacity, want 0", n)
	}
	if _, err := lim.AllowN(context.Background(), "k", 5); err != nil {
		t.Fatal(err)
	}
	if calls.calls.Load() == 0 {
		t.Error("a cost within capacity made no script call: the counter misses calls")
	}
}

// hammer calls lim.Allow on key from n goroutines for d, and returns how
// many were allowed and the errors.
func hammer(t *testing.T, lim floodgate.Limiter, key string, n int, d time.Duration) (allowed int64, errs []error) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var count atomic.Int64
	until := time.Now().Add(d)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(until) {
				res, err := lim.Allow(context.Background(), key)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				if res.Allowed {
					count.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return count.Load(), errs
}

// TestScriptFlushUnderLoad flushes the script cache while many callers
// decide: every call still succeeds (the script is reloaded with EVAL) and
// nothing is charged twice.
func TestScriptFlushUnderLoad(t *testing.T) {
	scriptFlushUnderLoad(t, standalone(t))
}

func scriptFlushUnderLoad(t *testing.T, client redis.UniversalClient) {
	calls := countScripts(client)
	lim := newLimiter(t, newStore(t, client, Options{}), "flush", floodgate.PerHour(3000))
	stop := make(chan struct{})
	var flushes atomic.Int64
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if err := client.ScriptFlush(context.Background()).Err(); err == nil {
					flushes.Add(1)
				}
			}
		}
	}()
	allowed, errs := hammer(t, lim, "k", 32, 1500*time.Millisecond)
	close(stop)
	if len(errs) > 0 {
		t.Fatalf("%d errors under SCRIPT FLUSH, first: %v", len(errs), errs[0])
	}
	if flushes.Load() < 5 || calls.evals.Load() == 0 {
		t.Fatalf("%d flushes and %d reloads: the test did not exercise NOSCRIPT", flushes.Load(), calls.evals.Load())
	}
	res, err := lim.AllowN(context.Background(), "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	// Every admission is charged exactly once: what is left plus what was
	// admitted is the burst plus what refilled (3000/h: under two per
	// second).
	if total := allowed + res.Remaining; total < 3000 || total > 3005 {
		t.Errorf("admitted %d and %d remain: %d, want 3000 plus a few refilled", allowed, res.Remaining, total)
	}
	t.Logf("%d decisions in %d script calls, %d SCRIPT FLUSHes, %d reloads", calls.decisions.Load(), calls.calls.Load(), flushes.Load(), calls.evals.Load())
}

// TestSharedAcrossInstances: three Stores, each with its own client, share
// one limit through one Redis and together admit what one would.
func TestSharedAcrossInstances(t *testing.T) {
	srv := testenv.Redis(t)
	const burst = 500
	l := floodgate.PerMinute(600).WithBurst(burst) // 10/s refill
	var lims []floodgate.Limiter
	for range 3 {
		lims = append(lims, newLimiter(t, newStore(t, newClient(t, srv.Addr), Options{}), "shared", l))
	}
	start := time.Now()
	var wg sync.WaitGroup
	var total atomic.Int64
	for _, lim := range lims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, errs := hammer(t, lim, "k", 8, time.Second)
			if len(errs) > 0 {
				t.Errorf("%d errors, first: %v", len(errs), errs[0])
			}
			total.Add(n)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	limit := float64(burst) + 10*elapsed.Seconds()
	if got := float64(total.Load()); got < burst || got > limit*1.01 {
		t.Errorf("three instances admitted %.0f in %s, want between %d and %.0f (+1%%)", got, elapsed, burst, limit*1.01)
	}
	t.Logf("three instances admitted %d in %s; the shared limit allows %.0f", total.Load(), elapsed, limit)
}

// TestConcurrentDecisionsAreAtomic: batched decisions on one key behave as
// if made one at a time: exactly the capacity is admitted, and each
// admission reports a different Remaining.
func TestConcurrentDecisionsAreAtomic(t *testing.T) {
	concurrentDecisionsAreAtomic(t, standalone(t))
}

func concurrentDecisionsAreAtomic(t *testing.T, client redis.UniversalClient) {
	calls := countScripts(client)
	for _, l := range []floodgate.Limit{
		floodgate.PerHour(200),
		floodgate.PerHour(200).WithAlgorithm(floodgate.FixedWindow),
		floodgate.PerHour(200).WithAlgorithm(floodgate.SlidingWindow),
		floodgate.PerHour(200).WithAlgorithm(floodgate.SlidingLog),
	} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			// A fixed clock: nothing refills while the test runs.
			clock := floodgate.ClockFunc(func() int64 { return time.Date(2026, 3, 1, 0, 10, 0, 0, time.UTC).UnixNano() })
			lim := newLimiter(t, newStore(t, client, Options{Clock: clock, Prefix: "atomic:" + l.Algorithm.String() + ":"}), "atomic", l)
			var mu sync.Mutex
			var remaining []int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 5 {
						res, err := lim.Allow(context.Background(), "k")
						if err != nil {
							t.Error(err)
							return
						}
						if res.Allowed {
							mu.Lock()
							remaining = append(remaining, res.Remaining)
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			slices.Sort(remaining)
			if len(remaining) != 200 {
				t.Fatalf("admitted %d of 320, want 200", len(remaining))
			}
			for i, r := range remaining {
				if r != int64(i) {
					t.Fatalf("admissions reported Remaining %v, want each of 0..199 once", remaining)
				}
			}
		})
	}
	if c, d := calls.calls.Load(), calls.decisions.Load(); c >= d {
		t.Errorf("%d decisions took %d script calls: no batching", d, c)
	} else {
		t.Logf("%d decisions in %d script calls", d, c)
	}
}

// TestMultiLimitBatchAllOrNothing mixes, in concurrent batches, requests of
// a two-limit policy: a denial by one limit charges neither.
func TestMultiLimitBatchAllOrNothing(t *testing.T) {
	client := standalone(t)
	clock := floodgate.ClockFunc(func() int64 { return time.Date(2026, 3, 1, 0, 0, 30, 0, time.UTC).UnixNano() })
	s := newStore(t, client, Options{Clock: clock})
	both := newLimiter(t, s, "pair", floodgate.PerHour(100), floodgate.PerMinute(30).WithAlgorithm(floodgate.FixedWindow))
	first := newLimiter(t, s, "pair", floodgate.PerHour(100))
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				res, err := both.Allow(context.Background(), "k")
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
	if admitted.Load() != 30 {
		t.Fatalf("admitted %d, want 30 (the per-minute window)", admitted.Load())
	}
	res, err := first.AllowN(context.Background(), "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Remaining != 70 {
		t.Errorf("the hourly limit has %d left, want 70: denied requests were charged to it", res.Remaining)
	}
}

// TestRedisDown: a Redis that refuses connections fails decisions at once,
// with an error that names the operation and wraps the network error.
func TestRedisDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer client.Close()
	lim := newLimiter(t, newStore(t, client, Options{}), "down", floodgate.PerSecond(10))
	start := time.Now()
	_, err = lim.Allow(context.Background(), "k")
	if err == nil {
		t.Fatal("decided without Redis")
	}
	var se *Error
	var ne net.Error
	if !errors.As(err, &se) || se.Op != "decide" || !errors.As(err, &ne) {
		t.Errorf("error %v (%T): want a *redisstore.Error for decide wrapping a net.Error", err, err)
	}
	t.Logf("failed after %s: %v", time.Since(start), err)
}

// TestStalledRedisHonoursContext: when Redis does not answer, each caller
// gets its context's error when its deadline passes, not when Redis
// answers; requests whose callers left are never sent.
func TestStalledRedisHonoursContext(t *testing.T) {
	srv := testenv.Redis(t)
	client := newClient(t, srv.Addr)
	calls := countScripts(client)
	s := newStore(t, client, Options{Flushers: 1})
	lim := newLimiter(t, s, "stall", floodgate.PerHour(10))
	if _, err := lim.Allow(context.Background(), "warm"); err != nil {
		t.Fatal(err)
	}
	before := calls.calls.Load()
	srv.Pause(1500 * time.Millisecond)

	// The first request occupies the only flusher; the others queue.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	took := make([]time.Duration, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, errs[i] = lim.Allow(ctx, fmt.Sprintf("k%d", i))
			took[i] = time.Since(start)
		}()
		if i == 0 {
			eventually(t, time.Second, "first request sent", func() bool { return calls.calls.Load() > before })
		}
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("caller %d: error %v, want one wrapping context.DeadlineExceeded", i, err)
		}
		if took[i] > 400*time.Millisecond {
			t.Errorf("caller %d waited %s with a 100ms deadline", i, took[i])
		}
	}
	// Once Redis answers again, only the request in flight was decided.
	eventually(t, 5*time.Second, "redis answers", func() bool {
		_, err := lim.Allow(context.Background(), "after")
		return err == nil
	})
	if n := calls.decisions.Load() - before; n > 3 {
		t.Errorf("%d decisions sent after the stall began, want the one in flight and the probes after", n)
	}
	for i := 1; i < len(errs); i++ {
		key := Key(DefaultPrefix, lim.LimitsFor("k").Engine(), fmt.Sprintf("k%d", i), 0)
		if client.Exists(context.Background(), key).Val() != 0 {
			t.Errorf("abandoned request %d was charged", i)
		}
	}
}

// TestRestartedRedis: a Redis restarted empty (as a failover to a fresh
// node looks) does not know the script; decisions resume after it.
func TestRestartedRedis(t *testing.T) {
	srv := testenv.Redis(t)
	client := newClient(t, srv.Addr)
	calls := countScripts(client)
	lim := newLimiter(t, newStore(t, client, Options{}), "restart", floodgate.PerSecond(1000))
	if _, err := lim.Allow(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	evals := calls.evals.Load()
	srv.Restart()
	eventually(t, 5*time.Second, "decisions after restart", func() bool {
		_, err := lim.Allow(context.Background(), "k")
		return err == nil
	})
	if calls.evals.Load() == evals {
		t.Error("the restarted server ran the script without a reload")
	}
}

// TestOverloaded: when Options.MaxPending requests already wait, a new
// one fails at once instead of queueing behind a stalled Redis.
func TestOverloaded(t *testing.T) {
	srv := testenv.Redis(t)
	client := newClient(t, srv.Addr)
	calls := countScripts(client)
	s := newStore(t, client, Options{Flushers: 1, MaxPending: 2})
	lim := newLimiter(t, s, "over", floodgate.PerSecond(10))
	srv.Pause(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 3 { // one in flight, two waiting
		wg.Add(1)
		go func() {
			defer wg.Done()
			lim.Allow(ctx, fmt.Sprint(i))
		}()
		if i == 0 {
			eventually(t, time.Second, "first request sent", func() bool { return calls.calls.Load() > 0 })
		}
	}
	eventually(t, time.Second, "queue full", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.pending)-s.head == 2
	})
	start := time.Now()
	_, err := lim.Allow(ctx, "more")
	if !errors.Is(err, ErrOverloaded) || time.Since(start) > 100*time.Millisecond {
		t.Errorf("Allow on a full queue = %v after %s, want ErrOverloaded at once", err, time.Since(start))
	}
	wg.Wait()
}

// TestClose: requests waiting when the Store closes, and any after, fail
// with ErrClosed; Close stops the flushers and may be called twice.
func TestClose(t *testing.T) {
	srv := testenv.Redis(t)
	client := newClient(t, srv.Addr)
	calls := countScripts(client)
	s, err := New(client, Options{Flushers: 1})
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, "close", floodgate.PerSecond(10))
	srv.Pause(500 * time.Millisecond)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = lim.Allow(context.Background(), fmt.Sprint(i))
		}()
		if i == 0 {
			eventually(t, time.Second, "first request sent", func() bool { return calls.calls.Load() > 0 })
		}
	}
	eventually(t, time.Second, "two requests queued", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.pending)-s.head == 2
	})
	s.Close()
	wg.Wait()
	closed := 0
	for _, err := range errs {
		if errors.Is(err, ErrClosed) {
			closed++
		}
	}
	if closed != 2 {
		t.Errorf("errors %v: want the two queued requests to fail with ErrClosed", errs)
	}
	if _, err := lim.Allow(context.Background(), "late"); !errors.Is(err, ErrClosed) {
		t.Errorf("Allow after Close = %v, want ErrClosed", err)
	}
	s.Close()
}

// TestSentinel decides through Sentinel's failover client.
func TestSentinel(t *testing.T) {
	g := testenv.RedisSentinel(t, 1, 1)
	client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: g.MasterName, SentinelAddrs: g.SentinelAddrs})
	defer client.Close()
	lim := newLimiter(t, newStore(t, client, Options{}), "sentinel", floodgate.PerMinute(2))
	for i, want := range []bool{true, true, false} {
		res, err := lim.Allow(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != want {
			t.Errorf("request %d: Allowed = %v, want %v", i+1, res.Allowed, want)
		}
	}
}

// newSet compiles limits into the Set a Store receives, as a Limiter would.
func newSet(policy, name string, limits []floodgate.Limit) (*algo.Set, error) {
	return floodgatetest.NewSet(policy, name, limits...)
}
