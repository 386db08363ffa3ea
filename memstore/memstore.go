// Package memstore is floodgate's in-memory engine: the state of every key
// in this process, decided in about the time of one cache miss.
//
// Keys are spread over shards, each with its own mutex and its own hash
// table, so there is no global lock. A key's state is kept under a 64-bit
// keyed hash of (limit set, key): 16 bytes per GCRA key, 24 per window key.
// State that carries no information (a full bucket) is deleted by an
// incremental janitor that holds one shard at a time, and MaxKeys bounds
// memory: when a shard is full, the sampled entry that carries the least
// debt is evicted, so a flood of unique keys cannot exhaust memory.
//
// Hash collisions: two distinct keys share state only if their 64-bit hashes
// collide, about one chance in 10^7 at a million live keys per limit set. The
// hash is seeded randomly per Store, so clients cannot aim for a collision.
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/clock"
)

// Options configures a Store. The zero value is a good default.
type Options struct {
	// MaxKeys bounds the number of entries kept (one per key and limit of its
	// policy). When a shard reaches its share, inserting a new entry evicts
	// the sampled entry carrying the least debt: an evicted key restarts with
	// full capacity, so the bound errs lenient for that key and only when
	// the store is full. 0 means DefaultMaxKeys; -1 means no bound.
	MaxKeys int

	// Shards is the number of independently locked shards, rounded up to a
	// power of two. 0 means DefaultShards.
	Shards int

	// Clock tells the time. Nil means a clock.Coarse refreshed every
	// millisecond, owned by the Store and stopped by Close.
	Clock clock.Clock

	// SweepInterval is how often the janitor walks every shard to drop
	// expired state. 0 means DefaultSweepInterval; negative disables the
	// janitor (call Sweep yourself).
	SweepInterval time.Duration
}

// Source is the Source of the decisions a Store makes.
const Source = "memory"

// ValidateLimit implements floodgate.Store: memory keeps every valid limit.
func (s *Store) ValidateLimit(floodgate.Limit) error { return nil }

// Defaults for Options' zero values.
const (
	DefaultMaxKeys       = 1 << 21
	DefaultShards        = 256
	DefaultSweepInterval = time.Second
)

// evictSamples is how many entries an eviction compares.
const evictSamples = 8

// A Store keeps limit state in memory. It is safe for concurrent use.
type Store struct {
	shards   []shard
	shift    uint
	perShard int // entries a shard may hold; 0 means no bound
	seed     maphash.Seed
	clock    clock.Clock
	ownClock *clock.Coarse
	closed   atomic.Bool

	evictions atomic.Uint64
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

type shard struct {
	mu   sync.Mutex
	tats atomic.Pointer[gcraTable] // GCRA and TokenBucket: the TAT; read without mu
	// Each window algorithm has a table of its own: eviction reads the
	// counts of a state, which each algorithm keeps in its own way.
	fixed   table[algo.State]
	sliding table[algo.State]
	logs    map[uint64]*keyLog
	// scratch stands in for the log of a key that has none, so checking it
	// allocates nothing. Only used under mu.
	scratch algo.Log
	_       [40]byte // keep neighbouring shards on separate cache lines
}

// keyLog is the Log of one SlidingLog key with the rule that charged it
// last, which eviction needs to count the units the log holds.
type keyLog struct {
	algo.Log
	rule *algo.Transition
}

// windows returns the table of r, a window algorithm's rule.
func (sh *shard) windows(r *algo.Transition) *table[algo.State] {
	if r.Kind() == algo.FixedWindow {
		return &sh.fixed
	}
	return &sh.sliding
}

func (sh *shard) len() int {
	n := sh.fixed.n + sh.sliding.n + len(sh.logs)
	if t := sh.tats.Load(); t != nil {
		n += t.live
	}
	return n
}

var _ floodgate.Store = (*Store)(nil)

// New returns a Store. Call Close when done with it to stop its goroutines.
func New(o Options) *Store {
	n := o.Shards
	if n <= 0 {
		n = DefaultShards
	}
	size, shift := 1, uint(64)
	for size < n {
		size *= 2
		shift--
	}
	s := &Store{shards: make([]shard, size), shift: shift, seed: maphash.MakeSeed(), clock: o.Clock}
	if size == 1 {
		s.shift = 63 // h>>63 is 0 or 1; keep one shard by masking below
	}
	switch {
	case o.MaxKeys == 0:
		s.perShard = (DefaultMaxKeys + size - 1) / size
	case o.MaxKeys > 0:
		s.perShard = (o.MaxKeys + size - 1) / size
	}
	if s.clock == nil {
		s.ownClock = clock.NewCoarse(clock.DefaultTick)
		s.clock = s.ownClock
	}
	interval := o.SweepInterval
	if interval == 0 {
		interval = DefaultSweepInterval
	}
	if interval > 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.janitor(interval)
	}
	return s
}

