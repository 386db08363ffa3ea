package status

import (
	"cmp"
	"hash/maphash"
	"slices"
	"sync"

	"github.com/floodgate-go/floodgate"
)

// Shards is the number of independently locked parts of a Window. A key
// belongs to one shard, chosen by its hash, so concurrent decisions for
// different keys rarely meet on one lock.
const Shards = 16

// A Window counts the heaviest keys of a stream over a sliding period in a
// fixed amount of memory, however many distinct keys arrive: the
// Space-Saving algorithm (Metwally, Agrawal, El Abbadi, 2005) with
// PerShard counters in each of Shards shards and each of Buckets time
// buckets. Rotate starts a new bucket and forgets the oldest, so Top covers
// the last Buckets-1 whole buckets and the current partial one.
//
// Error bound: Top reports for each key an upper bound Count and an Error
// such that the key's true weight in the window lies in
// [Count-Error, Count], and Error ≤ N/PerShard, where N is the total weight
// the window holds in that key's shard (Total per shard; with a uniform hash
// about the window's total over Shards). Every key whose true weight is
// above N/PerShard is among the keys Top can return. Keys are told apart by
// a 64-bit hash; two keys whose hashes collide (a chance of about 2^-64 per
// pair) are counted as one.
//
// A Window is safe for concurrent use; Add takes one shard's lock and
// allocates nothing for keys of up to floodgate.MaxKeyLen bytes, except a
// bucket's counters the first time it counts: a shard's buckets are made
// on its first weighted Add and dropped by Rotate once all of them are
// empty, so a Window that counts nothing holds no counters.
type Window struct {
	perShard int
	buckets  int
	shards   [Shards]shard
}

// shard is one lock's part of a Window, padded so that two shards' locks do
// not share a cache line.
type shard struct {
	mu     sync.Mutex
	cur    int
	ring   []summary // buckets of one shard, ring[cur] is the one filling; nil while all are empty
	events uint64    // every Add ever, for rates
	weight uint64    // every Add's weight ever
	tags   [maxTags]uint64
	_      [64]byte
}

// maxTags bounds the tags an Add may count (see Add).
const maxTags = 12

// summary is one Space-Saving summary: at most len(hash) monitored keys.
// Its slices are made on its first add.
type summary struct {
	n     int
	total uint64 // weight added to this summary
	hash  []uint64
	key   []string
	count []uint64
	err   []uint64
}

var seed = maphash.MakeSeed()

// NewWindow returns a Window with perShard counters per shard and bucket
// (at least 1) and buckets time buckets (at least 2).
func NewWindow(perShard, buckets int) *Window {
	w := new(Window)
	w.size(perShard, buckets)
	return w
}

// size sets the sizes of w, which counts nothing yet.
func (w *Window) size(perShard, buckets int) {
	w.perShard, w.buckets = max(perShard, 1), max(buckets, 2)
}

// Add counts weight for key and one event under tag (0 ≤ tag < 12; others
// are not counted by tag). A weight of 0 counts the event only.
func (w *Window) Add(key string, weight uint64, tag int) {
	h := maphash.String(seed, key)
	s := &w.shards[h%Shards]
	// No defer: nothing below can panic, and Add is on every decision.
	s.mu.Lock()
	s.events++
	s.weight += weight
	if uint(tag) < maxTags {
		s.tags[tag]++
	}
	if weight > 0 {
		if s.ring == nil {
			s.ring = make([]summary, w.buckets)
		}
		s.ring[s.cur].add(h, key, weight, w.perShard)
	}
	s.mu.Unlock()
}

