package floodgate

import (
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
)

// MaxLimits is the most limits one policy may combine. Engines keep the
// per-limit decisions on the stack, so the bound keeps decisions free of
// allocations.
const MaxLimits = 8

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
}

// A LimitSet is one validated list of limits of a policy: its default
// limits, one override, or one tier. Engines receive a LimitSet with each
// decision and keep its state under (ID, key).
type LimitSet struct {
	// Policy is the policy's name.
	Policy string

	// Name is "" for the default limits, "override:"+key or "tier:"+name.
	Name string

	// ID is a stable hash of Policy and Name. Engines use it to keep the
	// state of different sets apart.
	ID uint64

	// Rules are the validated limits, in the policy's order.
	Rules []Rule

	// capacity is the smallest Capacity of Rules; capIndex its rule.
	capacity int64
	capIndex int
}

// A LimitValidator is implemented by engines that cannot keep every valid
// Limit, e.g. because their clock ticks in microseconds. New asks it about
// every limit so that such limits fail at construction, not on a request.
type LimitValidator interface {
	ValidateLimit(Limit) error
}

// NewLimitSet validates limits and compiles them into a LimitSet. Engines and
// composed stores use it; most callers build a Policy instead.
func NewLimitSet(policy, name string, limits []Limit) (*LimitSet, error) {
	if len(limits) == 0 {
		return nil, fmt.Errorf("%w: %q has no limits; give it at least one", ErrInvalidPolicy, setLabel(policy, name))
	}
	if len(limits) > MaxLimits {
		return nil, fmt.Errorf("%w: %q has %d limits, more than the %d one decision checks", ErrInvalidPolicy, setLabel(policy, name), len(limits), MaxLimits)
	}
	h := fnv.New64a()
	h.Write([]byte(policy))
	h.Write([]byte{0})
	h.Write([]byte(name))
	s := &LimitSet{Policy: policy, Name: name, ID: h.Sum64(), Rules: make([]Rule, len(limits))}
	for i, l := range limits {
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("%s limit %d (%s): %w", setLabel(policy, name), i+1, l, err)
		}
		s.Rules[i] = newRule(l)
		if c := l.Capacity(); i == 0 || c < s.capacity {
			s.capacity, s.capIndex = c, i
		}
	}
	return s, nil
}

func setLabel(policy, name string) string {
	if name == "" {
		return "policy " + policy
	}
	return "policy " + policy + " " + name
}

// Capacity is the largest cost that can ever pass: the smallest Capacity of
// the set's limits.
func (s *LimitSet) Capacity() int64 { return s.capacity }

// Impossible returns the Result for a cost above Capacity: denied, never
// retriable, decided without any engine. Remaining and ResetAfter are zero
// because no state was read.
func (s *LimitSet) Impossible() Result {
	return Result{Limit: s.Rules[s.capIndex].Limit, RetryAfter: RetryNever, Source: SourcePolicy, Policy: s.Policy}
}

// Combine folds the decisions of the set's rules, one per rule in order, into
// a Result. When any rule denied, the decisions of the rules that allowed must
// be the uncharged ones (cost 0), because a denied request is charged to none
// of its limits.
func (s *LimitSet) Combine(ds []Decision, src Source) Result {
	if len(ds) == 1 {
		return s.CombineOne(ds[0], src)
	}
	r := Result{Allowed: true, Source: src, Policy: s.Policy}
	drive := -1
	for i, d := range ds {
		if d.ResetAfter > r.ResetAfter {
			r.ResetAfter = d.ResetAfter
		}
		if !d.Allowed {
			if r.Allowed || d.RetryAfter > r.RetryAfter {
				r.RetryAfter = d.RetryAfter
				drive = i
			}
			r.Allowed = false
		}
	}
	r.Remaining = -1
	for i, d := range ds {
		if r.Remaining < 0 || d.Remaining < r.Remaining {
			r.Remaining = d.Remaining
			if r.Allowed {
				drive = i
			}
		}
	}
	if drive >= 0 {
		r.Limit = s.Rules[drive].Limit
	}
	if r.Remaining < 0 {
		r.Remaining = 0
	}
	return r
}

// CombineOne is Combine for a set of one rule. It is small enough to be
// inlined, so an engine's hot path builds the Result in place.
func (s *LimitSet) CombineOne(d Decision, src Source) Result {
	return Result{Allowed: d.Allowed, Limit: s.Rules[0].Limit, Remaining: d.Remaining,
		ResetAfter: d.ResetAfter, RetryAfter: d.RetryAfter, Source: src, Policy: s.Policy}
}

// compiled is a Policy ready to serve: every limit set validated.
type compiled struct {
	name      string
	def       *LimitSet
	overrides map[string]*LimitSet
	tiers     map[string]*LimitSet
	tierOf    func(string) string
}

func compilePolicy(p Policy, v LimitValidator) (*compiled, error) {
	if p.Name == "" {
		return nil, fmt.Errorf("%w: the policy needs a name", ErrInvalidPolicy)
	}
	if (p.TierOf == nil) != (len(p.Tiers) == 0) {
		return nil, fmt.Errorf("%w: policy %s: set Tiers and TierOf together", ErrInvalidPolicy, p.Name)
	}
	c := &compiled{name: p.Name, tierOf: p.TierOf}
	var errs []error
	add := func(name string, limits []Limit) *LimitSet {
		s, err := NewLimitSet(p.Name, name, limits)
		if err == nil && v != nil {
			for i, l := range limits {
				if verr := v.ValidateLimit(l); verr != nil {
					err = fmt.Errorf("%s limit %d (%s): %w", setLabel(p.Name, name), i+1, l, verr)
					break
				}
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
		return s
	}
	c.def = add("", p.Limits)
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
