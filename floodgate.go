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
//	res, err := floodgate.Allow(ctx, lim, "user:42")
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
//
// A caller of someone else's limited API waits instead of being refused:
// Wait blocks until the units pass (or returns at once, charging nothing,
// when they cannot before the context's deadline), and ReserveN takes the
// units now for the exact instant they fit, which a Reservation's Cancel
// gives back. On Redis the waiting callers of every instance share one
// budget and one line. See docs/waiting.md.
package floodgate

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/internal/isnil"
)

// A Limiter decides for keys under one policy. Its methods are the
// primitives every engine and wrapper keeps; everything else is built on
// them: Allow, PeekN, Check, AllowAll and WaitAll on AllowN (and RefundN),
// Wait and WaitN on ReserveN. So a wrapper (metrics,
// logging, a deny list) that embeds the Limiter it wraps and overrides one
// method is honoured by every caller of that method's helpers.
// Implementations are safe for concurrent use.
//
// A wrapper exposes the Limiter it wraps with a method Unwrap() Limiter,
// so that As finds a capability (Describer) anywhere in a chain of
// wrappers.
type Limiter interface {
	// Name is the name of the policy the limiter decides for. Two limiters
	// of one name on one store share their state.
	Name() string

	// AllowN reports whether cost units for key may pass now and, if so,
	// charges them. A cost of 0 peeks without charging. The error is non-nil
	// only when the limiter could not decide (an invalid cost, a closed
	// store, an engine failure that its failure policy does not absorb);
	// the Result is then not a decision.
	AllowN(ctx context.Context, key string, cost int64) (Result, error)

	// RefundN gives back up to cost units charged earlier to key, e.g. when
	// a request that was counted turns out not to count (a successful login
	// under a failures-only limit). It never raises a key above full
	// capacity. A token bucket gives back the newest units charged, and
	// nothing while the key holds a reservation not yet due, which was
	// timed behind them (see algo.Transition.Reserved).
	RefundN(ctx context.Context, key string, cost int64) error

	// Reset forgets key's state: its next request meets full capacity. It
	// lifts the key's penalty (Policy.Penalty) too.
	Reset(ctx context.Context, key string) error

	// ReserveN takes cost units for key now, to be used at the instant the
	// Reservation names: the earliest at which they fit, if it comes
	// before ctx's deadline. Otherwise nothing is charged and the
	// Reservation is not OK. Cancel gives the units back.
	ReserveN(ctx context.Context, key string, cost int64) (*Reservation, error)
}

// A Describer tells the limits a Limiter applies, for pages and tools that
// show them (the status page, the daemon's reload). New's PolicyLimiter is
// one; find one behind wrappers with As[Describer].
type Describer interface {
	// LimitsFor returns the limit set that applies to key: its override,
	// its tier or the policy's defaults. It is never nil.
	LimitsFor(key string) *LimitSet

	// Overrides returns the keys that have limits of their own, sorted;
	// LimitsFor tells each one's limits.
	Overrides() []string
}

// As returns the first limiter in l's chain of wrappers that is a T, and
// true; the zero T and false when none is. The chain is l, then, while the
// limiter at hand has a method Unwrap() Limiter, what that returns, up to a
// limiter without one or a nil; as errors.As walks wrapped errors. T is
// usually an interface such as Describer, or a concrete type such as
// *PolicyLimiter.
func As[T any](l Limiter) (T, bool) {
	for l != nil {
		if t, ok := l.(T); ok {
			return t, true
		}
		u, ok := l.(interface{ Unwrap() Limiter })
		if !ok {
			break
		}
		l = u.Unwrap()
	}
	var zero T
	return zero, false
}

// A Store keeps the state of limits and decides on it. Engines (memstore,
// redisstore) and compositions (hybrid, failover) are Stores; package algo
// holds what they decide with. The key is already normalised (NormalizeKey)
// and cost is between 0 and set.Capacity().
type Store interface {
	// Decide charges cost units to key under every transition of set, all
	// or nothing, and returns the combined Verdict (algo.Set.Combine).
	Decide(ctx context.Context, set *algo.Set, key string, cost int64) (algo.Verdict, error)

	// Refund gives back up to cost units to key under every transition of
	// set.
	Refund(ctx context.Context, set *algo.Set, key string, cost int64) error

	// Reset drops key's state under every transition of set.
	Reset(ctx context.Context, set *algo.Set, key string) error

	// Reserve charges cost units to key under every transition of set for
	// the earliest instant at which all of them fit, if that instant is at
	// most maxWait away (clamped by set.MaxWait): it is algo.Set.Reserve,
	// atomic per key. The Verdict is allowed when charged, its RetryAfter
	// the wait; the Ticket is what Cancel needs. set is Reservable: the
	// Limiter decides window limits with Decide.
	Reserve(ctx context.Context, set *algo.Set, key string, cost int64, maxWait time.Duration) (algo.Verdict, algo.Ticket, error)

	// Cancel takes back a reservation of cost units that Reserve booked
	// under t, if its instant has not come and no later charge relies on
	// it (algo.Transition.Unreserve).
	Cancel(ctx context.Context, set *algo.Set, key string, cost int64, t algo.Ticket) error

	// ValidateLimit reports whether the store can keep l, e.g. an engine
	// whose clock ticks in microseconds cannot keep a finer interval. New
	// asks it about every limit, so such limits fail at construction, not on
	// a request. A composition asks every store it decides with.
	ValidateLimit(l Limit) error
}

