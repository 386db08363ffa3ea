package floodgate

import (
	"errors"
	"fmt"
	"math/big"
	"sort"
	"time"

	"github.com/floodgate-go/floodgate/algo"
)

// MaxLimits is the most limits one policy may combine. Engines keep the
// per-limit decisions on the stack, so the bound keeps decisions free of
// allocations.
const MaxLimits = algo.MaxTransitions

// A Policy is a named set of limits that must all pass, with optional
// per-key overrides and tiers.
type Policy struct {
	// Name identifies the policy in results, headers, metrics and engine
	// keys. Two limiters built from policies of the same name on one store
	// share their state.
	Name string

	// Limits all apply to every key (10/s and 1000/h). A request passes only
	// if every limit admits it, and is charged to all or to none.
	Limits []Limit

	// Local, when given, is what a local filter in front of a shared store
	// (package hybrid) lets through per instance in place of Limits, one
	// limit for each of Limits and in their order: "local 10/s burst 20,
	// global 50/s burst 100". Each must be no larger than its limit, in rate
	// and in burst. Nil (the zero value) leaves the filter to hold the
	// store's fraction of every limit. Overrides and tiers always get the
	// store's fraction. Other stores ignore Local.
	Local []Limit

	// Overrides replaces Limits for the exact keys listed, e.g. a batch
	// worker that gets 500/s.
	Overrides map[string][]Limit

	// Tiers names alternative limit sets; TierOf picks one per key. A key
	// whose tier is "" or not in Tiers gets Limits. Overrides win over tiers.
	Tiers map[string][]Limit

	// TierOf returns the tier of key. It must be set exactly when Tiers is,
	// and must be cheap and safe for concurrent use: it runs on every
	// decision.
	TierOf func(key string) string

	// Penalty, when not zero, blocks a key for this long once the policy
	// denies it: every request of the key is then refused, charging
	// nothing, with Source SourcePenalty and RetryAfter the time left (a
	// look with a cost of 0 is refused too). The penalty is kept in the
	// store beside the limits, so every limiter of the policy on a shared
	// store sees it; it starts at the first denial and is not extended by
	// the requests it refuses; Reset lifts it. Between MinPenalty and
	// MaxPenalty. Denials of a cost above a limit's capacity (RetryNever)
	// and decisions by a failure mode start no penalty. See docs/penalty.md.
	Penalty time.Duration
}

// A LimitSet is the list of limits that applies to a key: a policy's
// defaults, one of its overrides or one of its tiers. A Result names the set
// that decided it, so front ends can describe every limit of it (the
// RateLimit-Policy header does). A LimitSet is immutable and lives as long
// as its Limiter, so what front ends derive from it can be cached per set.
type LimitSet struct {
	policy, variant string
	limits          []Limit
	set             *algo.Set
}

// Policy is the name of the policy the set belongs to.
func (s *LimitSet) Policy() string { return s.policy }

// Variant says which of the policy's lists the set is: "" for its default
// limits, "override:"+key for an override, "tier:"+tier for a tier,
// "penalty" for its penalty, and "runtime:..." for limits set while the
// service runs (PolicyLimiter.Derive).
func (s *LimitSet) Variant() string { return s.variant }

// Len is the number of limits.
func (s *LimitSet) Len() int { return len(s.limits) }

// Limit returns limit i, in the policy's order.
func (s *LimitSet) Limit(i int) Limit { return s.limits[i] }

// Capacity is the largest cost that can ever pass: the smallest Capacity of
// the set's limits.
func (s *LimitSet) Capacity() int64 { return s.set.Capacity() }

// Compiled returns the set as engines receive it, for tools that look at
// an engine's state directly (redisstore.Key).
func (s *LimitSet) Compiled() *algo.Set { return s.set }

// newLimitSet validates limits and compiles them; v, when not nil, is asked
// about each limit too.
func newLimitSet(policy, name string, limits []Limit, v func(Limit) error) (*LimitSet, error) {
	label := setLabel(policy, name)
	if len(limits) == 0 {
		return nil, fmt.Errorf("%w: %s has no limits; give it at least one", ErrInvalidPolicy, label)
	}
	if len(limits) > MaxLimits {
		return nil, fmt.Errorf("%w: %s has %d limits, more than the %d one decision checks", ErrInvalidPolicy, label, len(limits), MaxLimits)
	}
	ts := make([]algo.Transition, len(limits))
	for i, l := range limits {
		t, err := l.transition()
		if err == nil && v != nil {
			err = v(l)
		}
		if err != nil {
			return nil, fmt.Errorf("%s limit %d (%s): %w", label, i+1, l, err)
		}
		ts[i] = t
	}
	set, err := algo.NewSet(policy, name, ts)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidPolicy, label, err)
	}
	return &LimitSet{policy: policy, variant: name, limits: append([]Limit(nil), limits...), set: set}, nil
}

