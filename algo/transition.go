// Package algo holds floodgate's algorithms as pure state transitions, for
// the authors of engines. A user of floodgate builds Limits and Policies in
// the root package; an engine (package memstore, redisstore, or one of
// yours) receives a Set of Transitions with each decision, keeps their
// State, and calls their methods to decide. Engines never decide anything
// themselves, so every engine agrees.
//
// Every transition is a function of (state, now, cost) in integer Unix
// nanoseconds. Four transitions exist, one per Kind; the root package maps
// each floodgate.Algorithm onto one of them in one place.
package algo

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"time"
)

// A Kind is one of the four state transitions. Engines switch on it to know
// how a limit's state is shaped: GCRA keeps one timestamp, the window kinds
// two integers, SlidingLog a Log.
type Kind uint8

const (
	// GCRA keeps the theoretical arrival time: a continuous token bucket.
	// floodgate's GCRA and TokenBucket algorithms both run it.
	GCRA Kind = iota
	// FixedWindow counts units per window.
	FixedWindow
	// SlidingWindow estimates the last period from two window counters.
	SlidingWindow
	// SlidingLog remembers every admission of the last period.
	SlidingLog
)

// Kinds is how many kinds exist: tables indexed by Kind have this length.
const Kinds = 4

var kindNames = [Kinds]string{"gcra", "fixed_window", "sliding_window", "sliding_log"}

