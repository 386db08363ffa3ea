package failover_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/hybrid"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/testkit"
)

// Fault tests: real redis-server processes killed, paused, restarted and
// failed over while callers keep deciding through each failure policy and a
// hybrid store. They assert what the callers saw, under the default Guard
// settings:
//
//   - no call returns an error, whatever the policy: each absorbs the
//     failure (FailClosed by denying with Source fail-closed);
//   - no call takes longer than the timeout plus a slack that only a
//     starved machine could use up: below the 3 s go-redis would wait;
//     the Guard's Stats show the stalled calls were cut off by its timeout;
//   - the breaker opens during an outage of a standalone server, after at least the configured
//     number of failures (a hang detector bounds the wait, not a speed);
//   - decisions come from Redis again after its recovery (the back-off is
//     at most 2 s; a hang detector bounds the wait).
const (
	callSlack     = 2 * time.Second
	openWithin    = 30 * time.Second
	recoverWithin = 10 * time.Second
	faultLimit    = 100_000 // per second: every decision is allowed while Redis is up
)

// A subject is one way of deciding under test, with what it records.
type subject struct {
	name     string
	lim      *floodgate.PolicyLimiter
	guard    *failover.Guard
	key      string
	remote   floodgate.Source          // the Source of a decision Redis made
	fallback floodgate.Source          // the Source of a decision made without Redis
	allowed  map[floodgate.Source]bool // Allowed each Source must report; absent: either

	mu        sync.Mutex
	calls     int
	errs      int
	firstErr  error
	bySource  map[floodgate.Source]int
	slowest   time.Duration
	violation string

	failures []string // the first few errors the Guard reported, timed

	lastRemote   atomic.Int64 // UnixNano of the last decision Redis made
	lastFallback atomic.Int64 // UnixNano of the last decision made without it
}

func (s *subject) onError(began time.Time) func(*failover.Error) {
	return func(e *failover.Error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.failures) < 8 {
			s.failures = append(s.failures, fmt.Sprintf("+%.3fs %v", time.Since(began).Seconds(), e))
		}
	}
}

func (s *subject) record(res floodgate.Result, err error, start time.Time, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.slowest = max(s.slowest, took)
	if err != nil {
		s.errs++
		if s.firstErr == nil {
			s.firstErr = err
		}
		return
	}
	s.bySource[res.Source]++
	switch res.Source {
	case s.remote:
		s.lastRemote.Store(start.UnixNano())
	case s.fallback:
		s.lastFallback.Store(start.UnixNano())
	case hybrid.SourceLocal:
	default:
		if s.violation == "" {
			s.violation = fmt.Sprintf("unexpected Source %q in %+v", res.Source, res)
		}
	}
	if want, ok := s.allowed[res.Source]; ok && res.Allowed != want && s.violation == "" {
		s.violation = fmt.Sprintf("Source %q with Allowed %v: %+v", res.Source, res.Allowed, res)
	}
}

// subjects builds the three policies and a hybrid store over one Redis
// store, each with a Guard of its own and the default settings.
func subjects(t *testing.T, rs floodgate.Store) []*subject {
	t.Helper()
	limit := floodgate.PerSecond(faultLimit)
	began := time.Now()
	var out []*subject
	add := func(s *subject, store floodgate.Store, guard *failover.Guard) {
		lim, err := floodgate.New(store, floodgate.Policy{Name: s.name, Limits: []floodgate.Limit{limit}})
		if err != nil {
			t.Fatal(err)
		}
		s.lim, s.guard, s.key, s.bySource = lim, guard, "client", map[floodgate.Source]int{}
		out = append(out, s)
	}
	for _, p := range []failover.Mode{failover.FailOpen, failover.FailClosed, failover.LocalFallback} {
		sub := &subject{name: p.String()}
		o := failover.Options{Mode: p, Guard: failover.GuardOptions{OnError: sub.onError(began)}}
		if p == failover.LocalFallback {
			o.Local = localStore(t)
		}
		s, err := failover.New(rs, o)
		if err != nil {
			t.Fatal(err)
		}
		fallback := map[failover.Mode]floodgate.Source{
			failover.FailOpen:      floodgate.SourceFailOpen,
			failover.FailClosed:    floodgate.SourceFailClosed,
			failover.LocalFallback: floodgate.SourceLocalFallback,
		}[p]
		sub.remote, sub.fallback = redisstore.Source, fallback
		sub.allowed = map[floodgate.Source]bool{
			redisstore.Source: true, floodgate.SourceFailOpen: true, floodgate.SourceFailClosed: false, floodgate.SourceLocalFallback: true,
		}
		add(sub, s, s.Guard())
	}
	sub := &subject{name: "hybrid", remote: hybrid.SourceGlobal, fallback: floodgate.SourceLocalFallback,
		allowed: map[floodgate.Source]bool{hybrid.SourceGlobal: true, floodgate.SourceLocalFallback: true}}
	h, err := hybrid.New(localStore(t), rs, hybrid.Options{Fraction: 0.5, Guard: failover.GuardOptions{OnError: sub.onError(began)}})
	if err != nil {
		t.Fatal(err)
	}
	add(sub, h, h.Guard())
	return out
}

