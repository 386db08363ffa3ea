package failover

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
)

// Defaults for GuardOptions' zero values.
const (
	// DefaultTimeout bounds one call to the remote store. A local Redis
	// answers in well under a millisecond; 100 ms is far above its slow
	// tail (a fork, a failover) yet short enough that a caller who pays it
	// once barely notices.
	DefaultTimeout = 100 * time.Millisecond

	// DefaultFailures is how many consecutive failures open the breaker:
	// enough that one dropped connection does not, few enough that an
	// outage is cut off after a handful of timeouts.
	DefaultFailures = 5

	// DefaultBackoff is how long the breaker stays open before its first
	// probe.
	DefaultBackoff = time.Second

	// DefaultMaxBackoff caps the back-off, which doubles with every failed
	// probe. It is also the longest a recovered remote store waits to be
	// used again.
	DefaultMaxBackoff = 2 * time.Second
)

// GuardOptions configures a Guard. The zero value gives the defaults.
type GuardOptions struct {
	// Timeout bounds every call to the remote store. 0 means
	// DefaultTimeout. The Guard enforces it itself, so it holds even for a
	// store that ignores its context (a go-redis client without
	// ContextTimeoutEnabled waits for its ReadTimeout, 3 s by default). A
	// call cut off by the timeout may still complete in the background: the
	// remote store may charge a request the policy also decided on, which
	// errs strict by one request.
	Timeout time.Duration

	// Failures is how many consecutive failures open the breaker. 0 means
	// DefaultFailures; a negative value disables the breaker, so every call
	// is tried and a long outage costs a timeout per call.
	Failures int

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
	Opened   uint64       // times consecutive failures opened the breaker
	Probes   uint64       // probes let through by an open breaker
	Calls    uint64       // calls made to the remote store
	Skipped  uint64       // calls not made because the breaker was open
	Failures OpCounts     // calls that failed or timed out, by operation
	Timeouts uint64       // of those, the calls cut off by Timeout
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
	bounded    bool // GuardOptions.ContextBound: call the remote directly
	timeout    time.Duration
	errTimeout error
	onError    func(*Error)
	br         breaker

	calls    atomic.Uint64
	skipped  atomic.Uint64
	canceled atomic.Uint64
	timeouts atomic.Uint64
	failures [3]atomic.Uint64 // by opIndex
}

var _ floodgate.Store = (*Guard)(nil)

// NewGuard returns a Guard over remote.
func NewGuard(remote floodgate.Store, o GuardOptions) (*Guard, error) {
	switch {
	case remote == nil:
		return nil, errors.New("failover: no remote store given")
	case o.Timeout < 0:
		return nil, fmt.Errorf("failover: timeout %s is negative; use 0 for the default of %s", o.Timeout, DefaultTimeout)
	case o.Backoff < 0 || o.MaxBackoff < 0:
		return nil, fmt.Errorf("failover: back-off %s (max %s) is negative; use 0 for the defaults", o.Backoff, o.MaxBackoff)
	}
	if _, ok := remote.(*Guard); ok {
		return nil, errors.New("failover: the remote store is already a Guard; use it directly")
	}
	g := &Guard{remote: remote, timeout: o.Timeout, onError: o.OnError}
	g.bounded = o.ContextBound
	if g.timeout == 0 {
		g.timeout = DefaultTimeout
	}
	g.errTimeout = fmt.Errorf("%w: no answer within %s", ErrTimeout, g.timeout)
	b := &g.br
	b.threshold, b.base, b.max = int32(o.Failures), o.Backoff, o.MaxBackoff
	switch {
	case o.Failures == 0:
		b.threshold = DefaultFailures
	case o.Failures < 0:
		b.threshold = 0
	case o.Failures > 1<<30:
		b.threshold = 1 << 30
	}
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
	b.notify = o.OnStateChange
	return g, nil
}

// Timeout returns the per-call timeout in force.
func (g *Guard) Timeout() time.Duration { return g.timeout }

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
		Canceled: g.canceled.Load(),
	}
}

