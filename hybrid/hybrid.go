// Package hybrid composes a local store in front of a global one: the local
// store holds a fraction of every limit and filters, the global store (Redis)
// arbitrates what passes the filter, and when the global store fails or is
// slow the local verdict stands.
//
// With N instances behind a load balancer, each instance's local filter
// holds about 1/N of each limit plus headroom. A client far over its limit is
// then denied by the filter of whichever instance it reaches, in process, in
// a few tens of nanoseconds, and costs Redis nothing; only the traffic the
// filters pass, bounded by the sum of their shares, reaches Redis, which
// keeps the exact limit across all instances. Every Result says which part
// decided:
//
//   - hybrid:local: the local filter denied; Redis was not asked.
//   - hybrid:global: the filter passed and Redis decided.
//   - lease: the filter passed and a block of the budget leased from Redis
//     decided (a global lease.Store; see New).
//   - local-fallback (floodgate.SourceLocalFallback, the Source every
//     failover to a store in this process carries): the filter passed and
//     Redis failed, timed out or is cut off by the circuit breaker, so the
//     filter's verdict stands.
//
// Calls to Redis go through a failover.Guard (per-call timeout, circuit
// breaker); a decision never returns an error for a Redis failure.
//
// docs/failure.md explains how to size the fraction.
package hybrid

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/internal/isnil"
	"github.com/floodgate-go/floodgate/lease"
)

// The Sources of a Store's decisions.
const (
	// SourceLocal: the local filter denied the request without asking the
	// global store.
	SourceLocal = "hybrid:local"
	// SourceGlobal: the local filter passed the request and the global
	// store decided it.
	SourceGlobal = "hybrid:global"
	// When the local filter passed the request and the global store
	// failed, was too slow, or was cut off by its circuit breaker, the
	// filter's verdict stands and its Source is
	// floodgate.SourceLocalFallback.
)

// DefaultHeadroom is the headroom FractionFor uses when given none.
const DefaultHeadroom = 2.0

// FractionFor returns the local fraction for instances replicas behind a
// balancer that spreads each key's requests evenly (round robin, least
// connections): headroom/instances, at most 1. Headroom covers uneven
// spreading; below 1 the global limit cannot be reached at all. A headroom
// of 0 or less means DefaultHeadroom. Size instances by the fewest replicas
// you run, not the usual count: with fewer replicas than planned the shares
// add up to less than the limit.
func FractionFor(instances int, headroom float64) float64 {
	if headroom <= 0 || math.IsNaN(headroom) {
		headroom = DefaultHeadroom
	}
	if instances <= 1 {
		return 1
	}
	return min(1, headroom/float64(instances))
}

// Options configures a Store.
type Options struct {
	// Fraction is the share of every limit that the local filter holds,
	// in (0, 1]: its rate and burst are the global ones times Fraction,
	// rounded up, at least 1. There is no default: it depends on how many
	// instances share the limit; see FractionFor. A policy that gives its
	// own local limits (floodgate.Policy.Local: "local 10/s burst 20,
	// global 50/s burst 100") is filtered by those instead. Zero is
	// allowed only when every policy the store serves does so and has no
	// overrides or tiers; a decision on any other limits is then an error.
	Fraction float64

	// Guard configures the timeout and circuit breaker of calls to the
	// global store. It is ignored when the global store given to New is
	// already a *failover.Guard.
	Guard failover.GuardOptions
}

// A Store is a floodgate.Store that filters with a local store and decides
// with a global one. It is safe for concurrent use.
//
// The local store must be the Store's own (a memstore.Store no other
// limiter uses): the filter keeps its state under the same limit-set IDs as
// the global limits, with smaller limits.
type Store struct {
	local    floodgate.Store
	guard    *failover.Guard
	global   floodgate.Store // guard, or a lease.Store leasing from it
	fraction float64
	sets     setCache
}

var _ floodgate.Store = (*Store)(nil)

// New returns a Store that filters with local and decides with global. If
// global is a *failover.Guard it is used as it is, so that stores over one
// Redis can share one breaker; else New wraps it in a Guard made with
// o.Guard.
//
// global may also be a *lease.Store that leases from a *failover.Guard:
// what passes the filter is then decided by the lease store, from leased
// blocks when they cover it (Source "lease"), else by the Guard. The
// global limit still holds exactly (blocks are charged before they are
// used); the filter, the local fallback and the breaker keep their
// meaning, and a block still valid answers while Redis is down.
func New(local, global floodgate.Store, o Options) (*Store, error) {
	switch {
	case isnil.Value(local) || isnil.Value(global):
		return nil, fmt.Errorf("hybrid: both a local and a global store are needed; got local %T and global %T, one of them nil", local, global)
	case !(o.Fraction >= 0 && o.Fraction <= 1): // also rejects NaN
		return nil, fmt.Errorf("hybrid: fraction %g is outside (0, 1]; use about 2/N for N instances (see FractionFor)", o.Fraction)
	}
	if _, ok := global.(*failover.Store); ok {
		return nil, errors.New("hybrid: the global store already has a failure policy; pass the engine itself, the hybrid store falls back on its local filter")
	}
	if ls, ok := global.(*lease.Store); ok {
		g, ok := ls.Remote().(*failover.Guard)
		if !ok {
			return nil, fmt.Errorf("hybrid: the lease store must lease from a *failover.Guard, whose breaker the hybrid store falls back by; it leases from %T", ls.Remote())
		}
		return &Store{local: local, guard: g, global: ls, fraction: o.Fraction}, nil
	}
	g, ok := global.(*failover.Guard)
	if !ok {
		var err error
		if g, err = failover.NewGuard(global, o.Guard); err != nil {
			return nil, fmt.Errorf("hybrid: %w", err)
		}
	}
	return &Store{local: local, guard: g, global: g, fraction: o.Fraction}, nil
}

