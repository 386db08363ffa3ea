package floodgate

import (
	"context"
	"errors"
	"fmt"
)

// A Check is one link of a chain: a limiter, the key it limits and the cost.
// Its zero values are safe: a Check{Limiter: l, Key: k} charges one unit,
// as one request costs. Asking without charging is said with Peek, reading
// the state without asking anything with Look.
type Check struct {
	// Limiter decides the check. It must be set.
	Limiter Limiter

	// Key is the key the check limits. The zero value "" is a key like any
	// other, one bucket shared by every check that leaves it empty (the
	// global link of a chain).
	Key string

	// Cost is the units the check is about, charged or, with Peek, asked
	// about. Zero means 1, the cost of one request, so that a check whose
	// Cost was never set limits; a negative Cost is an error
	// (ErrInvalidCost). Units reports what is charged.
	Cost int64

	// Peek makes the check ask, charging nothing, what charging it would
	// answer now: it passes when its units (Cost, 1 when Cost is 0) would
	// pass (PeekN). Check{Limiter: l, Key: k, Peek: true} asks whether the
	// next request would pass. The zero value, false, charges.
	Peek bool

	// Look makes the check read its key's state and pass, charging nothing
	// and asking nothing of the limit (AllowN with a cost of 0): its Result
	// shows the quota left, for a request that costs nothing (an OPTIONS
	// request, an Envoy hits_addend of 0). Cost and Peek are then not used.
	Look bool

	// Result is set by AllowAll to the check's own Result, for every check
	// it decided, so that a front end can describe each of them (the
	// RateLimit header lists every quota with its own values). Checks after
	// a denial are not decided and keep the zero Result.
	Result Result
}

// AllowAll decides checks in order (for example global → per user → per IP)
// and stops at the first denial. Checks that had already passed are refunded,
// so a request that is denied anywhere consumes nothing anywhere, except on
// a key where a reservation made meanwhile waits behind the units (RefundN
// then gives nothing back, so that the reservation never over-admits). It returns
// the Result of the check that drove the answer and that check's index: when
// one denies, that check; when every check passes, the most restrictive one,
// the fewest units remaining among the checks that read state (a fail-open
// Result read none, and is chosen only when every check failed open).
//
// An error from a check is returned with the refunds done, with the index of
// the failing check and the zero Result.
func AllowAll(ctx context.Context, checks ...Check) (Result, int, error) {
	var best Result
	drove := 0
	for i := range checks {
		c := &checks[i]
		res, err := c.Run(ctx)
		if err != nil || !res.Allowed {
			if rerr := refundChecks(ctx, checks[:i]); rerr != nil {
				err = errors.Join(err, rerr)
			}
			if err != nil {
				return Result{}, i, err
			}
			return res, i, nil
		}
		if i == 0 || best.Source == SourceFailOpen || (res.Source != SourceFailOpen && res.Remaining < best.Remaining) {
			best, drove = res, i
		}
	}
	return best, drove, nil
}

// WaitAll blocks until every check passes at once, deciding them as
// AllowAll does, and returns what AllowAll returns for the decision that
// admitted them. Between tries it charges nothing: a chain that is denied
// is refunded, and WaitAll sleeps for the denying check's RetryAfter
// before it asks again, so no link is ever held while another is waited
// for and no limit admits more than it allows. Waiters are not served in
// order: one that asks at the right moment may pass before one that has
// waited longer (a single token-bucket limit is fair under WaitN).
//
// It returns an error wrapping ErrWaitDeadline, at once and having charged
// nothing, when the chain cannot pass before ctx's deadline; ctx's error
// when ctx ends while it sleeps; an error wrapping ErrInvalidCost when a
// check's cost can never pass; and the error of a check that could not be
// decided, with the index of that check, as AllowAll does.
func WaitAll(ctx context.Context, checks ...Check) (Result, int, error) {
	for {
		res, i, err := AllowAll(ctx, checks...)
		if err != nil || res.Allowed {
			return res, i, err
		}
		if err := retryLater(ctx, res, res.RetryAfter); err != nil {
			return res, i, err
		}
	}
}

func refundChecks(ctx context.Context, checks []Check) error {
	var errs []error
	for i := range checks {
		c := &checks[i]
		if err := c.Limiter.RefundN(ctx, c.Key, c.Units()); err != nil {
			// The key is the client's; only its redacted form goes into an
			// error that ends up in logs.
			errs = append(errs, fmt.Errorf("refund %s: %w", RedactKey(c.Key), err))
		}
	}
	return errors.Join(errs...)
}

// Units is what the check charges: 0 for a peek or a look, else Cost, 1
// when Cost is 0.
func (c *Check) Units() int64 {
	if c.Peek || c.Look {
		return 0
	}
	return c.units()
}

// units is what the check is about, charged or peeked at: Cost, 1 when
// Cost is 0.
func (c *Check) units() int64 {
	if c.Cost == 0 {
		return 1
	}
	return c.Cost
}

// Run decides the check alone, as AllowAll decides each link, and sets
// its Result: AllowN with Units, for a peek PeekN with the units a charge
// would take, for a look AllowN with a cost of 0.
func (c *Check) Run(ctx context.Context) (Result, error) {
	var res Result
	var err error
	switch {
	case c.Look:
		res, err = c.Limiter.AllowN(ctx, c.Key, 0)
	case c.Peek:
		res, err = PeekN(ctx, c.Limiter, c.Key, c.units())
	default:
		res, err = c.Limiter.AllowN(ctx, c.Key, c.Units())
	}
	c.Result = res
	return res, err
}

// PeekN reports whether cost units for key would pass now, charging
// nothing: the Result is the key's state (Remaining, ResetAfter) as a
// look (AllowN with a cost of 0) sees it, Allowed when cost fits in it,
// and, when it does not, the RetryAfter of cost. It is what "may the next
// request pass?" asks, where AllowN with a cost of 0 always passes. The
// RetryAfter of a refusal comes from asking the limiter for cost itself,
// which charges nothing when refused; should the key have refilled in
// between, the units pass and are refunded at once. A negative cost is an
// error wrapping ErrInvalidCost.
func PeekN(ctx context.Context, l Limiter, key string, cost int64) (Result, error) {
	if cost < 0 {
		return Result{Policy: l.Name()}, fmt.Errorf("%w: policy %s: a peek at %d units; costs are 0 or more", ErrInvalidCost, l.Name(), cost)
	}
	res, err := l.AllowN(ctx, key, 0)
	if err != nil || cost == 0 || res.Source == SourceFailOpen || res.Set != nil && res.Remaining >= cost {
		return res, err
	}
	res, err = l.AllowN(ctx, key, cost)
	if err != nil || !res.Allowed {
		return res, err
	}
	if err := l.RefundN(ctx, key, cost); err != nil {
		return res, err
	}
	res.Remaining = min(res.Remaining+cost, res.Limit.Capacity())
	return res, nil
}
