package floodgatetest

import (
	"strings"
	"time"
	_ "time/tzdata" // the cases use real zones, whatever the machine has

	fg "github.com/floodgate-go/floodgate"
)

const (
	us = time.Microsecond
	ms = time.Millisecond
	s  = time.Second
)

func one(name string, limits ...fg.Limit) []fg.Policy {
	return []fg.Policy{{Name: name, Limits: limits}}
}

func allow(remaining int64, reset time.Duration) Want {
	return Want{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

// waitFor is a reservation taken: remaining at its instant, reset from now,
// and its wait.
func waitFor(remaining int64, reset, wait time.Duration) Want {
	return Want{Allowed: true, Remaining: remaining, ResetAfter: reset, RetryAfter: wait}
}

// penalty is a refusal by a penalty that ends in d.
func penalty(d time.Duration) Want {
	return Want{ResetAfter: d, RetryAfter: d, Source: fg.SourcePenalty}
}

func deny(remaining int64, reset, retry time.Duration) Want {
	return Want{Remaining: remaining, ResetAfter: reset, RetryAfter: retry}
}

// Cases returns the conformance table. Each case starts at Start on fresh
// state.
func Cases() []Case {
	longA := strings.Repeat("a", 300) + "1"
	longB := strings.Repeat("a", 300) + "2"
	tierOf := func(key string) string {
		if strings.HasPrefix(key, "pro:") {
			return "pro"
		}
		return ""
	}
	ist := time.FixedZone("IST", 5*3600+1800) // UTC+5:30: hours and days start at :30 UTC
	newYork, err := time.LoadLocation("America/New_York")
	if err != nil {
		panic("floodgatetest: " + err.Error()) // time/tzdata is embedded; this cannot fail
	}

	return []Case{
		{
			Name:     "reserve/waiters line up and cancels give back",
			Policies: one("line", fg.PerSecond(10)),
			Steps: []Step{
				{Cost: 10, Want: allow(0, s)},
				{Do: DoReserve, Cost: 1, Want: waitFor(0, 1100*ms, 100*ms)},
				{Do: DoReserve, Cost: 2, Want: waitFor(0, 1300*ms, 300*ms)},
				{Cost: 1, Want: deny(0, 1300*ms, 400*ms)},
				{Do: DoReserve, Cost: 1, MaxWait: time.Hour, Want: waitFor(0, 1400*ms, 400*ms)},
				{Do: DoCancel, Ref: 5},             // the last one: all back
				{Do: DoCancel, Ref: 3},             // now the last one too
				{Cost: 0, Want: allow(0, 1100*ms)}, // as if they never were
				{Do: DoReserve, Cost: 1, Want: waitFor(0, 1200*ms, 200*ms)},
				{Do: DoCancel, Ref: 2},             // step 9 waits behind it: nothing back
				{Cost: 0, Want: allow(0, 1200*ms)}, // step 9's reservation stays where it was
				{Do: DoCancel, Ref: 2},             // cancelling twice does nothing
				{Cost: 0, Want: allow(0, 1200*ms)},
				{Advance: 500 * ms, Do: DoCancel, Ref: 9}, // due at +200ms: nothing back
				{Cost: 0, Want: allow(3, 700*ms)},
				{Do: DoReserve, Cost: 11, Want: Want{RetryAfter: fg.RetryNever, Source: fg.SourcePolicy}},
				{Advance: 600 * ms, Do: DoReserve, Cost: 3, Want: waitFor(6, 400*ms, 0)},
			},
		},
		{
			// A cancel that gave back units a later reservation relied on
			// let a unit in beside two at 3s under a burst of 2.
			Name:     "reserve/a cancel keeps what later reservations rely on",
			Policies: one("behind", fg.PerSecond(1).WithBurst(2)),
			Steps: []Step{
				{Do: DoReserve, Cost: 1, Want: waitFor(1, s, 0)},
				{Do: DoReserve, Cost: 2, Want: waitFor(0, 3*s, s)},
				{Do: DoReserve, Cost: 1, Want: waitFor(0, 4*s, 2*s)},
				{Do: DoCancel, Ref: 2}, // step 3 waits behind it: nothing back
				{Do: DoReserve, Cost: 2, Want: waitFor(0, 6*s, 4*s)},
				{Do: DoCancel, Ref: 3}, // step 5 waits behind it: nothing back
				{Do: DoReserve, Cost: 1, Want: waitFor(0, 7*s, 5*s)},
				{Do: DoCancel, Ref: 7}, // the last: all back
				{Do: DoCancel, Ref: 5}, // now the last: all back
				{Cost: 0, Want: allow(0, 4*s)},
			},
		},
		{
			// A refund that moved the TAT back past a reservation's
			// charge let two units in at 2s beside two at 1s under a
			// burst of 2 at 1/s.
			Name:     "reserve/a refund keeps what later reservations rely on",
			Policies: one("refund", fg.PerSecond(1).WithBurst(2)),
			Steps: []Step{
				{Cost: 1, Want: allow(1, s)},
				{Do: DoReserve, Cost: 2, Want: waitFor(0, 3*s, s)},
				{Do: DoRefund, Cost: 1}, // step 2 is due at 1s: nothing back
				{Do: DoReserve, Cost: 2, Want: waitFor(0, 5*s, 3*s)},
				{Do: DoCancel, Ref: 4},
				{Do: DoCancel, Ref: 2},
				{Do: DoRefund, Cost: 1}, // nothing is due later: all back
				{Cost: 0, Want: allow(2, 0)},
				{Cost: 2, Want: allow(0, 2*s)},
				{Do: DoReserve, Cost: 1, Want: waitFor(0, 3*s, s)},
				{Advance: s, Do: DoRefund, Cost: 1}, // step 10 is due: all back
				{Cost: 0, Want: allow(1, s)},
			},
		},
		{
			// The reservation waits for the second limit only; the first
			// is charged as of 1s but not a span ahead. Refunding it
			// alone would still move it back below that charge.
			Name: "reserve/a refund waits for every limit's reservations",
			Policies: []fg.Policy{
				{Name: "refund2", Limits: []fg.Limit{fg.PerSecond(10).WithBurst(20), fg.PerSecond(1).WithBurst(2)}},
				{Name: "refund2", Limits: []fg.Limit{fg.PerSecond(10).WithBurst(20)}},
			},
			Steps: []Step{
				{Cost: 1, Want: Want{Allowed: true, Remaining: 1, ResetAfter: s, Limit: 1}},
				{Do: DoReserve, Cost: 2, Want: Want{Allowed: true, ResetAfter: 3 * s, RetryAfter: s, Limit: 1}},
				{Do: DoRefund, Cost: 1}, // step 2 is due at 1s: nothing back on either limit
				{Policy: 1, Cost: 0, Want: allow(8, 1200*ms)},
				{Do: DoCancel, Ref: 2},
				{Do: DoRefund, Cost: 1}, // nothing is due later: all back
				{Policy: 1, Cost: 0, Want: allow(20, 0)},
				{Cost: 0, Want: Want{Allowed: true, Remaining: 2, Limit: 1}},
			},
		},
		{
			Name:     "reserve/beyond the deadline charges nothing",
			Policies: one("deadline", fg.PerMinute(6)),
			Steps: []Step{
				{Cost: 6, Want: allow(0, time.Minute)},
				{Do: DoReserve, Cost: 1, MaxWait: 5 * s, Want: Want{ResetAfter: time.Minute, RetryAfter: 10 * s}},
				{Do: DoReserve, Cost: 1, MaxWait: 5 * s, Want: Want{ResetAfter: time.Minute, RetryAfter: 10 * s}},
				{Do: DoReserve, Cost: 2, MaxWait: time.Hour, Want: waitFor(0, 80*s, 20*s)},
				{Advance: 20 * s, Cost: 1, Want: deny(0, 60*s, 10*s)},
			},
		},
		{
			Name: "reserve/every limit of a policy waits",
			Policies: []fg.Policy{
				{Name: "multi", Limits: []fg.Limit{fg.PerMinute(20), fg.PerSecond(10)}},
				{Name: "multi", Limits: []fg.Limit{fg.PerMinute(20)}},
			},
			Steps: []Step{
				{Cost: 10, Want: Want{Allowed: true, ResetAfter: s, Limit: 1}},
				{Do: DoReserve, Cost: 1, Want: Want{Allowed: true, ResetAfter: 1100 * ms, RetryAfter: 100 * ms, Limit: 1}},
				// The minute's limit makes this one wait 3s; the second's
				// limit is charged as of then.
				{Do: DoReserve, Cost: 10, Want: waitFor(0, 63*s, 3*s)},
				{Policy: 1, Cost: 0, Want: allow(0, 63*s)},
				{Do: DoCancel, Ref: 2}, // a later one relies on it: nothing back
				{Policy: 1, Cost: 0, Want: allow(0, 63*s)},
				{Do: DoCancel, Ref: 3}, // the last: all back, on both limits
				{Policy: 1, Cost: 0, Want: allow(9, 33*s)},
				{Cost: 0, Want: Want{Allowed: true, ResetAfter: 1100 * ms, Limit: 1}},
			},
		},
		{
			Name:     "reserve/a window reserves only now",
			Policies: one("window", fg.Limit{Rate: 2, Period: time.Minute, Algorithm: fg.FixedWindow}),
			Steps: []Step{
				{Do: DoReserve, Cost: 2, Want: waitFor(0, 60*s, 0)},
				{Do: DoReserve, Cost: 1, MaxWait: time.Hour, Want: deny(0, 60*s, 60*s)},
				{Advance: 60 * s, Do: DoReserve, Cost: 1, Want: waitFor(1, 60*s, 0)},
			},
		},
		{
			Name:     "gcra/exact remaining and retry",
			Policies: one("gcra", fg.PerSecond(10)),
			Steps: []Step{
				{Cost: 1, Want: allow(9, 100*ms)},
				{Cost: 1, Want: allow(8, 200*ms)},
				{Cost: 1, Want: allow(7, 300*ms)},
				{Cost: 7, Want: allow(0, s)},
				{Cost: 1, Want: deny(0, s, 100*ms)},
				{Advance: 99 * ms, Cost: 1, Want: deny(0, 901*ms, ms)},
				{Advance: 999 * us, Cost: 1, Want: deny(0, 900*ms+1*us, 1*us)},
				{Advance: 1 * us, Cost: 1, Want: allow(0, s)},
				{Advance: 550 * ms, Cost: 0, Want: allow(5, 450*ms)},
			},
		},
		{
			Name:     "gcra/burst above rate",
			Policies: one("burst", fg.PerSecond(1).WithBurst(3)),
			Steps: []Step{
				{Cost: 3, Want: allow(0, 3*s)},
				{Cost: 1, Want: deny(0, 3*s, s)},
				{Advance: 2 * s, Cost: 2, Want: allow(0, 3*s)},
				{Advance: 10 * s, Cost: 0, Want: allow(3, 0)},
			},
		},
		{
			Name:     "gcra/denied requests consume nothing",
			Policies: one("nothing", fg.PerSecond(2)),
			Steps: []Step{
				{Cost: 2, Want: allow(0, s)},
				{Cost: 1, Want: deny(0, s, 500*ms)},
				{Cost: 1, Want: deny(0, s, 500*ms)},
				{Advance: 100 * ms, Cost: 1, Want: deny(0, 900*ms, 400*ms)},
				{Advance: 400 * ms, Cost: 1, Want: allow(0, s)},
			},
		},
		{
			Name:     "gcra/cost zero peeks",
			Policies: one("peek", fg.PerMinute(60)),
			Steps: []Step{
				{Cost: 5, Want: allow(55, 5*s)},
				{Cost: 0, Want: allow(55, 5*s)},
				{Cost: 0, Want: allow(55, 5*s)},
				{Advance: 2 * s, Cost: 0, Want: allow(57, 3*s)},
			},
		},
		{
			Name:     "gcra/cost above burst never passes",
			Policies: one("huge", fg.PerSecond(10)),
			Steps: []Step{
				{Cost: 11, Want: Want{RetryAfter: fg.RetryNever, Source: fg.SourcePolicy}},
				{Cost: 10, Want: allow(0, s)},
				{Cost: 11, Want: Want{RetryAfter: fg.RetryNever, Source: fg.SourcePolicy}},
			},
		},
		{
			Name:     "gcra/negative cost is an error",
			Policies: one("neg", fg.PerSecond(10)),
			Steps: []Step{
				{Cost: -1, Want: Want{Err: fg.ErrInvalidCost}},
				{Cost: 1, Want: allow(9, 100*ms)},
			},
		},
		{
			Name:     "token bucket",
			Policies: one("tb", fg.Limit{Rate: 5, Period: s, Burst: 10, Algorithm: fg.TokenBucket}),
			Steps: []Step{
				{Cost: 10, Want: allow(0, 2*s)},
				{Cost: 1, Want: deny(0, 2*s, 200*ms)},
				{Advance: s, Cost: 5, Want: allow(0, 2*s)},
				{Advance: 400 * ms, Cost: 0, Want: allow(2, 1600*ms)},
			},
		},
		{
			Name:     "keys are independent",
			Policies: one("keys", fg.PerMinute(1)),
			Steps: []Step{
				{Key: "alice", Cost: 1, Want: allow(0, time.Minute)},
				{Key: "bob", Cost: 1, Want: allow(0, time.Minute)},
				{Key: "alice", Cost: 1, Want: deny(0, time.Minute, time.Minute)},
			},
		},
		{
			Name:     "long keys stay distinct",
			Policies: one("long", fg.PerMinute(1)),
			Steps: []Step{
				{Key: longA, Cost: 1, Want: allow(0, time.Minute)},
				{Key: longB, Cost: 1, Want: allow(0, time.Minute)},
				{Key: longA, Cost: 1, Want: deny(0, time.Minute, time.Minute)},
				{Key: longB, Cost: 1, Want: deny(0, time.Minute, time.Minute)},
			},
		},
		{
			Name: "multi-limit is all or nothing",
			Policies: []fg.Policy{
				{Name: "multi", Limits: []fg.Limit{fg.PerMinute(100), fg.PerSecond(2)}},
				{Name: "multi", Limits: []fg.Limit{fg.PerMinute(100)}}, // the first limit on its own
			},
			Steps: []Step{
				// Every field is the driving limit's: the per-second one
				// is full again after 1s, whatever the minute limit says.
				{Cost: 2, Want: Want{Allowed: true, Remaining: 0, ResetAfter: s, Limit: 1}},
				{Cost: 1, Want: Want{Remaining: 0, ResetAfter: s, RetryAfter: 500 * ms, Limit: 1}},
				// The denied request charged neither limit: 98 of 100 are left.
				{Policy: 1, Cost: 0, Want: allow(98, 1200*ms)},
				{Advance: 500 * ms, Cost: 1, Want: Want{Allowed: true, Remaining: 0, ResetAfter: s, Limit: 1}},
				{Policy: 1, Cost: 0, Want: allow(97, 1300*ms)},
			},
		},
		{
			Name:     "multi-limit: longest wait drives",
			Policies: one("wait", fg.PerSecond(10), fg.PerMinute(12)),
			Steps: []Step{
				{Cost: 10, Want: Want{Allowed: true, Remaining: 0, ResetAfter: s, Limit: 0}},
				{Advance: s, Cost: 3, Want: Want{Remaining: 2, ResetAfter: 49 * s, RetryAfter: 4 * s, Limit: 1}},
				{Cost: 2, Want: Want{Allowed: true, Remaining: 0, ResetAfter: 59 * s, Limit: 1}},
				{Cost: 1, Want: Want{Remaining: 0, ResetAfter: 59 * s, RetryAfter: 4 * s, Limit: 1}},
			},
		},
		{
			Name: "overrides",
			Policies: []fg.Policy{{Name: "ov", Limits: []fg.Limit{fg.PerMinute(1)},
				Overrides: map[string][]fg.Limit{"vip": {fg.PerMinute(3)}}}},
			Steps: []Step{
				{Cost: 1, Want: allow(0, time.Minute)},
				{Cost: 1, Want: deny(0, time.Minute, time.Minute)},
				{Key: "vip", Cost: 1, Want: allow(2, 20*s)},
				{Key: "vip", Cost: 1, Want: allow(1, 40*s)},
				{Key: "vip", Cost: 1, Want: allow(0, time.Minute)},
				{Key: "vip", Cost: 1, Want: deny(0, time.Minute, 20*s)},
			},
		},
		{
			Name: "tiers",
			Policies: []fg.Policy{{Name: "tiers", Limits: []fg.Limit{fg.PerMinute(1)},
				Tiers: map[string][]fg.Limit{"pro": {fg.PerMinute(5)}}, TierOf: tierOf}},
			Steps: []Step{
				{Key: "free:1", Cost: 1, Want: allow(0, time.Minute)},
				{Key: "free:1", Cost: 1, Want: deny(0, time.Minute, time.Minute)},
				{Key: "pro:1", Cost: 1, Want: allow(4, 12*s)},
				{Key: "pro:1", Cost: 4, Want: allow(0, time.Minute)},
				{Key: "pro:1", Cost: 1, Want: deny(0, time.Minute, 12*s)},
			},
		},
		{
			Name:     "refund and reset",
			Policies: one("refund", fg.PerMinute(10)),
			Steps: []Step{
				{Cost: 5, Want: allow(5, 30*s)},
				{Do: DoRefund, Cost: 3},
				{Cost: 0, Want: allow(8, 12*s)},
				{Do: DoRefund, Cost: 100},
				{Cost: 0, Want: allow(10, 0)},
				{Cost: 10, Want: allow(0, time.Minute)},
				{Do: DoReset},
				{Cost: 1, Want: allow(9, 6*s)},
			},
		},
		{
			Name:     "fixed window",
			Policies: one("fixed", fg.PerMinute(3).WithAlgorithm(fg.FixedWindow)),
			Steps: []Step{
				{Advance: 20 * s, Cost: 1, Want: allow(2, 40*s)},
				{Cost: 2, Want: allow(0, 40*s)},
				{Cost: 1, Want: deny(0, 40*s, 40*s)},
				{Advance: 40*s - us, Cost: 1, Want: deny(0, us, us)},
				{Advance: us, Cost: 1, Want: allow(2, time.Minute)},
				{Advance: time.Minute, Cost: 0, Want: allow(3, 0)},
				{Cost: 3, Want: allow(0, time.Minute)},
				{Do: DoRefund, Cost: 1},
				{Cost: 0, Want: allow(1, time.Minute)},
			},
		},
		{
			Name:     "fixed window aligned to a zone's days",
			Policies: one("daily", fg.PerDay(2).AlignedTo(ist)),
			Steps: []Step{
				// Start is 05:30 in IST: the IST day ends 18h30m later.
				{Cost: 1, Want: allow(1, 18*time.Hour+30*time.Minute)},
				{Cost: 1, Want: allow(0, 18*time.Hour+30*time.Minute)},
				{Cost: 1, Want: deny(0, 18*time.Hour+30*time.Minute, 18*time.Hour+30*time.Minute)},
				{Advance: 18*time.Hour + 30*time.Minute, Cost: 1, Want: allow(1, 24*time.Hour)},
			},
		},
		{
			// Days have 25 and 23 hours across New York's daylight-saving
			// changes (2026-11-01 and 2027-03-14); a day window still
			// ends at the next local midnight, never an hour off.
			Name:     "fixed window of calendar days across daylight saving",
			Policies: one("dst", fg.PerDay(3).AlignedTo(newYork)),
			Steps: []Step{
				// 2026-11-01 00:30 EDT (04:30 UTC); the day ends at 05:00 UTC the next day.
				{Advance: time.Date(2026, 11, 1, 4, 30, 0, 0, time.UTC).Sub(Start), Cost: 3, Want: allow(0, 24*time.Hour+30*time.Minute)},
				// 23:00 EST the same local day: still denied, for one more hour.
				{Advance: 23*time.Hour + 30*time.Minute, Cost: 1, Want: deny(0, time.Hour, time.Hour)},
				{Advance: time.Hour, Cost: 1, Want: allow(2, 24*time.Hour)},
				// 2027-03-14 00:30 EST (05:30 UTC); the 23-hour day ends at 04:00 UTC the next day.
				{Advance: time.Date(2027, 3, 14, 5, 30, 0, 0, time.UTC).Sub(time.Date(2026, 11, 2, 5, 0, 0, 0, time.UTC)), Cost: 3, Want: allow(0, 22*time.Hour+30*time.Minute)},
				{Advance: 22*time.Hour + 30*time.Minute - us, Cost: 1, Want: deny(0, us, us)},
				// Local midnight of the new day: not an hour later.
				{Advance: us, Cost: 1, Want: allow(2, 24*time.Hour)},
			},
		},
		{
			Name:     "fixed window aligned to a zone's hours",
			Policies: one("hourly", fg.PerHour(1).AlignedTo(ist)),
			Steps: []Step{
				{Cost: 1, Want: allow(0, 30*time.Minute)},
				{Advance: 30 * time.Minute, Cost: 1, Want: allow(0, time.Hour)},
			},
		},
		{
			Name:     "sliding window",
			Policies: one("sliding", fg.PerMinute(10).WithAlgorithm(fg.SlidingWindow)),
			Steps: []Step{
				{Advance: 30 * s, Cost: 10, Want: allow(0, 90*s)},
				// 11 > 10 in this window; in the next, 10 × (60−e)/60 + 1 ≤ 10 from e = 6 s.
				{Cost: 1, Want: deny(0, 90*s, 36*s)},
				{Advance: 36*s - us, Cost: 1, Want: deny(0, 54*s+us, us)},
				{Advance: us, Cost: 1, Want: allow(0, 114*s)},
				{Cost: 1, Want: deny(0, 114*s, 6*s)},
				{Advance: 6 * s, Cost: 0, Want: allow(1, 108*s)},
				{Do: DoRefund, Cost: 1},
				{Cost: 0, Want: allow(2, 48*s)},
				{Advance: 48 * s, Cost: 0, Want: allow(10, 0)},
			},
		},
		{
			Name:     "sliding log",
			Policies: one("log", fg.PerMinute(3).WithAlgorithm(fg.SlidingLog)),
			Steps: []Step{
				{Cost: 1, Want: allow(2, time.Minute)},
				{Advance: 10 * s, Cost: 1, Want: allow(1, time.Minute)},
				{Advance: 10 * s, Cost: 1, Want: allow(0, time.Minute)},
				{Cost: 1, Want: deny(0, time.Minute, 40*s)},
				{Cost: 2, Want: deny(0, time.Minute, 50*s)},
				{Advance: 40*s - us, Cost: 1, Want: deny(0, 20*s+us, us)},
				{Advance: us, Cost: 1, Want: allow(0, time.Minute)},
				{Do: DoRefund, Cost: 1}, // drops the admission just made: the newest left is from +20s
				{Cost: 0, Want: allow(1, 20*s)},
				{Advance: 2 * time.Minute, Cost: 0, Want: allow(3, 0)},
			},
		},
		{
			Name: "mixed algorithms in one policy",
			Policies: []fg.Policy{
				{Name: "mixed", Limits: []fg.Limit{fg.PerSecond(5), fg.PerMinute(6).WithAlgorithm(fg.FixedWindow), fg.PerMinute(7).WithAlgorithm(fg.SlidingLog)}},
				{Name: "mixed", Limits: []fg.Limit{fg.PerSecond(5)}},
			},
			Steps: []Step{
				{Cost: 5, Want: Want{Allowed: true, Remaining: 0, ResetAfter: s, Limit: 0}},
				{Advance: s, Cost: 2, Want: Want{Remaining: 1, ResetAfter: 59 * s, RetryAfter: 59 * s, Limit: 1}},
				{Policy: 1, Cost: 0, Want: allow(5, 0)},
				{Cost: 1, Want: Want{Allowed: true, Remaining: 0, ResetAfter: 59 * s, Limit: 1}},
			},
		},
		{
			Name: "penalty/starts on a denial, lasts its time, charges nothing",
			Policies: []fg.Policy{
				{Name: "pen", Limits: []fg.Limit{fg.PerMinute(3)}, Penalty: 15 * time.Minute},
				{Name: "pen", Limits: []fg.Limit{fg.PerMinute(3)}}, // the limit's own state
			},
			Steps: []Step{
				{Cost: 1, Want: allow(2, 20*s)},
				{Cost: 1, Want: allow(1, 40*s)},
				{Cost: 1, Want: allow(0, time.Minute)},
				{Cost: 1, Want: penalty(15 * time.Minute)}, // the denial starts the penalty
				{Advance: time.Minute, Policy: 1, Cost: 0, Want: allow(3, 0)},
				{Cost: 1, Want: penalty(14 * time.Minute)}, // the limit is full, the key is still out
				{Cost: 0, Want: penalty(14 * time.Minute)}, // a look is refused too
				{Policy: 1, Cost: 0, Want: allow(3, 0)},    // refusals charged nothing
				{Key: "other", Cost: 1, Want: allow(2, 20*s)},
				{Advance: 14*time.Minute - us, Cost: 1, Want: penalty(us)}, // not extended by refusals
				{Advance: us, Cost: 1, Want: allow(2, 20*s)},
			},
		},
		{
			Name: "penalty/one per policy name on a store, lifted by reset",
			Policies: []fg.Policy{
				{Name: "pen2", Limits: []fg.Limit{fg.PerSecond(1)}, Penalty: time.Hour},
				{Name: "pen2", Limits: []fg.Limit{fg.PerSecond(1)}, Penalty: time.Hour},
			},
			Steps: []Step{
				{Cost: 1, Want: allow(0, s)},
				{Policy: 1, Cost: 1, Want: penalty(time.Hour)},
				{Advance: 10 * s, Cost: 1, Want: penalty(time.Hour - 10*s)},
				{Policy: 1, Do: DoReset},
				{Cost: 1, Want: allow(0, s)},
				{Cost: 1, Want: penalty(time.Hour)}, // a new denial, a new penalty
			},
		},
		{
			Name:     "penalty/impossible costs and reservations start none",
			Policies: []fg.Policy{{Name: "pen3", Limits: []fg.Limit{fg.PerSecond(2)}, Penalty: time.Minute}},
			Steps: []Step{
				{Cost: 3, Want: Want{RetryAfter: fg.RetryNever, Source: fg.SourcePolicy}},
				{Cost: 2, Want: allow(0, s)},
				{Do: DoReserve, Cost: 1, MaxWait: 100 * ms, Want: Want{ResetAfter: s, RetryAfter: 500 * ms}},
				{Cost: 1, Want: penalty(time.Minute)},
				{Do: DoReserve, Cost: 1, MaxWait: time.Hour, Want: penalty(time.Minute)},
				{Advance: time.Minute, Do: DoReserve, Cost: 1, MaxWait: time.Hour, Want: waitFor(1, 500*ms, 0)},
			},
		},
	}
}
