package failover

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/internal/isnil"
)

// Defaults for GuardOptions' zero values.
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

// GuardOptions configures a Guard. The zero value gives the defaults.
type GuardOptions struct {
	// Timeout is how long a call to the remote store may take before it
	// counts as slow (Stats.Slow). A slow call is still waited for, up to
	// SlowTimeout, and its answer used: on a machine whose CPUs are
	// saturated every call is late, and that is not an outage. 0 means
	// DefaultTimeout.
	Timeout time.Duration

	// SlowTimeout bounds every call to the remote store: a call unanswered
	// by then fails with ErrTimeout and counts against the breaker. 0
	// means DefaultSlowTimeout, or Timeout if that is larger; set it equal
	// to Timeout to cut every call off at Timeout. The Guard enforces it
	// itself, so it holds even for a store that ignores its context (a
	// go-redis client without ContextTimeoutEnabled waits for its
	// ReadTimeout, 3 s by default); a timeout of the store's own is only a
	// backstop. A call cut off may still complete in the background: the
	// remote store may charge a request the policy also decided on, which
	// errs strict by one request.
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
	// and not calls whose caller gave up). It runs on the caller's
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

	// ContextBound promises that each call of the remote store returns soon
	// after the call's context is done, whatever its backend does: it waits
	// for Redis with a select on ctx.Done(), not in a blocking read
	// (redisstore.Store keeps this promise). The Guard then calls the
	// remote store directly on the caller's goroutine; otherwise it calls it
	// on a goroutine of its own, so that the timeout holds even for a store
	// that ignores its context. The direct call saves a goroutine and a few
	// allocations per call. It is an option, not something the Guard finds
	// out, because a wrapper around the store could not keep the promise
	// visible.
	ContextBound bool

	// Clock times the breaker's back-off. Nil means floodgate.SystemClock.
	// The per-call timeout always uses the real clock.
	Clock floodgate.Clock
}

// An Op names the Store method that failed.
type Op string

// The operations a Guard performs.
const (
	OpDecide Op = "decide"
	OpRefund Op = "refund"
	OpReset  Op = "reset"
)

var (
	// ErrOpen reports a call that was not made because the breaker is open
	// (or half-open with its probe in flight).
	ErrOpen = errors.New("failover: circuit breaker open, remote store not called")

	// ErrTimeout reports a call that did not complete within the Guard's
	// Timeout.
	ErrTimeout = errors.New("failover: remote store did not answer in time")
)

// An Error is a failed call to the remote store, with what was asked.
// Err wraps ErrOpen, ErrTimeout, the caller's context error, or the remote
// store's own error.
type Error struct {
	Op     Op     // what was asked
	Policy string // the rate-limit policy (floodgate.LimitSet.Policy)
	Err    error
}

