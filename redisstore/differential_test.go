package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestMatchesMemstore drives the Redis engine and the in-memory engine with
// the same random sequences on the same pinned clock and requires identical
// Results: the Lua twins of the algorithms must agree with the Go ones on
// every path, including refunds, resets, peeks and a clock that steps back.
// The one difference allowed is the rounding of a retry that falls between
// microseconds.
func TestMatchesMemstore(t *testing.T) {
	client := standalone(t)
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	deadline := time.Now().Add(4 * time.Second)
	seq, decisions := 0, 0
	defer func() { t.Logf("%d sequences, %d decisions compared", seq, decisions) }()
	for ; seq < 400 && time.Now().Before(deadline); seq++ {
		p := randomPolicy(rng, fmt.Sprintf("p%d", seq))
		clock := floodgatetest.NewClock(floodgatetest.Start.Add(time.Duration(rng.Int64N(int64(48*time.Hour/time.Microsecond))) * time.Microsecond))
		mem := memstore.New(memstore.Options{Clock: clock, SweepInterval: -1})
		red, err := New(client, Options{Prefix: fmt.Sprintf("diff%d:", seq), Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		lm, err := floodgate.New(mem, p)
		if err != nil {
			t.Fatalf("%s: %v", describe(p), err)
		}
		lr, err := floodgate.New(red, p)
		if err != nil {
			t.Fatalf("%s: %v", describe(p), err)
		}
		capacity := lm.LimitsFor("a").Compiled().Capacity()
		var log []string
		for step := 0; step < 60; step++ {
			clock.Advance(randomAdvance(rng, p))
			key := []string{"a", "b"}[rng.IntN(2)]
			switch n := rng.IntN(20); {
			case n == 0:
				log = append(log, fmt.Sprintf("reset %s", key))
				if err := lm.Reset(ctx, key); err != nil {
					t.Fatal(err)
				}
				if err := lr.Reset(ctx, key); err != nil {
					t.Fatal(err)
				}
			case n <= 2:
				cost := rng.Int64N(capacity + 1)
				log = append(log, fmt.Sprintf("refund %s %d", key, cost))
				if err := lm.RefundN(ctx, key, cost); err != nil {
					t.Fatal(err)
				}
				if err := lr.RefundN(ctx, key, cost); err != nil {
					t.Fatal(err)
				}
			default:
				cost := rng.Int64N(capacity + 2)
				if rng.IntN(3) == 0 {
					cost = min(cost, 1)
				}
				want, err := lm.AllowN(ctx, key, cost)
				if err != nil {
					t.Fatal(err)
				}
				got, err := lr.AllowN(ctx, key, cost)
				if err != nil {
					t.Fatal(err)
				}
				decisions++
				log = append(log, fmt.Sprintf("t=%s allow %s %d → %+v", clock.Now().Sub(floodgatetest.Start), key, cost, want))
				if want.Source == memstore.Source {
					want.Source = Source
				}
				// Each limiter has its own sets; the rest must agree.
				if got.Set == nil || want.Set == nil || got.Set.Len() != want.Set.Len() || got.Set.Variant() != want.Set.Variant() {
					t.Fatalf("sets differ: redis %+v, memory %+v", got.Set, want.Set)
				}
				want.Set = got.Set
				// A sliding window's retry may fall between microseconds;
				// Redis's clock admits the request at the next one.
				if want.RetryAfter != floodgate.RetryNever {
					want.RetryAfter = (want.RetryAfter + time.Microsecond - 1).Truncate(time.Microsecond)
				}
				if got != want {
					t.Fatalf("%s\nsteps:\n%s\nredis: %+v\nmemory: %+v", describe(p), joinLines(log), got, want)
				}
			}
		}
		red.Close()
		mem.Close()
	}
}

func joinLines(lines []string) string {
	s := ""
	for _, l := range lines {
		s += "  " + l + "\n"
	}
	return s
}

func describe(p floodgate.Policy) string {
	s := "policy " + p.Name + ":"
	for _, l := range p.Limits {
		s += " [" + l.String() + "]"
	}
	return s
}

// randomPolicy returns one to three limits of random algorithms whose
// numbers are exact in microseconds.
func randomPolicy(rng *rand.Rand, name string) floodgate.Policy {
	ist := time.FixedZone("IST", 5*3600+1800)
	west := time.FixedZone("W", -7*3600)
	intervals := []time.Duration{time.Millisecond, 2500 * time.Microsecond, 100 * time.Millisecond, time.Second, 7 * time.Second}
	periods := []time.Duration{time.Second, 5 * time.Second, time.Minute, time.Hour, 24 * time.Hour}
	n := 1 + rng.IntN(3)
	p := floodgate.Policy{Name: name}
	for range n {
		alg := floodgate.Algorithm(rng.IntN(5))
		rate := 1 + rng.Int64N(12)
		var l floodgate.Limit
		switch alg {
		case floodgate.GCRA, floodgate.TokenBucket:
			iv := intervals[rng.IntN(len(intervals))]
			l = floodgate.Limit{Rate: rate, Period: iv * time.Duration(rate), Algorithm: alg}
			if rng.IntN(2) == 0 {
				l.Burst = 1 + rng.Int64N(3*rate)
			}
		default:
			l = floodgate.Limit{Rate: rate, Period: periods[rng.IntN(len(periods))], Algorithm: alg}
			if alg == floodgate.FixedWindow && rng.IntN(2) == 0 {
				l.Location = []*time.Location{ist, west}[rng.IntN(2)]
			}
		}
		p.Limits = append(p.Limits, l)
	}
	return p
}

// randomAdvance moves the clock by nothing, a microsecond, a fraction of a
// limit's period or a few periods, and now and then back.
func randomAdvance(rng *rand.Rand, p floodgate.Policy) time.Duration {
	period := p.Limits[rng.IntN(len(p.Limits))].Period
	switch rng.IntN(10) {
	case 0:
		return 0
	case 1:
		return time.Microsecond
	case 2:
		return -time.Duration(rng.Int64N(int64(period/time.Microsecond)/4+1)) * time.Microsecond
	case 3:
		return time.Duration(rng.Int64N(int64(3*period/time.Microsecond))) * time.Microsecond
	}
	return time.Duration(rng.Int64N(int64(period/time.Microsecond)/3+1)) * time.Microsecond
}

// TestCalendarDayAcrossDST decides a set of one calendar-day window in a
// zone with daylight saving, the single-window path of the script, across
// both changes of 2026 in Berlin: the days of 23 and 25 hours run from
// midnight to midnight, on the Redis engine as on the in-memory one.
func TestCalendarDayAcrossDST(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	client := standalone(t)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		first time.Time // the first request, in the day of the change
		reset time.Duration
	}{
		{"spring", time.Date(2026, 3, 29, 0, 30, 0, 0, berlin), 22*time.Hour + 30*time.Minute},
		{"autumn", time.Date(2026, 10, 25, 0, 30, 0, 0, berlin), 24*time.Hour + 30*time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := floodgatetest.NewClock(c.first)
			mem := memstore.New(memstore.Options{Clock: clock, SweepInterval: -1})
			red := newStore(t, client, Options{Prefix: "dst-" + c.name + ":", Clock: clock})
			limit := floodgate.PerDay(3).AlignedTo(berlin)
			lm, lr := floodgatetest.NewLimiter(t, mem, "day", limit), floodgatetest.NewLimiter(t, red, "day", limit)
			next := time.Date(c.first.Year(), c.first.Month(), c.first.Day()+1, 0, 0, 0, 0, berlin)
			steps := []struct {
				at   time.Time
				cost int64
			}{
				{c.first, 1}, {c.first, 2}, {c.first.Add(time.Hour), 1}, {next.Add(-time.Microsecond), 1},
				{next, 0}, {next, 3}, {next.Add(time.Minute), 1},
			}
			for i, st := range steps {
				clock.Set(st.at)
				want, err := lm.AllowN(ctx, "k", st.cost)
				if err != nil {
					t.Fatal(err)
				}
				got, err := lr.AllowN(ctx, "k", st.cost)
				if err != nil {
					t.Fatal(err)
				}
				if got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.ResetAfter != want.ResetAfter || got.RetryAfter != want.RetryAfter {
					t.Fatalf("step %d at %s cost %d: redis %+v, memory %+v", i, st.at, st.cost, got, want)
				}
				if i == 0 && (!got.Allowed || got.ResetAfter != c.reset) {
					t.Fatalf("first request: %+v; want allowed, reset after %s (the day's length less half an hour)", got, c.reset)
				}
			}
		})
	}
}
