package failover_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/redis/go-redis/v9"
)

// Failures leave the window as it slides on: failures spread thinner than
// MinCalls per window never open the breaker, however many there are.
func TestBreakerWindowForgets(t *testing.T) {
	clock := newClock()
	remote := newFakeRemote(t, clock)
	remote.Set(floodgatetest.Failing)
	g, err := failover.NewGuard(remote, failover.GuardOptions{Clock: clock, MinCalls: 3, FailureRate: 1, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	set := mustSet(t, floodgate.PerSecond(1000))
	for i := range 10 {
		for range 2 {
			if _, err := g.Decide(context.Background(), set, "k", 1); err == nil {
				t.Fatal("a failing remote answered")
			}
		}
		if g.State() != failover.Closed {
			t.Fatalf("round %d: state %s with 2 failures per window, want closed (min calls 3)", i, g.State())
		}
		clock.Advance(time.Second)
	}
	for range 3 {
		_, _ = g.Decide(context.Background(), set, "k", 1)
	}
	if g.State() != failover.Open {
		t.Fatalf("state %s after 3 failures within one window, want open", g.State())
	}
}

// A dead remote store opens the breaker after MinCalls failures in a row,
// however many answered calls of the window before still count: the rate
// alone would wait for them to leave the window.
func TestBreakerOpensOnAStreak(t *testing.T) {
	clock := newClock()
	remote := newFakeRemote(t, clock)
	g, err := failover.NewGuard(remote, failover.GuardOptions{Clock: clock, MinCalls: 20, FailureRate: 0.5, Window: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	set := mustSet(t, floodgate.PerSecond(1e6))
	remote.Set(floodgatetest.Healthy)
	for range 1000 {
		_, _ = g.Decide(context.Background(), set, "k", 1)
	}
	remote.Set(floodgatetest.Failing)
	for i := range 19 {
		_, _ = g.Decide(context.Background(), set, "k", 1)
		if g.State() != failover.Closed {
			t.Fatalf("open after %d failures in a row, want closed until 20", i+1)
		}
	}
	_, _ = g.Decide(context.Background(), set, "k", 1)
	if g.State() != failover.Open {
		t.Fatalf("state %s after 20 failures in a row behind 1000 answered calls, want open", g.State())
	}
}

// A failure rate below FailureRate keeps the breaker closed however many
// calls fail: one call in four failing is a stall, not an outage.
func TestBreakerRateBelowThreshold(t *testing.T) {
	clock := newClock()
	remote := newFakeRemote(t, clock)
	g, err := failover.NewGuard(remote, failover.GuardOptions{Clock: clock, MinCalls: 20, FailureRate: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	set := mustSet(t, floodgate.PerSecond(1e6))
	for i := range 400 {
		remote.Set(floodgatetest.Healthy)
		if i%4 == 0 {
			remote.Set(floodgatetest.Failing)
		}
		_, _ = g.Decide(context.Background(), set, "k", 1)
		if g.State() != failover.Closed {
			t.Fatalf("call %d: state %s at a 25%% failure rate, want closed (rate 30%%, at least 20 calls)", i, g.State())
		}
	}
	if st := g.Stats(); st.Failures.Decide != 100 || st.Opened != 0 {
		t.Fatalf("stats %+v, want 100 failures and no opening", st)
	}
}

// slowRemote answers every call, after delay, whatever its context says.
type slowRemote struct {
	*floodgatetest.FaultStore
	delay time.Duration
}

func (s slowRemote) Decide(ctx context.Context, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	time.Sleep(s.delay) // the remote store's latency, not a wait for the test
	return s.FaultStore.Decide(ctx, set, key, cost)
}

// A call slower than Timeout but answered within SlowTimeout is slow, not
// failed: its answer is the decision, the breaker does not count it, and
// Stats.Slow does. The remote takes 20 ms, the timeout 1 ms, the slow
// timeout a minute, so no scheduling delay can put the call on the other
// side of either.
func TestSlowCallIsAnswered(t *testing.T) {
	for _, bound := range []bool{false, true} {
		remote := slowRemote{newFakeRemote(t, nil), 20 * time.Millisecond}
		s, err := failover.New(remote, failover.Options{Mode: failover.FailClosed, Guard: failover.GuardOptions{
			Timeout: time.Millisecond, SlowTimeout: time.Minute, MinCalls: 1, ContextBound: bound,
		}})
		if err != nil {
			t.Fatal(err)
		}
		lim := floodgatetest.NewLimiter(t, s, "api", floodgate.PerSecond(1000))
		for range 3 {
			if res := mustAllow(t, lim, "k"); !res.Allowed || res.Source != redisstore.Source {
				t.Fatalf("bound %v: slow call decided %v by %q, want allowed by the remote store", bound, res.Allowed, res.Source)
			}
		}
		st := s.Guard().Stats()
		if st.Slow != 3 || st.Timeouts != 0 || st.Failures.Decide != 0 || st.State != failover.Closed {
			t.Errorf("bound %v: stats %+v, want 3 slow calls, no failure, closed", bound, st)
		}
		if s.Guard().SlowTimeout() != time.Minute || s.Guard().Timeout() != time.Millisecond {
			t.Errorf("bound %v: timeouts %s / %s, want 1ms / 1m", bound, s.Guard().Timeout(), s.Guard().SlowTimeout())
		}
	}
}

// The slow timeout defaults to DefaultSlowTimeout, or to Timeout when that
// is longer.
func TestSlowTimeoutDefault(t *testing.T) {
	for _, tc := range []struct{ timeout, want time.Duration }{
		{0, failover.DefaultSlowTimeout},
		{time.Millisecond, failover.DefaultSlowTimeout},
		{time.Minute, time.Minute},
	} {
		g, err := failover.NewGuard(newFakeRemote(t, nil), failover.GuardOptions{Timeout: tc.timeout})
		if err != nil {
			t.Fatal(err)
		}
		if got := g.SlowTimeout(); got != tc.want {
			t.Errorf("Timeout %s: SlowTimeout %s, want %s", tc.timeout, got, tc.want)
		}
	}
}

// Every transition reaches OnTransition with a reason a log line can
// carry: the counts and the error that opened it, the probe's fate.
func TestTransitionReasons(t *testing.T) {
	clock := newClock()
	remote := newFakeRemote(t, clock)
	var mu sync.Mutex
	var got []failover.Transition
	var states []string
	g, err := failover.NewGuard(remote, failover.GuardOptions{Clock: clock, MinCalls: 2, Backoff: time.Second,
		OnTransition: func(tr failover.Transition) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, tr)
		},
		OnStateChange: func(from, to failover.BreakerState) {
			mu.Lock()
			defer mu.Unlock()
			states = append(states, from.String()+">"+to.String())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	set := mustSet(t, floodgate.PerSecond(1000))
	decide := func() { _, _ = g.Decide(context.Background(), set, "k", 1) }
	remote.Set(floodgatetest.Failing)
	decide()
	decide()
	clock.Advance(time.Second)
	decide() // the probe fails
	clock.Advance(2 * time.Second)
	remote.Set(floodgatetest.Healthy)
	decide() // the probe succeeds
	mu.Lock()
	defer mu.Unlock()
	want := []struct {
		from, to failover.BreakerState
		reason   []string
	}{
		{failover.Closed, failover.Open, []string{"2 of 2 calls failed within 10s", "100% >= 50%", floodgatetest.ErrDown.Error(), "first probe in"}},
		{failover.Open, failover.HalfOpen, []string{"probe"}},
		{failover.HalfOpen, failover.Open, []string{"probe failed", floodgatetest.ErrDown.Error(), "next probe in"}},
		{failover.Open, failover.HalfOpen, []string{"probe"}},
		{failover.HalfOpen, failover.Closed, []string{"probe was answered"}},
	}
	if len(got) != len(want) || len(states) != len(want) {
		t.Fatalf("transitions %+v (states %v), want %d", got, states, len(want))
	}
	for i, w := range want {
		tr := got[i]
		if tr.From != w.from || tr.To != w.to || states[i] != w.from.String()+">"+w.to.String() {
			t.Errorf("transition %d: %s>%s (state hook %s), want %s>%s", i, tr.From, tr.To, states[i], w.from, w.to)
		}
		for _, part := range w.reason {
			if !strings.Contains(tr.Reason, part) {
				t.Errorf("transition %d: reason %q lacks %q", i, tr.Reason, part)
			}
		}
	}
}

// A remote store whose host refuses the connection opens the breaker after
// UnreachableInRow calls, not MinCalls: waiting answers a slow machine, not
// a closed port.
func TestBreakerOpensWhenUnreachable(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: testkit.RefusingAddr(t), ContextTimeoutEnabled: true, DialerRetries: 1})
	defer client.Close()
	rs, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var reasons []string
	g, err := failover.NewGuard(rs, failover.GuardOptions{ContextBound: true, Backoff: time.Hour,
		OnTransition: func(tr failover.Transition) { reasons = append(reasons, tr.Reason) }})
	if err != nil {
		t.Fatal(err)
	}
	set := mustSet(t, floodgate.PerSecond(1000))
	for i := range failover.UnreachableInRow {
		if g.State() != failover.Closed {
			t.Fatalf("state %s after %d refused calls, want closed until %d", g.State(), i, failover.UnreachableInRow)
		}
		if _, err := g.Decide(context.Background(), set, "k", 1); err == nil {
			t.Fatal("a refused connection answered")
		}
	}
	if g.State() != failover.Open || len(reasons) != 1 || !strings.Contains(reasons[0], "could not connect") {
		t.Fatalf("state %s after %d refused calls, transitions %q; want open, saying why", g.State(), failover.UnreachableInRow, reasons)
	}
}

// doneRemote records the context of each call.
type doneRemote struct {
	*floodgatetest.FaultStore
	ctx context.Context
}

func (d *doneRemote) Decide(ctx context.Context, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	d.ctx = ctx
	return d.FaultStore.Decide(ctx, set, key, cost)
}

// A DeadlineBound Guard hands its remote store the caller's context with
// the slow timeout as its deadline, derived from nothing: its Done is the
// caller's (no timer, no channel, no registration per call).
func TestDeadlineBoundGivesDeadlineNotContext(t *testing.T) {
	remote := &doneRemote{FaultStore: newFakeRemote(t, nil)}
	g, err := failover.NewGuard(remote, failover.GuardOptions{SlowTimeout: time.Minute, DeadlineBound: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := time.Now()
	if _, err := g.Decide(ctx, mustSet(t, floodgate.PerSecond(10)), "k", 1); err != nil {
		t.Fatal(err)
	}
	d, ok := remote.ctx.Deadline()
	if !ok || d.Before(before.Add(time.Minute)) || d.After(time.Now().Add(time.Minute)) {
		t.Errorf("the store's deadline %v (set %v), want the slow timeout, a minute from the call", d, ok)
	}
	if remote.ctx.Done() != ctx.Done() {
		t.Error("the store got a derived context, not the caller's Done")
	}
}

// A DeadlineBound Guard over redisstore still cuts a call off at its slow
// timeout when Redis stalls: the store bounds its wait by the deadline it
// reads, and the breaker counts a timeout.
func TestDeadlineBoundTimesOutStalledRedis(t *testing.T) {
	srv := testkit.Redis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer client.Close()
	rs, err := redisstore.New(client, redisstore.Options{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	g, err := failover.NewGuard(rs, failover.GuardOptions{Timeout: 50 * time.Millisecond, SlowTimeout: 200 * time.Millisecond, DeadlineBound: true, MinCalls: -1})
	if err != nil {
		t.Fatal(err)
	}
	set := mustSet(t, floodgate.PerSecond(10))
	if _, err := g.Decide(context.Background(), set, "warm", 1); err != nil {
		t.Fatal(err)
	}
	srv.PauseWrites()
	done := make(chan error, 1)
	go func() {
		_, err := g.Decide(context.Background(), set, "k", 1)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, failover.ErrTimeout) {
			t.Errorf("error %v, want failover.ErrTimeout", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no answer within 20s of a 200ms slow timeout")
	}
	srv.Unpause()
	if st := g.Stats(); st.Timeouts != 1 {
		t.Errorf("stats %+v, want one timeout", st)
	}
}
