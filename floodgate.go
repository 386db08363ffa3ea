// Package floodgate is rate limiting for Go services: exact limiters, an
// in-memory engine (package memstore), a Redis engine for limits shared by
// many instances (package redisstore), and net/http middleware (package
// httplimit).
//
// Every part answers one question: may cost units for key pass under a
// policy's limits, now? A Policy names one or more Limits that must all pass;
// a Store keeps their state; New joins the two into a Limiter:
//
//	store := memstore.New(memstore.Options{})
//	defer store.Close()
//	lim, err := floodgate.New(store, floodgate.Policy{
//		Name:   "api",
//		Limits: []floodgate.Limit{floodgate.PerSecond(10), floodgate.PerHour(1000)},
//	})
//	res, err := lim.Allow(ctx, "user:42")
//
// The semantics every engine keeps:
//
//   - A denied request consumes nothing. A policy with several limits is
//     all-or-nothing: if one limit denies, none is charged.
//   - A cost of 0 peeks without charging; a negative cost is an error; a cost
//     above a limit's capacity is denied with RetryAfter == RetryNever.
//   - Time is integer, so Remaining and RetryAfter are exact: the request
//     passes at now+RetryAfter, not a nanosecond later or earlier.
//   - State that carries no information (a full bucket) is dropped.
//   - Keys longer than MaxKeyLen bytes are replaced by their SHA-256 digest.
package floodgate

import (
	"context"
	"fmt"
)

// A Limiter decides for keys under one policy. Implementations are safe for
// concurrent use.
type Limiter interface {
	// Allow is AllowN with a cost of 1.
	Allow(ctx context.Context, key string) (Result, error)

	// AllowN reports whether cost units for key may pass now and, if so,
	// charges them. A cost of 0 peeks without charging. The error is non-nil
	// only when the limiter could not decide (an invalid cost, an engine
	// failure that its failure policy does not absorb); the Result is then
	// not a decision.
	AllowN(ctx context.Context, key string, cost int64) (Result, error)

	// RefundN gives back up to cost units charged earlier to key, e.g. when
	// a request that was counted turns out not to count (a successful login
	// under a failures-only limit). It never raises a key above full
	// capacity.
	RefundN(ctx context.Context, key string, cost int64) error

	// Reset forgets key's state: its next request meets full capacity.
	Reset(ctx context.Context, key string) error
}

// A Store keeps the state of limits and decides on it. Engines (memstore,
// redisstore) and compositions (hybrid, failure policies) are Stores. The
// key is already normalised; cost is between 0 and set.Capacity().
type Store interface {
	// Decide charges cost units to key under every rule of set, all or
	// nothing, and returns the combined Result (see LimitSet.Combine).
	Decide(ctx context.Context, set *LimitSet, key string, cost int64) (Result, error)

	// Refund gives back up to cost units to key under every rule of set.
	Refund(ctx context.Context, set *LimitSet, key string, cost int64) error

	// Reset drops key's state under every rule of set.
	Reset(ctx context.Context, set *LimitSet, key string) error
}

// PolicyLimiter is the Limiter that New builds: a validated Policy over a
// Store.
type PolicyLimiter struct {
	store Store
	p     *compiled
}

// New validates p and returns a Limiter that keeps its state in store. A
// limit the store cannot keep (see LimitValidator) is an error here, never
// at request time.
func New(store Store, p Policy) (*PolicyLimiter, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: policy %s: no store given", ErrInvalidPolicy, p.Name)
	}
	v, _ := store.(LimitValidator)
	c, err := compilePolicy(p, v)
	if err != nil {
		return nil, err
	}
	return &PolicyLimiter{store: store, p: c}, nil
}

// Name returns the policy's name.
func (l *PolicyLimiter) Name() string { return l.p.name }

// LimitsFor returns the limit set that applies to key: its override, its
// tier or the policy's defaults. Front ends use it to describe the policy
// (for example in a RateLimit-Policy header).
func (l *PolicyLimiter) LimitsFor(key string) *LimitSet { return l.p.setFor(key) }

// Allow is AllowN with a cost of 1.
func (l *PolicyLimiter) Allow(ctx context.Context, key string) (Result, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN implements Limiter.
func (l *PolicyLimiter) AllowN(ctx context.Context, key string, cost int64) (Result, error) {
	if cost < 0 {
		return Result{Policy: l.p.name}, fmt.Errorf("%w: policy %s: cost %d is negative; use 0 to peek", ErrInvalidCost, l.p.name, cost)
	}
	set := l.p.setFor(key)
	if cost > set.capacity {
		return set.Impossible(), nil
	}
	res, err := l.store.Decide(ctx, set, NormalizeKey(key), cost)
	if err != nil {
		return Result{Policy: l.p.name}, fmt.Errorf("floodgate: policy %s: decide: %w", l.p.name, err)
	}
	res.Policy = l.p.name
	return res, nil
}

// RefundN implements Limiter.
func (l *PolicyLimiter) RefundN(ctx context.Context, key string, cost int64) error {
	if cost < 0 {
		return fmt.Errorf("%w: policy %s: refund of %d is negative", ErrInvalidCost, l.p.name, cost)
	}
	if cost == 0 {
		return nil
	}
	if err := l.store.Refund(ctx, l.p.setFor(key), NormalizeKey(key), cost); err != nil {
		return fmt.Errorf("floodgate: policy %s: refund: %w", l.p.name, err)
	}
	return nil
}

// Reset implements Limiter.
func (l *PolicyLimiter) Reset(ctx context.Context, key string) error {
	if err := l.store.Reset(ctx, l.p.setFor(key), NormalizeKey(key)); err != nil {
		return fmt.Errorf("floodgate: policy %s: reset: %w", l.p.name, err)
	}
	return nil
}