// Decide asks the remote store. On failure the Result is the zero Result
// and the error is an *Error.
func (g *Guard) Decide(ctx context.Context, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	v, st, err := g.call(ctx, OpDecide, set, key, cost)
	if st != ok {
		return algo.Verdict{}, &Error{Op: OpDecide, Policy: set.Policy(), Err: err}
	}
	return v, nil
}

// Refund asks the remote store to refund; see Decide for errors.
func (g *Guard) Refund(ctx context.Context, set *algo.Set, key string, cost int64) error {
	if _, st, err := g.call(ctx, OpRefund, set, key, cost); st != ok {
		return &Error{Op: OpRefund, Policy: set.Policy(), Err: err}
	}
	return nil
}

// Reset asks the remote store to reset; see Decide for errors.
func (g *Guard) Reset(ctx context.Context, set *algo.Set, key string) error {
	if _, st, err := g.call(ctx, OpReset, set, key, 0); st != ok {
		return &Error{Op: OpReset, Policy: set.Policy(), Err: err}
	}
	return nil
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

func opIndex(op Op) int {
	switch op {
	case OpDecide:
		return 0
	case OpRefund, OpCancel:
		return 1
	case OpReserve:
		return 0
	}
	return 2
}

// call makes one guarded call and classifies its outcome. It builds no
// *Error unless OnError wants one, so Store's fallback path allocates
// nothing beyond the call itself.
func (g *Guard) call(ctx context.Context, op Op, set *algo.Set, key string, cost int64) (algo.Verdict, status, error) {
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
		res, err = g.invokeProbe(ctx, op, set, key, cost)
	} else {
		res, err = g.invoke(ctx, op, set, key, cost)
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
	if err == g.errTimeout {
		g.timeouts.Add(1)
	}
	g.br.failure(probe)
	if g.onError != nil {
		g.onError(&Error{Op: op, Policy: set.Policy(), Err: err})
	}
	return algo.Verdict{}, failed, err
}

// invokeProbe is invoke for the probe of a half-open breaker. A ContextBound
// store runs on the caller's goroutine, so its panic unwinds past call: the
// probe then counts as failed, or the breaker would stay half-open with no
// probe in flight and skip every call from then on.
func (g *Guard) invokeProbe(ctx context.Context, op Op, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	returned := false
	defer func() {
		if !returned {
			g.failures[opIndex(op)].Add(1)
			g.br.failure(true)
		}
	}()
	res, err := g.invoke(ctx, op, set, key, cost)
	returned = true
	return res, err
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

// invoke makes the call under the timeout. A store that is not ContextBound is
// called on a goroutine of its own and waited for at most the timeout:
// waiting on a channel rather than trusting the store to honour its context
// is what makes the bound hold for any store; the goroutine costs about a
// microsecond, small beside a network round trip. A call that overruns
// finishes in the background and its answer is dropped; the breaker stops
// new calls from piling up behind it.
func (g *Guard) invoke(ctx context.Context, op Op, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	cctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	if g.bounded {
		res, err := g.dispatch(cctx, op, set, key, cost)
		return res, g.timedOut(ctx, cctx, err)
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
		o.res, o.err = g.dispatch(cctx, op, set, key, cost)
	}()
	select {
	case o := <-ch:
		return o.res, g.timedOut(ctx, cctx, o.err)
	case <-cctx.Done():
		if err := callerDone(ctx); err != nil {
			return algo.Verdict{}, err
		}
		return algo.Verdict{}, g.errTimeout
	}
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

func (g *Guard) dispatch(ctx context.Context, op Op, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	switch op {
	case OpDecide:
		return g.remote.Decide(ctx, set, key, cost)
	case OpRefund:
		return algo.Verdict{}, g.remote.Refund(ctx, set, key, cost)
	case OpReserve, OpCancel:
		return dispatchReserve(ctx, g.remote, op, set, key, cost)
	}
	return algo.Verdict{}, g.remote.Reset(ctx, set, key)
}
