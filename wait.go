package floodgate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/floodgate-go/floodgate/algo"
)

// ErrWaitDeadline reports a WaitN (or a ReserveN) whose units cannot pass
// before the context's deadline. Nothing was charged; the wrapping error
// says how long the units would have needed.
var ErrWaitDeadline = errors.New("floodgate: the units cannot pass before the context's deadline")

// A Reservation is units taken now for a later instant. When OK, the units
// are charged and may be used from Time on (Delay after the engine decided);
// using them is the caller's part: WaitN sleeps until then. Cancel before
// Time gives them back.
//
// The instant is exact in the engine's arithmetic (integer nanoseconds in
// memory, microseconds in Redis), like a Result's RetryAfter: the engine
// books the units as an admission at that instant, so reservations of many
// callers (of many instances, on Redis) never add up to more than the
// limits, whatever their number and however they race.
//
// Only token-bucket limits (GCRA and TokenBucket) can be charged for a
// later instant. A policy with a window limit (fixed, sliding, log) among
// its limits reserves only what passes now: its Reservation is OK with a
// Delay of 0 or not OK with Delay the wait before the units could pass,
// charging nothing; WaitN then sleeps that long and asks again.
type Reservation struct {
	// OK reports whether the units were taken.
	OK bool

	// Delay is, when OK, how long after the engine's decision the units may
	// be used: 0 when at once. When not OK, it is how long the units would
	// have had to wait (RetryNever when they can never pass, their cost
	// being above a limit's capacity).
	Delay time.Duration

	// Time is when the units may be used, on this process's clock: the
	// moment the engine's answer arrived plus Delay, never earlier than the
	// engine's instant. It is zero when not OK.
	Time time.Time

	// Result describes the limit that drove the answer (the one the units
	// wait longest for): Allowed is OK, RetryAfter is Delay, Remaining is
	// what that limit holds at Time after the charge, ResetAfter the time
	// from the decision until it is full.
	Result Result

	l      *PolicyLimiter
	set    *LimitSet
	key    string
	cost   int64
	ticket algo.Ticket
	booked bool // the engine holds a charge to take back
}

// Cancel gives the units back, when called before Time, if no later charge
// of the key relies on them: all of them when the engine's state is still
// what this reservation left (nothing was charged after it, or everything
// charged after it was cancelled first, newest first); nothing otherwise,
// since later reservations were timed behind these units. After Time, or
// for a Reservation that is not OK, it does nothing. Cancel is idempotent.
func (r *Reservation) Cancel(ctx context.Context) error {
	if r == nil || !r.OK || !r.booked {
		return nil
	}
	r.booked = false
	if !time.Now().Before(r.Time) {
		return nil
	}
	if err := r.l.store.Cancel(ctx, r.set.set, NormalizeKey(r.key), r.cost, r.ticket); err != nil {
		return fmt.Errorf("floodgate: policy %s: cancel: %w", r.l.p.name, err)
	}
	return nil
}

// maxWaitOf is how long ctx lets a caller wait: until its deadline, or
// without bound.
func maxWaitOf(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), 0)
	}
	return time.Duration(math.MaxInt64)
}

// ReserveN implements Limiter: it takes cost units for key to be used at
// the earliest instant they fit, if that instant comes before ctx's
// deadline (without a deadline, within the longest a limit can hold:
// algo.MaxReserveAhead beyond its span). A reservation that does not fit
// is not taken: OK is false and nothing is charged. The error is non-nil
// only when the limiter could not decide, as for AllowN.
func (l *PolicyLimiter) ReserveN(ctx context.Context, key string, cost int64) (*Reservation, error) {
	r := new(Reservation)
	if err := l.reserve(ctx, key, cost, r); err != nil {
		return nil, err
	}
	return r, nil
}

// reserve makes a reservation into r, which the caller provides so that
// WaitN keeps it on its stack.
func (l *PolicyLimiter) reserve(ctx context.Context, key string, cost int64, r *Reservation) error {
	if cost < 0 {
		return fmt.Errorf("%w: policy %s: cost %d is negative", ErrInvalidCost, l.p.name, cost)
	}
	set := l.p.setFor(key)
	*r = Reservation{l: l, set: set, key: key, cost: cost}
	if cost > set.set.Capacity() {
		r.Result = set.result(set.set.Impossible(string(SourcePolicy)))
		r.Delay = RetryNever
		return nil
	}
	if !set.set.Reservable() {
		res, err := l.AllowN(ctx, key, cost)
		if err != nil {
			return err
		}
		r.Result, r.OK = res, res.Allowed
		if res.Allowed {
			r.Time = time.Now()
		} else {
			r.Delay = res.RetryAfter
		}
		return nil
	}
	v, t, err := l.store.Reserve(ctx, set.set, NormalizeKey(key), cost, maxWaitOf(ctx))
	if err != nil {
		return fmt.Errorf("floodgate: policy %s: reserve: %w", l.p.name, err)
	}
	if v.Source == string(SourceFailOpen) {
		r.Result = Result{Allowed: v.Allowed, Source: SourceFailOpen, Policy: l.p.name}
	} else {
		r.Result = set.result(v)
	}
	r.OK, r.Delay = v.Allowed, v.RetryAfter
	if r.OK {
		r.Time = time.Now().Add(r.Delay)
		r.ticket, r.booked = t, cost > 0 && r.Result.Source != SourceFailOpen
	}
	return nil
}

// Wait is WaitN with a cost of 1.
func Wait(ctx context.Context, l Limiter, key string) (Result, error) {
	return WaitN(ctx, l, key, 1)
}

