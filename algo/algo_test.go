package algo_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/algo"
)

// TestZeroTransitionDenies checks that no literal value can make an engine
// panic or allow: the zero Transition denies every cost, and its other
// methods leave state alone.
func TestZeroTransitionDenies(t *testing.T) {
	var z algo.Transition
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, cost := range []int64{0, 1, 5, -1, math.MaxInt64} {
		s, d := z.Step(algo.State{A: now + 5, B: 3}, now, cost)
		if d.Allowed || d.RetryAfter != algo.Never || s != (algo.State{A: now + 5, B: 3}) {
			t.Errorf("zero Step(cost %d) = %+v, %+v; want denied, never, state unchanged", cost, s, d)
		}
		var l algo.Log
		if d := z.CheckLog(&l, now, cost); d.Allowed || d.RetryAfter != algo.Never {
			t.Errorf("zero CheckLog(cost %d) = %+v", cost, d)
		}
		z.ChargeLog(&l, now, cost)
		z.RefundLog(&l, now, cost)
		if l.Expiry() != 0 {
			t.Errorf("zero ChargeLog(cost %d) recorded %d", cost, l.Expiry())
		}
	}
	if s := z.Refund(algo.State{A: 7}, 0, 3); s != (algo.State{A: 7}) {
		t.Errorf("zero Refund changed state to %+v", s)
	}
	if d := algo.Debt(algo.FixedWindow, algo.State{A: 9, B: 2}, 0); d != 18 {
		t.Errorf("Debt of a window of 2 ending in 9ns = %d, want 18", d)
	}
	if _, err := algo.NewSet("p", "", []algo.Transition{z}); !errors.Is(err, algo.ErrInvalid) {
		t.Errorf("NewSet with a zero Transition: error %v, want ErrInvalid", err)
	}
	var zs algo.Set
	if zs.Len() != 0 || zs.Capacity() != 0 {
		t.Errorf("zero Set: Len %d Capacity %d", zs.Len(), zs.Capacity())
	}
}

