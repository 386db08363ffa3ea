package floodgate

import (
	"context"
	"errors"
	"fmt"
)

// A Check is one link of a chain: a limiter, the key it limits and the cost.
type Check struct {
	Limiter Limiter
	Key     string
	Cost    int64
}

// AllowAll decides checks in order (for example global → per user → per IP)
// and stops at the first denial. Checks that had already passed are refunded,
// so a request that is denied anywhere consumes nothing anywhere. When every
// check passes, the Result is the most restrictive one: the fewest units
// remaining among the checks that read state (a fail-open Result read none,
// and is chosen only when every check failed open). When one denies, it is
// that check's Result.
//
// An error from a check is returned with the refunds done; the Result is then
// the zero Result.
func AllowAll(ctx context.Context, checks ...Check) (Result, error) {
	var best Result
	for i, c := range checks {
		res, err := c.Limiter.AllowN(ctx, c.Key, c.Cost)
		if err != nil || !res.Allowed {
			if rerr := refundChecks(ctx, checks[:i]); rerr != nil {
				err = errors.Join(err, rerr)
			}
			if err != nil {
				return Result{}, err
			}
			return res, nil
		}
		// A fail-open Result read no state (its Remaining is 0 by default):
		// it describes the request only when no check read any.
		if i == 0 || best.Source == SourceFailOpen || (res.Source != SourceFailOpen && res.Remaining < best.Remaining) {
			best = res
		}
	}
	return best, nil
}

func refundChecks(ctx context.Context, checks []Check) error {
	var errs []error
	for _, c := range checks {
		if err := c.Limiter.RefundN(ctx, c.Key, c.Cost); err != nil {
			errs = append(errs, fmt.Errorf("refund %q: %w", c.Key, err))
		}
	}
	return errors.Join(errs...)
}
