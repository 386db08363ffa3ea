package failover_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
)

// A healthy remote's decisions pass through unchanged: the wrapper keeps
// every semantic of the engine under it.
func TestConformance(t *testing.T) {
	for _, p := range []failover.Mode{failover.FailOpen, failover.FailClosed, failover.LocalFallback} {
		t.Run(p.String(), func(t *testing.T) {
			floodgatetest.Run(t, floodgatetest.Harness{
				NewStore: func(t *testing.T, clock clock.Clock) floodgate.Store {
					o := failover.Options{Mode: p}
					if p == failover.LocalFallback {
						o.Local = newMem(t, clock)
					}
					s, err := failover.New(newMem(t, clock), o)
					if err != nil {
						t.Fatal(err)
					}
					return s
				},
				Source: memstore.Source,
			})
		})
	}
}

func TestPolicies(t *testing.T) {
	limit := floodgate.PerSecond(10)
	for _, tc := range []struct {
		policy failover.Mode
		want   floodgate.Result
	}{
		{failover.FailOpen, floodgate.Result{Allowed: true, Source: floodgate.SourceFailOpen, Policy: "api"}},
		{failover.FailClosed, floodgate.Result{Limit: limit, RetryAfter: failover.DefaultBackoff, Source: floodgate.SourceFailClosed, Policy: "api"}},
		{failover.LocalFallback, floodgate.Result{Allowed: true, Limit: limit, Remaining: 9, ResetAfter: 100 * time.Millisecond, Source: floodgate.SourceLocalFallback, Policy: "api"}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			clock := newClock()
			remote := newFakeRemote(t, clock)
			remote.set(failing)
			o := failover.Options{Mode: tc.policy, Guard: failover.GuardOptions{Clock: clock}}
			if tc.policy == failover.LocalFallback {
				o.Local = newMem(t, clock)
			}
			s, err := failover.New(remote, o)
			if err != nil {
				t.Fatal(err)
			}
			lim := newLimiter(t, s, limit)
			got := mustAllow(t, lim, "k")
			if tc.want.Limit != (floodgate.Limit{}) {
				tc.want.Set = lim.LimitsFor("k") // every Result that read a limit names its set
			}
			if got != tc.want {
				t.Errorf("failed remote: got %+v\nwant %+v", got, tc.want)
			}

			remote.set(healthy)
			got = mustAllow(t, lim, "k")
			if got.Source != redisstore.Source || !got.Allowed || got.Remaining != 9 {
				t.Errorf("healthy remote: got %+v, want its own decision passed through", got)
			}
		})
	}
}

