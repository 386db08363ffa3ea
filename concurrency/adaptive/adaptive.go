// Package adaptive holds concurrency.Controllers: limits that find
// themselves from the latency and outcome of the work they admit, so that a
// slowing resource sheds the excess instead of queueing it.
//
// Gradient compares the latency of recent work with the resource's latency
// when nothing queues (measured now and then at a low limit) and moves the
// limit by their ratio, as Envoy's adaptive concurrency filter and
// Netflix's concurrency-limits do. AIMD grows the limit by one per limit's
// worth of successes and cuts it by a factor on a drop (a timeout, a 503),
// as TCP does.
//
//	ctl, _ := adaptive.NewGradient(adaptive.GradientOptions{})
//	lim, _ := concurrency.New(concurrency.NewLocal(), concurrency.Options{Controller: ctl})
//
// A Controller belongs to one Limiter and measures one resource: give each
// upstream its own.
package adaptive

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/concurrency"
)

// ErrInvalid reports invalid options.
var ErrInvalid = errors.New("adaptive: invalid options")

// Defaults for GradientOptions' zero values.
const (
	DefaultInitial       = 20
	DefaultMin           = 3
	DefaultMax           = 1000
	DefaultTolerance     = 1.1
	DefaultSmoothing     = 0.2
	DefaultWindow        = 100 * time.Millisecond
	DefaultMinSamples    = 10
	DefaultProbeInterval = 30 * time.Second
	DefaultProbeSamples  = 25
	DefaultProbeAfter    = 5
)

// GradientOptions configures a Gradient. The zero value gives the defaults.
type GradientOptions struct {
	// Initial is the limit until the first window is measured; 0 means
	// DefaultInitial.
	Initial int

	// Min and Max bound the limit; 0 means DefaultMin and DefaultMax. Min
	// is also the limit while the baseline latency is measured.
	Min, Max int

	// Tolerance is how far above the baseline the latency of a window may
	// be before the limit falls: 1.1 lets work take 10% longer than it
	// does when nothing queues. 0 means DefaultTolerance; it must be at
	// least 1.
	Tolerance float64

	// Smoothing weighs a rise of the limit against the limit before it
	// (0 < Smoothing <= 1; 0 means DefaultSmoothing). Falls take effect at
	// once: shedding late is what the limit is for.
	Smoothing float64

	// Window is how often the limit is recomputed, from the samples of the
	// window; a window of fewer than MinSamples samples is extended. 0
	// means DefaultWindow and DefaultMinSamples.
	Window     time.Duration
	MinSamples int

	// ProbeInterval is how often the baseline is measured again: for
	// ProbeSamples samples the limit is Min, so that nothing queues and the
	// latency measured is the resource's own. The first measurement starts
	// at once. A resource that turns faster is learnt at the next probe
	// (until then the limit lets its work queue up to Tolerance times the
	// old baseline); one that turns slower, after ProbeAfter windows of
	// shedding. 0 means DefaultProbeInterval and DefaultProbeSamples.
	ProbeInterval time.Duration
	ProbeSamples  int

	// ProbeAfter is how many windows in a row may shed with a gradient of
	// 0.6 or less (latency more than Tolerance/0.6 times the baseline), or
	// with the limit already near Min (at most twice Min) and latency
	// still above Tolerance × baseline, before the baseline is measured
	// again, whatever ProbeInterval says, and the limit restarts from
	// where it stood before those windows. Queueing that the limit causes
	// ends once the limit has fallen; latency that stays high however far
	// the limit falls is a resource that turned slower, and without a new
	// baseline the limit would sit near Min until the next probe. 0 means
	// DefaultProbeAfter; -1 never probes early.
	ProbeAfter int

	// Clock times the windows; nil means clock.System.
	Clock clock.Clock
}

// Gradient is a concurrency.Controller whose limit follows the ratio of the
// baseline latency to the latency measured in each window:
//
//	gradient = clamp(Tolerance × baseline / latency, 0.5, 1)
//	limit    = limit × gradient + √limit
//
// The square root is headroom, so that the limit keeps probing upwards
// while latency stays at the baseline. A window in which fewer than half
// the slots were used does not raise the limit: the work was not limited
// by it, and its latency says nothing about more.
type Gradient struct {
	o GradientOptions

	mu        sync.Mutex
	limit     float64
	baseline  float64 // ns; 0 until measured
	probing   int     // samples left in the current probe; > 0 while probing
	probeSum  float64
	probeN    int
	nextProbe int64

	winStart int64
	winSum   float64
	winN     int
	winMaxIn int
	winDrops int
	intLimit int
	shedding int     // windows in a row that shed (see ProbeAfter)
	before   float64 // the limit before those windows
}

var _ concurrency.Controller = (*Gradient)(nil)