func localStore(t *testing.T) *memstore.Store {
	t.Helper()
	m := memstore.New(memstore.Options{})
	t.Cleanup(func() { m.Close() })
	return m
}

func redisStore(t *testing.T, client redis.UniversalClient) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A load runs workers for every subject, each deciding about once a
// millisecond, until stopped. Subjects get workers of their own, so a
// subject's slow calls never delay another's.
type load struct {
	subjects []*subject
	stop     chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup
}

// loadLimit bounds how long any load may run, whatever goes wrong.
const loadLimit = 90 * time.Second

func startLoad(t *testing.T, subjects []*subject, workersEach int) *load {
	t.Helper()
	l := &load{subjects: subjects, stop: make(chan struct{})}
	end := time.Now().Add(loadLimit)
	for _, s := range subjects {
		for range workersEach {
			l.done.Go(func() {
				ctx := context.Background()
				for time.Now().Before(end) {
					select {
					case <-l.stop:
						return
					default:
					}
					start := time.Now()
					res, err := floodgate.Allow(ctx, s.lim, s.key)
					s.record(res, err, start, time.Since(start))
					time.Sleep(time.Millisecond) // pacing, so fallbacks do not spin the CPU
				}
			})
		}
	}
	t.Cleanup(func() { l.halt(); l.done.Wait() })
	return l
}

func (l *load) halt() { l.stopOnce.Do(func() { close(l.stop) }) }

// finish stops the load and checks what every caller saw.
func (l *load) finish(t *testing.T) {
	t.Helper()
	l.halt()
	waited := make(chan struct{})
	go func() { l.done.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(30 * time.Second):
		t.Fatal("the load did not stop within 30 s: a call is stuck")
	}
	for _, s := range l.subjects {
		s.mu.Lock()
		t.Logf("%-14s %6d calls, slowest %6.1f ms, sources %v, guard %+v",
			s.name, s.calls, float64(s.slowest)/1e6, s.bySource, s.guard.Stats())
		for _, f := range s.failures {
			t.Logf("%-14s   %s", "", f)
		}
		if s.errs > 0 {
			t.Errorf("%s: %d of %d calls returned an error, first: %v", s.name, s.errs, s.calls, s.firstErr)
		}
		if bound := s.guard.Timeout() + callSlack; s.slowest > bound {
			t.Errorf("%s: the slowest call took %s, more than the timeout plus slack (%s)", s.name, s.slowest, bound)
		}
		if s.violation != "" {
			t.Errorf("%s: %s", s.name, s.violation)
		}
		s.mu.Unlock()
	}
}