func TestFailClosedRetryAfterFollowsBreaker(t *testing.T) {
	clock := newClock()
	remote := newFakeRemote(t, clock)
	remote.set(failing)
	s, err := failover.New(remote, failover.Options{Mode: failover.FailClosed,
		Guard: failover.GuardOptions{Clock: clock, MinCalls: 1, Backoff: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, floodgate.PerSecond(10))
	res := mustAllow(t, lim, "k") // opens the breaker
	if s.Guard().State() != failover.Open {
		t.Fatalf("state %s after a failure with Failures 1, want open", s.Guard().State())
	}
	if res.RetryAfter <= 1600*time.Millisecond || res.RetryAfter > 2*time.Second {
		t.Errorf("RetryAfter = %s, want the back-off (1.6 s, 2 s]", res.RetryAfter)
	}
	clock.Advance(time.Second)
	if res := mustAllow(t, lim, "k"); res.RetryAfter <= 600*time.Millisecond || res.RetryAfter > time.Second {
		t.Errorf("RetryAfter 1 s later = %s, want the rest of the back-off (0.6 s, 1 s]", res.RetryAfter)
	}
}

// The Guard cuts a call off at its timeout even when the remote store
// ignores its context, as a go-redis client without ContextTimeoutEnabled
// does.
func TestTimeoutBoundsCall(t *testing.T) {
	const timeout = 50 * time.Millisecond
	remote := newFakeRemote(t, nil)
	remote.set(hanging)
	var reported atomic.Pointer[failover.Error]
	s, err := failover.New(remote, failover.Options{Mode: failover.FailOpen, Guard: failover.GuardOptions{
		Timeout: timeout,
		OnError: func(e *failover.Error) { reported.Store(e) },
	}})
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, floodgate.PerSecond(10))
	start := time.Now()
	res := mustAllow(t, lim, "k")
	took := time.Since(start)
	if res.Source != floodgate.SourceFailOpen {
		t.Errorf("Source = %q, want fail-open", res.Source)
	}
	// The upper bound only detects a hang: ErrTimeout and Stats show the
	// Guard's timeout ended the call.
	if took < timeout || took > 10*time.Second {
		t.Errorf("a hanging remote held the call for %s, want the %s timeout", took, timeout)
	}
	st := s.Guard().Stats()
	if st.Timeouts != 1 || st.Failures.Decide != 1 {
		t.Errorf("stats %+v, want one decide failure, a timeout", st)
	}
	e := reported.Load()
	if e == nil || !errors.Is(e, failover.ErrTimeout) || e.Op != failover.OpDecide || e.Policy != "api" {
		t.Errorf("OnError got %v, want a decide timeout of policy api", e)
	}
	remote.release() // the abandoned call ends; its answer is dropped
}

// A store that honours its context and returns its error when the Guard's
// deadline passes has timed out, not failed for another reason.
func TestTimeoutOfContextHonouringStore(t *testing.T) {
	remote := newFakeRemote(t, nil)
	remote.set(stalling)
	g, err := failover.NewGuard(remote, failover.GuardOptions{Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	set := mustSet(t, floodgate.PerSecond(1))
	if _, err := g.Decide(context.Background(), set, "k", 1); !errors.Is(err, failover.ErrTimeout) {
		t.Fatalf("Decide error = %v, want ErrTimeout", err)
	}
	if st := g.Stats(); st.Timeouts != 1 {
		t.Errorf("Timeouts = %d, want 1", st.Timeouts)
	}
}

func mustSet(t *testing.T, limits ...floodgate.Limit) *algo.Set {
	t.Helper()
	set, err := floodgatetest.NewSet("api", "", limits...)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestBreaker(t *testing.T) {
	clock := newClock()
	remote := newFakeRemote(t, clock)
	var changes []string
	var mu sync.Mutex
	g, err := failover.NewGuard(remote, failover.GuardOptions{
		Clock: clock, MinCalls: 4, FailureRate: 0.5, Backoff: time.Second, MaxBackoff: 3 * time.Second,
		OnStateChange: func(from, to failover.BreakerState) {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, from.String()+">"+to.String())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := failover.New(g, failover.Options{Mode: failover.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, floodgate.PerSecond(1000))
	decide := func(want floodgate.Source) {
		t.Helper()
		if res := mustAllow(t, lim, "k"); res.Source != want {
			t.Fatalf("Source = %q, want %q (state %s)", res.Source, want, g.State())
		}
	}
	calls := func() int64 { return remote.calls.Load() }

	// The rate counts, over the window, once it holds MinCalls calls: two
	// failures of the first two calls do not open it, nor do they among
	// successes, but half of eight calls failing does.
	remote.set(failing)
	decide(floodgate.SourceFailOpen)
	decide(floodgate.SourceFailOpen)
	remote.set(healthy)
	for range 4 {
		decide(redisstore.Source)
	}
	remote.set(failing)
	decide(floodgate.SourceFailOpen)
	if g.State() != failover.Closed {
		t.Fatalf("state %s after 3 failures of 7 calls, want closed", g.State())
	}
	decide(floodgate.SourceFailOpen)
	if g.State() != failover.Open {
		t.Fatalf("state %s after 4 failures of 8 calls, want open", g.State())
	}

	// While open, no call reaches the remote store.
	before := calls()
	for range 100 {
		decide(floodgate.SourceFailOpen)
	}
	clock.Advance(799 * time.Millisecond) // the back-off is at least 0.8 s
	decide(floodgate.SourceFailOpen)
	if calls() != before {
		t.Fatalf("%d calls reached the remote store while the breaker was open", calls()-before)
	}

	// After the back-off one probe goes; it fails, and the back-off doubles.
	clock.Advance(201 * time.Millisecond)
	decide(floodgate.SourceFailOpen)
	if calls() != before+1 || g.State() != failover.Open {
		t.Fatalf("after the back-off: %d calls, state %s; want 1 probe that reopens", calls()-before, g.State())
	}
	if r := g.RetryIn(); r <= 1600*time.Millisecond || r > 2*time.Second {
		t.Fatalf("RetryIn after a failed probe = %s, want the doubled back-off (1.6 s, 2 s]", r)
	}
	clock.Advance(2 * time.Second)
	decide(floodgate.SourceFailOpen) // second failed probe: back-off capped at 3 s
	if r := g.RetryIn(); r <= 2400*time.Millisecond || r > 3*time.Second {
		t.Fatalf("RetryIn after two failed probes = %s, want MaxBackoff (2.4 s, 3 s]", r)
	}

	// Once the remote store answers, the next probe closes the breaker.
	remote.set(healthy)
	decide(floodgate.SourceFailOpen)
	clock.Advance(3 * time.Second)
	decide(redisstore.Source)
	if g.State() != failover.Closed {
		t.Fatalf("state %s after a successful probe, want closed", g.State())
	}
	decide(redisstore.Source)

	// The back-off starts from Backoff again, and the window from empty:
	// with one success in it, three failures make the rate.
	remote.set(failing)
	for range 3 {
		decide(floodgate.SourceFailOpen)
	}
	if r := g.RetryIn(); r <= 800*time.Millisecond || r > time.Second {
		t.Fatalf("RetryIn after reopening = %s, want Backoff again", r)
	}

	st := g.Stats()
	want := failover.Stats{State: failover.Open, Opened: 2, Probes: 3, Calls: 15, Skipped: 102,
		Failures: failover.OpCounts{Decide: 9}}
	if st != want {
		t.Errorf("Stats = %+v\nwant    %+v", st, want)
	}
	mu.Lock()
	defer mu.Unlock()
	wantChanges := []string{"closed>open", "open>half_open", "half_open>open", "open>half_open", "half_open>open",
		"open>half_open", "half_open>closed", "closed>open"}
	if len(changes) != len(wantChanges) {
		t.Fatalf("state changes %v, want %v", changes, wantChanges)
	}
	for i := range changes {
		if changes[i] != wantChanges[i] {
			t.Fatalf("state changes %v, want %v", changes, wantChanges)
		}
	}
}

// A half-open breaker lets exactly one probe through, however many callers
// arrive while it is in flight, and they do not wait for it.
func TestBreakerSingleProbe(t *testing.T) {
	clock := newClock()
	remote := newFakeRemote(t, clock)
	remote.set(failing)
	s, err := failover.New(remote, failover.Options{Mode: failover.FailClosed,
		Guard: failover.GuardOptions{Clock: clock, MinCalls: 1, Timeout: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, floodgate.PerSecond(1000))
	mustAllow(t, lim, "k")
	clock.Advance(time.Second)
	remote.set(hanging)
	probeDone := make(chan floodgate.Result)
	go func() {
		res, _ := floodgate.Allow(context.Background(), lim, "k")
		probeDone <- res
	}()
	waitFor(t, "the probe to reach the remote store", func() bool { return remote.calls.Load() == 2 })

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				res, err := floodgate.Allow(context.Background(), lim, "k")
				if err != nil || res.Source != floodgate.SourceFailClosed {
					t.Errorf("during the probe: %+v, %v; want fail-closed at once", res, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := remote.calls.Load(); n != 2 {
		t.Errorf("%d calls reached the remote store, want the failure and one probe", n)
	}
	if st := s.Guard().State(); st != failover.HalfOpen {
		t.Errorf("state %s with the probe in flight, want half_open", st)
	}
	remote.set(healthy)
	remote.release()
	if res := <-probeDone; res.Source != floodgate.SourceFailClosed {
		t.Errorf("probe that failed: Source %q, want fail-closed", res.Source)
	}
}

// waitFor polls cond until it holds, failing after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// The caller giving up is not the remote store failing: no failure is
// counted, the breaker does not move, and the caller gets its context's
// error because nothing was decided.
func TestCallerCancellation(t *testing.T) {
	for _, policy := range []failover.Mode{failover.FailOpen, failover.FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			clock := newClock()
			remote := newFakeRemote(t, clock)
			s, err := failover.New(remote, failover.Options{Mode: policy,
				Guard: failover.GuardOptions{Clock: clock, MinCalls: 1, Timeout: time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			lim := newLimiter(t, s, floodgate.PerSecond(1000))

			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := floodgate.Allow(ctx, lim, "k"); !errors.Is(err, context.Canceled) {
				t.Fatalf("canceled before the call: err = %v, want context.Canceled", err)
			}
			if n := remote.calls.Load(); n != 0 {
				t.Fatalf("a canceled caller reached the remote store (%d calls)", n)
			}

			remote.set(hanging)
			ctx, cancel = context.WithCancel(context.Background())
			errc := make(chan error)
			go func() {
				_, err := floodgate.Allow(ctx, lim, "k")
				errc <- err
			}()
			waitFor(t, "the call to reach the remote store", func() bool { return remote.calls.Load() == 1 })
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("canceled during the call: err = %v, want context.Canceled", err)
			}

			ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			if _, err := floodgate.Allow(ctx, lim, "k"); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("caller's deadline: err = %v, want context.DeadlineExceeded", err)
			}
			st := s.Guard().Stats()
			if st.State != failover.Closed || st.Failures.Decide != 0 || st.Canceled != 3 {
				t.Fatalf("stats %+v, want closed, no failures, 3 canceled", st)
			}

			// A canceled probe is given back: the next caller probes.
			remote.set(failing)
			mustAllow(t, lim, "k")
			clock.Advance(time.Second)
			remote.set(hanging)
			ctx, cancel = context.WithCancel(context.Background())
			go func() {
				_, err := floodgate.Allow(ctx, lim, "k")
				errc <- err
			}()
			waitFor(t, "the probe to reach the remote store", func() bool { return remote.calls.Load() == 4 })
			cancel()
			<-errc
			if st := s.Guard().State(); st != failover.Open {
				t.Fatalf("state %s after a canceled probe, want open", st)
			}
			remote.release()
			remote.set(healthy)
			if res := mustAllow(t, lim, "k"); res.Source != redisstore.Source {
				t.Fatalf("next caller after a canceled probe: Source %q, want the remote's", res.Source)
			}
		})
	}
}

func TestOnError(t *testing.T) {
	remote := newFakeRemote(t, nil)
	remote.set(failing)
	var got []*failover.Error
	var mu sync.Mutex
	s, err := failover.New(remote, failover.Options{Mode: failover.FailOpen, Guard: failover.GuardOptions{
		MinCalls: 2,
		OnError: func(e *failover.Error) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, e)
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, floodgate.PerSecond(10))
	ctx := context.Background()
	mustAllow(t, lim, "k")
	if err := lim.RefundN(ctx, "k", 1); err != nil {
		t.Fatalf("RefundN under FailOpen: %v, want the failure absorbed", err)
	}
	mustAllow(t, lim, "k") // skipped: the breaker is open; not an error to report
	if err := lim.Reset(ctx, "k"); !errors.Is(err, failover.ErrOpen) {
		t.Fatalf("Reset with the breaker open: %v, want ErrOpen", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("OnError called %d times, want 2 (a decide and a refund)", len(got))
	}
	for i, op := range []failover.Op{failover.OpDecide, failover.OpRefund} {
		e := got[i]
		if e.Op != op || e.Policy != "api" || !errors.Is(e, errDown) {
			t.Errorf("error %d = %+v, want %s of policy api wrapping the remote's error", i, e, op)
		}
	}
	if want := "failover: policy api: decide: fake remote: connection refused"; got[0].Error() != want {
		t.Errorf("Error() = %q, want %q", got[0].Error(), want)
	}
	if st := s.Guard().Stats(); st.Failures != (failover.OpCounts{Decide: 1, Refund: 1}) || st.Skipped != 2 {
		t.Errorf("stats %+v, want a decide and a refund failure and 2 skipped", st)
	}
}

func TestFallbackLocalRefundAndReset(t *testing.T) {
	clock := newClock()
	remote := newFakeRemote(t, clock)
	local := newMem(t, clock)
	s, err := failover.New(remote, failover.Options{Mode: failover.LocalFallback, Local: local,
		Guard: failover.GuardOptions{Clock: clock, MinCalls: -1}})
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, floodgate.PerMinute(2))
	ctx := context.Background()

	remote.set(failing)
	mustAllow(t, lim, "k")
	mustAllow(t, lim, "k")
	if res := mustAllow(t, lim, "k"); res.Allowed || res.Source != floodgate.SourceLocalFallback {
		t.Fatalf("third request during the outage: %+v, want denied by the local fallback", res)
	}
	// The remote store cannot take the refund, so the local store does.
	if err := lim.RefundN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if res := mustAllow(t, lim, "k"); !res.Allowed {
		t.Fatalf("after a refund during the outage: %+v, want allowed", res)
	}
	// A reset that misses the remote store is reported, and still resets
	// the local store.
	if err := lim.Reset(ctx, "k"); !errors.Is(err, errDown) {
		t.Fatalf("Reset during the outage: %v, want the remote's error", err)
	}
	if res := mustAllow(t, lim, "k"); !res.Allowed || res.Remaining != 1 {
		t.Fatalf("after Reset: %+v, want a full local bucket", res)
	}

	remote.set(healthy)
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	mustAllow(t, lim, "k")
	if err := lim.RefundN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if res := mustAllow(t, lim, "k"); res.Source != redisstore.Source || res.Remaining != 1 {
		t.Fatalf("after a refund to the remote store: %+v, want 1 remaining there", res)
	}
}

func TestPanickingRemote(t *testing.T) {
	remote := newFakeRemote(t, nil)
	remote.set(panicky)
	s, err := failover.New(remote, failover.Options{Mode: failover.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, floodgate.PerSecond(10))
	if res := mustAllow(t, lim, "k"); res.Source != floodgate.SourceFailClosed {
		t.Fatalf("panicking remote: Source %q, want fail-closed", res.Source)
	}
	if st := s.Guard().Stats(); st.Failures.Decide != 1 {
		t.Fatalf("a panic was not counted as a failure: %+v", st)
	}
}

func TestBreakerDisabled(t *testing.T) {
	clock := newClock()
	remote := newFakeRemote(t, clock)
	remote.set(failing)
	s, err := failover.New(remote, failover.Options{Mode: failover.FailOpen,
		Guard: failover.GuardOptions{Clock: clock, MinCalls: -1}})
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, floodgate.PerSecond(10))
	for range 50 {
		mustAllow(t, lim, "k")
	}
	if n, st := remote.calls.Load(), s.Guard().State(); n != 50 || st != failover.Closed {
		t.Fatalf("%d calls, state %s; want every call tried and the breaker closed", n, st)
	}
}

// validatingStore rejects limits over 1000 units, as an engine with a
// coarse clock rejects limits it cannot keep.
type validatingStore struct{ floodgate.Store }

func (validatingStore) ValidateLimit(l floodgate.Limit) error {
	if l.Capacity() > 1000 {
		return floodgate.ErrInvalidLimit
	}
	return nil
}

func TestValidateLimit(t *testing.T) {
	remote := validatingStore{newMem(t, nil)}
	for _, o := range []failover.Options{
		{Mode: failover.FailOpen},
		{Mode: failover.LocalFallback, Local: newMem(t, nil)},
	} {
		s, err := failover.New(remote, o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := floodgate.New(s, floodgate.Policy{Name: "big", Limits: []floodgate.Limit{floodgate.PerSecond(5000)}}); !errors.Is(err, floodgate.ErrInvalidLimit) {
			t.Errorf("%s: a limit the remote store rejects: New error %v, want ErrInvalidLimit", o.Mode, err)
		}
	}
	s, err := failover.New(newMem(t, nil), failover.Options{Mode: failover.LocalFallback, Local: remote})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := floodgate.New(s, floodgate.Policy{Name: "big", Limits: []floodgate.Limit{floodgate.PerSecond(5000)}}); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("a limit the local store rejects: New error %v, want ErrInvalidLimit", err)
	}
}

func TestNewRejects(t *testing.T) {
	mem := newMem(t, nil)
	good, err := failover.New(mem, failover.Options{Mode: failover.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		remote floodgate.Store
		o      failover.Options
	}{
		{"no policy", mem, failover.Options{}},
		{"unknown policy", mem, failover.Options{Mode: 9}},
		{"fallback without local", mem, failover.Options{Mode: failover.LocalFallback}},
		{"local without fallback", mem, failover.Options{Mode: failover.FailClosed, Local: mem}},
		{"no remote", nil, failover.Options{Mode: failover.FailOpen}},
		{"nested policy", good, failover.Options{Mode: failover.FailOpen}},
		{"negative timeout", mem, failover.Options{Mode: failover.FailOpen, Guard: failover.GuardOptions{Timeout: -1}}},
		{"negative slow timeout", mem, failover.Options{Mode: failover.FailOpen, Guard: failover.GuardOptions{SlowTimeout: -1}}},
		{"slow timeout below timeout", mem, failover.Options{Mode: failover.FailOpen, Guard: failover.GuardOptions{Timeout: time.Second, SlowTimeout: time.Millisecond}}},
		{"failure rate above 1", mem, failover.Options{Mode: failover.FailOpen, Guard: failover.GuardOptions{FailureRate: 1.5}}},
		{"negative failure rate", mem, failover.Options{Mode: failover.FailOpen, Guard: failover.GuardOptions{FailureRate: -0.1}}},
		{"NaN failure rate", mem, failover.Options{Mode: failover.FailOpen, Guard: failover.GuardOptions{FailureRate: math.NaN()}}},
		{"negative window", mem, failover.Options{Mode: failover.FailOpen, Guard: failover.GuardOptions{Window: -time.Second}}},
		{"negative back-off", mem, failover.Options{Mode: failover.FailOpen, Guard: failover.GuardOptions{Backoff: -1}}},
		{"max below base", mem, failover.Options{Mode: failover.FailOpen, Guard: failover.GuardOptions{Backoff: 2 * time.Second, MaxBackoff: time.Second}}},
	} {
		if _, err := failover.New(tc.remote, tc.o); err == nil {
			t.Errorf("%s: New succeeded, want an error", tc.name)
		}
	}
	if _, err := failover.NewGuard(good.Guard(), failover.GuardOptions{}); err == nil {
		t.Error("NewGuard over a Guard succeeded, want an error")
	}
}

func TestParseMode(t *testing.T) {
	for _, p := range []failover.Mode{failover.FailOpen, failover.FailClosed, failover.LocalFallback} {
		got, err := failover.ParseMode(p.String())
		if err != nil || got != p {
			t.Errorf("ParseMode(%q) = %v, %v", p.String(), got, err)
		}
	}
	if got, err := failover.ParseMode(" Fail-Open "); err != nil || got != failover.FailOpen {
		t.Errorf("ParseMode(\" Fail-Open \") = %v, %v", got, err)
	}
	if _, err := failover.ParseMode("fail_soft"); err == nil {
		t.Error("ParseMode(fail_soft) succeeded")
	}
	if s := failover.Mode(0).String(); s != "mode(0)" {
		t.Errorf("zero Mode String = %q", s)
	}
}

// Many callers against a remote store that flaps: run with -race. Every call
// returns a decision, never an error, and the breaker ends closed once the
// remote store is healthy again.
func TestConcurrentFlapping(t *testing.T) {
	clock := newClock()
	remote := newFakeRemote(t, clock)
	s, err := failover.New(remote, failover.Options{Mode: failover.LocalFallback, Local: newMem(t, clock),
		Guard: failover.GuardOptions{Clock: clock, MinCalls: 3, Backoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, floodgate.PerSecond(1_000_000))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			remote.set(int32(i/7) % 2) // healthy and failing in turns
			clock.Advance(3 * time.Millisecond)
			time.Sleep(50 * time.Microsecond)
		}
	})
	var calls atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				key := "k" + string(rune('a'+(g+i)%4))
				if _, err := floodgate.Allow(context.Background(), lim, key); err != nil {
					t.Errorf("Allow: %v", err)
					return
				}
				calls.Add(1)
			}
		})
	}
	for calls.Load() < 16000 && !t.Failed() {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	remote.set(healthy)
	clock.Advance(time.Second)
	if res := mustAllow(t, lim, "ka"); res.Source != redisstore.Source {
		t.Errorf("after recovery: Source %q, want the remote's", res.Source)
	}
	st := s.Guard().Stats()
	if st.State != failover.Closed || st.Calls != uint64(remote.calls.Load()) {
		t.Errorf("stats %+v (remote saw %d calls), want closed and every call counted", st, remote.calls.Load())
	}
	t.Logf("%+v", st)
}

// A Bounded store is called on the caller's goroutine: its timeout comes
// from its context, and a panic reaches the caller as it would without a
// Guard.
func TestBoundedStore(t *testing.T) {
	remote := newFakeRemote(t, nil)
	g, err := failover.NewGuard(remote, failover.GuardOptions{ContextBound: true, Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	set := mustSet(t, floodgate.PerSecond(1))
	ctx := context.Background()
	if res, err := g.Decide(ctx, set, "k", 1); err != nil || !res.Allowed {
		t.Fatalf("healthy: %+v, %v", res, err)
	}
	remote.set(stalling)
	start := time.Now()
	if _, err := g.Decide(ctx, set, "k", 1); !errors.Is(err, failover.ErrTimeout) {
		t.Fatalf("stalling: err = %v, want ErrTimeout", err)
	}
	// A hang detector: ErrTimeout shows the 20 ms timeout ended the call.
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("stalling: took %s, want the 20 ms timeout", took)
	}
	remote.set(panicky)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("a Bounded store's panic did not reach the caller")
			}
		}()
		g.Decide(ctx, set, "k", 1)
	}()
}

// A Bounded store runs on the caller's goroutine, so its panic during the
// probe unwinds past the Guard. The probe must still count as failed: the
// breaker opens again and a later call probes, instead of the breaker
// staying half-open with no probe in flight and skipping every call for
// good.
func TestBoundedProbePanicReopens(t *testing.T) {
	clock := newClock()
	remote := newFakeRemote(t, clock)
	g, err := failover.NewGuard(remote, failover.GuardOptions{ContextBound: true, Clock: clock, MinCalls: 1})
	if err != nil {
		t.Fatal(err)
	}
	set := mustSet(t, floodgate.PerSecond(1000))
	ctx := context.Background()
	remote.set(failing)
	g.Decide(ctx, set, "k", 1) // opens the breaker
	if st := g.State(); st != failover.Open {
		t.Fatalf("state %s after a failure with Failures 1, want open", st)
	}
	clock.Advance(time.Second)
	remote.set(panicky)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the probe's panic did not reach the caller")
			}
		}()
		g.Decide(ctx, set, "k", 1)
	}()
	if st := g.State(); st != failover.Open {
		t.Fatalf("state %s after the probe panicked, want open", st)
	}
	if st := g.Stats(); st.Failures.Decide != 2 {
		t.Errorf("Failures.Decide = %d, want 2: the panicking probe is a failure", st.Failures.Decide)
	}
	remote.set(healthy)
	clock.Advance(failover.DefaultMaxBackoff)
	if _, err := g.Decide(ctx, set, "k", 1); err != nil {
		t.Fatalf("probe after the back-off: %v, want the remote's answer", err)
	}
	if st := g.State(); st != failover.Closed {
		t.Fatalf("state %s after a successful probe, want closed", st)
	}
}

// lateCtx is a context whose deadline has passed but whose timer has not
// fired yet: Err is still nil. A store that set its own timer from the same
// deadline (go-redis's socket deadline, redisstore's batch deadline) can
// fail in that window.
type lateCtx struct {
	context.Context
	deadline time.Time
}

func (c lateCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// deadlineStore fails with context.DeadlineExceeded as soon as its
// context's deadline has passed, without waiting for Done, as a store that
// arms timers of its own from the deadline does.
type deadlineStore struct{ *fakeRemote }

func (d deadlineStore) Decide(ctx context.Context, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		d.calls.Add(1)
		return algo.Verdict{}, context.DeadlineExceeded
	}
	return d.fakeRemote.Decide(ctx, set, key, cost)
}

// A caller whose own deadline has passed is not the remote store failing,
// even when the store notices the deadline before the caller's context
// does: the call is the caller's (an undecided error), not a timeout of the
// Guard, and the breaker does not open on it.
func TestCallerDeadlineNoticedByStoreFirst(t *testing.T) {
	remote := newFakeRemote(t, nil)
	s, err := failover.New(deadlineStore{remote}, failover.Options{Mode: failover.FailClosed,
		Guard: failover.GuardOptions{MinCalls: 1, Timeout: time.Minute, ContextBound: true}})
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, floodgate.PerSecond(1000))
	ctx := lateCtx{Context: context.Background(), deadline: time.Now().Add(-time.Millisecond)}
	if _, err := floodgate.Allow(ctx, lim, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Allow past the caller's deadline: err = %v, want context.DeadlineExceeded", err)
	}
	if remote.calls.Load() != 1 {
		t.Fatalf("%d calls reached the store, want 1", remote.calls.Load())
	}
	st := s.Guard().Stats()
	if st.State != failover.Closed || st.Failures.Decide != 0 || st.Timeouts != 0 || st.Canceled != 1 {
		t.Fatalf("stats %+v, want closed, no failure, no timeout, 1 canceled", st)
	}
}

// TestRefusalsAreNotOutages: a closed store, or one key's corrupt state,
// is the remote store's answer about this call, not an outage. No failure
// mode may hide it (FailOpen would silently stop limiting), and it must not
// open the breaker for every other key.
func TestRefusalsAreNotOutages(t *testing.T) {
	for _, refusal := range []error{
		fmt.Errorf("redisstore: %w", floodgate.ErrClosed),
		fmt.Errorf("redisstore: key %q: %w", "floodgate:{api::victim}:0g", floodgate.ErrCorruptState),
	} {
		for _, mode := range []failover.Mode{failover.FailOpen, failover.FailClosed, failover.LocalFallback} {
			t.Run(mode.String(), func(t *testing.T) {
				errRefusal = refusal
				clock := newClock()
				remote := newFakeRemote(t, clock)
				o := failover.Options{Mode: mode, Guard: failover.GuardOptions{Clock: clock, MinCalls: 2}}
				if mode == failover.LocalFallback {
					o.Local = newMem(t, clock)
				}
				s, err := failover.New(remote, o)
				if err != nil {
					t.Fatal(err)
				}
				lim := newLimiter(t, s, floodgate.PerSecond(10))
				remote.set(refusing)
				for range 5 {
					res, err := floodgate.Allow(context.Background(), lim, "k")
					if !errors.Is(err, refusal) || res.Allowed {
						t.Fatalf("refused call: %+v, %v; want the refusal as an error", res, err)
					}
				}
				if st := s.Guard().Stats(); st.State != failover.Closed || st.Failures.Decide != 0 {
					t.Fatalf("after refusals: %+v, want the breaker closed and no failures counted", st)
				}
				remote.set(healthy)
				if res := mustAllow(t, lim, "k"); res.Source != redisstore.Source {
					t.Fatalf("next call: %+v, want the remote's decision", res)
				}
			})
		}
	}
}
