package override

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
)

// Limiter returns a limiter that decides as base does, except for the keys
// the table has an entry for under base's policy (its Name): those are
// decided under the entry's limits (see the package documentation for the
// order). With no entry for the policy a decision costs one atomic load and
// one map lookup more than base's. It is a floodgate.Describer (LimitsFor
// tells the runtime limits) and unwraps to base.
func (t *Table) Limiter(base *floodgate.PolicyLimiter) floodgate.Limiter {
	return &limiter{t: t, base: base}
}

type limiter struct {
	t     *Table
	base  *floodgate.PolicyLimiter
	cache atomic.Pointer[derivedCache]
}

var (
	_ floodgate.Limiter   = (*limiter)(nil)
	_ floodgate.Describer = (*limiter)(nil)
)

// derivedCache holds the limiters built for the entries of one snapshot.
// A new snapshot starts a new cache that keeps the limiters whose entries
// it still holds unchanged (by stamp), so an unrelated change does not
// rebuild them (a rebuilt limit set would strand blocks leased under the
// old one).
type derivedCache struct {
	snap *snapshot
	m    sync.Map // *Entry, or entryPair for a key's multiplier over its tier's entry → *derived
}

// entryPair keys the limiter of a key's entry e that multiplies its tier's
// entry under.
type entryPair struct{ e, under *Entry }

// derived is the limiter of an entry, nil when its limits cannot be decided
// on the policy's store; deps are the stamps of the entries it was built
// from.
type derived struct {
	lim  *floodgate.PolicyLimiter
	deps []string
}

// entryFor returns the entry that decides key and, when that entry is a
// multiplier of a key whose tier has an entry too, the tier's entry, whose
// limits the multiplier multiplies. Keys longer than floodgate.MaxKeyLen
// are also looked up by the digest the engines and the status page know
// them by.
func (l *limiter) entryFor(s *snapshot, key string) (e, under *Entry) {
	if len(s.byPolicy) == 0 {
		return nil, nil
	}
	pe := s.byPolicy[l.base.Name()]
	if pe == nil {
		return nil, nil
	}
	e = pe.keys[key]
	if e == nil {
		if nk := floodgate.NormalizeKey(key); nk != key {
			e = pe.keys[nk]
		}
	}
	if len(pe.tiers) == 0 || (e != nil && e.Multiplier == 0) {
		return e, nil
	}
	tier, ok := strings.CutPrefix(l.base.LimitsFor(key).Variant(), "tier:")
	if !ok {
		return e, nil
	}
	if e == nil {
		return pe.tiers[tier], nil
	}
	return e, pe.tiers[tier]
}

// pick returns the limiter that decides key: one derived for its entry,
// or base.
func (l *limiter) pick(key string) *floodgate.PolicyLimiter {
	s := l.t.cur.Load()
	e, under := l.entryFor(s, key)
	if e == nil {
		return l.base
	}
	now := l.t.now()
	if e.Expires.UnixNano() <= now {
		return l.base
	}
	var ck any = e
	if under != nil && under.Expires.UnixNano() > now {
		ck = entryPair{e, under}
	} else {
		under = nil
	}
	c := l.cacheFor(s)
	v, ok := c.m.Load(ck)
	if !ok {
		d := &derived{deps: []string{s.stamps[e]}}
		if under != nil {
			d.deps = append(d.deps, s.stamps[under])
		}
		var err error
		if d.lim, err = derive(l.base, e, under, key); err != nil {
			l.t.o.Logger.Warn("runtime override not applied: its limits cannot be decided on this policy's store; the policy's own limits apply",
				"policy", e.Policy, "target", targetOf(e), "error", err)
		}
		v, _ = c.m.LoadOrStore(ck, d)
	}
	if d := v.(*derived); d.lim != nil {
		return d.lim
	}
	return l.base
}

// cacheFor returns the cache of snapshot s, carrying over from the last
// one the limiters whose entries s still holds.
func (l *limiter) cacheFor(s *snapshot) *derivedCache {
	c := l.cache.Load()
	if c != nil && c.snap == s {
		return c
	}
	nc := &derivedCache{snap: s}
	if c != nil {
		c.m.Range(func(_, v any) bool {
			d := v.(*derived)
			e := s.byStamp[d.deps[0]]
			switch {
			case e == nil:
			case len(d.deps) == 1:
				nc.m.Store(e, d)
			case s.byStamp[d.deps[1]] != nil:
				nc.m.Store(entryPair{e, s.byStamp[d.deps[1]]}, d)
			}
			return true
		})
	}
	if l.cache.CompareAndSwap(c, nc) {
		return nc
	}
	if c = l.cache.Load(); c.snap == s {
		return c
	}
	return nc // a newer snapshot's cache won; build unshared
}

// targetOf names what e applies to in logs: the key, redacted as every log
// line redacts keys, or the tier.
func targetOf(e *Entry) string {
	if e.Tier != "" {
		return "tier " + e.Tier
	}
	return "key " + floodgate.RedactKey(e.Key)
}

