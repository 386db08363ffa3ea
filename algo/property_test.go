package algo_test

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/algo"
)

// model is a reference implementation of one algorithm, written the obvious
// way (a token count, a history of admissions) rather than the way the
// engines do it, so that the two can check each other.
type model interface {
	// allow reports whether cost passes at now and the remaining units
	// after it, charging it when allowed.
	allow(now, cost int64) (bool, int64)
}

// tokenModel is a token bucket that refills continuously, in exact rational
// arithmetic: tokens(t) = min(B, tokens + (t−last)·rate/period).
type tokenModel struct {
	capacity     int64
	rate, period int64
	tokens       *big.Rat
	last         int64
}

func (m *tokenModel) allow(now, cost int64) (bool, int64) {
	if m.tokens == nil {
		m.tokens, m.last = new(big.Rat).SetInt64(m.capacity), now
	}
	refill := new(big.Rat).SetFrac64((now-m.last)*m.rate, m.period)
	m.tokens.Add(m.tokens, refill)
	if capR := new(big.Rat).SetInt64(m.capacity); m.tokens.Cmp(capR) > 0 {
		m.tokens = capR
	}
	m.last = now
	after := new(big.Rat).Sub(m.tokens, new(big.Rat).SetInt64(cost))
	allowed := after.Sign() >= 0
	if allowed && cost > 0 {
		m.tokens = after
	} else {
		after = new(big.Rat).Set(m.tokens)
	}
	floor := new(big.Int).Quo(after.Num(), after.Denom())
	return allowed, floor.Int64()
}

// historyModel keeps every admission and counts them per window.
type historyModel struct {
	alg      algo.Kind
	quota    int64
	period   int64
	at, cost []int64
}

func (m *historyModel) sum(lo, hi int64) int64 { // admissions in [lo, hi)
	var n int64
	for i, t := range m.at {
		if t >= lo && t < hi {
			n += m.cost[i]
		}
	}
	return n
}

func (m *historyModel) allow(now, cost int64) (bool, int64) {
	var used *big.Rat
	switch m.alg {
	case algo.FixedWindow:
		ws := now - now%m.period
		used = new(big.Rat).SetInt64(m.sum(ws, ws+m.period))
	case algo.SlidingWindow:
		ws := now - now%m.period
		prev, cur := m.sum(ws-m.period, ws), m.sum(ws, ws+m.period)
		used = new(big.Rat).SetFrac64(prev*(m.period-(now-ws)), m.period)
		used.Add(used, new(big.Rat).SetInt64(cur))
	case algo.SlidingLog:
		used = new(big.Rat).SetInt64(m.sum(now-m.period+1, now+1))
	}
	left := new(big.Rat).Sub(new(big.Rat).SetInt64(m.quota), used)
	allowed := left.Cmp(new(big.Rat).SetInt64(cost)) >= 0
	if allowed && cost > 0 {
		m.at, m.cost = append(m.at, now), append(m.cost, cost)
		left.Sub(left, new(big.Rat).SetInt64(cost))
	}
	// Remaining is floor(left), never negative.
	if left.Sign() < 0 {
		return allowed, 0
	}
	return allowed, new(big.Int).Quo(left.Num(), left.Denom()).Int64()
}

// engine runs the real transition, keeping state like an engine.
type engine struct {
	rule  *algo.Transition
	state algo.State
	log   algo.Log
}

func (e *engine) step(now, cost int64) algo.Decision {
	if e.rule.Kind() == algo.SlidingLog {
		d := e.rule.CheckLog(&e.log, now, cost)
		if d.Allowed {
			e.rule.ChargeLog(&e.log, now, cost)
		}
		return d
	}
	next, d := e.rule.Step(e.state, now, cost)
	e.state = next
	return d
}

