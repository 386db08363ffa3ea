package failover

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/internal/isnil"
)

// Options configures a Store.
type Options struct {
	// Mode is what a decision does when the remote store fails. It must
	// be set: there is no safe default (see Mode).
	Mode Mode

	// Local is the store LocalFallback decides on, typically a
	// memstore.Store of its own. It must be set for LocalFallback and
	// only for it.
	Local floodgate.Store

	// Guard configures the timeout and the circuit breaker. It is ignored
	// when the remote store given to New is already a *Guard.
	Guard GuardOptions
}

// A Store is a floodgate.Store over a remote store with an explicit failure
// policy: when the remote store fails, times out or is cut off by the
// breaker, the policy decides instead and no error is returned. Decisions
// the remote store makes pass through unchanged, Source included.
//
// A Store is safe for concurrent use.
type Store struct {
	guard *Guard
	mode  Mode
	local floodgate.Store
}

var _ floodgate.Store = (*Store)(nil)

// New returns a Store deciding on remote under o.Mode. If remote is a
// *Guard it is used as it is (several Stores over one Redis then share one
// breaker), else New wraps it in a Guard made with o.Guard.
func New(remote floodgate.Store, o Options) (*Store, error) {
	if !o.Mode.valid() {
		return nil, fmt.Errorf("failover: choose a failure policy (FailOpen, FailClosed or LocalFallback); got %s", o.Mode)
	}
	if isnil.Value(remote) {
		return nil, fmt.Errorf("failover: no remote store given (the store is nil: %T)", remote)
	}
	if hasLocal := !isnil.Value(o.Local); (o.Mode == LocalFallback) != hasLocal {
		if !hasLocal {
			return nil, fmt.Errorf("failover: LocalFallback needs a Local store to decide on (Local is nil: %T)", o.Local)
		}
		return nil, fmt.Errorf("failover: Local is used only by LocalFallback, not by %s", o.Mode)
	}
	if _, ok := remote.(*Store); ok {
		return nil, errors.New("failover: the remote store already has a failure policy; wrap the engine itself")
	}
	g, isGuard := remote.(*Guard)
	if !isGuard {
		var err error
		if g, err = NewGuard(remote, o.Guard); err != nil {
			return nil, err
		}
	}
	return &Store{guard: g, mode: o.Mode, local: o.Local}, nil
}

// Mode returns the store's failure mode.
func (s *Store) Mode() Mode { return s.mode }

// Guard returns the Guard that calls the remote store, for its State and
// Stats.
func (s *Store) Guard() *Guard { return s.guard }

// Decide implements floodgate.Store. The error is non-nil only when the
// caller's context ended before the remote store answered (the request is
// then undecided, whatever the policy) or when LocalFallback's local store
// fails.
func (s *Store) Decide(ctx context.Context, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	v, st, err := s.guard.call(ctx, OpDecide, set, key, cost, nil)
	switch st {
	case ok:
		return v, nil
	case canceled, refused:
		return algo.Verdict{}, &Error{Op: OpDecide, Policy: set.Policy(), Err: err}
	}
	// With the state unknown, the Verdict names the limit a fresh key would
	// report (the one with the smallest capacity) and claims no quota:
	// Remaining 0 rather than a made-up number.
	switch s.mode {
	case FailOpen:
		return algo.Verdict{Decision: algo.Decision{Allowed: true}, Index: set.Impossible("").Index, Source: string(floodgate.SourceFailOpen)}, nil
	case FailClosed:
		return algo.Verdict{Decision: algo.Decision{RetryAfter: s.guard.RetryIn()}, Index: set.Impossible("").Index, Source: string(floodgate.SourceFailClosed)}, nil
	}
	v, err = s.local.Decide(ctx, set, key, cost)
	if err != nil {
		return algo.Verdict{}, fmt.Errorf("failover: policy %s: local fallback: %w", set.Policy(), err)
	}
	v.Source = string(floodgate.SourceLocalFallback)
	return v, nil
}

// Refund implements floodgate.Store. A refund the remote store cannot make
// is counted and reported through OnError but not returned: losing it
// leaves the key charged, which errs strict, and no policy wants a request
// failed over it. Under LocalFallback a refund the remote store did not
// take goes to the local store, where the charge most likely was.
func (s *Store) Refund(ctx context.Context, set *algo.Set, key string, cost int64) error {
	_, st, err := s.guard.call(ctx, OpRefund, set, key, cost, nil)
	if st == canceled || st == refused {
		return &Error{Op: OpRefund, Policy: set.Policy(), Err: err}
	}
	if st != ok && s.mode == LocalFallback {
		if err := s.local.Refund(ctx, set, key, cost); err != nil {
			return fmt.Errorf("failover: policy %s: local refund: %w", set.Policy(), err)
		}
	}
	return nil
}

// Reset implements floodgate.Store. Unlike a decision, a reset that does
// not reach the remote store returns its *Error: it is an operator's
// action, and the operator must learn that the key is still limited.
// Under LocalFallback the local store is reset as well, since the key may
// have been charged there during an outage.
func (s *Store) Reset(ctx context.Context, set *algo.Set, key string) error {
	_, st, err := s.guard.call(ctx, OpReset, set, key, 0, nil)
	var errs []error
	if st != ok {
		errs = append(errs, &Error{Op: OpReset, Policy: set.Policy(), Err: err})
	}
	if s.mode == LocalFallback {
		if err := s.local.Reset(ctx, set, key); err != nil {
			errs = append(errs, fmt.Errorf("failover: policy %s: local reset: %w", set.Policy(), err))
		}
	}
	return errors.Join(errs...)
}

// ValidateLimit rejects a limit that the remote store, or the local store
// of LocalFallback, cannot keep.
func (s *Store) ValidateLimit(l floodgate.Limit) error {
	if err := s.guard.ValidateLimit(l); err != nil {
		return err
	}
	if s.local != nil {
		return s.local.ValidateLimit(l)
	}
	return nil
}
