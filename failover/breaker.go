package failover

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/internal/deadline"
)

// BreakerState is the state of a Breaker.
type BreakerState int32

const (
	// Closed: calls are made. Calls and failures are
	// counted over a sliding window; when enough calls were made and
	// enough of them failed, the breaker opens.
	Closed BreakerState = iota

	// Open: calls are not made (ErrOpen); a Guard's owner's failure policy
	// decides at once.
	// When the back-off ends, the next call becomes the probe.
	Open

	// HalfOpen: one probe is in flight. Other calls are not made until it
	// answers: success closes the breaker, failure opens it again with a
	// doubled back-off.
	HalfOpen
)

var stateNames = [...]string{Closed: "closed", Open: "open", HalfOpen: "half_open"}

// String returns "closed", "open" or "half_open".
func (s BreakerState) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// A Transition is one change of a breaker's state, with why it happened,
// for a log line. Reason is a sentence such as "12 of 20 calls failed
// within 10s (60% >= 50%); last: ..." or "probe answered".
type Transition struct {
	From, To BreakerState
	Reason   string
}

// Defaults for BreakerOptions' zero values.
const (
	// DefaultTimeout is how long a call to the remote store may take
	// before it counts as slow. A local Redis answers in well under a
	// millisecond; 100 ms is far above its slow tail (a fork, a failover).
	DefaultTimeout = 100 * time.Millisecond

	// DefaultSlowTimeout bounds one call to the remote store: a call
	// unanswered by then fails. It is well above DefaultTimeout because a
	// machine whose CPUs are saturated delays every call (the caller, the
	// client library, Redis itself) by tens or hundreds of milliseconds
	// without anything being down; such a call is slow, and its answer is
	// still the right decision. A dead or hung Redis costs at most this
	// per call, and only until the breaker opens.
	DefaultSlowTimeout = 500 * time.Millisecond

	// DefaultFailureRate is the share of failed calls within the window
	// that opens the breaker: a transient stall that fails a few calls of
	// many leaves it closed, a Redis that is gone fails them all.
	DefaultFailureRate = 0.5

	// UnreachableInRow is how many calls in a row that could not connect
	// to the remote store open the breaker, whatever MinCalls is (unless
	// it is lower, or negative): a refused connection is not a slow
	// machine, and waiting does not answer it. A timeout between two of
	// them does not break the row; any other outcome does.
	UnreachableInRow = 3

	// DefaultMinCalls is how many calls the window must hold before its
	// failure rate counts, so that two failures of the first three calls
	// after a quiet spell do not open the breaker.
	DefaultMinCalls = 20

	// DefaultWindow is how far back calls are counted.
	DefaultWindow = 10 * time.Second

	// DefaultBackoff is how long the breaker stays open before its first
	// probe: short, so that a breaker opened by a stall is closed again
	// before callers notice, while a remote store that stays down costs one
	// probe per back-off.
	DefaultBackoff = 200 * time.Millisecond

	// DefaultMaxBackoff caps the back-off, which doubles with every failed
	// probe. It is also the longest a recovered remote store waits to be
	// used again.
	DefaultMaxBackoff = 2 * time.Second
)