// peek decides cost at now on a copy of the state, charging nothing.
func (e *engine) peek(now, cost int64) algo.Decision {
	if e.rule.Kind() == algo.SlidingLog {
		cp := e.log.Clone()
		return e.rule.CheckLog(cp, now, cost)
	}
	_, d := e.rule.Step(e.state, now, cost)
	return d
}

func randomSpec(rng *rand.Rand, kind algo.Kind) algo.Spec {
	rate := int64(1 + rng.IntN(20))
	// Periods that are whole multiples of the rate in µs keep GCRA's
	// interval exact, so the rational model agrees to the nanosecond.
	period := time.Duration(rate*int64(1+rng.IntN(1000))) * time.Millisecond
	l := algo.Spec{Rate: rate, Period: period, Kind: kind}
	if kind == algo.GCRA && rng.IntN(2) == 0 {
		l.Burst = 1 + rng.Int64N(3*rate)
	}
	return l
}

func newModel(l algo.Spec) model {
	if l.Kind == algo.GCRA {
		return &tokenModel{capacity: l.Capacity(), rate: l.Rate, period: int64(l.Period)}
	}
	return &historyModel{alg: l.Kind, quota: l.Rate, period: int64(l.Period)}
}

// TestAgainstReferenceModels drives every algorithm with random sequences of
// (advance, cost) and compares its verdicts and Remaining with the reference
// model, and checks that RetryAfter is exact: the denied request would still
// be denied a nanosecond before now+RetryAfter, and passes at it.
func TestAgainstReferenceModels(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, alg := range []algo.Kind{algo.GCRA, algo.FixedWindow, algo.SlidingWindow, algo.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			for seed := uint64(0); seed < 100; seed++ {
				rng := rand.New(rand.NewPCG(seed, uint64(alg)))
				l := randomSpec(rng, alg)
				tr, err := algo.New(l)
				if err != nil {
					t.Fatal(err)
				}
				e := &engine{rule: &tr}
				m := newModel(l)
				now := start
				for step := 0; step < 300; step++ {
					now += rng.Int64N(int64(l.Period) / l.Rate * 3)
					cost := rng.Int64N(l.Capacity() + 1)
					if rng.IntN(4) > 0 {
						cost = min(cost, 1)
					}
					d := e.step(now, cost)
					allowed, remaining := m.allow(now, cost)
					where := fmt.Sprintf("seed %d step %d limit %+v: t=+%dns cost %d", seed, step, l, now-start, cost)
					if d.Allowed != allowed || d.Remaining != remaining {
						t.Fatalf("%s: got allowed=%v remaining=%d, model says %v, %d", where, d.Allowed, d.Remaining, allowed, remaining)
					}
					if d.Remaining < 0 || d.Remaining > l.Capacity() {
						t.Fatalf("%s: remaining %d outside [0, %d]", where, d.Remaining, l.Capacity())
					}
					if full := e.peek(now+int64(d.ResetAfter), 0); full.Remaining != l.Capacity() {
						t.Fatalf("%s: at ResetAfter (%s) remaining is %d, not full", where, d.ResetAfter, full.Remaining)
					}
					if d.ResetAfter > 0 && e.peek(now+int64(d.ResetAfter)-1, 0).Remaining == l.Capacity() {
						t.Fatalf("%s: full before ResetAfter (%s)", where, d.ResetAfter)
					}
					if d.Allowed {
						if d.RetryAfter != 0 {
							t.Fatalf("%s: allowed with RetryAfter %s", where, d.RetryAfter)
						}
						continue
					}
					r := int64(d.RetryAfter)
					if r <= 0 {
						t.Fatalf("%s: denied with RetryAfter %s", where, d.RetryAfter)
					}
					if e.peek(now+r-1, cost).Allowed {
						t.Fatalf("%s: passes at RetryAfter−1ns (RetryAfter %s)", where, d.RetryAfter)
					}
					if !e.peek(now+r, cost).Allowed {
						t.Fatalf("%s: still denied at RetryAfter (%s)", where, d.RetryAfter)
					}
				}
			}
		})
	}
}
