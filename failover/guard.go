package failover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/internal/isnil"
)

// An Op names the Store method that failed, or OpCall for a call of
// Breaker.Do.
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

	// ErrTimeout reports a call that did not complete within the
	// Breaker's SlowTimeout.
	ErrTimeout = errors.New("failover: remote store did not answer in time")
)

// An Error is a failed call to the remote store, with what was asked.
// Err wraps ErrOpen, ErrTimeout, the caller's context error, or the remote
// store's own error.
type Error struct {
	Op     Op     // what was asked
	Policy string // the rate-limit policy (floodgate.LimitSet.Policy); for OpCall, the Breaker's Name
	Err    error
}

// Error reads "failover: policy <name>: <op>: <cause>", or for a call of
// Breaker.Do "failover: <name>: call: <cause>".
func (e *Error) Error() string {
	if e.Op == OpCall {
		if e.Policy == "" {
			return "failover: call: " + e.Err.Error()
		}
		return "failover: " + e.Policy + ": call: " + e.Err.Error()
	}
	return "failover: policy " + e.Policy + ": " + string(e.Op) + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// A Guard is a floodgate.Store that calls a remote store through a
// Breaker (its per-call timeouts and circuit breaker), and returns its
// failures as *Error. It applies no failure policy: Store (in this
// package) and the hybrid package do that on top of it. Share one Guard
// among all stores over the same remote, so that they share one breaker:
// an outage is then detected once. Calls of another kind to the same
// backend (redislease's leases beside redisstore's limits) go through the
// Guard's Breaker, so that one judgement covers them too.
//
// A Guard is safe for concurrent use.
type Guard struct {
	remote floodgate.Store
	br     *Breaker
}

var _ floodgate.Store = (*Guard)(nil)

// NewGuard returns a Guard over remote, with a Breaker made with o.
func NewGuard(remote floodgate.Store, o GuardOptions) (*Guard, error) {
	if isnil.Value(remote) {
		return nil, fmt.Errorf("failover: no remote store given (the store is nil: %T)", remote)
	}
	if _, ok := remote.(*Guard); ok {
		return nil, errors.New("failover: the remote store is already a Guard; use it directly")
	}
	br, err := NewBreaker(o)
	if err != nil {
		return nil, err
	}
	return &Guard{remote: remote, br: br}, nil
}

// Breaker returns the Guard's Breaker, through which calls of another kind
// to the same backend share its judgement: failures of either open it for
// both, and an open breaker skips both.
func (g *Guard) Breaker() *Breaker { return g.br }

// Timeout returns the time after which a call counts as slow.
func (g *Guard) Timeout() time.Duration { return g.br.Timeout() }

// SlowTimeout returns the time after which a call fails.
func (g *Guard) SlowTimeout() time.Duration { return g.br.SlowTimeout() }

// State returns the breaker's state.
func (g *Guard) State() BreakerState { return g.br.State() }

// RetryIn returns how long until the breaker lets a call through (see
// Breaker.RetryIn).
func (g *Guard) RetryIn() time.Duration { return g.br.RetryIn() }

// Stats returns a snapshot of the counters of the Guard's Breaker.
func (g *Guard) Stats() Stats { return g.br.Stats() }

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

// A remoteCall is a call of the remote store that call makes in place of
// one of its Store methods.
type remoteCall func(context.Context) (algo.Verdict, error)

// ValidateLimit asks the remote store, so that a limit it cannot keep fails
// when the policy is built, not on a request.
func (g *Guard) ValidateLimit(l floodgate.Limit) error { return g.remote.ValidateLimit(l) }

// call makes one call of the remote store through the Breaker: fn, when
// not nil (Reserve, Cancel), else op's method of the remote store. The
// Verdict is read only when the call succeeded: a call that overran may
// still write it from the Breaker's goroutine.
//
// The closure of the call is made only once the breaker lets it go, so a
// skipped call allocates nothing, and for a direct Breaker it is written
// out again for invokeDirect, which does not let it escape.
func (g *Guard) call(ctx context.Context, op Op, set *algo.Set, key string, cost int64, fn remoteCall) (algo.Verdict, status, error) {
	probe, st, err := g.br.enter(ctx)
	if st != ok {
		return algo.Verdict{}, st, err
	}
	var v algo.Verdict
	if g.br.direct() {
		err = g.br.invokeDirect(ctx, op, probe, g.br.byDeadline, func(ctx context.Context) (err error) {
			v, err = g.dispatch(ctx, op, set, key, cost, fn)
			return err
		})
	} else {
		w := new(algo.Verdict) // written by the Breaker's goroutine
		err = g.br.invoke(ctx, op, probe, func(ctx context.Context) (err error) {
			*w, err = g.dispatch(ctx, op, set, key, cost, fn)
			return err
		})
		if err == nil {
			v = *w
		}
	}
	if st, err = g.br.exit(ctx, op, set.Policy(), probe, err); st != ok {
		return algo.Verdict{}, st, err
	}
	return v, ok, nil
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