// Error reads "failover: policy <name>: <op>: <cause>".
func (e *Error) Error() string {
	return "failover: policy " + e.Policy + ": " + string(e.Op) + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// OpCounts counts events by operation.
type OpCounts struct {
	Decide, Refund, Reset uint64
}

// Stats is a snapshot of a Guard's counters, for metrics. Counters only
// grow.
type Stats struct {
	State    BreakerState // the breaker's state now
	Opened   uint64       // times the failure rate opened the breaker
	Probes   uint64       // probes let through by an open breaker
	Calls    uint64       // calls made to the remote store
	Skipped  uint64       // calls not made because the breaker was open
	Failures OpCounts     // calls that failed or timed out, by operation
	Timeouts uint64       // of those, the calls cut off by SlowTimeout
	Slow     uint64       // calls answered, later than Timeout
	Canceled uint64       // calls abandoned because the caller's context ended
}

// A Guard is a floodgate.Store that calls a remote store under a per-call
// timeout and a circuit breaker, and returns its failures as *Error. It
// applies no failure policy: Store (in this package) and the hybrid package
// do that on top of it. Share one Guard among all stores over the same
// remote, so that they share one breaker: an outage is then detected once.
//
// A Guard is safe for concurrent use.
type Guard struct {
	remote     floodgate.Store
	bounded    bool          // GuardOptions.ContextBound: call the remote directly
	timeout    time.Duration // a call slower than this is slow
	hard       time.Duration // a call slower than this fails
	errTimeout error
	onError    func(*Error)
	br         breaker

	calls    atomic.Uint64
	skipped  atomic.Uint64
	canceled atomic.Uint64
	timeouts atomic.Uint64
	slow     atomic.Uint64
	failures [3]atomic.Uint64 // by opIndex
}

var _ floodgate.Store = (*Guard)(nil)

// NewGuard returns a Guard over remote.
func NewGuard(remote floodgate.Store, o GuardOptions) (*Guard, error) {
	switch {
	case isnil.Value(remote):
		return nil, fmt.Errorf("failover: no remote store given (the store is nil: %T)", remote)
	case o.Timeout < 0 || o.SlowTimeout < 0:
		return nil, fmt.Errorf("failover: timeout %s (slow timeout %s) is negative; use 0 for the defaults of %s and %s", o.Timeout, o.SlowTimeout, DefaultTimeout, DefaultSlowTimeout)
	case o.Backoff < 0 || o.MaxBackoff < 0:
		return nil, fmt.Errorf("failover: back-off %s (max %s) is negative; use 0 for the defaults", o.Backoff, o.MaxBackoff)
	case o.Window < 0:
		return nil, fmt.Errorf("failover: window %s is negative; use 0 for the default of %s", o.Window, DefaultWindow)
	case math.IsNaN(o.FailureRate) || o.FailureRate < 0 || o.FailureRate > 1:
		return nil, fmt.Errorf("failover: failure rate %v is outside (0, 1]; use 0 for the default of %v", o.FailureRate, DefaultFailureRate)
	}
	if _, ok := remote.(*Guard); ok {
		return nil, errors.New("failover: the remote store is already a Guard; use it directly")
	}
	g := &Guard{remote: remote, timeout: o.Timeout, hard: o.SlowTimeout, onError: o.OnError}
	g.bounded = o.ContextBound
	if g.timeout == 0 {
		g.timeout = DefaultTimeout
	}
	if g.hard == 0 {
		g.hard = max(DefaultSlowTimeout, g.timeout)
	}
	if g.hard < g.timeout {
		return nil, fmt.Errorf("failover: slow timeout %s is below the timeout %s; a call is cut off at the slow timeout, so it must be at least as long", g.hard, g.timeout)
	}
	g.errTimeout = fmt.Errorf("%w: no answer within %s", ErrTimeout, g.hard)
	b := &g.br
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
		b.clock = floodgate.SystemClock
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
	return g, nil
}

// Timeout returns the time after which a call counts as slow.
func (g *Guard) Timeout() time.Duration { return g.timeout }

// SlowTimeout returns the time after which a call fails.
func (g *Guard) SlowTimeout() time.Duration { return g.hard }

// State returns the breaker's state.
func (g *Guard) State() BreakerState { return BreakerState(g.br.state.Load()) }

// RetryIn returns how long until the breaker lets a call through: the rest
// of its back-off while open, else its base back-off. FailClosed answers
// carry it as RetryAfter.
func (g *Guard) RetryIn() time.Duration { return g.br.retryIn() }

// Stats returns a snapshot of the Guard's counters.
func (g *Guard) Stats() Stats {
	return Stats{
		State:   g.State(),
		Opened:  g.br.opened.Load(),
		Probes:  g.br.probes.Load(),
		Calls:   g.calls.Load(),
		Skipped: g.skipped.Load(),
		Failures: OpCounts{
			Decide: g.failures[0].Load(),
			Refund: g.failures[1].Load(),
			Reset:  g.failures[2].Load(),
		},
		Timeouts: g.timeouts.Load(),
		Slow:     g.slow.Load(),
		Canceled: g.canceled.Load(),
	}
}

// Decide asks the remote store. On failure the Result is the zero Result
// and the error is an *Error.
func (g *Guard) Decide(ctx context.Context, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	v, st, err := g.call(ctx, OpDecide, set, key, cost, nil)
	if st != ok {
		return algo.Verdict{}, &Error{Op: OpDecide, Policy: set.Policy(), Err: err}
	}
	return v, nil
}

// Refund asks the remote store to refund; see Decide for errors.
func (g *Guard) Refund(ctx context.Context, set *algo.Set, key string, cost int64) error {
	if _, st, err := g.call(ctx, OpRefund, set, key, cost, nil); st != ok {
		return &Error{Op: OpRefund, Policy: set.Policy(), Err: err}
	}
	return nil
}

// Reset asks the remote store to reset; see Decide for errors.
func (g *Guard) Reset(ctx context.Context, set *algo.Set, key string) error {
	if _, st, err := g.call(ctx, OpReset, set, key, 0, nil); st != ok {
		return &Error{Op: OpReset, Policy: set.Policy(), Err: err}
	}
	return nil
}

// Do makes fn a call of the Guard's remote backend, under its timeout and
// breaker as Decide's calls are, so that a store of another kind over the
// same backend (redislease's leases beside redisstore's limits) shares one
// judgement of it: failures of either open the breaker for both, and an
// open breaker skips fn as it skips Decide. op and policy name the call in
// an *Error and in OnError; its failures count with Decide's unless op is
// OpRefund, OpCancel or OpReset. fn gets a context that ends at the
// Guard's slow timeout; unless GuardOptions.ContextBound is set it runs on
// a goroutine of its own and its result is dropped if it overruns, so it
// must not write to anything its caller reads after an error. An error
// that fn returns wrapping floodgate.ErrCorruptState or ErrClosed is its
// answer about this call (see Refusal), not a sign the backend is down.
func (g *Guard) Do(ctx context.Context, op Op, policy string, fn func(context.Context) error) error {
	_, st, err := g.call(ctx, op, nil, policy, 0, func(ctx context.Context) (algo.Verdict, error) {
		return algo.Verdict{}, fn(ctx)
	})
	if st != ok {
		return &Error{Op: op, Policy: policy, Err: err}
	}
	return nil
}

// A remoteCall is a call of the remote store that call makes in place of
// one of its Store methods.
type remoteCall func(context.Context) (algo.Verdict, error)

// policyOf names the policy of a call in its *Error: the Set's, or for
// Do, which has no Set, the name Do was given (carried as key).
func policyOf(set *algo.Set, key string) string {
	if set == nil {
		return key
	}
	return set.Policy()
}

// ValidateLimit asks the remote store, so that a limit it cannot keep fails
// when the policy is built, not on a request.
func (g *Guard) ValidateLimit(l floodgate.Limit) error { return g.remote.ValidateLimit(l) }

// status is what became of a call.
type status uint8

const (
	ok       status = iota
	skipped         // the breaker was open; the error is ErrOpen
	failed          // the remote store failed or timed out
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

// call makes one guarded call and classifies its outcome. It builds no
// *Error unless OnError wants one, so Store's fallback path allocates
// nothing beyond the call itself.
//
// fn, when not nil, is the call to make in place of op's method of the
// remote store (Reserve, Cancel and Do); the methods that the request path
// calls most pass nil, so that no closure is allocated for them.
func (g *Guard) call(ctx context.Context, op Op, set *algo.Set, key string, cost int64, fn remoteCall) (algo.Verdict, status, error) {
	// A caller that has already given up gets nothing, not even a probe.
	if err := ctx.Err(); err != nil {
		g.canceled.Add(1)
		return algo.Verdict{}, canceled, err
	}
	probe, allowed := g.br.acquire()
	if !allowed {
		g.skipped.Add(1)
		return algo.Verdict{}, skipped, ErrOpen
	}
	g.calls.Add(1)
	var res algo.Verdict
	var err error
	if probe {
		res, err = g.invokeProbe(ctx, op, set, key, cost, fn)
	} else {
		res, err = g.invoke(ctx, op, set, key, cost, fn)
	}
	if err == nil {
		g.br.success(probe)
		return res, ok, nil
	}
	if Refusal(err) {
		// The remote store answered: it is up, whatever it said.
		g.br.success(probe)
		return algo.Verdict{}, refused, err
	}
	if cerr := callerDone(ctx); cerr != nil {
		// The caller's cancellation or deadline says nothing about the
		// remote store: it must not open the breaker, nor close it.
		g.canceled.Add(1)
		g.br.release(probe)
		return algo.Verdict{}, canceled, cerr
	}
	g.failures[opIndex(op)].Add(1)
	timedOut := err == g.errTimeout
	if timedOut {
		g.timeouts.Add(1)
	}
	g.br.failure(probe, err, timedOut)
	if g.onError != nil {
		g.onError(&Error{Op: op, Policy: policyOf(set, key), Err: err})
	}
	return algo.Verdict{}, failed, err
}

// invokeProbe is invoke for the probe of a half-open breaker. A ContextBound
// store runs on the caller's goroutine, so its panic unwinds past call: the
// probe then counts as failed, or the breaker would stay half-open with no
// probe in flight and skip every call from then on.
func (g *Guard) invokeProbe(ctx context.Context, op Op, set *algo.Set, key string, cost int64, fn remoteCall) (algo.Verdict, error) {
	returned := false
	defer func() {
		if !returned {
			g.failures[opIndex(op)].Add(1)
			g.br.failure(true, errors.New("the remote store panicked"), false)
		}
	}()
	res, err := g.invoke(ctx, op, set, key, cost, fn)
	returned = true
	return res, err
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

type outcome struct {
	res algo.Verdict
	err error
}

// invoke makes the call under the slow timeout, and counts it slow when it
// is answered after the timeout. A store that is not ContextBound is
// called on a goroutine of its own and waited for at most the slow
// timeout: waiting on a channel rather than trusting the store to honour
// its context is what makes the bound hold for any store; the goroutine
// costs about a microsecond, small beside a network round trip. A call that
// overruns finishes in the background and its answer is dropped; the
// breaker stops new calls from piling up behind it.
func (g *Guard) invoke(ctx context.Context, op Op, set *algo.Set, key string, cost int64, fn remoteCall) (algo.Verdict, error) {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, g.hard)
	defer cancel()
	if g.bounded {
		res, err := g.dispatch(cctx, op, set, key, cost, fn)
		return res, g.answered(ctx, cctx, start, err)
	}
	ch := make(chan outcome, 1)
	go func() {
		var o outcome
		defer func() {
			// A panic on this goroutine could not reach the caller and
			// would end the process; report it as the failure it is.
			if p := recover(); p != nil {
				o.err = fmt.Errorf("failover: remote store panicked: %v", p)
			}
			ch <- o
		}()
		o.res, o.err = g.dispatch(cctx, op, set, key, cost, fn)
	}()
	select {
	case o := <-ch:
		return o.res, g.answered(ctx, cctx, start, o.err)
	case <-cctx.Done():
		if err := callerDone(ctx); err != nil {
			return algo.Verdict{}, err
		}
		return algo.Verdict{}, g.errTimeout
	}
}

// answered classifies a call that returned: counted slow when it took
// longer than the timeout, and its error made errTimeout when the slow
// timeout, not the caller, ended it.
func (g *Guard) answered(ctx, cctx context.Context, start time.Time, err error) error {
	err = g.timedOut(ctx, cctx, err)
	if err != g.errTimeout && time.Since(start) > g.timeout {
		g.slow.Add(1)
	}
	return err
}

// timedOut returns errTimeout in place of err when the store gave up
// because of the Guard's deadline rather than the caller's. A store that
// sets timers of its own from the deadline may see it pass a moment before
// cctx does, so its context.DeadlineExceeded counts too.
func (g *Guard) timedOut(ctx, cctx context.Context, err error) error {
	if err != nil && callerDone(ctx) == nil && (cctx.Err() != nil || errors.Is(err, context.DeadlineExceeded)) {
		return g.errTimeout
	}
	return err
}

func (g *Guard) dispatch(ctx context.Context, op Op, set *algo.Set, key string, cost int64, fn remoteCall) (algo.Verdict, error) {
	if fn != nil {
		return fn(ctx)
	}
	switch op {
	case OpDecide:
		return g.remote.Decide(ctx, set, key, cost)
	case OpRefund:
		return algo.Verdict{}, g.remote.Refund(ctx, set, key, cost)
	}
	return algo.Verdict{}, g.remote.Reset(ctx, set, key)
}