// withLocal attaches the local filter's limits to s (Policy.Local), after
// checking that each is no larger than its limit: a local limit above the
// global one would filter nothing.
func (s *LimitSet) withLocal(local []Limit, v func(Limit) error) error {
	label := setLabel(s.policy, s.variant)
	if len(local) != len(s.limits) {
		return fmt.Errorf("%w: %s has %d limits and %d local ones; give one local limit for each limit, in their order", ErrInvalidPolicy, label, len(s.limits), len(local))
	}
	ls, err := newLimitSet(s.policy, s.variant, local, v)
	if err != nil {
		return fmt.Errorf("local limits: %w", err)
	}
	for i, l := range local {
		g := s.limits[i]
		// l.Rate/l.Period > g.Rate/g.Period, compared without overflow.
		faster := new(big.Int).Mul(big.NewInt(l.Rate), big.NewInt(int64(g.Period))).Cmp(
			new(big.Int).Mul(big.NewInt(g.Rate), big.NewInt(int64(l.Period)))) > 0
		if faster || ls.set.At(i).Capacity() > s.set.At(i).Capacity() {
			return fmt.Errorf("%w: %s local limit %d (%s) is larger than its limit (%s); a local limit is a share of the global one", ErrInvalidPolicy, label, i+1, l, g)
		}
	}
	set, err := s.set.WithLocal(ls.set)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidPolicy, label, err)
	}
	s.set = set
	return nil
}

func setLabel(policy, name string) string {
	if name == "" {
		return "policy " + policy
	}
	return "policy " + policy + " " + name
}

// compiled is a Policy ready to serve: every limit set validated.
type compiled struct {
	name      string
	def       *LimitSet
	overrides map[string]*LimitSet
	tiers     map[string]*LimitSet
	tierOf    func(string) string
	penalty   *LimitSet // nil without Policy.Penalty
}

func compilePolicy(p Policy, v func(Limit) error) (*compiled, error) {
	if p.Name == "" {
		return nil, fmt.Errorf("%w: the policy needs a name", ErrInvalidPolicy)
	}
	if (p.TierOf == nil) != (len(p.Tiers) == 0) {
		return nil, fmt.Errorf("%w: policy %s: set Tiers and TierOf together", ErrInvalidPolicy, p.Name)
	}
	c := &compiled{name: p.Name, tierOf: p.TierOf}
	var errs []error
	add := func(name string, limits []Limit) *LimitSet {
		s, err := newLimitSet(p.Name, name, limits, v)
		if err != nil {
			errs = append(errs, err)
		}
		return s
	}
	c.def = add("", p.Limits)
	if len(p.Local) > 0 && c.def != nil {
		if err := c.def.withLocal(p.Local, v); err != nil {
			errs = append(errs, err)
		}
	}
	if len(p.Overrides) > 0 {
		c.overrides = make(map[string]*LimitSet, len(p.Overrides))
		for _, k := range sortedKeys(p.Overrides) {
			c.overrides[k] = add("override:"+k, p.Overrides[k])
		}
	}
	if len(p.Tiers) > 0 {
		c.tiers = make(map[string]*LimitSet, len(p.Tiers))
		for _, k := range sortedKeys(p.Tiers) {
			c.tiers[k] = add("tier:"+k, p.Tiers[k])
		}
	}
	if pen, err := compilePenalty(p.Name, p.Penalty, v); err != nil {
		errs = append(errs, err)
	} else {
		c.penalty = pen
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

func sortedKeys(m map[string][]Limit) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// setFor picks the limit set of key: its override, else its tier, else the
// defaults.
func (c *compiled) setFor(key string) *LimitSet {
	if c.overrides != nil {
		if s, ok := c.overrides[key]; ok {
			return s
		}
	}
	if c.tierOf != nil {
		if s, ok := c.tiers[c.tierOf(key)]; ok {
			return s
		}
	}
	return c.def
}
