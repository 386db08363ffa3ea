package hybrid

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/failover"
)

// Paths of a hybrid ticket.
const (
	pathBoth  uint8 = iota // booked by the filter (Inner) and the global store
	pathLocal              // the global store was down: booked by the filter alone
)

// Reserve implements floodgate.Store. The local filter reserves its share
// first: a reservation it cannot fit in maxWait never reaches Redis
// (SourceLocal). Redis then reserves the limit itself, shared by every
// instance in one script call (SourceGlobal); the units may be used at the
// later of the two instants. Unlike a decision, a reservation that Redis
// refuses (it does not fit before the deadline) is taken back from the
// filter: its units lie in the future, and keeping them would push every
// later wait of this instance back. When Redis fails, the filter's
// reservation stands (floodgate.SourceLocalFallback).
func (s *Store) Reserve(ctx context.Context, set *algo.Set, key string, cost int64, maxWait time.Duration) (algo.Verdict, algo.Ticket, error) {
	ls, err := s.localSet(set)
	if err != nil {
		return algo.Verdict{}, algo.Ticket{}, err
	}
	lcost := min(cost, ls.Capacity())
	lv, lt, err := s.local.Reserve(ctx, ls, key, lcost, maxWait)
	if err != nil {
		return algo.Verdict{}, algo.Ticket{}, fmt.Errorf("hybrid: policy %s: local reserve: %w", set.Policy(), err)
	}
	if !lv.Allowed {
		lv.Source = SourceLocal
		return lv, algo.Ticket{}, nil
	}
	undo := func() {
		if lcost > 0 {
			// The units were never handed out, even if their instant has
			// come: the ticket says they are not yet due.
			t := lt
			t.At = math.MaxInt64
			_ = s.local.Cancel(context.WithoutCancel(ctx), ls, key, lcost, t)
		}
	}
	gv, gt, err := s.guard.Reserve(ctx, set, key, cost, maxWait)
	if err == nil {
		if !gv.Allowed {
			undo()
		} else {
			gv.RetryAfter = max(gv.RetryAfter, lv.RetryAfter)
			gt.Inner, gt.Path = &lt, pathBoth
		}
		gv.Source = SourceGlobal
		return gv, gt, nil
	}
	if ctx.Err() != nil || failover.Refusal(err) {
		undo()
		return algo.Verdict{}, algo.Ticket{}, err
	}
	lv.Source = string(floodgate.SourceLocalFallback)
	lt.Path = pathLocal
	return lv, lt, nil
}

// Cancel implements floodgate.Store: it takes the reservation back from
// the filter and from Redis. A cancellation Redis does not take is counted
// by the Guard but not returned: the units stay charged, which errs
// strict.
func (s *Store) Cancel(ctx context.Context, set *algo.Set, key string, cost int64, t algo.Ticket) error {
	ls, err := s.localSet(set)
	if err != nil {
		return err
	}
	lcost := min(cost, ls.Capacity())
	lt := t
	if t.Path == pathBoth {
		if t.Inner == nil {
			return errors.New("hybrid: cancel: the ticket was not made by this store")
		}
		lt = *t.Inner
	}
	var errs []error
	if err := s.local.Cancel(ctx, ls, key, lcost, lt); err != nil {
		errs = append(errs, fmt.Errorf("hybrid: policy %s: local cancel: %w", set.Policy(), err))
	}
	if t.Path == pathBoth {
		if err := s.guard.Cancel(ctx, set, key, cost, t); err != nil && ctx.Err() != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
