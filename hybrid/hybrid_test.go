package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/hybrid"
)

// With the whole limit held locally the filter mirrors the global store
// exactly, so the hybrid store keeps every semantic of the engines.
func TestConformance(t *testing.T) {
	floodgatetest.Run(t, floodgatetest.Harness{
		NewStore: func(t *testing.T, clock clock.Clock) floodgate.Store {
			s, err := hybrid.New(newMem(t, clock), newMem(t, clock), hybrid.Options{Fraction: 1})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		// The source varies: hybrid:local for denials, hybrid:global else.
	})
}

func TestSources(t *testing.T) {
	clock := newClock()
	global := counting(newMem(t, clock))
	s, err := hybrid.New(newMem(t, clock), global, hybrid.Options{Fraction: 0.5,
		Guard: failover.GuardOptions{Clock: clock, MinCalls: 2, Window: 300 * time.Millisecond, Backoff: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	limit := floodgate.PerSecond(10)
	lim := newLimiter(t, s, limit)

	for i := range 5 {
		res := mustAllow(t, lim, "k")
		want := floodgate.Result{Allowed: true, Limit: limit, Remaining: int64(9 - i), ResetAfter: time.Duration(i+1) * 100 * time.Millisecond,
			Source: hybrid.SourceGlobal, Policy: "api", Set: lim.LimitsFor("k")}
		if res != want {
			t.Fatalf("request %d: %+v\nwant %+v", i+1, res, want)
		}
	}
	// The filter holds 5 of the 10: the sixth stops here, named after the
	// configured limit, with the filter's own numbers.
	res := mustAllow(t, lim, "k")
	want := floodgate.Result{Limit: limit, ResetAfter: time.Second, RetryAfter: 200 * time.Millisecond,
		Source: hybrid.SourceLocal, Policy: "api", Set: lim.LimitsFor("k")}
	if res != want {
		t.Fatalf("over the local share: %+v\nwant %+v", res, want)
	}
	if n := global.decides.Load(); n != 5 {
		t.Fatalf("%d decisions reached the global store, want 5", n)
	}

	// The global store fails: what passes the filter is allowed by it.
	global.fail.Store(true)
	clock.Advance(200 * time.Millisecond)
	res = mustAllow(t, lim, "k")
	want = floodgate.Result{Allowed: true, Limit: limit, ResetAfter: time.Second, Source: floodgate.SourceLocalFallback, Policy: "api", Set: lim.LimitsFor("k")}
	if res != want {
		t.Fatalf("global store down: %+v\nwant %+v", res, want)
	}
	if res := mustAllow(t, lim, "k"); res.Source != hybrid.SourceLocal {
		t.Fatalf("global store down, over the local share: Source %q, want hybrid:local", res.Source)
	}
	clock.Advance(200 * time.Millisecond)
	mustAllow(t, lim, "k") // the second failure within the window, the first successes out of it: the breaker opens
	if st := s.Guard().State(); st != failover.Open {
		t.Fatalf("breaker %s after 2 failures, want open", st)
	}
	before := global.decides.Load()
	clock.Advance(200 * time.Millisecond)
	if res := mustAllow(t, lim, "k"); res.Source != floodgate.SourceLocalFallback || !res.Allowed {
		t.Fatalf("breaker open: %+v, want allowed by the local fallback", res)
	}
	if global.decides.Load() != before {
		t.Fatal("a decision reached the global store while the breaker was open")
	}

	// Back to the global store after the back-off.
	global.fail.Store(false)
	clock.Advance(time.Second)
	if res := mustAllow(t, lim, "k"); res.Source != hybrid.SourceGlobal {
		t.Fatalf("after recovery: Source %q, want hybrid:global", res.Source)
	}
}

// A request the global store denies stays charged to the filter: the filter
// bounds what reaches the global store, and refunding it would let every
// request of an abusive client through to Redis once the other instances
// have used up the global limit.
func TestGlobalDenialKeepsLocalCharge(t *testing.T) {
	clock := newClock()
	shared := newMem(t, clock)
	global := counting(shared)
	s, err := hybrid.New(newMem(t, clock), global, hybrid.Options{Fraction: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	limit := floodgate.PerMinute(10)
	lim := newLimiter(t, s, limit)
	other := newLimiter(t, shared, limit) // another instance's view of the global store
	for range 10 {
		mustAllow(t, other, "k")
	}
	for i := range 5 {
		if res := mustAllow(t, lim, "k"); res.Allowed || res.Source != hybrid.SourceGlobal {
			t.Fatalf("request %d: %+v, want denied by the global store", i+1, res)
		}
	}
	if res := mustAllow(t, lim, "k"); res.Allowed || res.Source != hybrid.SourceLocal {
		t.Fatalf("sixth request: %+v, want denied by the filter", res)
	}
	if n := global.decides.Load(); n != 5 {
		t.Fatalf("%d decisions reached the global store, want the filter's 5", n)
	}
}

// A key driven at 10× its limit by one instance: at least 95% of the denied
// requests never reach the global store.
func TestDeniedRequestsStayLocal(t *testing.T) {
	clock := newClock()
	global := counting(newMem(t, clock))
	s, err := hybrid.New(newMem(t, clock), global, hybrid.Options{Fraction: hybrid.FractionFor(3, 1.5)})
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, floodgate.PerSecond(100))
	var denied, deniedGlobal int
	for range 10_000 { // 10 s at 1000 requests/s
		clock.Advance(time.Millisecond)
		res := mustAllow(t, lim, "hot")
		if !res.Allowed {
			denied++
			if res.Source == hybrid.SourceGlobal {
				deniedGlobal++
			}
		}
	}
	if local := float64(denied-deniedGlobal) / float64(denied); local < 0.95 {
		t.Fatalf("%d denied, %d of them by the global store: %.1f%% stayed local, want ≥ 95%%", denied, deniedGlobal, 100*local)
	}
	if n := global.decides.Load(); n > 50+10*50 {
		t.Fatalf("%d decisions reached the global store in 10 s, want at most the local share (a burst of 50, then 50/s)", n)
	}
}

// Three instances share one global store: together they admit the global
// limit, not three times it, and the global store sees about k times the
// limit, k = fraction × instances, however hard the key is driven. Three
// purely local limiters admit three times the limit.
func TestThreeInstances(t *testing.T) {
	clock := newClock()
	shared := counting(newMem(t, clock))
	guard, err := failover.NewGuard(shared, failover.GuardOptions{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	limit := floodgate.PerSecond(100)
	f := hybrid.FractionFor(3, 1.5)
	var hybrids, locals [3]*floodgate.PolicyLimiter
	for i := range 3 {
		s, err := hybrid.New(newMem(t, clock), guard, hybrid.Options{Fraction: f})
		if err != nil {
			t.Fatal(err)
		}
		hybrids[i] = newLimiter(t, s, limit)
		locals[i] = newLimiter(t, newMem(t, clock), limit)
	}
	count := func(lims [3]*floodgate.PolicyLimiter) (admitted int) {
		for i := range 30_000 { // 10 s at 3000 requests/s, round robin
			if i%3 == 0 {
				clock.Advance(time.Millisecond)
			}
			if mustAllow(t, lims[i%3], "hot").Allowed {
				admitted++
			}
		}
		return admitted
	}
	// In 10 s a limit of 100/s with a burst of 100 admits 1100, less the
	// one unit still refilling when the last request comes.
	const want = 1100
	if got := count(hybrids); got < want*98/100 || got > want*101/100 {
		t.Errorf("three hybrid instances admitted %d, want %d (+1%%, -2%%)", got, want)
	}
	if n := shared.decides.Load(); n > want*3/2 {
		t.Errorf("%d decisions reached the global store, want at most 1.5 × what the limit admits (%d)", n, want*3/2)
	}
	if got := count(locals); got < 3*want*99/100 || got > 3*want*101/100 {
		t.Errorf("three local limiters admitted %d, want about 3 × %d", got, want)
	}
}

func TestCallerCancelUndoesLocalCharge(t *testing.T) {
	clock := newClock()
	global := counting(newMem(t, clock))
	global.hang.Store(true)
	t.Cleanup(global.release)
	s, err := hybrid.New(newMem(t, clock), global, hybrid.Options{Fraction: 0.5,
		Guard: failover.GuardOptions{Timeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, floodgate.PerMinute(2))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := floodgate.Allow(ctx, lim, "k")
		errc <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for global.decides.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the call never reached the global store")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	// The local share is 1; had the canceled request kept its charge, the
	// filter would deny this one.
	global.hang.Store(false)
	global.fail.Store(true)
	if res := mustAllow(t, lim, "k"); !res.Allowed || res.Source != floodgate.SourceLocalFallback {
		t.Fatalf("after a canceled request: %+v, want the filter's share intact", res)
	}
	if st := s.Guard().Stats(); st.Canceled != 1 || st.Failures.Decide != 1 {
		t.Fatalf("stats %+v, want 1 canceled and 1 failure", st)
	}
}

func TestRefundAndReset(t *testing.T) {
	clock := newClock()
	global := counting(newMem(t, clock))
	s, err := hybrid.New(newMem(t, clock), global, hybrid.Options{Fraction: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, floodgate.PerMinute(4))
	ctx := context.Background()
	mustAllow(t, lim, "k")
	mustAllow(t, lim, "k")
	if res := mustAllow(t, lim, "k"); res.Source != hybrid.SourceLocal {
		t.Fatalf("third request: Source %q, want hybrid:local", res.Source)
	}
	if err := lim.RefundN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if res := mustAllow(t, lim, "k"); !res.Allowed || res.Remaining != 2 {
		t.Fatalf("after a refund: %+v, want allowed by both with 2 left globally", res)
	}
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if res := mustAllow(t, lim, "k"); !res.Allowed || res.Remaining != 3 {
		t.Fatalf("after a reset: %+v, want 3 left globally", res)
	}

	// A failed global refund is absorbed; a failed global reset is not.
	global.fail.Store(true)
	if err := lim.RefundN(ctx, "k", 1); err != nil {
		t.Fatalf("refund with the global store down: %v, want nil", err)
	}
	if err := lim.Reset(ctx, "k"); !errors.Is(err, errDown) {
		t.Fatalf("reset with the global store down: %v, want its error", err)
	}
}

// validatingStore rejects limits whose capacity is above 1000.
type validatingStore struct{ floodgate.Store }

func (validatingStore) ValidateLimit(l floodgate.Limit) error {
	if l.Capacity() > 1000 {
		return floodgate.ErrInvalidLimit
	}
	return nil
}

func TestValidateLimit(t *testing.T) {
	mem := newMem(t, nil)
	build := func(local, global floodgate.Store, f float64, l floodgate.Limit) error {
		s, err := hybrid.New(local, global, hybrid.Options{Fraction: f})
		if err != nil {
			t.Fatal(err)
		}
		_, err = floodgate.New(s, floodgate.Policy{Name: "p", Limits: []floodgate.Limit{l}})
		return err
	}
	if err := build(mem, validatingStore{mem}, 0.5, floodgate.PerSecond(1500)); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("limit the global store rejects: %v", err)
	}
	if err := build(validatingStore{mem}, mem, 0.5, floodgate.PerSecond(1500)); err != nil {
		t.Errorf("limit whose local share (750) the local store keeps: %v", err)
	}
	if err := build(validatingStore{mem}, mem, 0.8, floodgate.PerSecond(1500)); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("limit whose local share (1200) the local store rejects: %v", err)
	}
	// 11 per 10 intervals spans the whole MaxSpan; its tenth, 2 per
	// interval of 10, spans almost twice that.
	period := algo.MaxSpan / 11 * 10
	if err := build(mem, mem, 1, floodgate.Limit{Rate: 10, Period: period, Burst: 11}); err != nil {
		t.Fatalf("limit at MaxSpan: %v", err)
	}
	if err := build(mem, mem, 0.1, floodgate.Limit{Rate: 10, Period: period, Burst: 11}); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("limit whose local share spans more than MaxSpan: %v", err)
	}
}

func TestNewRejects(t *testing.T) {
	mem := newMem(t, nil)
	fs, err := failover.New(mem, failover.Options{Mode: failover.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		local, global floodgate.Store
		o             hybrid.Options
	}{
		{"negative fraction", mem, mem, hybrid.Options{Fraction: -0.5}},
		{"fraction above 1", mem, mem, hybrid.Options{Fraction: 1.5}},
		{"NaN fraction", mem, mem, hybrid.Options{Fraction: math.NaN()}},
		{"no local", nil, mem, hybrid.Options{Fraction: 0.5}},
		{"no global", mem, nil, hybrid.Options{Fraction: 0.5}},
		{"global with a policy", mem, fs, hybrid.Options{Fraction: 0.5}},
		{"bad guard options", mem, mem, hybrid.Options{Fraction: 0.5, Guard: failover.GuardOptions{Timeout: -1}}},
	} {
		if _, err := hybrid.New(tc.local, tc.global, tc.o); err == nil {
			t.Errorf("%s: New succeeded, want an error", tc.name)
		}
	}
}

func TestSharedGuard(t *testing.T) {
	mem := newMem(t, nil)
	g, err := failover.NewGuard(mem, failover.GuardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := hybrid.New(newMem(t, nil), g, hybrid.Options{Fraction: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	b, err := failover.New(g, failover.Options{Mode: failover.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	if a.Guard() != g || b.Guard() != g {
		t.Fatal("a Guard given as the remote store was not used as it is")
	}
}

func TestFractionFor(t *testing.T) {
	for _, tc := range []struct {
		n        int
		headroom float64
		want     float64
	}{
		{1, 2, 1},
		{0, 2, 1},
		{2, 2, 1},
		{4, 2, 0.5},
		{10, 0, 0.2},
		{10, 1.5, 0.15},
		{3, 1.5, 0.5},
		{3, math.NaN(), 2.0 / 3},
	} {
		if got := hybrid.FractionFor(tc.n, tc.headroom); got != tc.want {
			t.Errorf("FractionFor(%d, %g) = %g, want %g", tc.n, tc.headroom, got, tc.want)
		}
	}
}

// The local limits of a set are derived once; afterwards a decision the
// filter denies allocates nothing, even when sets of one policy name with
// different limits alternate (as two limiters built from one policy name,
// or the old and new config around a reload, do).
func TestLocalDenialAllocatesNothing(t *testing.T) {
	clock := newClock()
	s, err := hybrid.New(newMem(t, clock), newMem(t, clock), hybrid.Options{Fraction: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	a := newLimiter(t, s, floodgate.PerMinute(10))
	b := newLimiter(t, s, floodgate.PerMinute(20))
	for range 20 {
		mustAllow(t, a, "k")
		mustAllow(t, b, "k")
	}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		floodgate.Allow(ctx, a, "k")
		floodgate.Allow(ctx, b, "k")
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per pair of local denials, want 0", allocs)
	}
	la, _ := s.LocalLimits(a.LimitsFor("k").Compiled())
	lb, _ := s.LocalLimits(b.LimitsFor("k").Compiled())
	if la.At(0).Spec() != floodgate.PerMinute(5).Spec() || lb.At(0).Spec() != floodgate.PerMinute(10).Spec() {
		t.Fatalf("local limits %+v and %+v, want 5/min and 10/min", la.At(0).Spec(), lb.At(0).Spec())
	}
	if la.ID() != a.LimitsFor("k").Compiled().ID() {
		t.Fatal("the local set's ID differs from the global set's")
	}
}

func TestConcurrentSetCache(t *testing.T) {
	s, err := hybrid.New(newMem(t, nil), newMem(t, nil), hybrid.Options{Fraction: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	var lims []*floodgate.PolicyLimiter
	for i := range 20 { // more sets per ID than the cache keeps
		lims = append(lims, newLimiter(t, s, floodgate.PerMinute(int64(100+i))))
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				lim := lims[(g+i)%len(lims)]
				ls, err := s.LocalLimits(lim.LimitsFor("k").Compiled())
				if err != nil {
					t.Error(err)
					return
				}
				if want := (lim.LimitsFor("k").Limit(0).Rate + 3) / 4; ls.At(0).Spec().Rate != want {
					t.Errorf("local rate %d, want %d", ls.At(0).Spec().Rate, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// closedStore is a global store that has been closed.
type closedStore struct{ floodgate.Store }

func (closedStore) Decide(context.Context, *algo.Set, string, int64) (algo.Verdict, error) {
	return algo.Verdict{}, fmt.Errorf("redisstore: %w", floodgate.ErrClosed)
}
func (closedStore) Reserve(context.Context, *algo.Set, string, int64, time.Duration) (algo.Verdict, algo.Ticket, error) {
	return algo.Verdict{}, algo.Ticket{}, fmt.Errorf("redisstore: %w", floodgate.ErrClosed)
}
func (closedStore) Cancel(context.Context, *algo.Set, string, int64, algo.Ticket) error {
	return fmt.Errorf("redisstore: %w", floodgate.ErrClosed)
}

// TestClosedGlobalStoreIsAnError: a closed global store is a programming
// error, not an outage: the hybrid store reports it instead of deciding on
// its local filter as if Redis were down, and charges the filter nothing.
func TestClosedGlobalStoreIsAnError(t *testing.T) {
	local := newMem(t, nil)
	s, err := hybrid.New(local, closedStore{newMem(t, nil)}, hybrid.Options{Fraction: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, floodgate.PerSecond(10))
	for range 10 {
		if res, err := floodgate.Allow(context.Background(), lim, "k"); !errors.Is(err, floodgate.ErrClosed) || res.Allowed {
			t.Fatalf("%+v, %v; want ErrClosed", res, err)
		}
	}
	if st := s.Guard().Stats(); st.Failures.Decide != 0 {
		t.Errorf("guard counted %d failures for a closed store", st.Failures.Decide)
	}
	if local.Len() != 0 {
		t.Errorf("the local filter kept %d charges for undecided requests", local.Len())
	}
}