// BreakerOptions configures a Breaker, and a Guard through its Breaker.
// The zero value gives the defaults.
type BreakerOptions struct {
	// Name names the Breaker's calls made with Do in the *Error given to
	// OnError (its Policy field): an upstream, say. A Guard's own calls
	// name their policy instead.
	Name string

	// Timeout is how long a call to the remote store may take before it
	// counts as slow (Stats.Slow). A slow call is still waited for, up to
	// SlowTimeout, and its answer used: on a machine whose CPUs are
	// saturated every call is late, and that is not an outage. 0 means
	// DefaultTimeout; NoTimeout, never slow.
	Timeout time.Duration

	// SlowTimeout bounds every call to the remote store: a call unanswered
	// by then fails with ErrTimeout and counts against the breaker. 0
	// means DefaultSlowTimeout, or Timeout if that is larger; set it equal
	// to Timeout to cut every call off at Timeout. The Breaker enforces it
	// itself, so it holds even for a call that ignores its context (a
	// go-redis client without ContextTimeoutEnabled waits for its
	// ReadTimeout, 3 s by default); a timeout of the store's own is only a
	// backstop. A call cut off may still complete in the background: the
	// remote store may charge a request the policy also decided on, which
	// errs strict by one request. NoTimeout bounds no call: each is made on
	// the caller's goroutine, bounded by its own context alone, and the
	// Breaker arms no timer for it (an HTTP round trip, say).
	SlowTimeout time.Duration

	// FailureRate is the share of failed calls, among those of the last
	// Window, that opens the breaker: (0, 1]. 0 means DefaultFailureRate.
	FailureRate float64

	// MinCalls is how many calls the last Window must hold before its
	// failure rate opens the breaker; as many failures in a row that are
	// not timeouts (errors of a closed server) open it too, and so do
	// UnreachableInRow calls in a row that could not connect (a refused
	// or reset connection, an unknown host), or MinCalls of them if that
	// is fewer. 0 means DefaultMinCalls; a negative
	// value disables the breaker, so every call is tried and a long outage
	// costs a timeout per call. A service that makes fewer than MinCalls
	// calls per Window never opens it: lower MinCalls (or lengthen Window)
	// for one that is quiet.
	MinCalls int

	// Window is how far back calls are counted, in tenths: the rate is
	// that of the calls of the last nine to ten tenths. 0 means
	// DefaultWindow.
	Window time.Duration

	// Backoff is how long the breaker stays open before it lets one probe
	// through. 0 means DefaultBackoff. Each failed probe doubles it, up to
	// MaxBackoff; a successful probe resets it. Back-offs are shortened at
	// random by up to a fifth so that instances do not probe in step.
	Backoff time.Duration

	// MaxBackoff caps the back-off. 0 means DefaultMaxBackoff, or Backoff
	// if that is larger.
	MaxBackoff time.Duration

	// OnError, if set, is called with every failure of the remote store
	// (errors and timeouts, not calls skipped while the breaker is open
	// and not calls whose caller gave up): a Guard's name their operation
	// and policy, Do's name OpCall and Name. It runs on the caller's
	// goroutine, on the request path, so it must be quick and safe for
	// concurrent use: count a metric labelled with Error.Policy and
	// Error.Op, log with a rate limit.
	OnError func(*Error)

	// OnStateChange, if set, is called after every transition of the
	// breaker, on the goroutine that caused it and outside any lock. A
	// transition may be reported just after a newer one, so use the
	// arguments for logs and State for gauges.
	OnStateChange func(from, to BreakerState)

	// OnTransition, if set, is called after every transition of the
	// breaker, as OnStateChange is (and after it), with the reason for it:
	// what a log line needs.
	OnTransition func(Transition)

	// ContextBound promises that each call returns soon after the call's
	// context is done, whatever its backend does: it waits for Redis with a
	// select on ctx.Done(), not in a blocking read (redisstore.Store keeps
	// this promise). The Breaker then makes the call directly on the
	// caller's goroutine; otherwise on a goroutine of its own, so that the
	// timeout holds even for a call that ignores its context. The direct
	// call saves a goroutine and a few allocations per call. It is an
	// option, not something the Breaker finds out, because a wrapper around
	// the store could not keep the promise visible.
	ContextBound bool

	// DeadlineBound promises more of a Guard's remote store than
	// ContextBound, which it implies: each call returns soon after its
	// context's deadline passes even when the context's Done channel has
	// not closed, because the store bounds its own wait by ctx.Deadline()
	// (redisstore.Store keeps this promise: it arms a timer of its own).
	// The Guard then times each call by giving it the slow timeout as a
	// deadline on the caller's context, where it would otherwise derive a
	// context with context.WithTimeout: a timer, a registration with the
	// caller's context and a channel per call, which cost more than the
	// rest of a batched Redis decision's Go side. Calls of Breaker.Do are
	// not concerned: they still get a derived context.
	DeadlineBound bool

	// Clock times the breaker's back-off. Nil means clock.System.
	// The per-call timeout always uses the real clock.
	Clock clock.Clock
}

