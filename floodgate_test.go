package floodgate_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
)

func TestLimitValidate(t *testing.T) {
	valid := []floodgate.Limit{
		floodgate.PerSecond(1), floodgate.PerMinute(100).WithBurst(5), floodgate.PerHour(3).WithAlgorithm(floodgate.TokenBucket),
		floodgate.PerDay(10).AlignedTo(time.UTC), floodgate.Every(time.Nanosecond),
		floodgate.PerSecond(floodgate.MaxSlidingWindowRate).WithAlgorithm(floodgate.SlidingWindow),
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

func TestParseAlgorithm(t *testing.T) {
	for _, a := range []floodgate.Algorithm{floodgate.GCRA, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.SlidingLog} {
		got, err := floodgate.ParseAlgorithm(strings.ToUpper(strings.ReplaceAll(a.String(), "_", "-")))
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a, got, err)
		}
	}
	if _, err := floodgate.ParseAlgorithm("leaky"); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("unknown algorithm: error %v", err)
	}
}

func TestLimitString(t *testing.T) {
	for l, want := range map[floodgate.Limit]string{
		floodgate.PerSecond(10):                                  "10/1s gcra",
		floodgate.PerMinute(10).WithBurst(20):                    "10/1m0s burst 20 gcra",
		floodgate.PerDay(5).AlignedTo(time.UTC):                  "5/24h0m0s fixed_window in UTC",
		floodgate.PerHour(1).WithAlgorithm(floodgate.SlidingLog): "1/1h0m0s sliding_log",
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
}

func TestCombine(t *testing.T) {
	set, err := floodgate.NewLimitSet("p", "", []floodgate.Limit{floodgate.PerSecond(10), floodgate.PerMinute(100), floodgate.PerHour(1000)})
	if err != nil {
		t.Fatal(err)
	}
	ds := []floodgate.Decision{
		{Allowed: true, Remaining: 5, ResetAfter: time.Second},
		{Remaining: 3, ResetAfter: time.Minute, RetryAfter: 2 * time.Second},
		{Remaining: 7, ResetAfter: 30 * time.Second, RetryAfter: 9 * time.Second},
	}
	got := set.Combine(ds, floodgate.SourceMemory)
	want := floodgate.Result{Limit: floodgate.PerHour(1000), Remaining: 3, ResetAfter: time.Minute, RetryAfter: 9 * time.Second, Source: floodgate.SourceMemory, Policy: "p"}
	if got != want {
		t.Errorf("denied: got %+v\nwant %+v", got, want)
	}
	for i := range ds {
		ds[i].Allowed, ds[i].RetryAfter = true, 0
	}
	got = set.Combine(ds, floodgate.SourceRedis)
	want = floodgate.Result{Allowed: true, Limit: floodgate.PerMinute(100), Remaining: 3, ResetAfter: time.Minute, Source: floodgate.SourceRedis, Policy: "p"}
	if got != want {
		t.Errorf("allowed: got %+v\nwant %+v", got, want)
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
			res, err := lim.Allow(ctx, "k")
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
	chain := func() (floodgate.Result, error) {
		return floodgate.AllowAll(ctx,
			floodgate.Check{Limiter: global, Cost: 1},
			floodgate.Check{Limiter: user, Key: "alice", Cost: 1},
			floodgate.Check{Limiter: ip, Key: "10.0.0.1", Cost: 1})
	}
	for i := 0; i < 2; i++ {
		res, err := chain()
		if err != nil || !res.Allowed || res.Policy != "ip" {
			t.Fatalf("request %d: %+v, %v; want allowed, driven by the ip limit", i, res, err)
		}
	}
	for i := 0; i < 5; i++ {
		res, err := chain()
		if err != nil || res.Allowed || res.Policy != "ip" {
			t.Fatalf("denied request %d: %+v, %v", i, res, err)
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

type failingStore struct{ floodgate.Store }

var errDown = errors.New("store down")

func (failingStore) Decide(context.Context, *floodgate.LimitSet, string, int64) (floodgate.Result, error) {
	return floodgate.Result{}, errDown
}

func TestEngineErrorsCarryContext(t *testing.T) {
	lim, err := floodgate.New(failingStore{}, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerSecond(1)}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := lim.Allow(context.Background(), "k")
	if !errors.Is(err, errDown) || !strings.Contains(err.Error(), "policy api") || res.Allowed {
		t.Fatalf("got %+v, %v; want a denied zero result and an error naming the policy", res, err)
	}
	if _, err := floodgate.New(nil, floodgate.Policy{Name: "x", Limits: []floodgate.Limit{floodgate.PerSecond(1)}}); !errors.Is(err, floodgate.ErrInvalidPolicy) {
		t.Errorf("New with a nil store: %v", err)
	}
}

func TestCoarseClockLagsNeverLeads(t *testing.T) {
	c := floodgate.NewCoarseClock(100 * time.Microsecond)
	defer c.Stop()
	prev := int64(math.MinInt64)
	for i := 0; i < 100_000; i++ {
		got := c.UnixNano()
		if real := floodgate.SystemClock.UnixNano(); got > real {
			t.Fatalf("coarse clock %d leads the system clock %d", got, real)
		}
		if got < prev {
			t.Fatalf("coarse clock went back from %d to %d", prev, got)
		}
		prev = got
	}
	c.Stop()
	c.Stop() // idempotent
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
	local := fixedLimiter{res: floodgate.Result{Allowed: true, Remaining: 7, Source: floodgate.SourceMemory, Policy: "local"}}
	for _, order := range [][]floodgate.Check{{{Limiter: open}, {Limiter: local}}, {{Limiter: local}, {Limiter: open}}} {
		res, err := floodgate.AllowAll(context.Background(), order...)
		if err != nil || res.Policy != "local" {
			t.Errorf("AllowAll = %+v, %v; want the memory result, which read state", res, err)
		}
	}
	res, _ := floodgate.AllowAll(context.Background(), floodgate.Check{Limiter: open}, floodgate.Check{Limiter: open})
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
