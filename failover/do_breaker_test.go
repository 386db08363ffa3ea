package failover_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/testkit"
)

// transitions records a Breaker's hooks: OnStateChange and OnTransition
// must each report every transition, once.
type transitions struct {
	mu     sync.Mutex
	states [][2]failover.BreakerState
	seen   []failover.Transition
}

func (r *transitions) hook(o *failover.BreakerOptions) {
	o.OnStateChange = func(from, to failover.BreakerState) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.states = append(r.states, [2]failover.BreakerState{from, to})
	}
	o.OnTransition = func(t failover.Transition) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.seen = append(r.seen, t)
	}
}

// want fails unless the transitions so far are exactly path, each
// reported once by both hooks.
func (r *transitions) want(t *testing.T, path ...failover.BreakerState) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var got, gotT []string
	for _, s := range r.states {
		got = append(got, s[0].String()+">"+s[1].String())
	}
	for _, s := range r.seen {
		gotT = append(gotT, s.From.String()+">"+s.To.String())
	}
	var want []string
	for i := 1; i < len(path); i++ {
		want = append(want, path[i-1].String()+">"+path[i].String())
	}
	if strings.Join(got, " ") != strings.Join(want, " ") || strings.Join(gotT, " ") != strings.Join(want, " ") {
		t.Fatalf("transitions: OnStateChange %q, OnTransition %q; want %q", got, gotT, want)
	}
}

func newBreaker(t *testing.T, o failover.BreakerOptions) *failover.Breaker {
	t.Helper()
	b, err := failover.NewBreaker(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A Breaker guards any call, not only a Store's: it opens on its failure
// rule (here, MinCalls failures in a row), skips calls while open without
// making them, lets exactly one probe through after the back-off, opens
// again with a doubled back-off when the probe fails, and closes when a
// probe succeeds, reporting each transition once through both hooks.
func TestBreakerAroundACall(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(map[bool]string{false: "goroutine", true: "direct"}[direct], func(t *testing.T) {
			clock := newClock()
			var rec transitions
			var errs []*failover.Error
			o := failover.BreakerOptions{Name: "api", Clock: clock, MinCalls: 4, FailureRate: 1, Backoff: time.Second, MaxBackoff: 8 * time.Second,
				ContextBound: direct, OnError: func(e *failover.Error) { errs = append(errs, e) }}
			rec.hook(&o)
			b := newBreaker(t, o)
			ctx := context.Background()
			boom := errors.New("upstream: 502")
			ran := 0
			fail := func(context.Context) error { ran++; return boom }
			succeed := func(context.Context) error { ran++; return nil }

			if err := b.Do(ctx, succeed); err != nil {
				t.Fatalf("a call that succeeds: %v", err)
			}
			for i := range 4 {
				if b.State() != failover.Closed {
					t.Fatalf("open after %d failures, want closed until 4", i)
				}
				if err := b.Do(ctx, fail); err != boom {
					t.Fatalf("a failing call returned %v, want its own error", err)
				}
			}
			rec.want(t, failover.Closed, failover.Open)
			if len(errs) != 4 || errs[0].Op != failover.OpCall || errs[0].Policy != "api" || !errors.Is(errs[0], boom) {
				t.Fatalf("OnError saw %v", errs)
			}
			before := ran
			err := b.Do(ctx, succeed)
			if !errors.Is(err, failover.ErrOpen) || !strings.Contains(err.Error(), "next attempt in") {
				t.Fatalf("a call while open: %v", err)
			}
			if ran != before {
				t.Fatal("the open breaker made the call")
			}

			// The back-off is over: one probe goes, and while it is in
			// flight every other call is skipped.
			clock.Advance(time.Second)
			inProbe, answer := make(chan struct{}), make(chan struct{})
			done := make(chan error)
			go func() {
				done <- b.Do(ctx, func(context.Context) error { close(inProbe); <-answer; return boom })
			}()
			<-inProbe
			if b.State() != failover.HalfOpen {
				t.Fatalf("state %s with the probe in flight, want half_open", b.State())
			}
			if err := b.Do(ctx, succeed); !errors.Is(err, failover.ErrOpen) {
				t.Fatalf("a second call during the probe: %v", err)
			}
			close(answer)
			if err := <-done; err != boom {
				t.Fatalf("the probe returned %v", err)
			}
			rec.want(t, failover.Closed, failover.Open, failover.HalfOpen, failover.Open)
			// The back-off doubled: a second is not enough now (jitter
			// shortens it by at most a fifth).
			clock.Advance(time.Second)
			if err := b.Do(ctx, succeed); !errors.Is(err, failover.ErrOpen) {
				t.Fatalf("a call within the doubled back-off: %v", err)
			}
			clock.Advance(time.Second)
			if err := b.Do(ctx, succeed); err != nil {
				t.Fatalf("the second probe: %v", err)
			}
			if b.State() != failover.Closed {
				t.Fatalf("state %s after a probe succeeded, want closed", b.State())
			}
			rec.want(t, failover.Closed, failover.Open, failover.HalfOpen, failover.Open, failover.HalfOpen, failover.Closed)
			st := b.Stats()
			if st.Opened != 1 || st.Probes != 2 || st.Failures.Decide != 5 || st.Skipped != 3 || st.Calls != 7 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// Callers that fail at once open the breaker once: each transition is
// reported once however many calls race over it.
func TestBreakerHooksOncePerTransition(t *testing.T) {
	clock := newClock()
	var rec transitions
	o := failover.BreakerOptions{Clock: clock, MinCalls: 5, ContextBound: true}
	rec.hook(&o)
	b := newBreaker(t, o)
	boom := errors.New("down")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				_ = b.Do(context.Background(), func(context.Context) error { return boom })
			}
		}()
	}
	wg.Wait()
	rec.want(t, failover.Closed, failover.Open)
	clock.Advance(failover.DefaultMaxBackoff)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = b.Do(context.Background(), func(context.Context) error { return nil })
		}()
	}
	wg.Wait()
	if b.State() != failover.Closed {
		t.Fatalf("state %s after a successful probe, want closed", b.State())
	}
	rec.want(t, failover.Closed, failover.Open, failover.HalfOpen, failover.Closed)
}

