package floodgate_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/textform"
	"github.com/floodgate-go/floodgate/memstore"
)

func TestLimitValidate(t *testing.T) {
	valid := []floodgate.Limit{
		floodgate.PerSecond(1), floodgate.PerMinute(100).WithBurst(5), floodgate.PerHour(3).WithAlgorithm(floodgate.TokenBucket),
		floodgate.PerDay(10).AlignedTo(time.UTC), floodgate.Every(time.Nanosecond), floodgate.PerSecond(10_000_000),
		floodgate.PerSecond(algo.MaxSlidingWindowRate).WithAlgorithm(floodgate.SlidingWindow),
		floodgate.PerMinute(7).WithBurst(7).WithAlgorithm(floodgate.SlidingLog),
	}
	for _, l := range valid {
		if err := l.Validate(); err != nil {
			t.Errorf("%s: %v", l, err)
		}
	}
	for _, ip := range floodgatetest.InvalidPolicies() {
		for _, l := range ip.Policy.Limits {
			if err := l.Validate(); err != nil && !errors.Is(err, floodgate.ErrInvalidLimit) {
				t.Errorf("%s: error %v does not wrap ErrInvalidLimit", ip.Name, err)
			}
		}
	}
	err := floodgate.PerSecond(0).Validate()
	if err == nil || !strings.Contains(err.Error(), "rate must be positive") {
		t.Errorf("error for rate 0 = %v, want it to name the rate", err)
	}
}

// Every Algorithm's String is the configuration name textform parses back
// to it, whatever the case and dashes.
func TestAlgorithmNames(t *testing.T) {
	all := []floodgate.Algorithm{floodgate.GCRA, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.SlidingLog}
	if len(all) != len(textform.Algorithms) {
		t.Fatalf("%d algorithms, %d names", len(all), len(textform.Algorithms))
	}
	for _, a := range all {
		got, ok := textform.Algorithm(strings.ToUpper(strings.ReplaceAll(a.String(), "_", "-")))
		if !ok || floodgate.Algorithm(got) != a {
			t.Errorf("textform.Algorithm(%q) = %v, %v", a, got, ok)
		}
	}
	if _, ok := textform.Algorithm("leaky"); ok {
		t.Error("unknown algorithm parsed")
	}
	if err := (floodgate.Limit{Rate: 1, Period: time.Second, Algorithm: floodgate.SlidingLog + 1}).Validate(); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("unknown algorithm: error %v", err)
	}
}

