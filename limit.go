package floodgate

import (
	"fmt"
	"strings"
	"time"
)

// An Algorithm decides how a Limit spreads its rate over time.
type Algorithm uint8

const (
	// GCRA is the generic cell rate algorithm: a continuous token bucket kept
	// as one integer, the theoretical arrival time. Units refill smoothly, one
	// every Period/Rate; up to Burst may pass at once. It is the default.
	GCRA Algorithm = iota

	// TokenBucket is a token bucket of Burst tokens refilled at Rate per
	// Period. It admits exactly what GCRA admits (GCRA is the token bucket
	// written as one timestamp), so engines run the same state transition.
	TokenBucket

	// FixedWindow admits Rate units per window of Period. Windows start at
	// multiples of Period since the Unix epoch, or on the wall clock of
	// Location when it is set (calendar minutes, hours, days). Up to 2×Rate
	// may pass around a window boundary.
	FixedWindow

	// SlidingWindow is the two-counter estimate: the count of the previous
	// window weighted by how much of it still overlaps the sliding period,
	// plus the count of the current window. O(1) state, close to exact.
	SlidingWindow

	// SlidingLog keeps the time of every admitted unit of the last Period and
	// admits exactly Rate per any sliding Period. Its state grows with Rate.
	SlidingLog
)

var algorithmNames = [...]string{
	GCRA:          "gcra",
	TokenBucket:   "token_bucket",
	FixedWindow:   "fixed_window",
	SlidingWindow: "sliding_window",
	SlidingLog:    "sliding_log",
}

// String returns the algorithm's configuration name, e.g. "sliding_window".
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// ParseAlgorithm maps a configuration name (as returned by String; case and
// dashes do not matter) to its Algorithm.
func ParseAlgorithm(s string) (Algorithm, error) {
	norm := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	for a, name := range algorithmNames {
		if norm == name {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q (use one of %s)", ErrInvalidLimit, s, strings.Join(algorithmNames[:], ", "))
}

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
)

// A Limit is Rate units per Period.
//
// The zero value is not a valid Limit; build one with PerSecond, PerMinute,
// PerHour, PerDay or Every, or fill the fields and call Validate.
type Limit struct {
	// Rate is how many units may pass per Period. It must be positive.
	Rate int64

	// Period is the time over which Rate applies. It must be positive.
	Period time.Duration

	// Burst is the most units that may pass at once, for GCRA and
	// TokenBucket. Zero means Rate. Window algorithms admit Rate per window;
	// for them Burst must be zero or equal to Rate.
	Burst int64

	// Algorithm selects the state transition; the zero value is GCRA.
	Algorithm Algorithm

	// Location aligns FixedWindow windows to this zone's wall clock, so that
	// a PerDay limit resets at local midnight. Nil means the Unix epoch,
	// which is the UTC calendar. Only FixedWindow accepts a Location.
	Location *time.Location
}

// PerSecond returns a limit of n units per second (burst n, GCRA).
func PerSecond(n int64) Limit { return Limit{Rate: n, Period: time.Second} }

// PerMinute returns a limit of n units per minute (burst n, GCRA).
func PerMinute(n int64) Limit { return Limit{Rate: n, Period: time.Minute} }

// PerHour returns a limit of n units per hour (burst n, GCRA).
func PerHour(n int64) Limit { return Limit{Rate: n, Period: time.Hour} }

// PerDay returns a limit of n units per 24 hours (burst n, GCRA).
func PerDay(n int64) Limit { return Limit{Rate: n, Period: 24 * time.Hour} }

// Every returns a limit of one unit per interval (burst 1, GCRA).
func Every(interval time.Duration) Limit { return Limit{Rate: 1, Period: interval} }

// WithBurst returns l with its Burst set to b.
func (l Limit) WithBurst(b int64) Limit { l.Burst = b; return l }

// WithAlgorithm returns l with its Algorithm set to a.
func (l Limit) WithAlgorithm(a Algorithm) Limit { l.Algorithm = a; return l }

// AlignedTo returns l as a FixedWindow limit whose windows follow loc's wall
// clock: PerDay(n).AlignedTo(berlin) resets at midnight in Berlin.
func (l Limit) AlignedTo(loc *time.Location) Limit {
	l.Algorithm = FixedWindow
	l.Location = loc
	return l
}

// Capacity is the most units that may pass at once: Burst (or Rate when
// Burst is zero) for GCRA and TokenBucket, Rate for window algorithms. A
// cost above Capacity can never pass.
func (l Limit) Capacity() int64 {
	if l.Burst > 0 && (l.Algorithm == GCRA || l.Algorithm == TokenBucket) {
		return l.Burst
	}
	return l.Rate
}

// Interval is the time one unit takes to refill under GCRA and TokenBucket:
// Period/Rate, rounded down to a nanosecond. Rounding down keeps refills on
// time: after k×Period/Rate, at least k units are back.
func (l Limit) Interval() time.Duration {
	if l.Rate <= 0 {
		return 0
	}
	return l.Period / time.Duration(l.Rate)
}

// String formats the limit as in configuration, e.g. "10/1s burst 20 gcra".
func (l Limit) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%s", l.Rate, l.Period)
	if l.Burst != 0 && l.Burst != l.Rate {
		fmt.Fprintf(&b, " burst %d", l.Burst)
	}
	b.WriteString(" ")
	b.WriteString(l.Algorithm.String())
	if l.Location != nil {
		b.WriteString(" in ")
		b.WriteString(l.Location.String())
	}
	return b.String()
}