// GuardOptions configures a Guard: they are the options of its Breaker.
type GuardOptions = BreakerOptions

// NoTimeout is the BreakerOptions.SlowTimeout (and Timeout) that bounds no
// call: the call's own context does.
const NoTimeout time.Duration = math.MaxInt64

// OpCounts counts events by operation.
type OpCounts struct {
	Decide, Refund, Reset uint64
}

// Stats is a snapshot of a Breaker's (or Guard's) counters, for metrics.
// Counters only grow.
type Stats struct {
	State    BreakerState // the breaker's state now
	Opened   uint64       // times the failure rule opened the breaker
	Probes   uint64       // probes let through by an open breaker
	Calls    uint64       // calls made to the remote store
	Skipped  uint64       // calls not made because the breaker was open
	Failures OpCounts     // calls that failed or timed out, by operation (Do's with Decide's)
	Timeouts uint64       // of those, the calls cut off by SlowTimeout
	Slow     uint64       // calls answered, later than Timeout
	Canceled uint64       // calls abandoned because the caller's context ended
}

// windowSlots is how many slots the breaker's window is cut into: the
// failure rate is that of the calls of the last windowSlots slots, the
// current one included, so the window it looks at is between nine and ten
// tenths of BreakerOptions.Window long.
const windowSlots = 10

// A slot counts the calls and failures of one tenth of the window.
type slot struct {
	epoch atomic.Int64 // which tenth of time it counts (clock / slot length); written last
	calls atomic.Int64
	fails atomic.Int64
}

// A Breaker is a circuit breaker around calls to a remote backend (a
// Redis, an HTTP upstream): Do makes a call under two timeouts, counts how
// it ended, and stops making calls while the backend looks down. A Guard is
// a Breaker over a floodgate.Store; anything else calls Do.
//
// The rules, all of them this type's: a call is a failure when it returns
// an error, panics or is cut off by SlowTimeout; it is not when its error
// is an answer about this call only (Refusal), and it counts for nothing
// when the caller's context ended first. The breaker opens when, over the
// last window, at least minCalls calls were made and at least a rate of
// them failed; or when minCalls calls in a row failed within the window
// with an error other than a timeout; or when UnreachableInRow of them in
// a row could not even connect (see unreachable). A burst of errors in a
// busy service is then a small rate and keeps it closed, and so is a
// starved machine, whose calls time out together; a dead remote store,
// which fails every call, opens it after minCalls calls, however many
// successes of the seconds before still fill the window; and a remote
// store whose host refuses the connection, which no amount of waiting
// answers, opens it after UnreachableInRow calls. Once open, it lets one
// probe through after a back-off that doubles with every failed probe; a
// probe answered closes it.
//
// The closed state, which is where every healthy call runs, costs a
// clock read and an atomic add per call; the slot's counters are reset by
// the first call of each tenth of the window, under mu. Transitions take
// mu too, which is never held across a call. While open, deciding whether
// to skip costs a clock read and an atomic load.
//
// A Breaker is safe for concurrent use.
type Breaker struct {
	name       string
	bounded    bool          // BreakerOptions.ContextBound: call directly
	byDeadline bool          // BreakerOptions.DeadlineBound: a Guard's calls get a deadline, not a derived context
	timeout    time.Duration // a call slower than this is slow
	hard       time.Duration // a call slower than this fails; NoTimeout: none
	errTimeout error
	onError    func(*Error)

	state  atomic.Int32
	until  atomic.Int64 // while open: clock time from which a probe may go
	opened atomic.Uint64
	probes atomic.Uint64
	slots  [windowSlots]slot
	streak streak // failures other than timeouts since the last answered call
	down   streak // of those, the failures to connect since the last other outcome

	mu      sync.Mutex
	backoff time.Duration // the current back-off; under mu

	minCalls  int64   // calls in the window before the rate counts; <= 0 never opens
	rate      float64 // share of failed calls that opens
	slotNs    int64   // length of a slot
	window    time.Duration
	base, max time.Duration
	clock     clock.Clock
	notify    func(Transition)

	calls    atomic.Uint64
	skipped  atomic.Uint64
	canceled atomic.Uint64
	timeouts atomic.Uint64
	slow     atomic.Uint64
	failures [3]atomic.Uint64 // by opIndex
}