func (m *summary) add(h uint64, key string, weight uint64, size int) {
	if m.hash == nil {
		m.hash, m.key = make([]uint64, size), make([]string, size)
		m.count, m.err = make([]uint64, size), make([]uint64, size)
	}
	m.total += weight
	// One pass finds the key or, failing that, the least counter.
	low := 0
	for i := range m.n {
		if m.hash[i] == h {
			m.count[i] += weight
			return
		}
		if m.count[i] < m.count[low] {
			low = i
		}
	}
	if len(key) > floodgate.MaxKeyLen {
		// Keep the engine's name for the key, not a long string (a URL, a
		// token) that the request would otherwise keep alive.
		key = floodgate.NormalizeKey(key)
	}
	if m.n < len(m.hash) {
		low = m.n
		m.n++
		m.hash[low], m.key[low], m.count[low], m.err[low] = h, key, weight, 0
		return
	}
	// Space-Saving: the new key takes over the least counter and inherits
	// its count as its possible overestimate.
	m.hash[low], m.key[low], m.err[low] = h, key, m.count[low]
	m.count[low] += weight
}

// floor is the most weight a key that this summary does not monitor can
// have had in it: 0 while it has free counters, else its least count.
func (m *summary) floor() uint64 {
	if m.n == 0 || m.n < len(m.hash) {
		return 0
	}
	least := m.count[0]
	for i := 1; i < m.n; i++ {
		least = min(least, m.count[i])
	}
	return least
}

func (m *summary) reset() {
	m.n, m.total = 0, 0
	clear(m.key) // drop the references to the keys' memory
}

// Rotate starts a new time bucket, forgetting the oldest one. A shard
// whose buckets are then all empty gives their memory back.
func (w *Window) Rotate() {
	for i := range w.shards {
		s := &w.shards[i]
		s.mu.Lock()
		s.cur = (s.cur + 1) % w.buckets
		if s.ring != nil {
			s.ring[s.cur].reset()
			if !slices.ContainsFunc(s.ring, func(m summary) bool { return m.n > 0 }) {
				s.ring = nil
			}
		}
		s.mu.Unlock()
	}
}

// A Count is one key's estimated weight in a Window: its true weight lies
// in [Count-Error, Count].
type Count struct {
	Key   string
	Count uint64
	Error uint64
}

// Top returns up to n keys of the window by decreasing Count (n ≤ 0: every
// key the window monitors).
func (w *Window) Top(n int) []Count {
	var all []Count
	for i := range w.shards {
		all = append(all, w.shards[i].merged()...)
	}
	slices.SortFunc(all, func(a, b Count) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	if n > 0 && len(all) > n {
		all = all[:n]
	}
	return all
}

// merged sums the shard's buckets: a key not monitored in a bucket may have
// had up to that bucket's floor there, which goes into both its Count and
// its Error.
func (s *shard) merged() []Count {
	s.mu.Lock()
	defer s.mu.Unlock()
	type agg struct {
		Count
		seen []bool
	}
	byHash := map[uint64]*agg{}
	var order []uint64
	for b := range s.ring {
		m := &s.ring[b]
		for i := range m.n {
			a := byHash[m.hash[i]]
			if a == nil {
				a = &agg{Count: Count{Key: m.key[i]}, seen: make([]bool, len(s.ring))}
				byHash[m.hash[i]] = a
				order = append(order, m.hash[i])
			}
			a.Count.Count += m.count[i]
			a.Error += m.err[i]
			a.seen[b] = true
		}
	}
	out := make([]Count, 0, len(order))
	for _, h := range order {
		a := byHash[h]
		for b := range s.ring {
			if !a.seen[b] {
				f := s.ring[b].floor()
				a.Count.Count += f
				a.Error += f
			}
		}
		out = append(out, a.Count)
	}
	return out
}

// Totals are a Window's cumulative counters, which only grow.
type Totals struct {
	Events uint64
	Weight uint64
	Tags   [maxTags]uint64
}

// Totals returns the sums over all shards of every Add ever.
func (w *Window) Totals() Totals {
	var t Totals
	for i := range w.shards {
		s := &w.shards[i]
		s.mu.Lock()
		t.Events += s.events
		t.Weight += s.weight
		for j := range t.Tags {
			t.Tags[j] += s.tags[j]
		}
		s.mu.Unlock()
	}
	return t
}