// Fraction returns the share of each limit the local filter holds.
func (s *Store) Fraction() float64 { return s.fraction }

// Guard returns the Guard that calls the global store, for its State and
// Stats.
func (s *Store) Guard() *failover.Guard { return s.guard }

// Decide implements floodgate.Store.
//
// The local filter is charged for every request it passes, including one
// that the global store then denies. That is deliberate: the filter's job is
// to bound what reaches Redis, at about Fraction of the limit per instance.
// Refunding it on a global denial would keep it full whenever other
// instances have used up the global limit, so that every request of an
// abusive client would go on to Redis, exactly when shielding Redis matters
// most. The filter cannot drift: it refills at its own rate, Fraction of the
// limit's, and a global denial costs it at most what one request costs.
//
// A cost above the filter's capacity is charged to it as its whole
// capacity: such a request passes the filter only while the filter is full,
// and never stops the global limit from deciding it.
//
// The error is non-nil only if the local store fails or the caller's
// context ends before Redis answers; the local charge is then undone.
func (s *Store) Decide(ctx context.Context, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	ls, err := s.localSet(set)
	if err != nil {
		return algo.Verdict{}, err
	}
	lcost := min(cost, ls.Capacity())
	// The local set holds the same limits in the same order, so the
	// Verdict's Index names the configured limit whichever set decided.
	lres, err := s.local.Decide(ctx, ls, key, lcost)
	if err != nil {
		return algo.Verdict{}, fmt.Errorf("hybrid: policy %s: local decide: %w", set.Policy(), err)
	}
	if !lres.Allowed {
		lres.Source = SourceLocal
		return lres, nil
	}
	gres, err := s.global.Decide(ctx, set, key, cost)
	if err == nil {
		if gres.Source != lease.Source {
			gres.Source = SourceGlobal
		}
		return gres, nil
	}
	if ctx.Err() != nil || failover.Refusal(err) {
		// Undecided: the request consumes nothing, here either. A closed
		// or corrupt global store is not an outage to fall back from.
		if lcost > 0 {
			_ = s.local.Refund(context.WithoutCancel(ctx), ls, key, lcost)
		}
		return algo.Verdict{}, err
	}
	lres.Source = string(floodgate.SourceLocalFallback)
	return lres, nil
}

