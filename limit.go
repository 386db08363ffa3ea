package floodgate

import (
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/internal/textform"
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

// String returns the algorithm's configuration name, e.g. "sliding_window".
func (a Algorithm) String() string {
	if int(a) < len(textform.Algorithms) {
		return textform.Algorithms[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

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
func (l Limit) Capacity() int64 { return l.Spec().Capacity() }

// Interval is the time one unit takes to refill under GCRA and TokenBucket:
// Period/Rate rounded up to a nanosecond, so a limit never admits more than
// its rate (Validate rejects a rate whose rounding would lose more than 1%).
// It is zero for the window algorithms and for an invalid limit.
func (l Limit) Interval() time.Duration {
	if l.Algorithm.kind() != algo.GCRA {
		return 0
	}
	iv, err := algo.Interval(l.Spec(), time.Nanosecond)
	if err != nil {
		return 0
	}
	return time.Duration(iv)
}

// kind maps an Algorithm onto the state transition that runs it. It is the
// only place that knows TokenBucket is GCRA.
func (a Algorithm) kind() algo.Kind {
	switch a {
	case GCRA, TokenBucket:
		return algo.GCRA
	case FixedWindow:
		return algo.FixedWindow
	case SlidingWindow:
		return algo.SlidingWindow
	case SlidingLog:
		return algo.SlidingLog
	}
	return algo.Kinds // unknown: algo.New rejects it
}

// Spec returns l in the terms of package algo, for engines that must check
// what they can keep (Store.ValidateLimit).
func (l Limit) Spec() algo.Spec {
	return algo.Spec{Kind: l.Algorithm.kind(), Rate: l.Rate, Period: l.Period, Burst: l.Burst, Location: l.Location}
}

// transition validates l and compiles it.
func (l Limit) transition() (algo.Transition, error) {
	if int(l.Algorithm) >= len(textform.Algorithms) {
		return algo.Transition{}, fmt.Errorf("%w: unknown algorithm %d", ErrInvalidLimit, l.Algorithm)
	}
	// algo's errors name the fields of Limit and wrap ErrInvalidLimit.
	return algo.New(l.Spec())
}

// String formats the limit the way configuration writes it, e.g. "100/min",
// "10/s burst 20", "5/d fixed_window in Europe/Berlin".
func (l Limit) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%s", l.Rate, textform.Period(l.Period))
	if l.Burst != 0 && l.Burst != l.Rate {
		fmt.Fprintf(&b, " burst %d", l.Burst)
	}
	if l.Algorithm != GCRA {
		b.WriteString(" ")
		b.WriteString(l.Algorithm.String())
	}
	if l.Location != nil {
		b.WriteString(" in ")
		b.WriteString(l.Location.String())
	}
	return b.String()
}

// Validate reports whether l can work, with an error wrapping ErrInvalidLimit
// that names the field and what to change.
func (l Limit) Validate() error {
	_, err := l.transition()
	return err
}