// NewBreaker returns a closed Breaker configured by o.
func NewBreaker(o BreakerOptions) (*Breaker, error) {
	switch {
	case o.Timeout < 0 || o.SlowTimeout < 0:
		return nil, fmt.Errorf("failover: timeout %s (slow timeout %s) is negative; use 0 for the defaults of %s and %s", o.Timeout, o.SlowTimeout, DefaultTimeout, DefaultSlowTimeout)
	case o.Backoff < 0 || o.MaxBackoff < 0:
		return nil, fmt.Errorf("failover: back-off %s (max %s) is negative; use 0 for the defaults", o.Backoff, o.MaxBackoff)
	case o.Window < 0:
		return nil, fmt.Errorf("failover: window %s is negative; use 0 for the default of %s", o.Window, DefaultWindow)
	case math.IsNaN(o.FailureRate) || o.FailureRate < 0 || o.FailureRate > 1:
		return nil, fmt.Errorf("failover: failure rate %v is outside (0, 1]; use 0 for the default of %v", o.FailureRate, DefaultFailureRate)
	}
	b := &Breaker{name: o.Name, bounded: o.ContextBound || o.DeadlineBound, byDeadline: o.DeadlineBound, timeout: o.Timeout, hard: o.SlowTimeout, onError: o.OnError}
	if b.timeout == 0 {
		b.timeout = DefaultTimeout
	}
	if b.hard == 0 {
		b.hard = max(DefaultSlowTimeout, b.timeout)
	}
	if b.hard < b.timeout {
		return nil, fmt.Errorf("failover: slow timeout %s is below the timeout %s; a call is cut off at the slow timeout, so it must be at least as long", b.hard, b.timeout)
	}
	b.errTimeout = fmt.Errorf("%w: no answer within %s", ErrTimeout, b.hard)
	if b.hard == NoTimeout {
		b.errTimeout = fmt.Errorf("%w: the call's own deadline passed", ErrTimeout)
	}
	b.minCalls, b.rate, b.base, b.max = int64(o.MinCalls), o.FailureRate, o.Backoff, o.MaxBackoff
	switch {
	case o.MinCalls == 0:
		b.minCalls = DefaultMinCalls
	case o.MinCalls < 0:
		b.minCalls = 0
	}
	if b.rate == 0 {
		b.rate = DefaultFailureRate
	}
	window := o.Window
	if window == 0 {
		window = DefaultWindow
	}
	b.init(window)
	if b.base == 0 {
		b.base = DefaultBackoff
	}
	if b.max == 0 {
		b.max = max(DefaultMaxBackoff, b.base)
	}
	if b.max < b.base {
		return nil, fmt.Errorf("failover: max back-off %s is below the back-off %s", b.max, b.base)
	}
	b.backoff = b.base
	b.clock = o.Clock
	if b.clock == nil {
		b.clock = clock.System
	}
	if onState, onTransition := o.OnStateChange, o.OnTransition; onState != nil || onTransition != nil {
		b.notify = func(t Transition) {
			if onState != nil {
				onState(t.From, t.To)
			}
			if onTransition != nil {
				onTransition(t)
			}
		}
	}
	return b, nil
}

// OpCall names the calls of Breaker.Do in an *Error. Their failures count
// with Decide's in Stats.
const OpCall Op = "call"

