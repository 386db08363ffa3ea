package status

import (
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
)

// RecentPerKey is how many of a heavy hitter's last decisions a Status
// keeps.
const RecentPerKey = 16

// A Record is one past decision of a key among a policy's top limited keys:
// what an operator asked "why was this client denied at 12:03?" reads.
type Record struct {
	At        time.Time `json:"at"`
	Route     string    `json:"route,omitempty"` // the proxy route that asked, when one did
	Allowed   bool      `json:"allowed"`
	Cost      int64     `json:"cost"`
	Limit     string    `json:"limit,omitempty"` // the limit that drove the answer
	Remaining int64     `json:"remaining"`
	Source    string    `json:"source"`
}

// decision is a Record as kept: the Limit kept as it is and
// spelled only when read.
type decision struct {
	at        time.Time
	route     string
	allowed   bool
	cost      int64
	limit     floodgate.Limit
	hasLimit  bool
	remaining int64
	source    floodgate.Source
}

// ring holds a key's last RecentPerKey decisions.
type ring struct {
	mu   sync.Mutex
	n    int // decisions ever pushed
	last [RecentPerKey]decision
}

func (r *ring) push(d decision) {
	r.mu.Lock()
	r.last[r.n%RecentPerKey] = d
	r.n++
	r.mu.Unlock()
}

// decisions returns the ring's decisions, oldest first.
func (r *ring) decisions() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(r.n, RecentPerKey)
	if n == 0 {
		return nil
	}
	out := make([]Record, 0, n)
	for i := r.n - n; i < r.n; i++ {
		d := &r.last[i%RecentPerKey]
		e := Record{At: d.at, Route: d.route, Allowed: d.allowed, Cost: d.cost, Remaining: d.remaining, Source: string(d.source)}
		if d.hasLimit {
			e.Limit = d.limit.String()
		}
		out = append(out, e)
	}
	return out
}

// hotKeys are the keys whose decisions a policy keeps, by key as the
// window holds it (floodgate.NormalizeKey's for long keys). The map is
// replaced whole, never changed, so a decision reads it without a lock.
type hotKeys = map[string]*ring

// remember keeps the decision when key is among the hot keys: one map
// read for every other key, nothing at all while no key is limited.
func (p *policy) remember(key, route string, cost int64, res *floodgate.Result) {
	h := p.hot.Load()
	if h == nil || len(*h) == 0 {
		return
	}
	if len(key) > floodgate.MaxKeyLen {
		key = floodgate.NormalizeKey(key)
	}
	r := (*h)[key]
	if r == nil {
		return
	}
	r.push(decision{at: time.Now(), route: route, allowed: res.Allowed, cost: cost, limit: res.Limit,
		hasLimit: res.Set != nil, remaining: res.Remaining, source: res.Source})
}

// refreshHot makes the top limited keys the hot keys, keeping the rings
// of those that stay: memory is at most top rings per policy.
func (p *policy) refreshHot(top []Count) {
	old := p.hot.Load()
	next := make(hotKeys, len(top))
	for _, c := range top {
		var r *ring
		if old != nil {
			r = (*old)[c.Key]
		}
		if r == nil {
			r = new(ring)
		}
		next[c.Key] = r
	}
	p.hot.Store(&next)
}

// recent returns key's last decisions, nil when it is not a hot key.
func (p *policy) recent(key string) []Record {
	h := p.hot.Load()
	if h == nil {
		return nil
	}
	if len(key) > floodgate.MaxKeyLen {
		key = floodgate.NormalizeKey(key)
	}
	if r := (*h)[key]; r != nil {
		return r.decisions()
	}
	return nil
}

// Recent returns the last decisions of key under the named policy, oldest
// first, while the key is among the policy's top limited keys (nil
// otherwise): decisions are kept from the Tick that found the key among
// them, at most RecentPerKey per key.
func (s *Status) Recent(policy, key string) []Record {
	s.mu.Lock()
	ps := s.policies[policy]
	s.mu.Unlock()
	if ps == nil {
		return nil
	}
	return ps.recent(key)
}