// errClosed is what every call after Close returns. A Store closed while
// limiters still use it would otherwise decide on state that no longer
// expires, denying its exhausted keys for ever without a word.
var errClosed = fmt.Errorf("%w (memstore: Close was called; keep a Store open while limiters use it and close it at shutdown, not with defer in the function that builds them)", floodgate.ErrClosed)

// Close stops the janitor and the Store's own clock. Every later Decide,
// Refund and Reset returns an error wrapping floodgate.ErrClosed, so Close a
// Store only when no limiter uses it any more. Close is idempotent.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.closeOnce.Do(func() {
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
		if s.ownClock != nil {
			s.ownClock.Stop()
		}
	})
	return nil
}

// hash is the keyed hash of (limit set, key). Every limit of the set adds its
// index (ruleKey), so all of a key's entries live in one shard and one
// decision takes one lock.
func (s *Store) hash(set *algo.Set, key string) uint64 {
	return mix(maphash.String(s.seed, key) ^ set.ID())
}

func (s *Store) shardOf(h uint64) *shard {
	if len(s.shards) == 1 {
		return &s.shards[0]
	}
	return &s.shards[h>>s.shift]
}

// ruleKey is the table key of rule i of the key hashed to h. It is never
// emptyKey or tombKey, which mark free slots. Rule 0, the only rule of most
// policies, uses h itself: it is already well mixed, and the shard took its
// high bits while the table takes its low ones.
func ruleKey(h uint64, i int) uint64 {
	k := h
	if i > 0 {
		k = mix(h + uint64(i)*0x9e3779b97f4a7c15)
	}
	if k <= tombKey {
		k += 0x9e3779b97f4a7c15
	}
	return k
}

// mix is a 64-bit finaliser (splitmix64): every input bit affects every
// output bit, so the table's low bits and the shard's high bits are both
// uniform.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Decide implements floodgate.Store.
func (s *Store) Decide(_ context.Context, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	if s.closed.Load() {
		return algo.Verdict{}, errClosed
	}
	h := s.hash(set, key)
	if r := set.At(0); set.Len() == 1 && r.Kind() == algo.GCRA {
		var d algo.Decision
		s.decideGCRA(s.shardOf(h), r, ruleKey(h, 0), cost, &d)
		return algo.Verdict{Decision: d, Source: Source}, nil
	}
	var ds [algo.MaxTransitions]algo.Decision
	n := s.decide(set, h, cost, &ds)
	return set.Combine(ds[:n], Source), nil
}

func (s *Store) decide(set *algo.Set, h uint64, cost int64, ds *[algo.MaxTransitions]algo.Decision) int {
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.clock.UnixNano()
	n := set.Len()

	var keys [algo.MaxTransitions]uint64
	var read, next [algo.MaxTransitions]algo.State
	allowed := true
	for i := range n {
		keys[i] = ruleKey(h, i)
		read[i], next[i], ds[i] = sh.step(set.At(i), keys[i], now, cost)
		allowed = allowed && ds[i].Allowed
	}
	if !allowed {
		// Nothing is charged; the limits that would have admitted report
		// their uncharged state.
		for i := range n {
			if ds[i].Allowed && cost > 0 {
				_, _, ds[i] = sh.step(set.At(i), keys[i], now, 0)
			}
		}
		return n
	}
	if cost == 0 {
		return n
	}
	for i := range n {
		r := set.At(i)
		k := keys[i]
		switch r.Kind() {
		case algo.GCRA:
			s.chargeGCRA(sh, r, k, read[i].A, next[i].A, now, cost)
		case algo.SlidingLog:
			s.makeRoom(sh, k, now)
			r.ChargeLog(sh.chargedLog(k, r), now, cost)
		default:
			s.makeRoom(sh, k, now)
			sh.windows(r).put(k, next[i])
		}
	}
	return n
}

