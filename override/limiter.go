package override

import (
	"context"
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

// derivedCache holds the limiters built for the entries of one snapshot;
// a new snapshot starts a new cache, so replaced entries are forgotten.
type derivedCache struct {
	snap *snapshot
	m    sync.Map // *Entry → *floodgate.PolicyLimiter (nil: it cannot apply)
}

// entryFor returns the entry that decides key, or nil.
func (l *limiter) entryFor(s *snapshot, key string) *Entry {
	if len(s.byPolicy) == 0 {
		return nil
	}
	pe := s.byPolicy[l.base.Name()]
	if pe == nil {
		return nil
	}
	if e := pe.keys[key]; e != nil {
		return e
	}
	if len(pe.tiers) > 0 {
		if tier, ok := strings.CutPrefix(l.base.LimitsFor(key).Variant(), "tier:"); ok {
			return pe.tiers[tier]
		}
	}
	return nil
}

// pick returns the limiter that decides key: one derived for its entry,
// or base.
func (l *limiter) pick(key string) *floodgate.PolicyLimiter {
	s := l.t.cur.Load()
	e := l.entryFor(s, key)
	if e == nil || e.Expires.UnixNano() <= l.t.now() {
		return l.base
	}
	c := l.cache.Load()
	if c == nil || c.snap != s {
		nc := &derivedCache{snap: s}
		if l.cache.CompareAndSwap(c, nc) {
			c = nc
		} else if c = l.cache.Load(); c.snap != s {
			c = nc // a newer snapshot's cache won; build unshared
		}
	}
	if d, ok := c.m.Load(e); ok {
		if d := d.(*floodgate.PolicyLimiter); d != nil {
			return d
		}
		return l.base
	}
	d, err := derive(l.base, e, key)
	if err != nil {
		if _, logged := l.t.noted.LoadOrStore(problemKey{e.ID(), e.Created.UnixNano()}, struct{}{}); !logged {
			l.t.o.Logger.Warn("runtime override not applied: its limits cannot be decided on this policy's store; the policy's own limits apply",
				"policy", e.Policy, "target", targetOf(e), "error", err)
		}
		c.m.Store(e, (*floodgate.PolicyLimiter)(nil))
		return l.base
	}
	c.m.Store(e, d)
	return d
}

type problemKey struct {
	id      ID
	created int64
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
// the limits key gets from base multiplied by e's multiplier.
func derive(base *floodgate.PolicyLimiter, e *Entry, key string) (*floodgate.PolicyLimiter, error) {
	limits := e.Limits
	if e.Multiplier != 0 {
		set := base.LimitsFor(key)
		limits = make([]floodgate.Limit, set.Len())
		for i := range limits {
			limits[i] = set.Limit(i)
		}
		limits = Scale(limits, e.Multiplier)
	}
	return base.Derive(Variant(e.ID()), limits)
}

// Variant is the LimitSet.Variant of the limits an entry of id applies:
// "runtime:key:"+key or "runtime:tier:"+tier. IDOf reads it back.
func Variant(id ID) string {
	if id.Tier != "" {
		return "runtime:tier:" + id.Tier
	}
	return "runtime:key:" + id.Key
}

// IDOf returns the ID of the entry whose limits set is, and whether set is
// one of runtime limits at all.
func IDOf(set *floodgate.LimitSet) (ID, bool) { return ParseVariant(set.Policy(), set.Variant()) }

// ParseVariant is IDOf for a policy's name and a set's Variant, as the
// admin API's answers spell them.
func ParseVariant(policy, variant string) (ID, bool) {
	if k, ok := strings.CutPrefix(variant, "runtime:key:"); ok {
		return ID{Policy: policy, Key: k}, true
	}
	if t, ok := strings.CutPrefix(variant, "runtime:tier:"); ok {
		return ID{Policy: policy, Tier: t}, true
	}
	return ID{}, false
}

// ValidateFor reports whether e could apply to key under base: its limits (or
// base's limits for key, multiplied) valid on base's store. The admin API
// asks it before storing an entry, so that a mistake is an answer to the
// operator rather than a warning in every instance's log.
func ValidateFor(base *floodgate.PolicyLimiter, e Entry, key string) error {
	if err := e.Validate(); err != nil {
		return err
	}
	_, err := derive(base, &e, key)
	return err
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