// NewGradient returns a Gradient.
func NewGradient(o GradientOptions) (*Gradient, error) {
	if err := limitRange(&o.Initial, &o.Min, &o.Max); err != nil {
		return nil, err
	}
	orDefault(&o.MinSamples, DefaultMinSamples)
	orDefault(&o.ProbeSamples, DefaultProbeSamples)
	orDefault(&o.ProbeAfter, DefaultProbeAfter)
	if o.Tolerance == 0 {
		o.Tolerance = DefaultTolerance
	}
	if o.Smoothing == 0 {
		o.Smoothing = DefaultSmoothing
	}
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	if o.Clock == nil {
		o.Clock = clock.System
	}
	switch {
	case !(o.Tolerance >= 1) || math.IsInf(o.Tolerance, 0):
		return nil, fmt.Errorf("%w: Tolerance %v must be a number of at least 1", ErrInvalid, o.Tolerance)
	case !(o.Smoothing > 0 && o.Smoothing <= 1):
		return nil, fmt.Errorf("%w: Smoothing %v must be in (0, 1]", ErrInvalid, o.Smoothing)
	case o.Window < 0 || o.ProbeInterval < 0 || o.MinSamples < 0 || o.ProbeSamples < 0:
		return nil, fmt.Errorf("%w: Window, ProbeInterval, MinSamples and ProbeSamples must not be negative", ErrInvalid)
	case o.ProbeAfter < -1:
		return nil, fmt.Errorf("%w: ProbeAfter %d must be positive, or -1 for never", ErrInvalid, o.ProbeAfter)
	}
	g := &Gradient{o: o, limit: float64(o.Initial)}
	g.startProbe()
	g.winStart = o.Clock.UnixNano()
	return g, nil
}

// Limit implements concurrency.Controller.
func (g *Gradient) Limit() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.intLimit
}

// Baseline returns the latency measured at the last probe, 0 before the
// first one ends.
func (g *Gradient) Baseline() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return time.Duration(g.baseline)
}

func (g *Gradient) startProbe() {
	g.probing, g.probeSum, g.probeN, g.shedding = g.o.ProbeSamples, 0, 0, 0
	g.intLimit = g.o.Min
}

// Observe implements concurrency.Controller.
func (g *Gradient) Observe(s concurrency.Sample) {
	now := g.o.Clock.UnixNano()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.probing > 0 {
		// Only samples of work started at the probe's limit measure the
		// resource alone; the rest may have queued.
		if s.Outcome == concurrency.Success && s.InFlight <= g.o.Min {
			g.probeSum += float64(s.RTT)
			g.probeN++
			g.probing--
		}
		if g.probing == 0 {
			g.baseline = g.probeSum / float64(g.probeN)
			g.nextProbe = now + int64(g.o.ProbeInterval)
			g.intLimit = int(g.limit)
			g.resetWindow(now)
		}
		return
	}
	g.winSum += float64(s.RTT)
	g.winN++
	g.winMaxIn = max(g.winMaxIn, s.InFlight)
	if s.Outcome == concurrency.Dropped {
		g.winDrops++
	}
	if now-g.winStart < int64(g.o.Window) || g.winN < g.o.MinSamples {
		return
	}
	latency := g.winSum / float64(g.winN)
	// At a steady overload the limit settles where latency is above the
	// baseline by the √limit headroom (a gradient of 1 - 1/√limit: 0.75 at
	// a limit of 16), so a window above Tolerance alone says nothing new.
	// A gradient at or below staleGradient, window after window, or
	// latency that stays high once the limit has fallen near Min, where
	// this limit's own queue is short, does: the resource turned slower
	// than its baseline.
	if ratio := g.o.Tolerance * g.baseline / latency; ratio < 1 && (ratio <= staleGradient || g.limit <= float64(2*g.o.Min)) {
		if g.shedding == 0 {
			g.before = g.limit
		}
		g.shedding++
	} else {
		g.shedding = 0
	}
	grad := min(1, max(0.5, g.o.Tolerance*g.baseline/latency))
	next := g.limit*grad + math.Sqrt(g.limit)
	if g.winDrops > 0 {
		// Drops are overload whatever the latency says.
		next = min(next, 0.9*g.limit)
	}
	switch {
	case next < g.limit:
	case 2*g.winMaxIn < int(g.limit):
		next = g.limit
	default:
		next = g.limit*(1-g.o.Smoothing) + next*g.o.Smoothing
	}
	g.limit = min(float64(g.o.Max), max(float64(g.o.Min), next))
	g.intLimit = int(g.limit)
	g.resetWindow(now)
	switch {
	case g.o.ProbeAfter > 0 && g.shedding >= g.o.ProbeAfter:
		// The windows that shed measured a slower resource against the
		// old baseline: the limit they left says nothing. Start again
		// from the limit before them, which the new baseline corrects
		// within a few windows if it is too high.
		g.limit = max(g.limit, g.before)
		g.startProbe()
	case now >= g.nextProbe:
		g.startProbe()
	}
}

// staleGradient is the gradient below which a window counts towards
// ProbeAfter whatever the limit: work taking more than Tolerance/0.6 (1.8×
// at the default Tolerance) its baseline.
const staleGradient = 0.6