// Refund implements floodgate.Store. It refunds the local filter and the
// global store. A global refund that fails is counted by the Guard (and
// reported to OnError) but not returned: losing it errs strict.
func (s *Store) Refund(ctx context.Context, set *algo.Set, key string, cost int64) error {
	ls, err := s.localSet(set)
	if err != nil {
		return err
	}
	var errs []error
	if err := s.local.Refund(ctx, ls, key, min(cost, ls.Capacity())); err != nil {
		errs = append(errs, fmt.Errorf("hybrid: policy %s: local refund: %w", set.Policy(), err))
	}
	if err := s.global.Refund(ctx, set, key, cost); err != nil && ctx.Err() != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Reset implements floodgate.Store. It resets the local filter and the
// global store, and returns the global store's failure: a reset is an
// operator's action, and the operator must learn that it did not happen.
func (s *Store) Reset(ctx context.Context, set *algo.Set, key string) error {
	ls, err := s.localSet(set)
	if err != nil {
		return err
	}
	var errs []error
	if err := s.local.Reset(ctx, ls, key); err != nil {
		errs = append(errs, fmt.Errorf("hybrid: policy %s: local reset: %w", set.Policy(), err))
	}
	if err := s.global.Reset(ctx, set, key); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ValidateLimit rejects a limit that the global store cannot keep, or whose
// local share is not a valid limit or cannot be kept by the local store.
func (s *Store) ValidateLimit(l floodgate.Limit) error {
	if err := s.guard.ValidateLimit(l); err != nil {
		return err
	}
	sp := scaleSpec(l.Spec(), s.fraction)
	ll := l
	ll.Rate, ll.Burst = sp.Rate, sp.Burst
	if err := ll.Validate(); err != nil {
		return fmt.Errorf("local share %s (fraction %g): %w", ll, s.fraction, err)
	}
	if err := s.local.ValidateLimit(ll); err != nil {
		return fmt.Errorf("local share %s (fraction %g): %w", ll, s.fraction, err)
	}
	return nil
}

// LocalLimits returns the limit set the local filter applies in place of
// set: the policy's own local limits, or every limit scaled by the
// fraction.
func (s *Store) LocalLimits(set *algo.Set) (*algo.Set, error) {
	return s.localSet(set)
}

// scaleSpec returns the local share of a limit: its rate and capacity
// times f, rounded up, at least 1. Rounding up keeps the shares of N
// instances from adding up to less than the limit.
func scaleSpec(l algo.Spec, f float64) algo.Spec {
	if f >= 1 {
		return l
	}
	capacity := l.Capacity()
	l.Rate = scaleCount(l.Rate, f)
	switch l.Kind {
	case algo.GCRA:
		if l.Burst != 0 {
			l.Burst = scaleCount(capacity, f)
		}
	default:
		l.Burst = 0 // windows admit Rate per window; 0 keeps it equal to Rate
	}
	return l
}

func scaleCount(n int64, f float64) int64 {
	x := math.Ceil(float64(n) * f)
	if x < 1 {
		return 1
	}
	if x >= float64(n) {
		return n
	}
	return int64(x)
}

// setCache maps global limit sets to their local shares. Reads are an
// atomic load, a map lookup and a weak-pointer comparison, with no
// allocation; writes copy the map and happen once per set. Entries hold
// their global set weakly and are removed once it is collected, so a daemon
// that reloads its limits for weeks keeps only the shares of sets in use.
type setCache struct {
	m  atomic.Pointer[map[uint64][]cachedSet]
	mu sync.Mutex
}

// cachedSet is one share. Several live sets can have one ID: policies of
// one name that differ (two limiters over one store, or the old and the new
// config during a reload).
type cachedSet struct {
	src   weak.Pointer[algo.Set]
	local *algo.Set
}

func (c *setCache) find(set *algo.Set) *algo.Set {
	if m := c.m.Load(); m != nil {
		for _, e := range (*m)[set.ID()] {
			if e.src.Value() == set {
				return e.local
			}
		}
	}
	return nil
}

func (s *Store) localSet(set *algo.Set) (*algo.Set, error) {
	if ls := set.Local(); ls != nil {
		return ls, nil
	}
	switch {
	case s.fraction >= 1:
		return set, nil
	case s.fraction == 0:
		what := "policy " + set.Policy()
		if set.Variant() != "" {
			what += " " + set.Variant()
		}
		return nil, fmt.Errorf("%w: hybrid: %s has no local limits and the store has no fraction; give the policy Local limits (overrides and tiers always need the fraction) or the store a Fraction", floodgate.ErrInvalidPolicy, what)
	}
	if ls := s.sets.find(set); ls != nil {
		return ls, nil
	}
	return s.sets.add(set, s.fraction)
}

func (c *setCache) add(set *algo.Set, f float64) (*algo.Set, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ls := c.find(set); ls != nil {
		return ls, nil
	}
	ts := make([]algo.Transition, set.Len())
	for i := range set.Len() {
		t, err := algo.New(scaleSpec(set.At(i).Spec(), f))
		if err != nil {
			return nil, fmt.Errorf("hybrid: local share of policy %s limit %d: %w", set.Policy(), i+1, err)
		}
		ts[i] = t
	}
	// The same policy and set names give the same ID: the filter keeps its
	// state where the global set would, in its own store.
	local, err := algo.NewSet(set.Policy(), set.Variant(), ts)
	if err != nil {
		return nil, fmt.Errorf("hybrid: local share of policy %s: %w", set.Policy(), err)
	}
	c.update(set.ID(), func(es []cachedSet) []cachedSet {
		return append(es, cachedSet{src: weak.Make(set), local: local})
	})
	runtime.AddCleanup(set, c.forget, set.ID())
	return local, nil
}

// forget drops the shares of collected sets of one ID.
func (c *setCache) forget(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.update(id, func(es []cachedSet) []cachedSet {
		return slices.DeleteFunc(es, func(e cachedSet) bool { return e.src.Value() == nil })
	})
}

// update replaces the entries of id with what f makes of a copy of them.
// The caller holds mu.
func (c *setCache) update(id uint64, f func([]cachedSet) []cachedSet) {
	m := make(map[uint64][]cachedSet, 1)
	if old := c.m.Load(); old != nil {
		m = maps.Clone(*old)
	}
	// Readers may hold the old slice: work on a copy, never in place.
	if es := f(slices.Clone(m[id])); len(es) > 0 {
		m[id] = es
	} else {
		delete(m, id)
	}
	c.m.Store(&m)
}

// cached reports how many local shares the cache holds.
func (c *setCache) cached() int {
	n := 0
	if m := c.m.Load(); m != nil {
		for _, es := range *m {
			n += len(es)
		}
	}
	return n
}