// PolicyLimiter is the Limiter that New builds: a validated Policy over a
// Store.
type PolicyLimiter struct {
	store Store
	p     *compiled
}

var (
	_ Limiter   = (*PolicyLimiter)(nil)
	_ Describer = (*PolicyLimiter)(nil)
)

// New validates p and returns a Limiter that keeps its state in store. A
// limit the store cannot keep (Store.ValidateLimit) is an error here, never
// at request time.
func New(store Store, p Policy) (*PolicyLimiter, error) {
	if isnil.Value(store) {
		return nil, fmt.Errorf("%w: policy %s: no store given (the store is nil: %T)", ErrInvalidPolicy, p.Name, store)
	}
	c, err := compilePolicy(p, store.ValidateLimit)
	if err != nil {
		return nil, err
	}
	return &PolicyLimiter{store: store, p: c}, nil
}

// Name returns the policy's name.
func (l *PolicyLimiter) Name() string { return l.p.name }

// LimitsFor implements Describer: the limit set that applies to key, its
// override, its tier or the policy's defaults.
func (l *PolicyLimiter) LimitsFor(key string) *LimitSet { return l.p.setFor(key) }

// Overrides implements Describer: the keys the policy overrides
// (Policy.Overrides), sorted.
func (l *PolicyLimiter) Overrides() []string {
	out := make([]string, 0, len(l.p.overrides))
	for k := range l.p.overrides {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Derive returns a limiter of the same policy, store and penalty that
// applies limits to every key, keeping its state apart from the policy's
// under the set variant (LimitSet.Variant), which must start with
// "runtime:". It is how limits set while the service runs (package
// override) are decided: a key's own state under the file's limits is left
// as it was, and meets it again once the runtime limits end. The limits are
// validated as New validates a policy's.
func (l *PolicyLimiter) Derive(variant string, limits []Limit) (*PolicyLimiter, error) {
	if !strings.HasPrefix(variant, "runtime:") {
		return nil, fmt.Errorf("%w: policy %s: a derived variant starts with \"runtime:\", not %q", ErrInvalidPolicy, l.p.name, variant)
	}
	set, err := newLimitSet(l.p.name, variant, limits, l.store.ValidateLimit)
	if err != nil {
		return nil, err
	}
	return &PolicyLimiter{store: l.store, p: &compiled{name: l.p.name, def: set, penalty: l.p.penalty}}, nil
}

// AllowN implements Limiter.
func (l *PolicyLimiter) AllowN(ctx context.Context, key string, cost int64) (Result, error) {
	if cost < 0 {
		return Result{Policy: l.p.name}, fmt.Errorf("%w: policy %s: cost %d is negative; use 0 to peek", ErrInvalidCost, l.p.name, cost)
	}
	set := l.p.setFor(key)
	if cost > set.set.Capacity() {
		return set.result(set.set.Impossible(string(SourcePolicy))), nil
	}
	return l.decide(ctx, set, NormalizeKey(key), cost, true)
}

// decide asks the store about cost units (at most set's capacity) for the
// normalised key, after the key's penalty if the policy has one; a denial
// starts the penalty when penalise is true.
func (l *PolicyLimiter) decide(ctx context.Context, set *LimitSet, key string, cost int64, penalise bool) (Result, error) {
	if l.p.penalty != nil {
		if res, in, err := l.penalised(ctx, set, key); err != nil || in {
			return res, err
		}
	}
	v, err := l.store.Decide(ctx, set.set, key, cost)
	if err != nil {
		return Result{Policy: l.p.name}, fmt.Errorf("floodgate: policy %s: decide: %w", l.p.name, err)
	}
	if v.Source == string(SourceFailOpen) {
		// No state was read: there is no limit to describe.
		return Result{Allowed: v.Allowed, Source: SourceFailOpen, Policy: l.p.name}, nil
	}
	res := set.result(v)
	if !res.Allowed && penalise && l.p.penalty != nil && !res.FromFailureMode() {
		res = l.startPenalty(ctx, key, res)
	}
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
	if err := l.store.Refund(ctx, l.p.setFor(key).set, NormalizeKey(key), cost); err != nil {
		return fmt.Errorf("floodgate: policy %s: refund: %w", l.p.name, err)
	}
	return nil
}

// Reset implements Limiter.
func (l *PolicyLimiter) Reset(ctx context.Context, key string) error {
	nk := NormalizeKey(key)
	if err := l.store.Reset(ctx, l.p.setFor(key).set, nk); err != nil {
		return fmt.Errorf("floodgate: policy %s: reset: %w", l.p.name, err)
	}
	if l.p.penalty != nil {
		if err := l.store.Reset(ctx, l.p.penalty.set, nk); err != nil {
			return fmt.Errorf("floodgate: policy %s: reset penalty: %w", l.p.name, err)
		}
	}
	return nil
}

// Allow is l.AllowN(ctx, key, 1): the decision on one request.
func Allow(ctx context.Context, l Limiter, key string) (Result, error) {
	return l.AllowN(ctx, key, 1)
}
