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
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/testkit"
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

// TestSlotOf checks the engine's hash slots against testkit's independent
// implementation, braces included.
func TestSlotOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := "ab{}:x"
	for range 5000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if got, want := slotOf(b), testkit.KeySlot(string(b)); got != want {
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
			slot := testkit.KeySlot(Key(DefaultPrefix, set, key, 0))
			for i := range limits {
				if s := testkit.KeySlot(Key(DefaultPrefix, set, key, i)); s != slot {
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
			key := Key(DefaultPrefix, lim.LimitsFor("k").Compiled(), "k", 0)
			// The key ages between the decision and PTTL, by no more than
			// the time from before the one to after the other.
			start := time.Now()
			res, err := lim.AllowN(ctx, "k", 3)
			if err != nil || !res.Allowed {
				t.Fatalf("AllowN = %+v, %v", res, err)
			}
			pttl, err := client.PTTL(ctx, key).Result()
			aged := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			want := (res.ResetAfter + time.Millisecond - 1).Truncate(time.Millisecond)
			// PTTL truncates to the millisecond: one more may be lost.
			if low := want - aged - time.Millisecond; pttl > want || pttl < low {
				t.Errorf("PTTL %s = %s, want %s less at most the %s between the decision and PTTL (ResetAfter %s)", key, pttl, want, aged, res.ResetAfter)
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

// hammer calls lim.Allow on key from n goroutines until each has seen a
// denial, and returns how many were allowed and the errors. A worker gives
// up after 10 000 calls, so a limit that never denies cannot hang the test.
func hammer(t *testing.T, lim floodgate.Limiter, key string, n int) (allowed int64, errs []error) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var count atomic.Int64
	for range n {
		wg.Go(func() {
			for range 10_000 {
				res, err := floodgate.Allow(context.Background(), lim, key)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				if !res.Allowed {
					return
				}
				count.Add(1)
			}
			mu.Lock()
			errs = append(errs, errors.New("no denial in 10 000 calls"))
			mu.Unlock()
		})
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
	// A fixed clock: nothing refills, so what is left plus what was
	// admitted is the capacity exactly, and the capacity is far above the
	// decisions made, so every one of them is admitted and charged.
	clock := clock.Func(func() int64 { return time.Date(2026, 3, 1, 0, 10, 0, 0, time.UTC).UnixNano() })
	const capacity = 1_000_000
	lim := newLimiter(t, newStore(t, client, Options{Clock: clock}), "flush", floodgate.PerHour(capacity))
	// Workers flush after every 100th decision, so the cache is flushed
	// while the others' decisions are queued or in flight, however fast
	// or slow the machine is.
	const workers, each, flushEvery = 32, 40, 100
	var mu sync.Mutex
	var errs []error
	var decided, allowed, flushes atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				res, err := floodgate.Allow(context.Background(), lim, "k")
				if err == nil && res.Allowed {
					allowed.Add(1)
				}
				if err == nil && !res.Allowed {
					err = fmt.Errorf("denied with %d of %d left", res.Remaining, capacity)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
				if decided.Add(1)%flushEvery == 0 {
					if err := client.ScriptFlush(context.Background()).Err(); err != nil {
						t.Errorf("SCRIPT FLUSH: %v", err)
					}
					flushes.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors under SCRIPT FLUSH, first: %v", len(errs), errs[0])
	}
	if calls.evals.Load() == 0 {
		t.Fatalf("%d flushes and no reload: the test did not exercise NOSCRIPT", flushes.Load())
	}
	res, err := lim.AllowN(context.Background(), "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := allowed.Load() + res.Remaining; got != capacity || allowed.Load() != workers*each {
		t.Errorf("admitted %d of %d and %d remain: %d, want %d: a request was charged twice or not at all",
			allowed.Load(), workers*each, res.Remaining, got, capacity)
	}
	t.Logf("%d decisions in %d script calls, %d SCRIPT FLUSHes, %d reloads", calls.decisions.Load(), calls.calls.Load(), flushes.Load(), calls.evals.Load())
}

// TestSharedAcrossInstances: three Stores, each with its own client, share
// one limit through one Redis and together admit what one would: the
// burst, and no more than what refilled while they ran. They run until
// every caller has been denied, so the burst is used up however slowly
// the machine lets them run, and the refill is bounded by the measured
// time.
func TestSharedAcrossInstances(t *testing.T) {
	srv := testkit.Redis(t)
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
		wg.Go(func() {
			n, errs := hammer(t, lim, "k", 8)
			if len(errs) > 0 {
				t.Errorf("%d errors, first: %v", len(errs), errs[0])
			}
			total.Add(n)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	// One more than the refill: a partly refilled unit may complete.
	limit := burst + 10*elapsed.Seconds() + 1
	if got := float64(total.Load()); got < burst || got > limit {
		t.Errorf("three instances admitted %.0f in %s, want between %d and %.0f", got, elapsed, burst, limit)
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
			clock := clock.Func(func() int64 { return time.Date(2026, 3, 1, 0, 10, 0, 0, time.UTC).UnixNano() })
			lim := newLimiter(t, newStore(t, client, Options{Clock: clock, Prefix: "atomic:" + l.Algorithm.String() + ":"}), "atomic", l)
			var mu sync.Mutex
			var remaining []int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 5 {
						res, err := floodgate.Allow(context.Background(), lim, "k")
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
	clock := clock.Func(func() int64 { return time.Date(2026, 3, 1, 0, 0, 30, 0, time.UTC).UnixNano() })
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
				res, err := floodgate.Allow(context.Background(), both, "k")
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
// after one attempt to connect (counted, not timed), with an error that
// names the operation and wraps the network error.
func TestRedisDown(t *testing.T) {
	addr := testkit.RefusingAddr(t) // bound, never listening: refused
	// How many dials one attempt makes (go-redis's pool retries a dial).
	once := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer once.Close()
	perAttempt := countDials(once)
	if once.Ping(context.Background()).Err() == nil {
		t.Fatal("something answers on a closed port")
	}

	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer client.Close()
	dials := countDials(client)
	// newStore's generous Options.Timeout: the dial retries must end the
	// call, not the Store's deadline.
	lim := newLimiter(t, newStore(t, client, Options{}), "down", floodgate.PerSecond(10))
	start := time.Now()
	_, err := floodgate.Allow(context.Background(), lim, "k")
	if err == nil {
		t.Fatal("decided without Redis")
	}
	var se *Error
	var ne net.Error
	if !errors.As(err, &se) || se.Op != "decide" || !errors.As(err, &ne) {
		t.Errorf("error %v (%T): want a *redisstore.Error for decide wrapping a net.Error", err, err)
	}
	if got, want := dials.Load(), perAttempt.Load(); got != want {
		t.Errorf("%d dials for one decision, want %d (one attempt)", got, want)
	}
	t.Logf("failed after %s and %d dials: %v", time.Since(start), dials.Load(), err)
}

// hangLimit bounds a wait that the behaviour under test ends at once: far
// beyond any scheduling delay, so reaching it means a hang.
const hangLimit = 10 * time.Second

// await waits for ch to be closed, failing the test after hangLimit.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hangLimit):
		t.Fatalf("%s: still waiting after %s", what, hangLimit)
	}
}

// TestStalledRedisHonoursContext: when Redis does not answer, each caller
// gets its context's error when its deadline passes, not when Redis
// answers; requests whose callers left are never sent. Redis holds every
// script call until the test lets it go, so "before Redis answers" is an
// order of events, not a guess at how long anything takes.
func TestStalledRedisHonoursContext(t *testing.T) {
	srv := testkit.Redis(t)
	client := newClient(t, srv.Addr)
	calls := countScripts(client)
	s := newStore(t, client, Options{Flushers: 1})
	lim := newLimiter(t, s, "stall", floodgate.PerHour(10))
	if _, err := floodgate.Allow(context.Background(), lim, "warm"); err != nil {
		t.Fatal(err)
	}
	before, beforeDecisions := calls.calls.Load(), calls.decisions.Load()
	srv.PauseWrites()

	// The first request occupies the only flusher until Redis answers; its
	// caller waits that long. The others queue behind it with deadlines
	// that pass while it is held.
	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), generous)
		defer cancel()
		_, err := floodgate.Allow(ctx, lim, "k0")
		first <- err
	}()
	eventually(t, hangLimit, "first request sent", func() bool { return calls.calls.Load() > before })
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := 1; i < len(errs); i++ {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, errs[i] = floodgate.Allow(ctx, lim, fmt.Sprintf("k%d", i))
		})
	}
	queued := make(chan struct{})
	go func() { wg.Wait(); close(queued) }()
	await(t, queued, "callers with a 100ms deadline, Redis held")
	for i := 1; i < len(errs); i++ {
		if !errors.Is(errs[i], context.DeadlineExceeded) {
			t.Errorf("caller %d: error %v, want one wrapping context.DeadlineExceeded", i, errs[i])
		}
	}
	select {
	case err := <-first:
		t.Fatalf("the request in flight returned (%v) while Redis held it", err)
	default:
	}
	if n := calls.calls.Load() - before; n != 1 {
		t.Errorf("%d script calls sent while Redis held the first, want 1: abandoned requests were sent", n)
	}

	srv.Unpause()
	select {
	case err := <-first:
		if err != nil {
			t.Errorf("the request in flight: %v, want Redis's answer once it answers", err)
		}
	case <-time.After(hangLimit):
		t.Fatalf("the request in flight: no answer %s after Redis answers again", hangLimit)
	}
	if _, err := floodgate.Allow(context.Background(), lim, "after"); err != nil {
		t.Fatal(err)
	}
	// Only the request in flight and the one after were decided.
	if n := calls.decisions.Load() - beforeDecisions; n != 2 {
		t.Errorf("%d decisions sent after the stall began, want 2: the one in flight and the one after", n)
	}
	for i := 1; i < len(errs); i++ {
		key := Key(DefaultPrefix, lim.LimitsFor("k").Compiled(), fmt.Sprintf("k%d", i), 0)
		if client.Exists(context.Background(), key).Val() != 0 {
			t.Errorf("abandoned request %d was charged", i)
		}
	}
}

// TestRestartedRedis: a Redis restarted empty (as a failover to a fresh
// node looks) does not know the script; decisions resume after it.
func TestRestartedRedis(t *testing.T) {
	srv := testkit.Redis(t)
	client := newClient(t, srv.Addr)
	calls := countScripts(client)
	lim := newLimiter(t, newStore(t, client, Options{}), "restart", floodgate.PerSecond(1000))
	if _, err := floodgate.Allow(context.Background(), lim, "k"); err != nil {
		t.Fatal(err)
	}
	evals := calls.evals.Load()
	srv.Restart()
	eventually(t, 5*time.Second, "decisions after restart", func() bool {
		_, err := floodgate.Allow(context.Background(), lim, "k")
		return err == nil
	})
	if calls.evals.Load() == evals {
		t.Error("the restarted server ran the script without a reload")
	}
}

// TestOverloaded: when Options.MaxPending requests already wait, a new
// one fails at once with ErrOverloaded instead of queueing behind a
// stalled Redis: while Redis still holds the request in flight, and
// without a script call of its own.
func TestOverloaded(t *testing.T) {
	srv := testkit.Redis(t)
	client := newClient(t, srv.Addr)
	calls := countScripts(client)
	s := newStore(t, client, Options{Flushers: 1, MaxPending: 2})
	lim := newLimiter(t, s, "over", floodgate.PerSecond(10))
	if _, err := floodgate.Allow(context.Background(), lim, "warm"); err != nil { // loads the script
		t.Fatal(err)
	}
	before := calls.calls.Load()
	srv.PauseWrites()
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs { // one in flight, two waiting
		wg.Go(func() { _, errs[i] = floodgate.Allow(ctx, lim, fmt.Sprint(i)) })
		if i == 0 {
			eventually(t, hangLimit, "first request sent", func() bool { return calls.calls.Load() > before })
		}
	}
	eventually(t, hangLimit, "queue full", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.pending)-s.head == 2
	})
	more := make(chan struct{})
	var err error
	go func() { _, err = floodgate.Allow(ctx, lim, "more"); close(more) }()
	await(t, more, "Allow on a full queue, Redis held")
	if !errors.Is(err, ErrOverloaded) {
		t.Errorf("Allow on a full queue = %v, want ErrOverloaded", err)
	}
	if n := calls.calls.Load() - before; n != 1 {
		t.Errorf("%d script calls while Redis held the first, want 1", n)
	}
	srv.Unpause()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	await(t, done, "the requests queued before, Redis answering")
	for i, err := range errs {
		if err != nil {
			t.Errorf("request %d, queued before the queue was full: %v", i, err)
		}
	}
}

// TestClose: requests waiting when the Store closes, and any after, fail
// with ErrClosed, while Redis still holds the one in flight; Close stops
// the flushers and may be called twice.
func TestClose(t *testing.T) {
	srv := testkit.Redis(t)
	client := newClient(t, srv.Addr)
	calls := countScripts(client)
	s, err := New(client, Options{Flushers: 1, Timeout: generous})
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, "close", floodgate.PerSecond(10))
	if _, err := floodgate.Allow(context.Background(), lim, "warm"); err != nil { // loads the script
		t.Fatal(err)
	}
	before := calls.calls.Load()
	srv.PauseWrites()
	errs := make([]error, 3)
	done := make([]chan struct{}, len(errs))
	for i := range errs {
		done[i] = make(chan struct{})
		go func() {
			defer close(done[i])
			_, errs[i] = floodgate.Allow(context.Background(), lim, fmt.Sprint(i))
		}()
		if i == 0 {
			eventually(t, hangLimit, "first request sent", func() bool { return calls.calls.Load() > before })
		}
	}
	eventually(t, hangLimit, "two requests queued", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.pending)-s.head == 2
	})
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	// The queued requests fail at Close, not when Redis answers.
	for i := 1; i < len(errs); i++ {
		await(t, done[i], fmt.Sprintf("queued request %d after Close, Redis held", i))
		if !errors.Is(errs[i], ErrClosed) {
			t.Errorf("queued request %d: %v, want ErrClosed", i, errs[i])
		}
	}
	if _, err := floodgate.Allow(context.Background(), lim, "late"); !errors.Is(err, ErrClosed) {
		t.Errorf("Allow after Close = %v, want ErrClosed", err)
	}
	// Close waits for the flusher, which waits for Redis.
	srv.Unpause()
	await(t, closed, "Close, Redis answering")
	await(t, done[0], "the request in flight, Redis answering")
	if n := calls.calls.Load() - before; n != 1 {
		t.Errorf("%d script calls, want 1: the queued requests were sent after Close", n)
	}
	s.Close()
}

// TestSentinel decides through Sentinel's failover client.
func TestSentinel(t *testing.T) {
	g := testkit.RedisSentinel(t, 1, 1)
	client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: g.MasterName, SentinelAddrs: g.SentinelAddrs})
	defer client.Close()
	lim := newLimiter(t, newStore(t, client, Options{}), "sentinel", floodgate.PerMinute(2))
	for i, want := range []bool{true, true, false} {
		res, err := floodgate.Allow(context.Background(), lim, "k")
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