// A call that cannot connect at all (a real refused dial) opens the
// breaker after UnreachableInRow of them, whatever MinCalls is; any other
// error between them starts the row over.
func TestBreakerOpensOnRefusedDials(t *testing.T) {
	addr := testkit.RefusingAddr(t)
	var rec transitions
	o := failover.BreakerOptions{MinCalls: 100, Backoff: time.Hour, ContextBound: true}
	rec.hook(&o)
	b := newBreaker(t, o)
	dial := func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}
	ctx := context.Background()
	for range failover.UnreachableInRow - 1 {
		if err := b.Do(ctx, dial); err == nil {
			t.Fatal("a refused dial succeeded")
		}
	}
	_ = b.Do(ctx, func(context.Context) error { return errors.New("some other error") })
	for range failover.UnreachableInRow - 1 {
		_ = b.Do(ctx, dial)
	}
	if b.State() != failover.Closed {
		t.Fatalf("state %s: an other error did not break the row", b.State())
	}
	_ = b.Do(ctx, dial)
	if b.State() != failover.Open {
		t.Fatalf("state %s after %d refused dials in a row, want open", b.State(), failover.UnreachableInRow)
	}
	rec.mu.Lock()
	reason := rec.seen[0].Reason
	rec.mu.Unlock()
	if !strings.Contains(reason, "could not connect") {
		t.Fatalf("reason %q, want it to say the calls could not connect", reason)
	}
}