func mustNew(t *testing.T, s algo.Spec) algo.Transition {
	t.Helper()
	tr, err := algo.New(s)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestIntervalRoundsUpWithinOnePercent: GCRA's interval never makes a limit
// admit more than its rate, and a rate the tick cannot keep within 1% is an
// error rather than a silently different limit.
func TestIntervalRoundsUpWithinOnePercent(t *testing.T) {
	cases := []struct {
		rate   int64
		period time.Duration
		tick   time.Duration
		want   int64 // 0: an error
	}{
		{10, time.Second, time.Nanosecond, 100_000_000},
		{3, time.Second, time.Nanosecond, 333_333_334},
		{3, time.Second, time.Microsecond, 333_334},
		{3000, time.Second, time.Microsecond, 334},
		{500_000, time.Second, time.Microsecond, 2},
		{600_000, time.Second, time.Microsecond, 0},    // 1.67µs → 2µs loses 17%
		{500_001, time.Second, time.Microsecond, 2},    // 1.999996µs: rounding down to 1µs admitted 2×
		{600_000_000, time.Second, time.Nanosecond, 0}, // 1.67ns
		{1_000_000_000, time.Second, time.Nanosecond, 1},
		{1, time.Nanosecond, time.Microsecond, 0},
	}
	for _, c := range cases {
		got, err := algo.Interval(algo.Spec{Kind: algo.GCRA, Rate: c.rate, Period: c.period}, c.tick)
		if c.want == 0 {
			if !errors.Is(err, algo.ErrInvalid) {
				t.Errorf("%d/%s in %s: got %d, %v; want an error", c.rate, c.period, c.tick, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%d/%s in %s: got %d, %v; want %d", c.rate, c.period, c.tick, got, err, c.want)
		}
		// Never faster than the rate: rate intervals span at least a period.
		if got*c.rate*int64(c.tick) < int64(c.period) {
			t.Errorf("%d/%s: interval %d×%s admits more than the rate", c.rate, c.period, got, c.tick)
		}
	}
}

// TestCalendarDaysAcrossDaylightSaving: a day window aligned to a zone ends
// at the next local midnight, whether the day has 23, 24 or 25 hours.
func TestCalendarDaysAcrossDaylightSaving(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	day := mustNew(t, algo.Spec{Kind: algo.FixedWindow, Rate: 3, Period: 24 * time.Hour, Location: ny})
	week := mustNew(t, algo.Spec{Kind: algo.FixedWindow, Rate: 3, Period: 7 * 24 * time.Hour, Location: ny})
	cases := []struct {
		tr         *algo.Transition
		at         time.Time
		start, end time.Time
	}{
		// Fall back: 2026-11-01 has 25 hours.
		{&day, time.Date(2026, 11, 1, 0, 30, 0, 0, ny), time.Date(2026, 11, 1, 0, 0, 0, 0, ny), time.Date(2026, 11, 2, 0, 0, 0, 0, ny)},
		{&day, time.Date(2026, 11, 1, 23, 30, 0, 0, ny), time.Date(2026, 11, 1, 0, 0, 0, 0, ny), time.Date(2026, 11, 2, 0, 0, 0, 0, ny)},
		// Spring forward: 2026-03-08 has 23 hours.
		{&day, time.Date(2026, 3, 8, 0, 30, 0, 0, ny), time.Date(2026, 3, 8, 0, 0, 0, 0, ny), time.Date(2026, 3, 9, 0, 0, 0, 0, ny)},
		{&day, time.Date(2026, 3, 9, 0, 10, 0, 0, ny), time.Date(2026, 3, 9, 0, 0, 0, 0, ny), time.Date(2026, 3, 10, 0, 0, 0, 0, ny)},
		{&day, time.Date(1969, 12, 31, 12, 0, 0, 0, ny), time.Date(1969, 12, 31, 0, 0, 0, 0, ny), time.Date(1970, 1, 1, 0, 0, 0, 0, ny)},
		// Seven-day windows count calendar days since 1970-01-01 (a Thursday).
		{&week, time.Date(2026, 11, 3, 12, 0, 0, 0, ny), time.Date(2026, 10, 29, 0, 0, 0, 0, ny), time.Date(2026, 11, 5, 0, 0, 0, 0, ny)},
	}
	for _, c := range cases {
		s, e := c.tr.Window(c.at.UnixNano())
		if s != c.start.UnixNano() || e != c.end.UnixNano() {
			t.Errorf("%s: window [%s, %s), want [%s, %s)", c.at, time.Unix(0, s).In(ny), time.Unix(0, e).In(ny), c.start, c.end)
		}
	}

	// The reported defect: three requests at 00:30 EDT on the 25-hour day
	// must keep the key denied until the next local midnight, not 23:00.
	st := algo.State{}
	now := time.Date(2026, 11, 1, 0, 30, 0, 0, ny).UnixNano()
	for range 3 {
		var d algo.Decision
		if st, d = day.Step(st, now, 1); !d.Allowed {
			t.Fatal("a fresh day denied")
		}
	}
	late := time.Date(2026, 11, 1, 23, 0, 0, 0, ny).UnixNano()
	_, d := day.Step(st, late, 1)
	if d.Allowed {
		t.Fatal("a fourth request passed at 23:00 of the same local day")
	}
	if want := time.Date(2026, 11, 2, 0, 0, 0, 0, ny).UnixNano() - late; int64(d.RetryAfter) != want {
		t.Errorf("RetryAfter = %s, want %s (next local midnight)", d.RetryAfter, time.Duration(want))
	}
}

// TestCombineDescribesOneLimit: every field of a Verdict comes from the
// transition that drove it.
func TestCombineDescribesOneLimit(t *testing.T) {
	sec := mustNew(t, algo.Spec{Kind: algo.GCRA, Rate: 10, Period: time.Second})
	min := mustNew(t, algo.Spec{Kind: algo.GCRA, Rate: 100, Period: time.Minute})
	hour := mustNew(t, algo.Spec{Kind: algo.GCRA, Rate: 1000, Period: time.Hour})
	set, err := algo.NewSet("p", "", []algo.Transition{sec, min, hour})
	if err != nil {
		t.Fatal(err)
	}
	ds := []algo.Decision{
		{Allowed: true, Remaining: 5, ResetAfter: time.Second},
		{Remaining: 3, ResetAfter: time.Minute, RetryAfter: 2 * time.Second},
		{Remaining: 7, ResetAfter: 30 * time.Second, RetryAfter: 9 * time.Second},
	}
	if got, want := set.Combine(ds, "memory"), (algo.Verdict{Decision: ds[2], Index: 2, Source: "memory"}); got != want {
		t.Errorf("denied: got %+v, want %+v", got, want)
	}
	for i := range ds {
		ds[i].Allowed, ds[i].RetryAfter = true, 0
	}
	if got, want := set.Combine(ds, "redis"), (algo.Verdict{Decision: ds[1], Index: 1, Source: "redis"}); got != want {
		t.Errorf("allowed: got %+v, want %+v", got, want)
	}
	if v := set.Impossible("policy"); v.Allowed || v.RetryAfter != algo.Never || v.Index != 0 {
		t.Errorf("Impossible = %+v", v)
	}
}

// An interval the tick cannot keep is named as it is, not truncated.
func TestIntervalErrorUntruncated(t *testing.T) {
	_, err := algo.Interval(algo.Spec{Kind: algo.GCRA, Rate: 600_000_000, Period: time.Second}, time.Nanosecond)
	if err == nil || !strings.Contains(err.Error(), "interval of 1.67ns") {
		t.Fatalf("%v; want it to name the interval of 1.67ns", err)
	}
	for _, c := range []struct {
		period time.Duration
		rate   int64
		want   string
	}{{time.Second, 10, "100ms"}, {time.Second, 3, "333.333333ms"}, {time.Microsecond, 3, "333ns"}, {10 * time.Nanosecond, 4, "2.5ns"}, {time.Nanosecond, 3, "0.333ns"}} {
		if got := algo.FormatInterval(c.period, c.rate); got != c.want {
			t.Errorf("FormatInterval(%s, %d) = %q, want %q", c.period, c.rate, got, c.want)
		}
	}
}
