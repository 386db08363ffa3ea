// Package settle holds the one rule by which a charge made up front is
// settled once the real cost is known (a response header's cost, the
// tokens an LLM API reports): httplimit's rules and outbound's token
// budget both settle through it.
package settle

import (
	"context"

	"github.com/floodgate-go/floodgate"
)

// Charge settles a check that was charged c.Units() up front at the
// cost the response reported: the difference is refunded or charged, and
// a negative reported cost leaves the up-front charge as it is (the cost
// is unknown). An extra charge that does not fit now is charged into
// debt: the budget is emptied and the rest books the units ahead
// (Limiter.ReserveN, in pieces of at most a limit's capacity), so a
// response that reports more than a limit holds (an LLM reply bigger than
// the hour's token budget) keeps the key refused until the limit has
// refilled for all of it. A limit keeps at most its span plus
// algo.MaxReserveAhead of debt; a policy with a window limit, which
// cannot carry debt, is emptied instead.
func Charge(ctx context.Context, c *floodgate.Check, actual int64) error {
	if actual < 0 {
		return nil
	}
	extra := actual - c.Units()
	switch {
	case extra < 0:
		return c.Limiter.RefundN(ctx, c.Key, -extra)
	case extra == 0:
		return nil
	}
	set := c.Result.Set
	if set == nil {
		// A check decided alone keeps its Result in the verdict: ask.
		res, err := c.Limiter.AllowN(ctx, c.Key, 0)
		if err != nil {
			return err
		}
		set = res.Set
	}
	piece := extra
	if set != nil {
		piece = min(piece, set.Capacity())
	}
	for extra > 0 {
		// Without a deadline: debt is booked as far ahead as a limit holds.
		r, err := c.Limiter.ReserveN(context.WithoutCancel(ctx), c.Key, min(piece, extra))
		if err != nil {
			return err
		}
		if !r.OK {
			// No more debt can be booked (a window limit, or the most a
			// limit carries): empty what is left.
			res, err := c.Limiter.AllowN(ctx, c.Key, 0)
			if err != nil || res.Remaining <= 0 {
				return err
			}
			_, err = c.Limiter.AllowN(ctx, c.Key, min(res.Remaining, extra))
			return err
		}
		extra -= min(piece, extra)
	}
	return nil
}