// Do makes the call fn under the Breaker: at once ErrOpen (wrapped, with
// when the next call goes through) when the breaker is open or its probe
// is in flight, and the caller's context error when the caller had given
// up or gives up before fn answers; else fn's own error, or an error
// wrapping ErrTimeout when fn did not answer within SlowTimeout.
//
// fn gets a context that ends at the slow timeout. Unless ContextBound is
// set (or SlowTimeout is NoTimeout) it runs on a goroutine of its own, and
// is left running if it overruns, so it must not write to anything its
// caller reads after an error; a panic there is recovered and counts as
// its failure. On the caller's goroutine a panic propagates to Do's
// caller, and the breaker stays consistent: a panicking probe counts as a
// failed one. An error of fn wrapping floodgate.ErrCorruptState or
// ErrClosed is its answer about this call (see Refusal), not a failure.
func (b *Breaker) Do(ctx context.Context, fn func(context.Context) error) error {
	st, err := b.call(ctx, OpCall, b.name, fn)
	if st == skipped {
		return fmt.Errorf("%w; next attempt in %s", err, b.RetryIn().Round(time.Millisecond))
	}
	return err
}

// Name returns BreakerOptions.Name.
func (b *Breaker) Name() string { return b.name }

// Timeout returns the time after which a call counts as slow.
func (b *Breaker) Timeout() time.Duration { return b.timeout }

// SlowTimeout returns the time after which a call fails.
func (b *Breaker) SlowTimeout() time.Duration { return b.hard }

// State returns the breaker's state.
func (b *Breaker) State() BreakerState { return BreakerState(b.state.Load()) }

// RetryIn returns how long until the breaker lets a call through: the rest
// of its back-off while open, else its base back-off, a fair guess for a
// remote store that has just failed. FailClosed answers carry it as
// RetryAfter.
func (b *Breaker) RetryIn() time.Duration {
	if BreakerState(b.state.Load()) == Open {
		if d := time.Duration(b.until.Load() - b.clock.UnixNano()); d > 0 {
			return d
		}
	}
	return b.base
}

// Stats returns a snapshot of the Breaker's counters.
func (b *Breaker) Stats() Stats {
	return Stats{
		State:   b.State(),
		Opened:  b.opened.Load(),
		Probes:  b.probes.Load(),
		Calls:   b.calls.Load(),
		Skipped: b.skipped.Load(),
		Failures: OpCounts{
			Decide: b.failures[0].Load(),
			Refund: b.failures[1].Load(),
			Reset:  b.failures[2].Load(),
		},
		Timeouts: b.timeouts.Load(),
		Slow:     b.slow.Load(),
		Canceled: b.canceled.Load(),
	}
}

// init sets up the window; the breaker starts closed with empty slots.
func (b *Breaker) init(window time.Duration) {
	b.window = window
	b.slotNs = max(int64(window)/windowSlots, 1)
	b.clear()
}

// clear empties the window: every slot's epoch is older than any clock
// time, so the next call into it starts it over. The caller holds mu, or
// owns b.
func (b *Breaker) clear() {
	for i := range b.slots {
		b.slots[i].epoch.Store(math.MinInt64)
	}
	b.streak.n.Store(0)
	b.down.n.Store(0)
}

// A streak counts failures in a row within one window.
type streak struct {
	n     atomic.Int64
	since atomic.Int64 // clock time of the streak's first failure
}

// add counts a failure at now and returns the length of the streak: a
// streak that began a window or more ago starts over at now.
func (s *streak) add(now, window int64) int64 {
	row := s.n.Add(1)
	if row == 1 {
		s.since.Store(now)
	} else if now-s.since.Load() >= window {
		s.n.Store(1)
		s.since.Store(now)
		row = 1
	}
	return row
}

// reset ends the streak.
func (s *streak) reset() {
	if s.n.Load() != 0 {
		s.n.Store(0)
	}
}

// slotAt returns the slot counting the instant now, started over if it
// last counted an older tenth.
func (b *Breaker) slotAt(now int64) *slot {
	e := now / b.slotNs
	s := &b.slots[uint64(e)%windowSlots]
	if s.epoch.Load() < e {
		b.mu.Lock()
		if s.epoch.Load() < e {
			s.calls.Store(0)
			s.fails.Store(0)
			s.epoch.Store(e)
		}
		b.mu.Unlock()
	}
	return s
}

// tally sums the calls and failures of the window ending at now.
func (b *Breaker) tally(now int64) (calls, fails int64) {
	e := now / b.slotNs
	for i := range b.slots {
		s := &b.slots[i]
		if se := s.epoch.Load(); se > e-windowSlots && se <= e {
			calls += s.calls.Load()
			fails += s.fails.Load()
		}
	}
	return calls, fails
}