// Validate reports whether l can work, with an error wrapping ErrInvalidLimit
// that names the field and what to change.
func (l Limit) Validate() error {
	switch {
	case int(l.Algorithm) >= len(algorithmNames):
		return fmt.Errorf("%w: unknown algorithm %d", ErrInvalidLimit, l.Algorithm)
	case l.Rate <= 0:
		return fmt.Errorf("%w: rate must be positive, got %d", ErrInvalidLimit, l.Rate)
	case l.Period <= 0:
		return fmt.Errorf("%w: period must be positive, got %s", ErrInvalidLimit, l.Period)
	case l.Burst < 0:
		return fmt.Errorf("%w: burst must not be negative, got %d (0 means burst = rate)", ErrInvalidLimit, l.Burst)
	case l.Period > MaxSpan:
		return fmt.Errorf("%w: period %s is longer than the supported %s", ErrInvalidLimit, l.Period, MaxSpan)
	case l.Location != nil && l.Algorithm != FixedWindow:
		return fmt.Errorf("%w: a location aligns fixed windows only; %s has none", ErrInvalidLimit, l.Algorithm)
	}
	switch l.Algorithm {
	case GCRA, TokenBucket:
		iv := l.Interval()
		if iv < 1 {
			return fmt.Errorf("%w: %d per %s is more than one unit per nanosecond; use a longer period or a lower rate", ErrInvalidLimit, l.Rate, l.Period)
		}
		if l.Capacity() > int64(MaxSpan/iv) {
			return fmt.Errorf("%w: burst %d × interval %s spans more than %s; lower the burst", ErrInvalidLimit, l.Capacity(), iv, MaxSpan)
		}
	default:
		if l.Burst != 0 && l.Burst != l.Rate {
			return fmt.Errorf("%w: %s admits rate units per window and has no separate burst; set burst to 0 or %d", ErrInvalidLimit, l.Algorithm, l.Rate)
		}
	}
	if l.Algorithm == SlidingWindow && l.Rate > MaxSlidingWindowRate {
		return fmt.Errorf("%w: sliding_window rate %d exceeds %d; use gcra for larger rates", ErrInvalidLimit, l.Rate, MaxSlidingWindowRate)
	}
	if l.Algorithm == SlidingLog && l.Rate > MaxSlidingLogRate {
		return fmt.Errorf("%w: sliding_log keeps one entry per unit and rate %d exceeds %d; use sliding_window or gcra", ErrInvalidLimit, l.Rate, MaxSlidingLogRate)
	}
	return nil
}
