package algo

import (
	"fmt"
	"hash/fnv"
)

// MaxTransitions is the most transitions one Set holds: the most limits one
// policy may combine. Engines keep the per-limit decisions on the stack, so
// the bound keeps decisions free of allocations.
const MaxTransitions = 8

// A Set is the compiled form of one list of limits of a policy (its
// defaults, one override or one tier), the unit an engine decides on: every
// transition of a Set must admit a request, and is charged all or nothing.
// Engines keep its state under (ID, key). A Set is immutable.
type Set struct {
	policy, variant string
	id              uint64
	ts              []Transition
	capacity        int64 // the smallest capacity of ts
	capIndex        int
	local           *Set // what a local filter applies in place of this set; nil: none given
}

// NewSet returns the Set of transitions ts of one list of a policy: its
// variant is "" for the policy's defaults, "override:"+key or "tier:"+tier.
func NewSet(policy, variant string, ts []Transition) (*Set, error) {
	if len(ts) == 0 || len(ts) > MaxTransitions {
		return nil, fmt.Errorf("%w: a set holds 1 to %d limits, got %d", ErrInvalid, MaxTransitions, len(ts))
	}
	h := fnv.New64a()
	h.Write([]byte(policy))
	h.Write([]byte{0})
	h.Write([]byte(variant))
	s := &Set{policy: policy, variant: variant, id: h.Sum64(), ts: append([]Transition(nil), ts...)}
	for i := range s.ts {
		if !s.ts[i].valid() {
			return nil, fmt.Errorf("%w: transition %d was not made by algo.New", ErrInvalid, i)
		}
		if c := s.ts[i].capacity; i == 0 || c < s.capacity {
			s.capacity, s.capIndex = c, i
		}
	}
	return s, nil
}

// WithLocal returns a copy of s that carries local: the limits a local
// filter in front of a shared engine (package hybrid) applies in place of
// s's, when the policy gives them instead of leaving the filter to scale s.
// local must be a set of the same policy, variant and length.
func (s *Set) WithLocal(local *Set) (*Set, error) {
	if local == nil || local.policy != s.policy || local.variant != s.variant || len(local.ts) != len(s.ts) || local.local != nil {
		return nil, fmt.Errorf("%w: local limits must be a set of the same policy, variant and length", ErrInvalid)
	}
	c := *s
	c.local = local
	return &c, nil
}

// Local returns the limits a local filter applies in place of s, or nil
// when the policy gave none.
func (s *Set) Local() *Set { return s.local }

// Policy is the name of the policy the set belongs to.
func (s *Set) Policy() string { return s.policy }

// Variant says which list of the policy the set is: "" for its defaults,
// "override:"+key or "tier:"+tier.
func (s *Set) Variant() string { return s.variant }

// ID is a stable hash of Policy and Variant. Engines use it to keep the state
// of different sets apart.
func (s *Set) ID() uint64 { return s.id }

// Len is the number of transitions.
func (s *Set) Len() int { return len(s.ts) }

// At returns transition i, in the policy's order of its limits. The
// transition is shared: read it, never write it.
func (s *Set) At(i int) *Transition { return &s.ts[i] }

// Capacity is the largest cost that can ever pass: the smallest Capacity of
// the set's transitions.
func (s *Set) Capacity() int64 { return s.capacity }

// A Verdict is a set's answer: the decision of the transition that drove it,
// which every field describes.
type Verdict struct {
	Decision

	// Index is the transition that drove the answer: the one that denied
	// (the one with the longest RetryAfter when several did), or, when
	// allowed, the one with the fewest units remaining.
	Index int

	// Source names what decided, e.g. "memory" or "redis".
	Source string
}

// Impossible is the Verdict for a cost above Capacity: denied, never
// retriable, decided without any engine.
func (s *Set) Impossible(source string) Verdict {
	return Verdict{Decision: never, Index: s.capIndex, Source: source}
}

// Combine folds the decisions of the set's transitions, one per transition
// in order, into a Verdict. When any transition denied, the decisions of
// those that allowed must be the uncharged ones (cost 0), because a denied
// request is charged to none of its limits.
func (s *Set) Combine(ds []Decision, source string) Verdict {
	if len(ds) == 1 {
		return Verdict{Decision: ds[0], Source: source}
	}
	drive, denied := 0, false
	for i, d := range ds {
		switch {
		case !d.Allowed:
			if !denied || d.RetryAfter > ds[drive].RetryAfter {
				drive = i
			}
			denied = true
		case denied:
		case d.Remaining < ds[drive].Remaining:
			drive = i
		}
	}
	return Verdict{Decision: ds[drive], Index: drive, Source: source}
}
