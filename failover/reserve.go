package failover

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
)

// The reservation operations. Their failures count in Stats with Decide's
// (a reservation) and Refund's (a cancellation).
const (
	OpReserve Op = "reserve"
	OpCancel  Op = "cancel"
)

// reserve makes a guarded reservation; the ticket is valid when the status
// is ok.
func (g *Guard) reserve(ctx context.Context, set *algo.Set, key string, cost int64, maxWait time.Duration) (algo.Verdict, algo.Ticket, status, error) {
	var ticket algo.Ticket
	v, st, err := g.call(ctx, OpReserve, set, key, cost, func(ctx context.Context) (algo.Verdict, error) {
		v, t, err := g.remote.Reserve(ctx, set, key, cost, maxWait)
		ticket = t
		return v, err
	})
	if st != ok {
		return algo.Verdict{}, algo.Ticket{}, st, err
	}
	return v, ticket, st, nil
}

func (g *Guard) cancel(ctx context.Context, set *algo.Set, key string, cost int64, t algo.Ticket) (status, error) {
	_, st, err := g.call(ctx, OpCancel, set, key, cost, func(ctx context.Context) (algo.Verdict, error) {
		return algo.Verdict{}, g.remote.Cancel(ctx, set, key, cost, t)
	})
	return st, err
}

// Reserve asks the remote store for a reservation, under the Guard's
// timeout and breaker; see Decide for errors. A reservation whose answer
// was lost to the timeout may have been booked, and is not used: that
// errs strict.
func (g *Guard) Reserve(ctx context.Context, set *algo.Set, key string, cost int64, maxWait time.Duration) (algo.Verdict, algo.Ticket, error) {
	v, t, st, err := g.reserve(ctx, set, key, cost, maxWait)
	if st != ok {
		return algo.Verdict{}, algo.Ticket{}, &Error{Op: OpReserve, Policy: set.Policy(), Err: err}
	}
	return v, t, nil
}

// Cancel asks the remote store to take a reservation back; see Decide for
// errors.
func (g *Guard) Cancel(ctx context.Context, set *algo.Set, key string, cost int64, t algo.Ticket) error {
	if st, err := g.cancel(ctx, set, key, cost, t); st != ok {
		return &Error{Op: OpCancel, Policy: set.Policy(), Err: err}
	}
	return nil
}

// Paths of a Store's tickets.
const (
	pathRemote uint8 = iota
	pathLocal
)

// Reserve implements floodgate.Store with the Store's failure mode, as
// Decide: FailOpen grants the units at once without charging anything,
// FailClosed refuses them for as long as the breaker stays open
// (RetryAfter), LocalFallback reserves on the local store.
func (s *Store) Reserve(ctx context.Context, set *algo.Set, key string, cost int64, maxWait time.Duration) (algo.Verdict, algo.Ticket, error) {
	v, t, st, err := s.guard.reserve(ctx, set, key, cost, maxWait)
	switch st {
	case ok:
		return v, t, nil
	case canceled, refused:
		return algo.Verdict{}, algo.Ticket{}, &Error{Op: OpReserve, Policy: set.Policy(), Err: err}
	}
	switch s.mode {
	case FailOpen:
		return algo.Verdict{Decision: algo.Decision{Allowed: true}, Index: set.Impossible("").Index, Source: string(floodgate.SourceFailOpen)}, algo.Ticket{}, nil
	case FailClosed:
		return algo.Verdict{Decision: algo.Decision{RetryAfter: s.guard.RetryIn()}, Index: set.Impossible("").Index, Source: string(floodgate.SourceFailClosed)}, algo.Ticket{}, nil
	}
	v, t, err = s.local.Reserve(ctx, set, key, cost, maxWait)
	if err != nil {
		return algo.Verdict{}, algo.Ticket{}, fmt.Errorf("failover: policy %s: local fallback: %w", set.Policy(), err)
	}
	v.Source = string(floodgate.SourceLocalFallback)
	t.Path = pathLocal
	return v, t, nil
}

// Cancel implements floodgate.Store: the reservation goes back to the
// store that booked it. A cancellation the remote store does not take is
// counted and reported through OnError but not returned: the units stay
// charged, which errs strict.
func (s *Store) Cancel(ctx context.Context, set *algo.Set, key string, cost int64, t algo.Ticket) error {
	if t.Path == pathLocal {
		if s.local == nil {
			return nil
		}
		if err := s.local.Cancel(ctx, set, key, cost, t); err != nil {
			return fmt.Errorf("failover: policy %s: local cancel: %w", set.Policy(), err)
		}
		return nil
	}
	if st, err := s.guard.cancel(ctx, set, key, cost, t); st == canceled || st == refused {
		return &Error{Op: OpCancel, Policy: set.Policy(), Err: err}
	}
	return nil
}