func TestLimitString(t *testing.T) {
	for l, want := range map[floodgate.Limit]string{
		floodgate.PerSecond(10):                                   "10/s",
		floodgate.PerMinute(10).WithBurst(20):                     "10/min burst 20",
		floodgate.PerDay(5).AlignedTo(time.UTC):                   "5/d fixed_window in UTC",
		floodgate.PerHour(1).WithAlgorithm(floodgate.SlidingLog):  "1/h sliding_log",
		floodgate.Limit{Rate: 7, Period: 90 * time.Second}:        "7/90s",
		floodgate.Limit{Rate: 7, Period: 1500 * time.Millisecond}: "7/1.5s",
		floodgate.Limit{Rate: 2, Period: 48 * time.Hour}:          "2/2d",
	} {
		if got := l.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

func TestNormalizeKey(t *testing.T) {
	short := strings.Repeat("k", floodgate.MaxKeyLen)
	if got := floodgate.NormalizeKey(short); got != short {
		t.Errorf("a key of MaxKeyLen bytes changed to %q", got)
	}
	long1, long2 := short+"1", short+"2"
	h1, h2 := floodgate.NormalizeKey(long1), floodgate.NormalizeKey(long2)
	if h1 == h2 || !strings.HasPrefix(h1, "sha256:") || len(h1) != len("sha256:")+64 {
		t.Errorf("long keys normalised to %q and %q", h1, h2)
	}
	if floodgate.NormalizeKey(long1) != h1 {
		t.Error("normalisation is not deterministic")
	}
	// A short key that spells the digest of a long one must not share its
	// bucket.
	if got := floodgate.NormalizeKey(h1); got == h1 {
		t.Errorf("the literal key %q normalised to itself, the digest of a long key", h1)
	}
}

func TestRedactKey(t *testing.T) {
	a, b := floodgate.RedactKey("user:alice"), floodgate.RedactKey("user:bob")
	if a == b || a != floodgate.RedactKey("user:alice") || strings.Contains(a, "alice") || len(a) != len("k:")+12 {
		t.Errorf("RedactKey gave %q and %q", a, b)
	}
}

// TestMultiLimitResultDescribesDrivingLimit is the defect seen in review:
// [PerHour(20), PerSecond(10)], 6 at t=0, 9 at t=1s, ask 6. Both limits deny;
// the hourly one, which waits longest, drives, and every field must be its
// own: Remaining 5 (not the per-second limit's 1), its own ResetAfter.
func TestMultiLimitResultDescribesDrivingLimit(t *testing.T) {
	clock := floodgatetest.NewClock(floodgatetest.Start)
	s := memstore.New(memstore.Options{Clock: clock, SweepInterval: -1})
	defer s.Close()
	hour, sec := floodgate.PerHour(20), floodgate.PerSecond(10)
	lim, err := floodgate.New(s, floodgate.Policy{Name: "p", Limits: []floodgate.Limit{hour, sec}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if res, _ := lim.AllowN(ctx, "k", 6); !res.Allowed || res.Limit != sec || res.Index != 1 || res.Remaining != 4 {
		t.Fatalf("first: %+v, want allowed, driven by the per-second limit with 4 left", res)
	}
	clock.Advance(time.Second)
	if res, _ := lim.AllowN(ctx, "k", 9); !res.Allowed || res.Limit != sec || res.Remaining != 1 {
		t.Fatalf("second: %+v, want allowed with 1 left per second", res)
	}
	res, err := lim.AllowN(ctx, "k", 6)
	if err != nil {
		t.Fatal(err)
	}
	// The hourly bucket holds 15 of 20 units of debt at 3 minutes each, less
	// the one second that passed: full again after 15×180s − 1s.
	want := floodgate.Result{Limit: hour, Index: 0, Set: res.Set, Remaining: 5,
		ResetAfter: 15*180*time.Second - time.Second, RetryAfter: 180*time.Second - time.Second,
		Source: memstore.Source, Policy: "p"}
	if res != want {
		t.Errorf("denied: got  %+v\nwant %+v", res, want)
	}
	if res.Set == nil || res.Set.Len() != 2 || res.Set.Limit(res.Index) != res.Limit {
		t.Errorf("Set does not hold the driving limit at Index: %+v", res.Set)
	}
}

// TestClockSteppingBack feeds every algorithm a clock that jumps backwards
// and checks that nothing panics, Remaining stays within [0, capacity], and
// nothing passes that the forward clock had denied.
func TestClockSteppingBack(t *testing.T) {
	for _, l := range []floodgate.Limit{
		floodgate.PerSecond(5), floodgate.PerSecond(5).WithAlgorithm(floodgate.FixedWindow),
		floodgate.PerSecond(5).WithAlgorithm(floodgate.SlidingWindow), floodgate.PerSecond(5).WithAlgorithm(floodgate.SlidingLog),
	} {
		clock := floodgatetest.NewClock(floodgatetest.Start.Add(10 * time.Second))
		s := memstore.New(memstore.Options{Clock: clock, SweepInterval: -1})
		lim, err := floodgate.New(s, floodgate.Policy{Name: "back", Limits: []floodgate.Limit{l}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		lim.AllowN(ctx, "k", 5)
		for _, back := range []time.Duration{-time.Millisecond, -time.Second, -5 * time.Second, -time.Hour} {
			clock.Set(floodgatetest.Start.Add(10 * time.Second).Add(back))
			res, err := floodgate.Allow(ctx, lim, "k")
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed || res.Remaining < 0 || res.Remaining > l.Capacity() {
				t.Errorf("%s: %s back: %+v", l, back, res)
			}
		}
		s.Close()
	}
}

func TestAllowAllRefundsEarlierChecks(t *testing.T) {
	ctx := context.Background()
	clock := floodgatetest.NewClock(floodgatetest.Start)
	s := memstore.New(memstore.Options{Clock: clock, SweepInterval: -1})
	defer s.Close()
	mk := func(name string, l floodgate.Limit) *floodgate.PolicyLimiter {
		lim, err := floodgate.New(s, floodgate.Policy{Name: name, Limits: []floodgate.Limit{l}})
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	global, user, ip := mk("global", floodgate.PerMinute(100)), mk("user", floodgate.PerMinute(10)), mk("ip", floodgate.PerMinute(2))
	chain := func() (floodgate.Result, int, error) {
		return floodgate.AllowAll(ctx,
			floodgate.Check{Limiter: global, Cost: 1},
			floodgate.Check{Limiter: user, Key: "alice", Cost: 1},
			floodgate.Check{Limiter: ip, Key: "10.0.0.1", Cost: 1})
	}
	for i := 0; i < 2; i++ {
		res, drove, err := chain()
		if err != nil || !res.Allowed || res.Policy != "ip" || drove != 2 {
			t.Fatalf("request %d: %+v, check %d, %v; want allowed, driven by the ip limit (check 2)", i, res, drove, err)
		}
	}
	for i := 0; i < 5; i++ {
		res, drove, err := chain()
		if err != nil || res.Allowed || res.Policy != "ip" || drove != 2 {
			t.Fatalf("denied request %d: %+v, check %d, %v", i, res, drove, err)
		}
	}
	// Only the two admitted requests were charged to the earlier links.
	if res, _ := global.AllowN(ctx, "", 0); res.Remaining != 98 {
		t.Errorf("global remaining %d, want 98", res.Remaining)
	}
	if res, _ := user.AllowN(ctx, "alice", 0); res.Remaining != 8 {
		t.Errorf("user remaining %d, want 8", res.Remaining)
	}
}

// hookLimiter runs hook, then denies.
type hookLimiter struct {
	floodgate.Limiter
	hook func()
}

func (h hookLimiter) AllowN(context.Context, string, int64) (floodgate.Result, error) {
	h.hook()
	return floodgate.Result{Source: memstore.Source, Policy: "hook"}, nil
}

// An AllowAll denied by a later link refunds the earlier ones, except
// where a reservation made meanwhile was timed behind the units it would
// give back. Burst 2 at 1/s: the chain charges 1 unit at 0, a waiter
// reserves 2 (due at 1s) before the next link denies; the refund moved the
// bucket back a unit, so that 2 more reserved were due at 2s: 4 units in
// [1s, 2s], where the limit allows 3.
func TestAllowAllRefundKeepsReservations(t *testing.T) {
	ctx := context.Background()
	clock := floodgatetest.NewClock(floodgatetest.Start)
	s := memstore.New(memstore.Options{Clock: clock, SweepInterval: -1})
	defer s.Close()
	user, err := floodgate.New(s, floodgate.Policy{Name: "user", Limits: []floodgate.Limit{floodgate.PerSecond(1).WithBurst(2)}})
	if err != nil {
		t.Fatal(err)
	}
	reserve := func() time.Duration {
		t.Helper()
		r, err := user.ReserveN(ctx, "alice", 2)
		if err != nil || !r.OK {
			t.Fatalf("ReserveN: %+v, %v", r, err)
		}
		return r.Delay
	}
	var first time.Duration
	deny := hookLimiter{hook: func() { first = reserve() }}
	res, drove, err := floodgate.AllowAll(ctx, floodgate.Check{Limiter: user, Key: "alice"}, floodgate.Check{Limiter: deny})
	if err != nil || res.Allowed || drove != 1 {
		t.Fatalf("AllowAll = %+v, check %d, %v; want denied by check 1", res, drove, err)
	}
	if first != time.Second {
		t.Fatalf("the waiter's reservation is due after %s, want 1s", first)
	}
	if second := reserve(); second != 3*time.Second {
		t.Fatalf("a second reservation of 2 is due after %s, want 3s (the first one's 2 units are used from 1s)", second)
	}
}

type failingStore struct{ floodgate.Store }

var errDown = errors.New("store down")

func (failingStore) Decide(context.Context, *algo.Set, string, int64) (algo.Verdict, error) {
	return algo.Verdict{}, errDown
}
func (failingStore) Reserve(context.Context, *algo.Set, string, int64, time.Duration) (algo.Verdict, algo.Ticket, error) {
	return algo.Verdict{}, algo.Ticket{}, errDown
}
func (failingStore) Cancel(context.Context, *algo.Set, string, int64, algo.Ticket) error {
	return errDown
}

func (failingStore) ValidateLimit(floodgate.Limit) error { return nil }

func TestEngineErrorsCarryContext(t *testing.T) {
	lim, err := floodgate.New(failingStore{}, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerSecond(1)}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := floodgate.Allow(context.Background(), lim, "k")
	if !errors.Is(err, errDown) || !strings.Contains(err.Error(), "policy api") || res.Allowed {
		t.Fatalf("got %+v, %v; want a denied zero result and an error naming the policy", res, err)
	}
	if _, err := floodgate.New(nil, floodgate.Policy{Name: "x", Limits: []floodgate.Limit{floodgate.PerSecond(1)}}); !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("New with a nil store: %v", err)
	}
}

type fixedLimiter struct {
	floodgate.Limiter
	res floodgate.Result
}

func (f fixedLimiter) AllowN(context.Context, string, int64) (floodgate.Result, error) {
	return f.res, nil
}

func TestAllowAllPrefersResultsThatReadState(t *testing.T) {
	open := fixedLimiter{res: floodgate.Result{Allowed: true, Source: floodgate.SourceFailOpen, Policy: "remote"}}
	local := fixedLimiter{res: floodgate.Result{Allowed: true, Remaining: 7, Source: memstore.Source, Policy: "local"}}
	for i, order := range [][]floodgate.Check{{{Limiter: open}, {Limiter: local}}, {{Limiter: local}, {Limiter: open}}} {
		res, drove, err := floodgate.AllowAll(context.Background(), order...)
		if err != nil || res.Policy != "local" || drove != 1-i {
			t.Errorf("AllowAll = %+v, check %d, %v; want the memory result (check %d), which read state", res, drove, err, 1-i)
		}
	}
	res, _, _ := floodgate.AllowAll(context.Background(), floodgate.Check{Limiter: open}, floodgate.Check{Limiter: open})
	if res.Source != floodgate.SourceFailOpen || !res.Allowed {
		t.Errorf("all fail-open: %+v", res)
	}
}

// TestHugeRefundNeverCharges refunds far more than any bucket holds: the key
// must end full, not wrapped around into debt.
func TestHugeRefundNeverCharges(t *testing.T) {
	ctx := context.Background()
	for _, l := range []floodgate.Limit{
		floodgate.PerDay(1).WithBurst(3),
		floodgate.PerDay(3).WithAlgorithm(floodgate.FixedWindow),
		floodgate.PerDay(3).WithAlgorithm(floodgate.SlidingWindow),
		floodgate.PerDay(3).WithAlgorithm(floodgate.SlidingLog),
	} {
		s := memstore.New(memstore.Options{Clock: floodgatetest.NewClock(floodgatetest.Start), SweepInterval: -1})
		lim, err := floodgate.New(s, floodgate.Policy{Name: "r", Limits: []floodgate.Limit{l}})
		if err != nil {
			t.Fatal(err)
		}
		lim.AllowN(ctx, "k", 2)
		for _, n := range []int64{213503, math.MaxInt64 / 2, math.MaxInt64} {
			if err := lim.RefundN(ctx, "k", n); err != nil {
				t.Fatal(err)
			}
			if res, _ := lim.AllowN(ctx, "k", 0); res.Remaining != 3 {
				t.Errorf("%s: after refunding %d, remaining %d, want 3 (full)", l, n, res.Remaining)
			}
		}
		s.Close()
	}
}

// refundFails is a Limiter whose refunds fail.
type refundFails struct{ floodgate.Limiter }

func (refundFails) RefundN(context.Context, string, int64) error { return errDown }

// TestRefundErrorsRedactKeys: a refund that fails mid-chain ends up in a
// log line; it must carry the redacted key, never the key itself (a 1 MiB
// API key would be a 1 MiB log line, and a secret in the logs).
func TestRefundErrorsRedactKeys(t *testing.T) {
	s := memstore.New(memstore.Options{SweepInterval: -1})
	defer s.Close()
	mk := func(name string, n int64) floodgate.Limiter {
		lim, err := floodgate.New(s, floodgate.Policy{Name: name, Limits: []floodgate.Limit{floodgate.PerMinute(n)}})
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	secret := "sk_live_" + strings.Repeat("x", 1<<20)
	first, second := refundFails{mk("first", 10)}, mk("second", 1)
	floodgate.Allow(context.Background(), second, "k")
	_, drove, err := floodgate.AllowAll(context.Background(),
		floodgate.Check{Limiter: first, Key: secret, Cost: 1},
		floodgate.Check{Limiter: second, Key: "k", Cost: 1})
	if !errors.Is(err, errDown) || drove != 1 {
		t.Fatalf("AllowAll: check %d, %v; want the refund's error from check 1", drove, err)
	}
	if strings.Contains(err.Error(), "sk_live_") || len(err.Error()) > 200 || !strings.Contains(err.Error(), floodgate.RedactKey(secret)) {
		t.Fatalf("error of %d bytes does not carry just the redacted key: %.200s", len(err.Error()), err)
	}
}

// A Check whose Cost was never set charges one unit; Peek asks whether the
// check would pass, charging nothing, and Look reads the state and passes.
func TestCheckZeroValues(t *testing.T) {
	store := memstore.New(memstore.Options{Clock: floodgatetest.NewClock(floodgatetest.Start), SweepInterval: -1})
	defer store.Close()
	lim, err := floodgate.New(store, floodgate.Policy{Name: "zero", Limits: []floodgate.Limit{floodgate.PerMinute(2)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	peek := floodgate.Check{Limiter: lim, Key: "k", Cost: 1, Peek: true}
	if res, _, err := floodgate.AllowAll(ctx, peek); err != nil || !res.Allowed || res.Remaining != 2 {
		t.Fatalf("peek at a fresh key: %+v, %v", res, err)
	}
	for i, want := range []bool{true, true, false} {
		res, _, err := floodgate.AllowAll(ctx, floodgate.Check{Limiter: lim, Key: "k"})
		if err != nil || res.Allowed != want {
			t.Fatalf("check %d without a Cost: %+v, %v; want allowed %v (one unit each)", i+1, res, err, want)
		}
	}
	c := peek
	res, err := c.Run(ctx)
	if err != nil || res.Allowed || res.RetryAfter != 30*time.Second || c.Result != res {
		t.Fatalf("peek at the exhausted key: %+v, %v; want refused for 30s", res, err)
	}
	// Peek means one thing whatever the Cost: the check as it would be
	// charged, asked without charging. A Cost of 0 is one unit here too.
	bare := floodgate.Check{Limiter: lim, Key: "k", Peek: true}
	if res, err := bare.Run(ctx); err != nil || res.Allowed || res.RetryAfter != 30*time.Second || bare.Units() != 0 {
		t.Fatalf("Check{Peek: true} at the exhausted key: %+v, %v; want refused for 30s, as Cost 1 is, charging nothing", res, err)
	}
	look := floodgate.Check{Limiter: lim, Key: "k", Look: true, Cost: 5, Peek: true}
	if res, err := look.Run(ctx); err != nil || !res.Allowed || res.Remaining != 0 || look.Units() != 0 {
		t.Fatalf("a look at the exhausted key: %+v, %v; want it to pass, showing 0 left", res, err)
	}
	neg := floodgate.Check{Limiter: lim, Key: "k", Cost: -1, Peek: true}
	if _, err := neg.Run(ctx); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Fatalf("a peek at a negative cost: %v; want ErrInvalidCost", err)
	}
	if got := (&floodgate.Check{Cost: 3}).Units(); got != 3 {
		t.Errorf("Units of Cost 3: %d", got)
	}
}