// acquire reports whether a call may go to the remote store and whether it
// is the probe of a half-open breaker. Exactly one caller wins the probe.
func (b *Breaker) acquire() (probe, ok bool) {
	switch BreakerState(b.state.Load()) {
	case Closed:
		return false, true
	case Open:
		if b.clock.UnixNano() < b.until.Load() {
			return false, false
		}
		if b.state.CompareAndSwap(int32(Open), int32(HalfOpen)) {
			b.probes.Add(1)
			b.changed(Open, HalfOpen, "the back-off is over; one call probes the remote store")
			return true, true
		}
	}
	return false, false
}

// success records a call that the remote store answered.
func (b *Breaker) success(probe bool) {
	if probe {
		b.mu.Lock()
		b.clear()
		b.state.Store(int32(Closed))
		b.backoff = b.base
		b.mu.Unlock()
		b.changed(HalfOpen, Closed, "the probe was answered")
		return
	}
	// Only a closed breaker counts; an answer to a call that started
	// before the breaker opened proves little, and only the probe may
	// close it.
	if b.minCalls > 0 && BreakerState(b.state.Load()) == Closed {
		b.slotAt(b.clock.UnixNano()).calls.Add(1)
		b.streak.reset()
		b.down.reset()
	}
}

// failure records a call that failed or timed out with err.
func (b *Breaker) failure(probe bool, err error, timedOut bool) {
	if b.minCalls <= 0 {
		return
	}
	if probe {
		b.mu.Lock()
		b.backoff = min(2*b.backoff, b.max)
		wait := b.jitter(b.backoff)
		b.until.Store(b.clock.UnixNano() + int64(wait))
		b.state.Store(int32(Open))
		b.mu.Unlock()
		b.changed(HalfOpen, Open, fmt.Sprintf("the probe failed (%v); next probe in %s", err, wait.Round(time.Millisecond)))
		return
	}
	if BreakerState(b.state.Load()) != Closed {
		return
	}
	now := b.clock.UnixNano()
	s := b.slotAt(now)
	s.calls.Add(1)
	s.fails.Add(1)
	var row, down int64
	switch {
	case timedOut:
		// A stall, which a starved machine makes of many calls at once:
		// the rate decides. It does not break a streak either.
		row, down = b.streak.n.Load(), b.down.n.Load()
	case unreachable(err):
		row, down = b.streak.add(now, int64(b.window)), b.down.add(now, int64(b.window))
	default:
		row = b.streak.add(now, int64(b.window))
		b.down.reset()
	}
	calls, fails := b.tally(now)
	byRate := calls >= b.minCalls && float64(fails) >= b.rate*float64(calls)
	byDown := down >= UnreachableInRow
	if !byRate && !byDown && row < b.minCalls {
		return
	}
	b.mu.Lock()
	opened := BreakerState(b.state.Load()) == Closed
	var wait time.Duration
	if opened {
		b.backoff = b.base
		wait = b.jitter(b.base)
		b.until.Store(now + int64(wait))
		b.state.Store(int32(Open))
		b.clear()
		b.opened.Add(1)
	}
	b.mu.Unlock()
	if opened {
		why := fmt.Sprintf("%d of %d calls failed within %s (%.0f%% >= %.0f%%)", fails, calls, b.window, 100*float64(fails)/float64(calls), 100*b.rate)
		switch {
		case byRate:
		case row >= b.minCalls:
			why = fmt.Sprintf("%d calls in a row failed", row)
		default:
			why = fmt.Sprintf("%d calls in a row could not connect", down)
		}
		b.changed(Closed, Open, fmt.Sprintf("%s, the last with: %v; first probe in %s", why, err, wait.Round(time.Millisecond)))
	}
}

// release gives back a probe that told nothing about the remote store
// because the caller gave up first. The breaker stays open with its
// back-off already over, so the next call probes.
func (b *Breaker) release(probe bool) {
	if probe && b.state.CompareAndSwap(int32(HalfOpen), int32(Open)) {
		b.changed(HalfOpen, Open, "the probe's caller gave up before an answer; the next call probes")
	}
}