// WaitN blocks until cost units for key pass l and returns the Result of
// the decision that admitted them. It asks l.ReserveN for the units and
// sleeps until the instant they were reserved for, so a wrapper that
// decorates ReserveN (metrics, logging) sees every wait. When the units
// cannot pass before ctx's deadline it returns at once with an error
// wrapping ErrWaitDeadline, having charged nothing; when ctx ends while it
// waits, it gives the units back (Reservation.Cancel) and returns ctx's
// error. A cost above a limit's capacity is an error wrapping
// ErrInvalidCost.
//
// When the deadline comes while the engine is asked, the error wraps
// ErrWaitDeadline and context.DeadlineExceeded (whatever the engine's
// client reported, an i/o timeout included). Whether that call charged
// is the engine's: memory answers at once; Redis's script carries the
// deadline and charges nothing when Redis runs it after the deadline on
// its clock (redisstore.Store.Reserve), so a Redis that held the call
// (a long script, a stall) charges nothing for it; a call that Redis ran
// before the deadline and whose answer came back after it is charged.
//
// On token-bucket limits the units are reserved with one engine call and
// callers are served in the order they reserved. A policy with a window
// limit has no future to book into: its Reservation is not OK with the
// wait before the units could pass, WaitN sleeps that long and asks
// again, so it never over-admits, but a caller may lose its turn to one
// that asks at the right moment. A Reservation that is not OK from a
// limiter other than New's is treated the same way: WaitN sleeps for its
// Delay, if that fits before the deadline, and asks again. A ReserveN
// that returns neither a Reservation nor an error is an error.
func WaitN(ctx context.Context, l Limiter, key string, cost int64) (Result, error) {
	pl, direct := l.(*PolicyLimiter)
	for {
		var r *Reservation
		var err error
		if direct {
			// New's limiter keeps the reservation on the stack.
			var rv Reservation
			r, err = &rv, pl.reserve(ctx, key, cost, &rv)
		} else {
			r, err = l.ReserveN(ctx, key, cost)
		}
		if err != nil {
			return Result{}, deadlineCame(ctx, err)
		}
		if r == nil {
			return Result{}, fmt.Errorf("floodgate: policy %s: ReserveN returned neither a reservation nor an error", l.Name())
		}
		if res, done, err := r.settle(ctx); done {
			return res, err
		}
	}
}

// deadlineCame wraps err, the error of asking the engine, in
// ErrWaitDeadline and context.DeadlineExceeded when ctx's deadline came
// while it was asked: the same answer as a wait that would not fit, as the
// caller sees it. The deadline has come when the clock has passed it, also
// while ctx.Err is still nil: a read deadline set to it (a network
// client's) fires on its own timer and may report first.
func deadlineCame(ctx context.Context, err error) error {
	if errors.Is(err, ErrWaitDeadline) {
		return err
	}
	d, ok := ctx.Deadline()
	if !ok || (time.Now().Before(d) && !errors.Is(ctx.Err(), context.DeadlineExceeded)) {
		return err
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w (%w)", err, context.DeadlineExceeded)
	}
	return fmt.Errorf("%w: %w", ErrWaitDeadline, err)
}

// settle waits for r's units: until r.Time when they were taken (giving
// them back if ctx ends first), or, when they could not be taken, for as
// long as they need before asking again. It reports done when the wait is
// over, with its Result and error; false when the caller asks again.
func (r *Reservation) settle(ctx context.Context) (Result, bool, error) {
	if r.OK {
		if err := sleepUntil(ctx, r.Time); err != nil {
			if cerr := r.Cancel(context.WithoutCancel(ctx)); cerr != nil {
				err = errors.Join(err, cerr)
			}
			return r.Result, true, err
		}
		return r.Result, true, nil
	}
	if r.Delay != RetryNever && r.set != nil && r.set.set.Reservable() && r.Result.Source != SourceFailClosed {
		// The engine found no instant before the deadline.
		return r.Result, true, waitTooLong(r.Result, r.Delay)
	}
	// A window limit, or an engine that failed closed: wait until the
	// units could pass, if that comes before the deadline, and ask again.
	if err := retryLater(ctx, r.Result, r.Delay); err != nil {
		return r.Result, true, err
	}
	return Result{}, false, nil
}

// retryLater sleeps for delay, the wait a refused request was given, so
// that its caller may ask again: the rule of every wait that asks again
// (WaitN on a window limit or a closed breaker, WaitAll). It returns at
// once with an error wrapping ErrInvalidCost when delay is RetryNever (the
// cost is above a limit's capacity of res), or ErrWaitDeadline when the
// wait would pass ctx's deadline; ctx's error when ctx ends first.
func retryLater(ctx context.Context, res Result, delay time.Duration) error {
	if delay == RetryNever {
		return fmt.Errorf("%w: policy %s: the cost can never pass %s, whose capacity is %d; lower the cost",
			ErrInvalidCost, res.Policy, res.Limit, res.Limit.Capacity())
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < delay {
		return waitTooLong(res, delay)
	}
	return sleepUntil(ctx, time.Now().Add(max(delay, time.Microsecond)))
}

// waitTooLong is the error of a wait of delay that ctx's deadline does
// not leave time for.
func waitTooLong(res Result, delay time.Duration) error {
	return fmt.Errorf("%w: policy %s: the units would wait %s", ErrWaitDeadline, res.Policy, delay)
}

// sleepUntil returns at t, or with ctx's error if it ends first.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
