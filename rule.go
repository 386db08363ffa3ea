package floodgate

import (
	"math"
	"math/bits"
	"time"
)

// State is the state of one limit for one key: two integers. A is always the
// expiry: the instant (Unix ns) from which the state carries no information
// and is the same as the zero State, so engines can drop it (and set a TTL)
// without knowing the algorithm. A − now is the debt the state carries. B
// belongs to the algorithm: unused by GCRA (whose theoretical arrival time is
// A), the count of a fixed window (which ends at A), the packed counters of a
// sliding window. The zero State is a key never seen: a full bucket.
//
// SlidingLog keeps a Log instead.
type State struct{ A, B int64 }

// A Rule is a validated Limit with its derived constants. Its methods are the
// algorithm's pure state transition: functions of (state, now, cost) with
// integer time in Unix nanoseconds. Engines call them and store the state;
// they never decide anything themselves, so every engine agrees.
type Rule struct {
	Limit

	interval int64 // GCRA: ns per unit
	capacity int64
	span     int64 // GCRA: capacity × interval; windows: period
}

func newRule(l Limit) Rule {
	r := Rule{Limit: l, capacity: l.Capacity()}
	switch l.Algorithm {
	case GCRA, TokenBucket:
		r.interval = int64(l.Interval())
		r.span = r.capacity * r.interval
	default:
		r.span = int64(l.Period)
	}
	return r
}

// Step applies cost units at now to s and returns the next state and the
// decision. A denied request and a cost of zero leave the state as it was
// (the returned state may still drop information that has expired). cost
// must be between 0 and Capacity; callers check that first. Step panics on
// a SlidingLog rule, which keeps a Log: use StepLog.
func (r *Rule) Step(s State, now, cost int64) (State, Decision) {
	switch r.Algorithm {
	case GCRA, TokenBucket:
		return r.stepGCRA(s, now, cost)
	case FixedWindow:
		return r.stepFixed(s, now, cost)
	case SlidingWindow:
		return r.stepSliding(s, now, cost)
	}
	panic("floodgate: Step called on a " + r.Algorithm.String() + " rule")
}

// Refund gives back up to cost units charged earlier, as if they had not
// passed, without going above full capacity. Units charged in a window that
// has already ended are not refunded: that window no longer counts.
func (r *Rule) Refund(s State, now, cost int64) State {
	// No state holds more than a full bucket of charges; the cap also keeps
	// cost × interval from overflowing.
	cost = min(cost, r.capacity)
	switch r.Algorithm {
	case GCRA, TokenBucket:
		return r.refundGCRA(s, now, cost)
	case FixedWindow:
		return r.refundFixed(s, now, cost)
	case SlidingWindow:
		return r.refundSliding(s, now, cost)
	}
	return s
}

// Capacity is the rule's Limit.Capacity, precomputed.
func (r *Rule) Capacity() int64 { return r.capacity }

func dur(ns int64) time.Duration { return time.Duration(ns) }

// nonNeg clamps x at zero. Remaining never goes negative, even if a clock
// stepped backwards between two decisions.
func nonNeg(x int64) int64 { return max(x, 0) }

// mulDiv returns floor(a×b/c) for non-negative a, b and positive c without
// overflowing, saturating at MaxInt64.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// mulDivCeil returns ceil(a×b/c) for non-negative a, b and positive c,
// saturating at MaxInt64.
func mulDivCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, rem := bits.Div64(hi, lo, uint64(c))
	if rem != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}