// jitter shortens d by up to a fifth at random, so that instances that saw
// the same outage begin do not all probe at the same instant. It never
// lengthens d: MaxBackoff stays a bound on how late recovery is noticed.
func (b *Breaker) jitter(d time.Duration) time.Duration {
	if d < 5 {
		return d
	}
	return d - rand.N(d/5)
}

func (b *Breaker) changed(from, to BreakerState, reason string) {
	if b.notify != nil {
		b.notify(Transition{From: from, To: to, Reason: reason})
	}
}

// status is what became of a call.
type status uint8

const (
	ok       status = iota
	skipped         // the breaker was open; the error is ErrOpen
	failed          // the call failed or timed out
	canceled        // the caller's context ended; the error is its Err
	refused         // the remote store answered, with an error about this call only
)

// Refusal reports whether err is the remote store's answer about this one
// call rather than a sign that the store is down: a closed store
// (floodgate.ErrClosed, a programming error that no failure mode should
// hide) or one key's unreadable state (floodgate.ErrCorruptState). Neither
// counts against the breaker, and neither is absorbed by a failure mode.
func Refusal(err error) bool {
	return errors.Is(err, floodgate.ErrClosed) || errors.Is(err, floodgate.ErrCorruptState)
}

// opIndex picks the failure counter of op: refunds and cancellations give
// back, resets clear, and everything else (decisions, reservations and the
// calls of Do) asks for an answer.
func opIndex(op Op) int {
	switch op {
	case OpRefund, OpCancel:
		return 1
	case OpReset:
		return 2
	}
	return 0
}

// call makes one call under the breaker and classifies its outcome: the
// path of Do and, split in its three steps (enter, invoke or invokeDirect,
// exit), of every Guard method. op and name label a failure in Stats and
// OnError.
func (b *Breaker) call(ctx context.Context, op Op, name string, fn func(context.Context) error) (status, error) {
	probe, st, err := b.enter(ctx)
	if st != ok {
		return st, err
	}
	return b.exit(ctx, op, name, probe, b.invoke(ctx, op, probe, fn))
}

// enter decides whether a call may be made: ok, with whether it is the
// probe of a half-open breaker; skipped while the breaker is open;
// canceled when the caller has already given up, which gets nothing, not
// even a probe. A call that is not made costs no allocation.
func (b *Breaker) enter(ctx context.Context) (probe bool, st status, err error) {
	if err := ctx.Err(); err != nil {
		b.canceled.Add(1)
		return false, canceled, err
	}
	probe, allowed := b.acquire()
	if !allowed {
		b.skipped.Add(1)
		return false, skipped, ErrOpen
	}
	b.calls.Add(1)
	return probe, ok, nil
}

// exit counts how a call that enter let through ended, with err what
// invoke returned. It builds no *Error unless OnError wants one, so a
// Store's fallback path allocates nothing for the failure.
func (b *Breaker) exit(ctx context.Context, op Op, name string, probe bool, err error) (status, error) {
	if err == nil {
		b.success(probe)
		return ok, nil
	}
	if Refusal(err) {
		// The remote store answered: it is up, whatever it said.
		b.success(probe)
		return refused, err
	}
	if cerr := callerDone(ctx); cerr != nil {
		// The caller's cancellation or deadline says nothing about the
		// remote store: it must not open the breaker, nor close it.
		b.canceled.Add(1)
		b.release(probe)
		return canceled, cerr
	}
	b.failures[opIndex(op)].Add(1)
	timedOut := err == b.errTimeout
	if timedOut {
		b.timeouts.Add(1)
	}
	b.failure(probe, err, timedOut)
	if b.onError != nil {
		b.onError(&Error{Op: op, Policy: name, Err: err})
	}
	return failed, err
}

// direct reports whether calls are made on the caller's goroutine
// (ContextBound, or NoTimeout), where invokeDirect makes them.
func (b *Breaker) direct() bool { return b.bounded || b.hard == NoTimeout }