// String returns the kind's name, e.g. "sliding_window".
func (k Kind) String() string {
	if int(k) < Kinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Never is the RetryAfter of a request that can never pass: its cost is
// above the capacity of one of its limits.
const Never = time.Duration(math.MaxInt64)

// Upper bounds that keep every computation in exact int64 arithmetic, in Go
// with nanoseconds and in Redis's Lua with microseconds (whose numbers are
// doubles, exact to 2^53).
const (
	// MaxSlidingWindowRate bounds the per-window count of SlidingWindow,
	// whose state packs two counters into one int64.
	MaxSlidingWindowRate = 1<<31 - 1

	// MaxSlidingLogRate bounds SlidingLog, whose state holds up to Rate
	// entries per key.
	MaxSlidingLogRate = 100_000

	// MaxSpan bounds a bucket's time span (Burst × Period/Rate) and a
	// window's Period: about 104 days, so that spans in microseconds stay
	// exact in Lua and products of counts and spans stay within int64.
	MaxSpan = 9_000_000 * time.Second

	// MaxRounding is how far GCRA's interval may be rounded up from
	// Period/Rate, as a fraction of it: 1/MaxRounding. The interval is a
	// whole number of ticks (nanoseconds here, microseconds in Redis) and is
	// rounded up, so a limit never admits more than its rate; a rate whose
	// interval would lose more than 1% is rejected instead of silently
	// admitting less.
	MaxRounding = 100
)

// ErrInvalid is wrapped by every error New and Interval return. It is
// floodgate.ErrInvalidLimit, so callers branch on either.
var ErrInvalid = errors.New("floodgate: invalid limit")

// A Spec describes a limit in the terms the transitions need.
type Spec struct {
	Kind     Kind
	Rate     int64         // units per Period; must be positive
	Period   time.Duration // must be positive
	Burst    int64         // GCRA: the capacity, 0 meaning Rate; windows: 0 or Rate
	Location *time.Location
}

// Capacity is the most units that may pass at once: Burst (or Rate when
// Burst is zero) for GCRA, Rate for the window kinds.
func (s Spec) Capacity() int64 {
	if s.Burst > 0 && s.Kind == GCRA {
		return s.Burst
	}
	return s.Rate
}

// A Transition is a validated limit with its derived constants. Its methods
// are the algorithm's state transition. The zero Transition is valid and
// admits nothing: every request is denied with RetryAfter Never, so no
// literal value can make an engine panic or allow by mistake.
type Transition struct {
	kind     Kind
	interval int64 // GCRA: ns per unit, Period/Rate rounded up
	capacity int64
	span     int64 // GCRA: capacity × interval; windows: period
	days     int64 // FixedWindow with a location: the period in calendar days
	spec     Spec
}

// Interval returns GCRA's interval for spec in units of tick: Period/Rate
// rounded up to a whole tick, and an error when the rounding would change
// the rate by more than 1/MaxRounding. Engines whose clock ticks more
// coarsely than a nanosecond (Redis: microseconds) use it with their tick.
func Interval(spec Spec, tick time.Duration) (int64, error) {
	if spec.Rate <= 0 || spec.Period <= 0 || tick <= 0 {
		return 0, fmt.Errorf("%w: rate, period and tick must be positive", ErrInvalid)
	}
	// Period/Rate in ticks, exactly: ceil(Period / (Rate × tick)), computed
	// without forming Rate × tick, which may overflow.
	q, rem := bits.Div64(0, uint64(spec.Period), uint64(tick))
	periodTicks := int64(q)
	iv := periodTicks / spec.Rate
	if periodTicks%spec.Rate != 0 || rem != 0 {
		iv++
	}
	// The admitted rate is Period/(iv×tick); it differs from Rate by the
	// excess iv×tick×Rate − Period, relative to Period.
	hi, lo := bits.Mul64(uint64(iv)*uint64(tick), uint64(spec.Rate))
	excess := lo - uint64(spec.Period)
	if hi != 0 || excess > uint64(spec.Period)/MaxRounding {
		return 0, fmt.Errorf("%w: %d per %s needs an interval of %s, which a clock of 1%s ticks cannot keep within 1%%; lower the rate or lengthen the period so that Period/Rate is a whole number of %s or at least %d%s",
			ErrInvalid, spec.Rate, spec.Period, FormatInterval(spec.Period, spec.Rate), tickName(tick), tickName(tick), MaxRounding, tickName(tick))
	}
	return iv, nil
}

// FormatInterval formats period/rate, the time per unit, without
// truncating it to whole nanoseconds: 1s/600000000 is "1.67ns", not "1ns".
// An interval of a microsecond or more keeps nanoseconds, which is exact
// to within one part in a thousand.
func FormatInterval(period time.Duration, rate int64) string {
	if rate <= 0 {
		return "∞"
	}
	if int64(period)%rate == 0 || int64(period)/rate >= 1000 {
		return (period / time.Duration(rate)).String()
	}
	return strconv.FormatFloat(float64(period)/float64(rate), 'g', 3, 64) + "ns"
}

func tickName(tick time.Duration) string {
	switch tick {
	case time.Nanosecond:
		return "ns"
	case time.Microsecond:
		return "µs"
	}
	return tick.String()
}

// New validates spec and returns its Transition, or an error wrapping
// ErrInvalid that names the field and what to change.
func New(spec Spec) (Transition, error) {
	switch {
	case int(spec.Kind) >= Kinds:
		return Transition{}, fmt.Errorf("%w: unknown kind %d", ErrInvalid, spec.Kind)
	case spec.Rate <= 0:
		return Transition{}, fmt.Errorf("%w: rate must be positive, got %d", ErrInvalid, spec.Rate)
	case spec.Period <= 0:
		return Transition{}, fmt.Errorf("%w: period must be positive, got %s", ErrInvalid, spec.Period)
	case spec.Burst < 0:
		return Transition{}, fmt.Errorf("%w: burst must not be negative, got %d (0 means burst = rate)", ErrInvalid, spec.Burst)
	case spec.Period > MaxSpan:
		return Transition{}, fmt.Errorf("%w: period %s is longer than the supported %s", ErrInvalid, spec.Period, MaxSpan)
	case spec.Location != nil && spec.Kind != FixedWindow:
		return Transition{}, fmt.Errorf("%w: a location aligns fixed windows only; %s has none", ErrInvalid, spec.Kind)
	}
	t := Transition{kind: spec.Kind, capacity: spec.Capacity(), spec: spec}
	switch spec.Kind {
	case GCRA:
		iv, err := Interval(spec, time.Nanosecond)
		if err != nil {
			return Transition{}, err
		}
		if t.capacity > int64(MaxSpan)/iv {
			return Transition{}, fmt.Errorf("%w: burst %d × interval %s spans more than %s; lower the burst", ErrInvalid, t.capacity, time.Duration(iv), MaxSpan)
		}
		t.interval = iv
		t.span = t.capacity * iv
		return t, nil
	case SlidingWindow:
		if spec.Rate > MaxSlidingWindowRate {
			return Transition{}, fmt.Errorf("%w: sliding_window rate %d exceeds %d; use gcra for larger rates", ErrInvalid, spec.Rate, MaxSlidingWindowRate)
		}
	case SlidingLog:
		if spec.Rate > MaxSlidingLogRate {
			return Transition{}, fmt.Errorf("%w: sliding_log keeps one entry per unit and rate %d exceeds %d; use sliding_window or gcra", ErrInvalid, spec.Rate, MaxSlidingLogRate)
		}
	}
	if spec.Burst != 0 && spec.Burst != spec.Rate {
		return Transition{}, fmt.Errorf("%w: %s admits rate units per window and has no separate burst; set burst to 0 or %d", ErrInvalid, spec.Kind, spec.Rate)
	}
	t.span = int64(spec.Period)
	if spec.Location != nil && spec.Period%(24*time.Hour) == 0 {
		t.days = int64(spec.Period / (24 * time.Hour))
	}
	return t, nil
}

// Kind returns the transition's kind.
func (r *Transition) Kind() Kind { return r.kind }

// Capacity is the most units that may pass at once. A cost above it can
// never pass.
func (r *Transition) Capacity() int64 { return r.capacity }

// Interval is GCRA's time per unit in nanoseconds (zero for other kinds).
func (r *Transition) Interval() int64 { return r.interval }

// Span is GCRA's bucket span (Capacity × Interval) or a window's period, in
// nanoseconds: the longest a state can carry information.
func (r *Transition) Span() int64 { return r.span }

// Calendar reports whether r is a FixedWindow of whole calendar days in a
// location, whose windows Window computes by the calendar (23 or 25 hours
// long across a daylight-saving change) rather than by the period.
func (r *Transition) Calendar() bool { return r.days > 0 }

// Spec returns the spec the transition was made from. Compositions that
// derive limits from others (a hybrid engine's local share) start from it.
func (r *Transition) Spec() Spec { return r.spec }

// valid reports whether r came from New. The zero Transition denies.
func (r *Transition) valid() bool { return r.capacity > 0 }

// never is the answer of the zero Transition and of a cost above capacity.
var never = Decision{RetryAfter: Never}

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

// A Decision is one limit's answer, the output of a state transition.
type Decision struct {
	Allowed    bool
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
}

// Step applies cost units at now to s and returns the next state and the
// decision. A denied request and a cost of zero leave the state as it was
// (the returned state may still drop information that has expired). A cost
// above Capacity is denied with RetryAfter Never. A SlidingLog transition
// keeps a Log, not a State: Step denies for it; use CheckLog and ChargeLog.
func (r *Transition) Step(s State, now, cost int64) (State, Decision) {
	if cost > r.capacity || cost < 0 || !r.valid() {
		return s, never
	}
	switch r.kind {
	case GCRA:
		return r.stepGCRA(s, now, cost)
	case FixedWindow:
		return r.stepFixed(s, now, cost)
	case SlidingWindow:
		return r.stepSliding(s, now, cost)
	}
	return s, never
}

// Refund gives back up to cost units charged earlier, as if they had not
// passed, without going above full capacity. Units charged in a window that
// has already ended are not refunded: that window no longer counts. A
// token bucket's state is one instant, which cannot tell which charge a
// refund means: it gives back the newest units charged, and nothing while
// the state carries a reservation not yet due (Reserved), whose charge was
// timed behind the units being refunded. An engine refunds a Set only when
// no transition of it is Reserved, since a reservation's charge shows on
// the transition that made it wait; see Reserved for why this never
// over-admits.
func (r *Transition) Refund(s State, now, cost int64) State {
	if cost <= 0 || !r.valid() || r.Reserved(s, now) {
		return s
	}
	// No state holds more than a full bucket of charges; the cap also keeps
	// cost × interval from overflowing.
	cost = min(cost, r.capacity)
	switch r.kind {
	case GCRA:
		return r.refundGCRA(s, now, cost)
	case FixedWindow:
		return r.refundFixed(s, now, cost)
	case SlidingWindow:
		return r.refundSliding(s, now, cost)
	}
	return s
}

// Debt is how much a State of kind k carries at now, for eviction: the
// units it holds back times the time until it expires. Of two entries, the
// one with the smaller Debt loses the least information when it is dropped:
// an expired state has none, an exhausted key the most. GCRA's debt is its
// time until full alone, as its units come back continuously. It needs no
// Transition, so an engine can compare entries by their state alone.
func Debt(k Kind, s State, now int64) int64 {
	left := s.A - now
	if left <= 0 {
		return 0
	}
	switch k {
	case FixedWindow:
		return DebtOf(s.B, left)
	case SlidingWindow:
		// The previous window's count stops counting sooner, so this is an
		// upper bound; it still orders an exhausted key above a fresh one.
		prev, cur := unpackCounts(s.B)
		return DebtOf(prev+cur, left)
	}
	return left
}

// DebtOf is units × left, zero when either is not positive, saturating
// instead of overflowing.
func DebtOf(units, left int64) int64 {
	if units <= 0 || left <= 0 {
		return 0
	}
	return mulSat(units, left)
}

func mulSat(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

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