// awaitRemote waits until every subject has had a decision from Redis that
// began after since, and returns how long that took after since.
func (l *load) awaitRemote(t *testing.T, since time.Time, within time.Duration, what string) time.Duration {
	t.Helper()
	deadline := since.Add(within)
	for {
		last := time.Now()
		pending := ""
		for _, s := range l.subjects {
			if s.lastRemote.Load() <= since.UnixNano() {
				pending += " " + s.name + "(" + s.guard.State().String() + ")"
			}
		}
		if pending == "" {
			return last.Sub(since)
		}
		if time.Now().After(deadline) {
			for _, s := range l.subjects {
				s.mu.Lock()
				t.Logf("%s: guard %+v, first failures %v", s.name, s.guard.Stats(), s.failures)
				s.mu.Unlock()
			}
			t.Fatalf("%s: no decision from Redis within %s for:%s", what, within, pending)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitOpen waits until every subject's breaker has opened since before was
// taken, and returns how long that took after since. Each opening takes
// failover.DefaultMinCalls calls in the window of which at least
// failover.DefaultFailureRate failed, or failover.UnreachableInRow calls in
// a row that could not connect, each counted once in Stats.Failures, so
// however the calls were scheduled the failures can never be fewer than
// the least of those per opening.
func (l *load) awaitOpen(t *testing.T, since time.Time, before map[*subject]failover.Stats) time.Duration {
	t.Helper()
	deadline := since.Add(openWithin)
	for {
		now := time.Now()
		pending := ""
		for _, s := range l.subjects {
			if s.guard.Stats().Opened <= before[s].Opened {
				pending += " " + s.name
			}
		}
		if pending == "" {
			break
		}
		if now.After(deadline) {
			t.Fatalf("breakers not open %s after the outage began:%s", openWithin, pending)
		}
		time.Sleep(2 * time.Millisecond)
	}
	took := time.Since(since)
	for _, s := range l.subjects {
		st := s.guard.Stats()
		each := min(uint64(math.Ceil(failover.DefaultMinCalls*failover.DefaultFailureRate)), failover.UnreachableInRow)
		if least := each * st.Opened; st.Failures.Decide < least {
			t.Errorf("%s: opened %d times after %d failures, want at least %d each: %+v",
				s.name, st.Opened, st.Failures.Decide, each, st)
		}
	}
	return took
}

// requireTimeouts checks, once the breakers opened during a stall, that
// every subject's Guard cut off stalled calls at its own timeout: they
// ended because of the Guard, not go-redis. (At least one: on a starved
// machine part of the streak that opened a breaker may be calls to a
// healthy Redis that timed out before the stall began.)
func (l *load) requireTimeouts(t *testing.T, before map[*subject]failover.Stats) {
	t.Helper()
	for _, s := range l.subjects {
		if n := s.guard.Stats().Timeouts - before[s].Timeouts; n == 0 {
			t.Errorf("%s: no call cut off by the Guard's timeout during the stall: %+v", s.name, s.guard.Stats())
		}
	}
}

// awaitFallbacks waits until every subject has decided n times without
// Redis after since: the outage has been felt for a while.
func (l *load) awaitFallbacks(t *testing.T, since time.Time, n int) {
	t.Helper()
	counts := map[*subject]int{}
	for _, s := range l.subjects {
		s.mu.Lock()
		counts[s] = s.bySource[s.fallback]
		s.mu.Unlock()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		pending := ""
		for _, s := range l.subjects {
			s.mu.Lock()
			got := s.bySource[s.fallback] - counts[s]
			s.mu.Unlock()
			if got < n {
				pending += " " + s.name
			}
		}
		if pending == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d decisions without Redis within 10 s for:%s", n, pending)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stats takes every subject's Guard Stats.
func (l *load) stats() map[*subject]failover.Stats {
	m := map[*subject]failover.Stats{}
	for _, s := range l.subjects {
		m[s] = s.guard.Stats()
	}
	return m
}

// warmUp waits until every subject decides on Redis.
func (l *load) warmUp(t *testing.T) {
	t.Helper()
	l.awaitRemote(t, time.Now(), 10*time.Second, "warm-up")
}

func init() {
	// go-redis logs every failed dial; the outages below are deliberate.
	redis.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func newStandalone(t *testing.T) (*testkit.RedisServer, []*subject) {
	t.Helper()
	srv := testkit.Redis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { client.Close() })
	rs := redisStore(t, client)
	prime(t, primer(t, rs), "client")
	return srv, subjects(t, rs)
}

// primer returns a limiter over rs with no Guard, for prime.
func primer(t *testing.T, rs floodgate.Store) *floodgate.PolicyLimiter {
	t.Helper()
	lim, err := floodgate.New(rs, floodgate.Policy{Name: "prime", Limits: []floodgate.Limit{floodgate.PerSecond(faultLimit)}})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// prime makes one decision on key through lim, which has no Guard, with a
// generous deadline, so that the client's connections (and a Cluster
// client's slot map) are up and the node holding key has the script before
// the load starts: a fresh client's first calls, slow on a loaded machine,
// would otherwise time out under the Guards and open their breakers before
// the fault under test.
func prime(t *testing.T, lim *floodgate.PolicyLimiter, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := floodgate.Allow(ctx, lim, key); err != nil {
		t.Fatalf("first decision on Redis: %v", err)
	}
}

func TestFaultRedisKilled(t *testing.T) {
	srv, subs := newStandalone(t)
	l := startLoad(t, subs, 3)
	l.warmUp(t)

	before := l.stats()
	killed := time.Now()
	srv.Kill()
	t.Logf("breakers open %s after the kill", l.awaitOpen(t, killed, before))
	l.awaitFallbacks(t, killed, 200)

	srv.Restart()
	back := time.Now()
	t.Logf("decisions back on Redis %s after the restart", l.awaitRemote(t, back, recoverWithin, "after restart"))
	l.finish(t)
}

// CLIENT PAUSE holds every script call: Redis stays connected and simply
// does not answer, the case a timeout exists for. It holds them until the
// breakers have opened, however long a loaded machine takes to get there.
func TestFaultRedisPaused(t *testing.T) {
	srv, subs := newStandalone(t)
	l := startLoad(t, subs, 3)
	l.warmUp(t)

	before := l.stats()
	paused := time.Now()
	srv.PauseWrites()
	t.Logf("breakers open %s after the pause began", l.awaitOpen(t, paused, before))
	l.requireTimeouts(t, before)
	resumed := time.Now()
	srv.Unpause()
	t.Logf("decisions back on Redis %s after the pause ended", l.awaitRemote(t, resumed, recoverWithin, "after the pause"))
	l.finish(t)
}

// DEBUG SLEEP blocks the whole server: not even PING is answered. It cannot
// be ended early, so it lasts long enough for the breakers to open on a
// starved machine too (they open within 100–800 ms).
func TestFaultRedisDebugSleep(t *testing.T) {
	const sleep = 5 * time.Second
	srv, subs := newStandalone(t)
	l := startLoad(t, subs, 3)
	l.warmUp(t)

	before := l.stats()
	slept := time.Now()
	done := srv.DebugSleep(sleep)
	t.Logf("breakers open %s after the sleep began", l.awaitOpen(t, slept, before))
	l.requireTimeouts(t, before)
	if err := <-done; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	woke := time.Now()
	t.Logf("decisions back on Redis %s after the server woke", l.awaitRemote(t, woke, recoverWithin, "after DEBUG SLEEP"))
	l.finish(t)
}

// A quick restart drops every connection and all state; callers may not
// even see the breaker open, but they must see no error and no stall.
func TestFaultRedisRestarted(t *testing.T) {
	srv, subs := newStandalone(t)
	l := startLoad(t, subs, 3)
	l.warmUp(t)
	for i := range 3 {
		srv.Restart()
		back := time.Now()
		t.Logf("restart %d: decisions back on Redis %s later", i+1, l.awaitRemote(t, back, recoverWithin, "after restart"))
	}
	l.finish(t)
}

// SCRIPT FLUSH makes Redis forget the script; the store must load it again
// by itself, so callers see neither an error nor a fallback.
func TestFaultScriptFlush(t *testing.T) {
	srv, subs := newStandalone(t)
	l := startLoad(t, subs, 3)
	l.warmUp(t)
	for range 5 {
		if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
			t.Fatalf("SCRIPT FLUSH: %v", err)
		}
		l.awaitRemote(t, time.Now(), recoverWithin, "after SCRIPT FLUSH")
	}
	l.finish(t)
	// A timeout may happen on a noisy machine; any other failure means the
	// store let a NOSCRIPT through.
	for _, s := range subs {
		if st := s.guard.Stats(); st.Failures.Decide != st.Timeouts || st.Opened != 0 {
			t.Errorf("%s: SCRIPT FLUSH caused failures: %+v", s.name, st)
		}
	}
}

// A 3-master Cluster with a replica each loses the master that holds the
// keys under test; its replica takes over. Callers see no error and no
// stall, and decisions come from Redis again after the failover.
func TestFaultClusterFailover(t *testing.T) {
	cl := testkit.RedisCluster(t, 3, 1)
	// Default options: the store itself has go-redis reload the topology
	// when a node stops answering.
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { client.Close() })
	rs := redisStore(t, client)
	subs := subjects(t, rs)

	// Put every subject's key on one master.
	victim := cl.Masters()[0]
	for _, s := range subs {
		s.key = keyOn(cl, victim, s.lim)
	}
	warm := primer(t, rs)
	prime(t, warm, keyOn(cl, victim, warm))
	l := startLoad(t, subs, 3)
	l.warmUp(t)

	killed := time.Now()
	cl.KillNode(victim)
	// The breakers need not open: a failover of a few seconds, whose calls
	// mostly time out behind a window full of answers, is a stall to them,
	// and callers are answered by their failure mode meanwhile, none later
	// than the timeout (finish checks it).
	promoted := cl.WaitFailover(victim)
	failedOver := time.Now()
	t.Logf("replica %s took over %s after the kill", promoted, failedOver.Sub(killed))
	t.Logf("decisions back on Redis %s after the failover", l.awaitRemote(t, failedOver, recoverWithin, "after failover"))
	l.finish(t)
}

// keyOn returns a key whose decisions through lim are stored on master.
func keyOn(cl *testkit.Cluster, master string, lim *floodgate.PolicyLimiter) string {
	set := lim.LimitsFor("").Compiled()
	for i := 0; ; i++ {
		key := "client" + strconv.Itoa(i)
		if cl.MasterForKey(redisstore.Key(redisstore.DefaultPrefix, set, key, 0)) == master {
			return key
		}
	}
}
