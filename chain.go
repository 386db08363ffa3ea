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

	// Result is set by AllowAll to the check's own Result, for every check
	// it decided, so that a front end can describe each of them (the
	// RateLimit header lists every quota with its own values). Checks after
	// a denial are not decided and keep the zero Result.
	Result Result
}

// AllowAll decides checks in order (for example global → per user → per IP)
// and stops at the first denial. Checks that had already passed are refunded,
// so a request that is denied anywhere consumes nothing anywhere. It returns
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
		res, err := c.Limiter.AllowN(ctx, c.Key, c.Cost)
		c.Result = res
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

func refundChecks(ctx context.Context, checks []Check) error {
	var errs []error
	for i := range checks {
		c := &checks[i]
		if err := c.Limiter.RefundN(ctx, c.Key, c.Cost); err != nil {
			// The key is the client's; only its redacted form goes into an
			// error that ends up in logs.
			errs = append(errs, fmt.Errorf("refund %s: %w", RedactKey(c.Key), err))
		}
	}
	return errors.Join(errs...)
}