// decideGCRA is the path of a policy of one GCRA limit, the most common. An
// existing key is decided without the shard lock: one probe and a
// compare-and-swap of its TAT. Concurrent decisions on one key retry until
// one wins; each recomputes from the TAT it read, so none over-admits. A
// timestamp that another caller has already passed only makes the decision
// stricter: the TAT can only move forward.
func (s *Store) decideGCRA(sh *shard, r *algo.Transition, k uint64, cost int64, d *algo.Decision) {
	if t := sh.tats.Load(); t != nil {
		if slot := t.find(k); slot != nil && s.casGCRA(slot, r, cost, d) {
			return
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// Under the lock no slot is being deleted or frozen: a slot found now is
	// live, and an absent key stays absent until this insert.
	if t := sh.tats.Load(); t != nil {
		if slot := t.find(k); slot != nil && s.casGCRA(slot, r, cost, d) {
			return
		}
	}
	now := s.clock.UnixNano()
	next, dd := r.Step(algo.State{}, now, cost)
	*d = dd
	if dd.Allowed && cost > 0 {
		s.insertGCRA(sh, k, next.A, now)
	}
}

// casGCRA decides on the TAT in slot and stores the charge with
// compare-and-swap. It reports false when the slot is frozen or dead: the
// caller must retry under the shard lock.
func (s *Store) casGCRA(slot *gcraSlot, r *algo.Transition, cost int64, d *algo.Decision) bool {
	now := s.clock.UnixNano()
	for {
		tat := slot.tat.Load()
		if tat < 0 {
			return false
		}
		next, dd := r.Step(algo.State{A: tat}, now, cost)
		if !dd.Allowed || cost == 0 || slot.tat.CompareAndSwap(tat, next.A) {
			*d = dd
			return true
		}
	}
}

// chargeGCRA stores a multi-limit decision's charge of a GCRA limit, under
// the shard lock. The TAT normally is still the one the decision read; if a
// lock-free decision of a one-limit policy of the same name moved it in
// between, the charge is added on top of the new TAT, never lost.
func (s *Store) chargeGCRA(sh *shard, r *algo.Transition, k uint64, read, next, now, cost int64) {
	t := sh.tats.Load()
	var slot *gcraSlot
	if t != nil {
		slot = t.find(k)
	}
	if slot == nil {
		s.insertGCRA(sh, k, next, now)
		return
	}
	for !slot.tat.CompareAndSwap(read, next) {
		read = slot.tat.Load()
		next = max(read, now) + cost*int64(r.Interval())
	}
}

// insertGCRA adds k, absent from the shard, with tat. The caller holds the
// shard lock.
func (s *Store) insertGCRA(sh *shard, k uint64, tat, now int64) {
	s.makeRoom(sh, k, now)
	t := sh.tats.Load()
	switch {
	case t == nil:
		t = newGCRATable(minTableSize)
		sh.tats.Store(t)
	case !t.hasRoom():
		t = t.rebuilt(1)
		sh.tats.Store(t)
	}
	t.insert(k, tat)
}

// tat returns the TAT of k, or 0 when absent. The caller holds the shard
// lock, so the value is live.
func (sh *shard) tat(k uint64) int64 {
	if t := sh.tats.Load(); t != nil {
		if slot := t.find(k); slot != nil {
			return max(slot.tat.Load(), 0)
		}
	}
	return 0
}

// step decides cost units of r for k at now on the state the shard holds,
// and stores nothing: it returns the state it read, the next state (both
// zero for SlidingLog, whose Log the caller charges) and the decision. The
// caller holds the shard lock.
func (sh *shard) step(r *algo.Transition, k uint64, now, cost int64) (read, next algo.State, d algo.Decision) {
	switch r.Kind() {
	case algo.GCRA:
		read = algo.State{A: sh.tat(k)}
	case algo.SlidingLog:
		return read, next, r.CheckLog(sh.log(k), now, cost)
	default:
		read, _ = sh.windows(r).get(k)
	}
	next, d = r.Step(read, now, cost)
	return read, next, d
}

// log returns the Log of k. For a key without one it returns an empty Log
// that must not be written.
func (sh *shard) log(k uint64) *algo.Log {
	if l, ok := sh.logs[k]; ok {
		return &l.Log
	}
	sh.scratch = algo.Log{}
	return &sh.scratch
}

// chargedLog returns the Log of k for r to charge, creating it when k has
// none.
func (sh *shard) chargedLog(k uint64, r *algo.Transition) *algo.Log {
	l, ok := sh.logs[k]
	if !ok {
		if sh.logs == nil {
			sh.logs = make(map[uint64]*keyLog)
		}
		l = new(keyLog)
		sh.logs[k] = l
	}
	l.rule = r
	return &l.Log
}

// makeRoom evicts an entry when the shard is full and k is new to it.
func (s *Store) makeRoom(sh *shard, k uint64, now int64) {
	if s.perShard == 0 || sh.len() < s.perShard || sh.has(k) {
		return
	}
	s.evict(sh, k, now)
}

func (sh *shard) has(k uint64) bool {
	if t := sh.tats.Load(); t != nil && t.find(k) != nil {
		return true
	}
	if _, ok := sh.fixed.get(k); ok {
		return true
	}
	if _, ok := sh.sliding.get(k); ok {
		return true
	}
	_, ok := sh.logs[k]
	return ok
}