// invoke makes the call under the slow timeout, and counts it slow when it
// is answered after the timeout. A call that is not direct is made on a
// goroutine of its own and waited for at most the slow timeout: waiting
// on a channel rather than trusting the call to honour its context is
// what makes the bound hold for any call; the goroutine costs about a
// microsecond, small beside a network round trip. A call that overruns
// finishes in the background and its answer is dropped; the breaker stops
// new calls from piling up behind it. A panic there could not reach the
// caller and would end the process: it is the call's failure.
func (b *Breaker) invoke(ctx context.Context, op Op, probe bool, fn func(context.Context) error) error {
	if b.direct() {
		return b.invokeDirect(ctx, op, probe, false, fn)
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, b.hard)
	defer cancel()
	ch := make(chan error, 1)
	go func() {
		var err error
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("failover: the call panicked: %v", p)
			}
			ch <- err
		}()
		err = fn(cctx)
	}()
	select {
	case err := <-ch:
		return b.answered(ctx, cctx, start, err)
	case <-cctx.Done():
		if err := callerDone(ctx); err != nil {
			return err
		}
		return b.errTimeout
	}
}

// invokeDirect is invoke on the caller's goroutine, bounded by the call's
// context ending at the slow timeout (none under NoTimeout, and no timer
// armed); with byDeadline (a Guard's call under DeadlineBound) the context
// only carries the slow timeout as its deadline, and fn bounds itself by
// it. fn does not escape, so a caller's closure can stay on its stack.
// A panic unwinds past exit; for the probe of a half-open breaker it
// counts as a failed probe, or the breaker would stay half-open with no
// probe in flight and skip every call from then on.
func (b *Breaker) invokeDirect(ctx context.Context, op Op, probe, byDeadline bool, fn func(context.Context) error) error {
	if probe {
		returned := false
		defer func() {
			if !returned {
				b.failures[opIndex(op)].Add(1)
				b.failure(true, errors.New("the call panicked"), false)
			}
		}()
		err := b.invokeDirect(ctx, op, false, byDeadline, fn)
		returned = true
		return err
	}
	start := time.Now()
	if b.hard == NoTimeout {
		return b.answered(ctx, ctx, start, fn(ctx))
	}
	if byDeadline {
		cctx := deadline.With(ctx, start.Add(b.hard))
		return b.answered(ctx, cctx, start, fn(cctx))
	}
	cctx, cancel := context.WithTimeout(ctx, b.hard)
	defer cancel()
	return b.answered(ctx, cctx, start, fn(cctx))
}

// unreachable reports whether err says that the remote store could not be
// connected to at all: a dial that failed other than by timing out (the
// host refused or reset the connection, or has no address), which go-redis
// returns as a *net.OpError with Op "dial". A dial that timed out is a
// timeout like any other: a starved or distant machine makes those too.
func unreachable(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && !op.Timeout()
}

// callerDone returns the error of the caller's context if it has ended or
// its deadline has passed. The deadline is checked as well because a store
// that arms timers of its own from it (go-redis's socket deadline,
// redisstore's batch deadline) can fail a moment before ctx.Err() reports
// the deadline: that failure is the caller's, not the remote store's.
func callerDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// answered classifies a call that returned: counted slow when it took
// longer than the timeout, and its error made errTimeout when the slow
// timeout, not the caller, ended it.
func (b *Breaker) answered(ctx, cctx context.Context, start time.Time, err error) error {
	err = b.timedOut(ctx, cctx, err)
	if err != b.errTimeout && time.Since(start) > b.timeout {
		b.slow.Add(1)
	}
	return err
}

// timedOut returns errTimeout in place of err when the call gave up
// because of the Breaker's deadline rather than the caller's. A call that
// sets timers of its own from the deadline may see it pass a moment before
// cctx does, so its context.DeadlineExceeded counts too.
func (b *Breaker) timedOut(ctx, cctx context.Context, err error) error {
	if err != nil && callerDone(ctx) == nil && (cctx.Err() != nil || errors.Is(err, context.DeadlineExceeded)) {
		return b.errTimeout
	}
	return err
}
