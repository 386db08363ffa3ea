package outbound

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/failover"
)

// The circuit breakers of this package are failover's: a failover.Guard
// over a floodgate.Store whose Decide runs one call (a round trip, a Redis
// command) handed to it through the context. The Guard then counts the
// call's failures, opens, probes and closes exactly as it does for a
// remote engine, with the same options, statistics and metrics.

// A guardedCall is the call a Decide runs.
type guardedCall interface {
	run(ctx context.Context) error
}

// callFunc is a guardedCall of a function.
type callFunc func(ctx context.Context) error

func (f callFunc) run(ctx context.Context) error { return f(ctx) }

type callKey struct{}

// callCtx carries a guardedCall to callStore. When far is set and its
// parent has no deadline, it reports one far beyond the Guard's timeout:
// the Guard then bounds the call without arming a timer of its own (a
// context.WithTimeout under a parent whose deadline comes first is a plain
// cancel context), which is most of what guarding a round trip would cost.
// The round trip itself runs on its request's context, which alone bounds
// it.
type callCtx struct {
	context.Context
	call guardedCall
	far  bool
}

func (c *callCtx) Value(key any) any {
	if key == (callKey{}) {
		return c.call
	}
	return c.Context.Value(key)
}

func (c *callCtx) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok || !c.far {
		return d, ok
	}
	return time.Now().Add(farDeadline), true
}

// farDeadline is the deadline a callCtx reports for its unbounded calls:
// far off, and before the Guard's own bound (SlowTimeout, unbounded) would
// end.
const farDeadline = unbounded / 2

// callStore is the floodgate.Store a Guard guards.
type callStore struct{}

func (callStore) Decide(ctx context.Context, _ *algo.Set, _ string, _ int64) (algo.Verdict, error) {
	fn, ok := ctx.Value(callKey{}).(guardedCall)
	if !ok {
		return algo.Verdict{}, errors.New("outbound: guarded call without its function")
	}
	if err := fn.run(ctx); err != nil {
		return algo.Verdict{}, err
	}
	return algo.Verdict{Decision: algo.Decision{Allowed: true}}, nil
}

func (callStore) Refund(context.Context, *algo.Set, string, int64) error { return nil }
func (callStore) Reset(context.Context, *algo.Set, string) error         { return nil }
func (callStore) ValidateLimit(floodgate.Limit) error                    { return nil }

// Reserve and Cancel are never called: a guarded call is always a Decide.
func (callStore) Reserve(context.Context, *algo.Set, string, int64, time.Duration) (algo.Verdict, algo.Ticket, error) {
	return algo.Verdict{}, algo.Ticket{}, errors.New("outbound: a guarded call does not reserve")
}

func (callStore) Cancel(context.Context, *algo.Set, string, int64, algo.Ticket) error { return nil }

// callSet is the limit set a guarded call names in the Guard's errors: the
// Guard asks a set for its policy name, nothing else.
func callSet(name string) (*algo.Set, error) {
	tr, err := algo.New(floodgate.PerSecond(1).Spec())
	if err != nil {
		return nil, err
	}
	return algo.NewSet(name, "", []algo.Transition{tr})
}

// breaker is one guarded target: an upstream or a Redis.
type breaker struct {
	guard *failover.Guard
	set   *algo.Set
	far   bool // calls are bounded by their own contexts, not the Guard's timeout
}

func newBreaker(name string, o failover.GuardOptions) (*breaker, error) {
	g, err := failover.NewGuard(callStore{}, o)
	if err != nil {
		return nil, err
	}
	set, err := callSet(name)
	if err != nil {
		return nil, err
	}
	return &breaker{guard: g, set: set, far: o.SlowTimeout == unbounded}, nil
}

// do runs fn under the breaker. It returns failover.ErrOpen (wrapped) when
// the breaker did not let the call go, the caller's context error when the
// caller gave up, and fn's error otherwise.
func (b *breaker) do(ctx context.Context, fn guardedCall) error {
	_, err := b.guard.Decide(&callCtx{Context: ctx, call: fn, far: b.far}, b.set, "", 1)
	if err == nil {
		return nil
	}
	var fe *failover.Error
	if errors.As(err, &fe) {
		if errors.Is(fe.Err, failover.ErrOpen) {
			return fmt.Errorf("%w; next attempt in %s", fe.Err, b.guard.RetryIn().Round(1e6))
		}
		return fe.Err
	}
	return err
}