func (g *Gradient) resetWindow(now int64) {
	g.winStart, g.winSum, g.winN, g.winMaxIn, g.winDrops = now, 0, 0, 0, 0
}

// Defaults for AIMDOptions' zero values.
const (
	DefaultBackoff = 0.9
)

// AIMDOptions configures an AIMD. The zero value gives the defaults.
type AIMDOptions struct {
	// Initial, Min and Max are as in GradientOptions (0 means
	// DefaultInitial, DefaultMin, DefaultMax).
	Initial, Min, Max int

	// Backoff multiplies the limit on a drop (0 < Backoff < 1; 0 means
	// DefaultBackoff).
	Backoff float64

	// Timeout, when positive, counts a success that took longer as a drop:
	// the latency above which the work is queueing. Without it only
	// Dropped outcomes cut the limit. A resource that turns slower than
	// Timeout on its own is learnt, not held at Min for good: a success
	// counts as a drop only when it also took more than one and a half
	// times the resource's own latency, the moving average of work that
	// ran with at most Min in flight (where nothing of this limit's
	// queues). Set Timeout to about one and a half times the latency of
	// the resource when nothing queues.
	Timeout time.Duration

	// Clock spaces the cuts; nil means clock.System.
	Clock clock.Clock
}

// AIMD is a concurrency.Controller that adds one to the limit per limit's
// worth of successes (one per round of the slots, as TCP's congestion
// avoidance does) and multiplies it by Backoff on a drop. Drops closer
// together than the latency of the work cut once: they are one overload
// seen by several holders. Successes of work that used fewer than half the
// slots do not raise the limit.
type AIMD struct {
	o AIMDOptions

	mu      sync.Mutex
	limit   int
	acc     int
	lastCut int64
	cut     bool    // lastCut is set
	own     float64 // ns: moving average of work at <= Min in flight; 0 until seen
}

// ownWeight is the weight of a sample in AIMD's moving average of the
// resource's own latency: about the last ten samples at Min in flight.
const ownWeight = 0.2

var _ concurrency.Controller = (*AIMD)(nil)

// NewAIMD returns an AIMD.
func NewAIMD(o AIMDOptions) (*AIMD, error) {
	if err := limitRange(&o.Initial, &o.Min, &o.Max); err != nil {
		return nil, err
	}
	if o.Backoff == 0 {
		o.Backoff = DefaultBackoff
	}
	if o.Clock == nil {
		o.Clock = clock.System
	}
	switch {
	case !(o.Backoff > 0 && o.Backoff < 1):
		return nil, fmt.Errorf("%w: Backoff %v must be in (0, 1)", ErrInvalid, o.Backoff)
	case o.Timeout < 0:
		return nil, fmt.Errorf("%w: Timeout %s is negative; use 0 for none", ErrInvalid, o.Timeout)
	}
	return &AIMD{o: o, limit: o.Initial}, nil
}

// Limit implements concurrency.Controller.
func (a *AIMD) Limit() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.limit
}

// Observe implements concurrency.Controller.
func (a *AIMD) Observe(s concurrency.Sample) {
	now := a.o.Clock.UnixNano()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.o.Timeout > 0 && s.Outcome == concurrency.Success && s.InFlight <= a.o.Min {
		if a.own == 0 {
			a.own = float64(s.RTT)
		} else {
			a.own += ownWeight * (float64(s.RTT) - a.own)
		}
	}
	drop := s.Outcome == concurrency.Dropped ||
		(a.o.Timeout > 0 && s.RTT > a.o.Timeout && float64(s.RTT) > 1.5*a.own)
	if drop {
		if a.cut && now-a.lastCut < int64(s.RTT) {
			return
		}
		a.lastCut, a.cut = now, true
		a.limit = max(a.o.Min, int(float64(a.limit)*a.o.Backoff))
		a.acc = 0
		return
	}
	if 2*s.InFlight < a.limit {
		return
	}
	if a.acc++; a.acc >= a.limit {
		a.acc = 0
		a.limit = min(a.o.Max, a.limit+1)
	}
}

// limitRange gives Initial, Min and Max their defaults where they are 0 and
// checks that they bound each other, for every controller: the limit starts
// at Initial and moves between Min and Max.
func limitRange(initial, lo, hi *int) error {
	orDefault(initial, DefaultInitial)
	orDefault(lo, DefaultMin)
	orDefault(hi, DefaultMax)
	if *lo < 1 || *hi < *lo || *initial < *lo || *initial > *hi {
		return fmt.Errorf("%w: limits must satisfy 1 <= Min <= Initial <= Max; got Min %d, Initial %d, Max %d", ErrInvalid, *lo, *initial, *hi)
	}
	return nil
}

// orDefault sets *v to d when it is 0, an option left unset.
func orDefault(v *int, d int) {
	if *v == 0 {
		*v = d
	}
}