// The caller's deadline bounds the call and says nothing about the
// backend; SlowTimeout bounds it too and is a failure; under NoTimeout the
// call gets the caller's context as it is.
func TestBreakerDeadlines(t *testing.T) {
	for _, direct := range []bool{false, true} {
		b := newBreaker(t, failover.BreakerOptions{MinCalls: 1, ContextBound: direct,
			Timeout: 10 * time.Millisecond, SlowTimeout: time.Minute})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		// A call that ignores its context is still left at the caller's
		// deadline when the Breaker runs it on a goroutine of its own.
		release := make(chan struct{})
		fn := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
		if !direct {
			fn = func(context.Context) error { <-release; return nil }
		}
		err := b.Do(ctx, fn)
		cancel()
		close(release)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, failover.ErrTimeout) {
			t.Fatalf("direct %v: the caller's deadline: %v", direct, err)
		}
		if st := b.Stats(); b.State() != failover.Closed || st.Canceled != 1 || st.Failures.Decide != 0 {
			t.Fatalf("direct %v: the caller's deadline moved the breaker: %s, %+v", direct, b.State(), st)
		}

		b = newBreaker(t, failover.BreakerOptions{MinCalls: 1, ContextBound: direct, Backoff: time.Hour,
			Timeout: 10 * time.Millisecond, SlowTimeout: 20 * time.Millisecond})
		err = b.Do(context.Background(), func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		if !errors.Is(err, failover.ErrTimeout) {
			t.Fatalf("direct %v: the slow timeout: %v", direct, err)
		}
		if st := b.Stats(); b.State() != failover.Open || st.Timeouts != 1 {
			t.Fatalf("direct %v: after a timeout: %s, %+v", direct, b.State(), st)
		}
	}

	b := newBreaker(t, failover.BreakerOptions{Timeout: failover.NoTimeout, SlowTimeout: failover.NoTimeout})
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "v")
	err := b.Do(ctx, func(got context.Context) error {
		if got != ctx {
			return errors.New("the call got a context of the Breaker's, not the caller's")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := failover.NewBreaker(failover.BreakerOptions{SlowTimeout: -1}); err == nil {
		t.Fatal("a negative slow timeout was accepted")
	}
}

// A panic in a call made on the caller's goroutine reaches the caller, and
// the breaker stays usable: a panicking probe counts as a failed one. On
// the Breaker's goroutine the panic is the call's failure.
func TestBreakerPanics(t *testing.T) {
	clock := newClock()
	b := newBreaker(t, failover.BreakerOptions{Clock: clock, MinCalls: 1, ContextBound: true})
	ctx := context.Background()
	mustPanic := func(what string) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Fatalf("%s: the panic did not reach the caller", what)
			}
		}()
		_ = b.Do(ctx, func(context.Context) error { panic("boom") })
	}
	mustPanic("closed")
	if err := b.Do(ctx, func(context.Context) error { return nil }); err != nil || b.State() != failover.Closed {
		t.Fatalf("after a panic: %v, state %s", err, b.State())
	}
	_ = b.Do(ctx, func(context.Context) error { return errors.New("down") })
	if b.State() != failover.Open {
		t.Fatalf("state %s after a failure with MinCalls 1", b.State())
	}
	clock.Advance(failover.DefaultMaxBackoff)
	mustPanic("probe")
	if b.State() != failover.Open {
		t.Fatalf("state %s after the probe panicked, want open", b.State())
	}
	clock.Advance(failover.DefaultMaxBackoff)
	if err := b.Do(ctx, func(context.Context) error { return nil }); err != nil || b.State() != failover.Closed {
		t.Fatalf("the next probe: %v, state %s", err, b.State())
	}

	g := newBreaker(t, failover.BreakerOptions{MinCalls: 1, Backoff: time.Hour})
	err := g.Do(ctx, func(context.Context) error { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "panicked") || g.State() != failover.Open {
		t.Fatalf("a panic on the Breaker's goroutine: %v, state %s", err, g.State())
	}
}

// An error wrapping ErrCorruptState or ErrClosed is the backend's answer:
// it is returned and does not count against the breaker.
func TestBreakerRefusalIsAnAnswer(t *testing.T) {
	b := newBreaker(t, failover.BreakerOptions{MinCalls: 1, ContextBound: true})
	for range 3 {
		if err := b.Do(context.Background(), func(context.Context) error { return floodgate.ErrCorruptState }); !errors.Is(err, floodgate.ErrCorruptState) {
			t.Fatalf("a refusal: %v", err)
		}
	}
	if st := b.Stats(); b.State() != failover.Closed || st.Failures.Decide != 0 {
		t.Fatalf("refusals counted as failures: %s, %+v", b.State(), st)
	}
}

// LogTransitions, on the Breaker's hook, logs the opening at Warn and the
// closing at Info, once each.
func TestBreakerLogTransitions(t *testing.T) {
	clock := newClock()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	b := newBreaker(t, failover.BreakerOptions{Clock: clock, MinCalls: 1, ContextBound: true,
		OnTransition: failover.LogTransitions(log, "the API", failover.FailClosed, "upstream", "api")})
	_ = b.Do(context.Background(), func(context.Context) error { return errors.New("down") })
	clock.Advance(failover.DefaultMaxBackoff)
	_ = b.Do(context.Background(), func(context.Context) error { return nil })
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "circuit breaker open") ||
		!strings.Contains(lines[0], "upstream=api") || !strings.Contains(lines[1], "level=INFO") || !strings.Contains(lines[1], "the API decides again") {
		t.Fatalf("log:\n%s", buf.String())
	}
}