// derive builds the limiter of e for key on base's store: e's limits, or
// the limits key would get otherwise multiplied by e's multiplier — those
// of under, the runtime entry of its tier, when there is one, else base's.
func derive(base *floodgate.PolicyLimiter, e, under *Entry, key string) (*floodgate.PolicyLimiter, error) {
	limits := e.Limits
	if e.Multiplier != 0 {
		switch {
		case under != nil && len(under.Limits) > 0:
			limits = under.Limits
		default:
			set := base.LimitsFor(key)
			limits = make([]floodgate.Limit, set.Len())
			for i := range limits {
				limits[i] = set.Limit(i)
			}
			if under != nil {
				limits = Scale(limits, under.Multiplier)
			}
		}
		limits = Scale(limits, e.Multiplier)
	}
	return base.Derive(e.version(), limits)
}

// version names this setting of e's ID — two entries of one ID put at
// different times have different versions — and is the LimitSet.Variant
// of its limits: "runtime:key:"+key or "runtime:tier:"+tier, then "@" and
// when it was set, so that every setting starts with state of its own
// (full) rather than what an earlier override of the key left.
// ParseVariant reads the ID back.
func (e *Entry) version() string {
	prefix := "runtime:key:" + e.Key
	if e.Tier != "" {
		prefix = "runtime:tier:" + e.Tier
	}
	return prefix + "@" + strconv.FormatInt(e.Created.UnixNano(), 36)
}

// IDOf returns the ID of the entry whose limits set is, and whether set is
// one of runtime limits at all.
func IDOf(set *floodgate.LimitSet) (ID, bool) { return ParseVariant(set.Policy(), set.Variant()) }

// ParseVariant is IDOf for a policy's name and a set's Variant, as the
// admin API's answers spell them.
func ParseVariant(policy, variant string) (ID, bool) {
	if i := strings.LastIndexByte(variant, '@'); i >= 0 {
		variant = variant[:i]
	} else {
		return ID{}, false
	}
	if k, ok := strings.CutPrefix(variant, "runtime:key:"); ok {
		return ID{Policy: policy, Key: k}, true
	}
	if t, ok := strings.CutPrefix(variant, "runtime:tier:"); ok {
		return ID{Policy: policy, Tier: t}, true
	}
	return ID{}, false
}

// Validate reports whether e could apply to key under base with the
// entries in force now: its limits (or the limits key would get otherwise,
// multiplied) valid on base's store, and accepted by it — a look at key
// under them, which charges nothing. The admin API asks it before storing
// an entry, so that a mistake is an answer to the operator rather than a
// refusal of the key's every request. An engine that cannot be reached is
// not the entry's fault and is not reported.
func (t *Table) Validate(ctx context.Context, base *floodgate.PolicyLimiter, e Entry, key string) error {
	if err := e.Validate(); err != nil {
		return err
	}
	var under *Entry
	if e.Tier == "" && e.Multiplier != 0 {
		if pe := t.cur.Load().byPolicy[e.Policy]; pe != nil {
			if tier, ok := strings.CutPrefix(base.LimitsFor(key).Variant(), "tier:"); ok {
				under = pe.tiers[tier]
			}
		}
	}
	d, err := derive(base, &e, under, key)
	if err != nil {
		return err
	}
	if _, err := d.AllowN(ctx, key, 0); errors.Is(err, floodgate.ErrInvalidPolicy) || errors.Is(err, floodgate.ErrInvalidLimit) {
		return err
	}
	return nil
}

func (l *limiter) Name() string { return l.base.Name() }

func (l *limiter) AllowN(ctx context.Context, key string, cost int64) (floodgate.Result, error) {
	return l.pick(key).AllowN(ctx, key, cost)
}

func (l *limiter) RefundN(ctx context.Context, key string, cost int64) error {
	return l.pick(key).RefundN(ctx, key, cost)
}

func (l *limiter) ReserveN(ctx context.Context, key string, cost int64) (*floodgate.Reservation, error) {
	return l.pick(key).ReserveN(ctx, key, cost)
}

// Reset forgets key's state under the file's limits and, when an entry
// applies to it, under the entry's.
func (l *limiter) Reset(ctx context.Context, key string) error {
	if d := l.pick(key); d != l.base {
		if err := d.Reset(ctx, key); err != nil {
			return err
		}
	}
	return l.base.Reset(ctx, key)
}

// LimitsFor implements floodgate.Describer: the runtime limits of key when
// an entry applies to it, else base's.
func (l *limiter) LimitsFor(key string) *floodgate.LimitSet { return l.pick(key).LimitsFor(key) }

// Overrides implements floodgate.Describer: the file's overrides (the
// runtime ones are the Table's Entries).
func (l *limiter) Overrides() []string { return l.base.Overrides() }

// Unwrap returns base.
func (l *limiter) Unwrap() floodgate.Limiter { return l.base }
