package redislease_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/redislease"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/redis/go-redis/v9"
)

// holderEnv, when set in the environment, makes the test binary a holder
// process: it takes holderSlots slots of key "k" at the Redis named by the
// variable, says "held" on stdout, and then holds them until it is killed.
const (
	holderEnv   = "REDISLEASE_TEST_HOLDER"
	holderSlots = 2
	holderLease = time.Second
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(holderEnv); addr != "" {
		os.Exit(hold(addr))
	}
	code := m.Run()
	if exampleRedis.srv != nil {
		exampleRedis.srv.Close()
	}
	os.Exit(code)
}

func hold(addr string) int {
	client := redis.NewClient(&redis.Options{Addr: addr})
	s, err := redislease.New(client, redislease.Options{Mode: failover.FailClosed, Lease: holderLease})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	l, err := concurrency.New(s, concurrency.Options{Name: "kill", Limit: holderSlots})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for range holderSlots {
		if res, _ := l.Acquire(context.Background(), "k"); !res.Allowed {
			fmt.Fprintln(os.Stderr, "refused:", res.Reason, res.Error)
			return 1
		}
	}
	fmt.Println("held")
	select {} // hold, renewing, until killed
}

func client(t *testing.T, srv *testkit.RedisServer) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

func newStore(t *testing.T, c redis.UniversalClient, o redislease.Options) *redislease.Store {
	t.Helper()
	s, err := redislease.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newLimiter(t *testing.T, s concurrency.Store, o concurrency.Options) *concurrency.Limiter {
	t.Helper()
	l, err := concurrency.New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func redisNowMillis(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

// TestKilledHolderFreesSlots runs a holder in a child process: while it
// lives it keeps its slots past its first lease (its heartbeat renews
// them); killed with SIGKILL, its slots come free when the leases it last
// renewed run out, never later than one lease after the kill.
func TestKilledHolderFreesSlots(t *testing.T) {
	srv := testkit.Redis(t)
	c := client(t, srv)
	s := newStore(t, c, redislease.Options{Mode: failover.FailClosed, Lease: holderLease})
	l := newLimiter(t, s, concurrency.Options{Name: "kill", Limit: holderSlots})

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+srv.Addr)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("holder said %q, %v", line, err)
	}
	key := s.Key("kill", "k")
	first, err := c.ZRangeWithScores(context.Background(), key, 0, -1).Result()
	if err != nil || len(first) != holderSlots {
		t.Fatalf("lease set %v, %v", first, err)
	}
	if res, _ := l.Acquire(context.Background(), "k"); res.Allowed || res.Reason != concurrency.ReasonFull || res.InFlight != holderSlots {
		t.Fatalf("while the holder holds: %+v", res)
	}

	// Alive past its first leases: Redis's clock passes the latest of
	// them, and the slots are still held.
	firstExpiry := int64(max(first[0].Score, first[1].Score))
	testkit.Eventually(t, 10*time.Second, "redis time past the first leases", func() bool { return redisNowMillis(t, c) > firstExpiry })
	if n, err := s.InFlight(context.Background(), "kill", "k"); err != nil || n != holderSlots {
		t.Fatalf("a live holder lost its slots: %d held, %v", n, err)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed := redisNowMillis(t, c)
	last, err := c.ZRangeWithScores(context.Background(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range last {
		if int64(z.Score) > killed+holderLease.Milliseconds() {
			t.Fatalf("lease runs out at %d, more than a lease after the kill at %d", int64(z.Score), killed)
		}
	}
	testkit.Eventually(t, 10*time.Second, "slots of the killed holder free", func() bool {
		n, err := s.InFlight(context.Background(), "kill", "k")
		return err == nil && n == 0
	})
	if n, _ := c.Exists(context.Background(), key).Result(); n != 0 {
		t.Fatalf("lease set without live leases still exists")
	}
	for range holderSlots {
		if res, _ := l.Acquire(context.Background(), "k"); !res.Allowed {
			t.Fatalf("after the holder's leases ran out: %+v", res)
		}
	}
}

// TestSharedAcrossInstances races two instances (stores on clients of
// their own) for the slots of one key: together they never exceed it.
func TestSharedAcrossInstances(t *testing.T) {
	srv := testkit.Redis(t)
	const limit = 3
	var lims [2]*concurrency.Limiter
	for i := range lims {
		lims[i] = newLimiter(t, newStore(t, client(t, srv), redislease.Options{Mode: failover.FailClosed}), concurrency.Options{Name: "shared", Limit: limit})
	}
	var inFlight, peak, over, admitted atomic.Int32
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Go(func() {
			for range 30 {
				res, p := lims[w%2].Acquire(context.Background(), "k")
				if !res.Allowed {
					if res.Reason != concurrency.ReasonFull {
						t.Errorf("refused: %+v", res)
					}
					continue
				}
				admitted.Add(1)
				n := inFlight.Add(1)
				if n > limit {
					over.Add(1)
				}
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				inFlight.Add(-1)
				p.Release()
			}
		})
	}
	wg.Wait()
	if over.Load() != 0 || admitted.Load() == 0 {
		t.Fatalf("%d admissions over the limit, %d admitted", over.Load(), admitted.Load())
	}
}

func TestLeasesByToken(t *testing.T) {
	srv := testkit.Redis(t)
	c := client(t, srv)
	s := newStore(t, c, redislease.Options{Mode: failover.FailClosed})
	l := newLimiter(t, s, concurrency.Options{Name: "api", Limit: 1})
	ctx := context.Background()
	res, lease := l.AcquireLease(ctx, "user:1", 2*time.Second)
	if !res.Allowed || res.Source != redislease.Source {
		t.Fatalf("%+v", res)
	}
	if r, _ := l.AcquireLease(ctx, "user:1", time.Second); r.Allowed {
		t.Fatal("second lease of a full key")
	}
	if err := l.RenewLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if err := l.RenewLease(ctx, concurrency.Lease{Key: "user:1", Token: "guessed", TTL: time.Second}); !errors.Is(err, concurrency.ErrLeaseLost) {
		t.Fatalf("renewal of a token that holds nothing: %v", err)
	}
	if err := l.ReleaseLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if err := l.RenewLease(ctx, lease); !errors.Is(err, concurrency.ErrLeaseLost) {
		t.Fatalf("renewal after release: %v", err)
	}
	if r, _ := l.AcquireLease(ctx, "user:1", time.Second); !r.Allowed {
		t.Fatalf("after release: %+v", r)
	}
}

func TestFailureModes(t *testing.T) {
	srv := testkit.Redis(t)
	c := client(t, srv)
	guard := failover.BreakerOptions{Timeout: 50 * time.Millisecond, MinCalls: -1}
	open := newLimiter(t, newStore(t, c, redislease.Options{Mode: failover.FailOpen, BreakerOptions: guard}), concurrency.Options{Name: "o", Limit: 1})
	closed := newLimiter(t, newStore(t, c, redislease.Options{Mode: failover.FailClosed, BreakerOptions: failover.BreakerOptions{Timeout: 50 * time.Millisecond, MinCalls: 1, FailureRate: 0.01, Backoff: time.Minute}}), concurrency.Options{Name: "c", Limit: 1})
	local := newLimiter(t, newStore(t, c, redislease.Options{Mode: failover.LocalFallback, BreakerOptions: guard}), concurrency.Options{Name: "l", Limit: 1})
	ctx := context.Background()
	srv.Kill()

	res, p := open.Acquire(ctx, "k")
	if !res.Allowed || res.Source != floodgate.SourceFailOpen || res.InFlight != -1 {
		t.Fatalf("fail-open: %+v", res)
	}
	p.Release()
	res, _ = closed.Acquire(ctx, "k")
	if res.Allowed || res.Reason != concurrency.ReasonFailClosed || res.RetryAfter <= 0 || !errors.Is(res.Err(), concurrency.ErrFailClosed) {
		t.Fatalf("fail-closed: %+v", res)
	}
	res, lp := local.Acquire(ctx, "k")
	if !res.Allowed || res.Source != floodgate.SourceLocalFallback {
		t.Fatalf("local fallback: %+v", res)
	}
	if r, _ := local.Acquire(ctx, "k"); r.Allowed || r.Reason != concurrency.ReasonFull {
		t.Fatalf("local fallback keeps the limit: %+v", r)
	}
	lp.Release()
	if r, p := local.Acquire(ctx, "k"); !r.Allowed {
		t.Fatalf("local fallback after release: %+v", r)
	} else {
		p.Release()
	}

	srv.Restart()
	testkit.Eventually(t, 10*time.Second, "redis decides again", func() bool {
		res, p := open.Acquire(ctx, "k")
		p.Release()
		return res.Source == redislease.Source
	})
}

// TestOneGuardForRatesAndLeases shares one Guard's Breaker between a rate
// limit and a concurrency limit on one Redis: a failure of either opens the one
// breaker, and both then skip Redis.
func TestOneGuardForRatesAndLeases(t *testing.T) {
	srv := testkit.Redis(t)
	c := client(t, srv)
	rs, err := redisstore.New(c, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	guard := mustGuard(t, rs)
	rates, err := failover.New(guard, failover.Options{Mode: failover.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	rl, err := floodgate.New(rates, floodgate.Policy{Name: "rate", Limits: []floodgate.Limit{floodgate.PerSecond(100)}})
	if err != nil {
		t.Fatal(err)
	}
	leases := newStore(t, c, redislease.Options{Mode: failover.FailClosed, Breaker: guard.Breaker()})
	cl := newLimiter(t, leases, concurrency.Options{Name: "conc", Limit: 5})
	ctx := context.Background()
	if r, err := floodgate.Allow(ctx, rl, "a"); err != nil || !r.Allowed || r.Source == floodgate.SourceFailOpen {
		t.Fatalf("rate: %+v %v", r, err)
	}
	if r, p := cl.Acquire(ctx, "a"); !r.Allowed || r.Source != redislease.Source {
		t.Fatalf("lease: %+v", r)
	} else {
		p.Release()
	}
	srv.Kill()
	if r, _ := cl.Acquire(ctx, "a"); r.Reason != concurrency.ReasonFailClosed {
		t.Fatalf("lease with redis down: %+v", r)
	}
	if guard.State() != failover.Open {
		t.Fatalf("breaker %s after the lease's failure, want open", guard.State())
	}
	skipped := guard.Stats().Skipped
	if r, _ := floodgate.Allow(ctx, rl, "a"); r.Source != floodgate.SourceFailOpen {
		t.Fatalf("rate with the breaker open: %+v", r)
	}
	if guard.Stats().Skipped != skipped+1 {
		t.Fatal("the rate limit called redis past the open breaker")
	}
}

func mustGuard(t *testing.T, remote floodgate.Store) *failover.Guard {
	t.Helper()
	g, err := failover.NewGuard(remote, failover.GuardOptions{MinCalls: 1, FailureRate: 0.01, Backoff: time.Minute, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestCorruptKeyIsNotAnOutage(t *testing.T) {
	srv := testkit.Redis(t)
	c := client(t, srv)
	s := newStore(t, c, redislease.Options{Mode: failover.FailOpen, BreakerOptions: failover.BreakerOptions{MinCalls: 1, FailureRate: 0.01}})
	l := newLimiter(t, s, concurrency.Options{Name: "x", Limit: 2})
	if err := c.Set(context.Background(), s.Key("x", "k"), "not a set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	res, _ := l.Acquire(context.Background(), "k")
	if res.Allowed || res.Reason != concurrency.ReasonError || !errors.Is(res.Err(), floodgate.ErrCorruptState) {
		t.Fatalf("corrupt key: %+v", res)
	}
	if s.Breaker().State() != failover.Closed {
		t.Fatal("a corrupt key opened the breaker")
	}
	if r, _ := l.Acquire(context.Background(), "other"); !r.Allowed || r.Source != redislease.Source {
		t.Fatalf("another key: %+v", r)
	}
}

func TestOptions(t *testing.T) {
	srv := testkit.Redis(t)
	c := client(t, srv)
	for name, o := range map[string]redislease.Options{
		"no mode":     {},
		"brace":       {Mode: failover.FailOpen, Prefix: "app{1}:"},
		"short lease": {Mode: failover.FailOpen, Lease: 200 * time.Millisecond},
		"stray local": {Mode: failover.FailOpen, Local: concurrency.NewLocal()},
		"bad guard":   {Mode: failover.FailOpen, BreakerOptions: failover.BreakerOptions{Timeout: -1}},
	} {
		if _, err := redislease.New(c, o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := redislease.New(nil, redislease.Options{Mode: failover.FailOpen}); err == nil {
		t.Error("nil client accepted")
	}
}

func TestKeyLayout(t *testing.T) {
	srv := testkit.Redis(t)
	s := newStore(t, client(t, srv), redislease.Options{Mode: failover.FailOpen, Prefix: "app:"})
	for _, c := range []struct{ name, key, want string }{
		{"api", "user:1", "app:{api:concurrency:user:1}:lease"},
		{"a:b", "x}y", "app:{a%3Ab:concurrency:x%7Dy}:lease"},
	} {
		if got := s.Key(c.name, c.key); got != c.want {
			t.Errorf("Key(%q, %q) = %q, want %q", c.name, c.key, got, c.want)
		}
	}
	if got := testkit.KeySlot(s.Key("api", "user:1")); got != testkit.KeySlot("{api:concurrency:user:1}") {
		t.Errorf("slot %d is not the hash tag's", got)
	}
}

// TestDroppedPermitIsReleased drops a Permit without Release: once it is
// garbage collected its heartbeat stops and its slot is released.
func TestDroppedPermitIsReleased(t *testing.T) {
	srv := testkit.Redis(t)
	s := newStore(t, client(t, srv), redislease.Options{Mode: failover.FailClosed})
	l := newLimiter(t, s, concurrency.Options{Name: "drop", Limit: 1})
	func() {
		if res, _ := l.Acquire(context.Background(), "k"); !res.Allowed {
			t.Fatalf("%+v", res)
		}
	}()
	testkit.Eventually(t, 10*time.Second, "the dropped permit's slot released", func() bool {
		runtime.GC()
		n, err := s.InFlight(context.Background(), "drop", "k")
		return err == nil && n == 0
	})
}

// TestModel runs random acquisitions and releases (some twice) on Redis
// against a counter per key: every answer, and every InFlight, must be the
// model's.
func TestModel(t *testing.T) {
	srv := testkit.Redis(t)
	s := newStore(t, client(t, srv), redislease.Options{Mode: failover.FailClosed})
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 10 {
		limit := 1 + rng.IntN(4)
		l := newLimiter(t, s, concurrency.Options{Name: fmt.Sprintf("model-%d", trial), Limit: limit})
		held := map[string][]*concurrency.Permit{}
		for step := range 100 {
			key := string(rune('a' + rng.IntN(3)))
			if rng.IntN(2) == 0 || len(held[key]) == 0 {
				res, p := l.Acquire(context.Background(), key)
				if want := len(held[key]) < limit; res.Allowed != want {
					t.Fatalf("trial %d step %d: key %s holding %d of %d: %+v", trial, step, key, len(held[key]), limit, res)
				}
				if res.Allowed {
					held[key] = append(held[key], p)
				}
				if want := len(held[key]); res.InFlight != want {
					t.Fatalf("trial %d step %d: InFlight %d, model %d", trial, step, res.InFlight, want)
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
		for _, ps := range held {
			for _, p := range ps {
				p.Release()
			}
		}
	}
}
