package memstore

import (
	"context"
	"math"
	"runtime"
	"time"

	"github.com/floodgate-go/floodgate/algo"
)

// evict removes the entry of sh carrying the least debt among a sample of
// entries, making room for k. Debt is how long an entry still carries
// information (its expiry minus now): the entry closest to being a full
// bucket is the one whose loss admits the least. Sampling keeps eviction
// O(1), as in Redis's approximated LRU; the starting point is k's hash, which
// clients cannot predict.
func (s *Store) evict(sh *shard, k uint64) {
	s.evictions.Add(1)
	// Prefer the bigger table; logs are sampled only when the tables are empty.
	if t := sh.tats.Load(); t != nil && t.live >= sh.wins.n && t.live > 0 {
		evictGCRA(t, k)
		return
	}
	if sh.wins.n > 0 {
		evictFrom(&sh.wins, k, func(st algo.State) int64 { return st.A })
		return
	}
	victim, least := uint64(0), int64(math.MaxInt64)
	n := 0
	for key, l := range sh.logs { // map iteration starts at a random entry
		if e := l.Expiry(); e < least {
			victim, least = key, e
		}
		if n++; n == evictSamples {
			break
		}
	}
	delete(sh.logs, victim)
}

// evictGCRA deletes the sampled GCRA entry with the earliest TAT. A
// lock-free decision may move a sampled TAT meanwhile; the deletion then
// fails and the sample is taken again.
func evictGCRA(t *gcraTable, start uint64) {
	for attempt := 0; attempt < 8; attempt++ {
		var best *gcraSlot
		bestTAT := int64(math.MaxInt64)
		seen := 0
		for i, probes := start&t.mask, 0; seen < evictSamples && probes < len(t.slots); i, probes = (i+1)&t.mask, probes+1 {
			s := &t.slots[i]
			if key := s.key.Load(); key == emptyKey || key == tombKey {
				continue
			}
			seen++
			if v := s.tat.Load(); v >= 0 && v < bestTAT {
				best, bestTAT = s, v
			}
		}
		if best == nil || t.kill(best, bestTAT) {
			return
		}
		start += evictSamples
	}
}

func evictFrom[V any](t *table[V], start uint64, expiry func(V) int64) {
	best, bestExp := uint64(0), int64(math.MaxInt64)
	seen := 0
	for i, probes := start&t.mask, 0; seen < evictSamples && probes < len(t.slots); i, probes = (i+1)&t.mask, probes+1 {
		if t.slots[i].key == 0 {
			continue
		}
		seen++
		if e := expiry(t.slots[i].val); e < bestExp {
			best, bestExp = i, e
		}
	}
	if seen > 0 {
		t.deleteAt(best)
	}
}

// Sweep drops the state of every key that carries no information at the
// Store's current time, one shard at a time, and shrinks tables that have
// become mostly empty. The janitor calls it every SweepInterval; tests and
// callers that disabled the janitor may call it directly. It returns how
// many entries it dropped.
func (s *Store) Sweep() int {
	dropped := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		now := s.clock.UnixNano()
		dropped += sh.sweepGCRA(now)
		dropped += sh.wins.sweep(func(st algo.State) bool { return st.A <= now })
		for k, l := range sh.logs {
			if l.Expiry() <= now {
				delete(sh.logs, k)
				dropped++
			}
		}
		sh.mu.Unlock()
		runtime.Gosched()
	}
	return dropped
}

// sweepGCRA deletes the GCRA entries whose TAT has passed, and rebuilds the
// table when it has become mostly empty or mostly tombstones. The caller
// holds the shard lock.
func (sh *shard) sweepGCRA(now int64) int {
	t := sh.tats.Load()
	if t == nil {
		return 0
	}
	dropped := 0
	for i := range t.slots {
		s := &t.slots[i]
		if key := s.key.Load(); key == emptyKey || key == tombKey {
			continue
		}
		// A decision that moves the TAT first keeps the entry alive.
		if v := s.tat.Load(); v <= now && t.kill(s, v) {
			dropped++
		}
	}
	switch {
	case t.live == 0:
		sh.tats.Store(nil)
	case len(t.slots) > minTableSize && t.live*8 < len(t.slots), (t.used-t.live)*4 > len(t.slots):
		sh.tats.Store(t.rebuilt(0))
	}
	return dropped
}

func (s *Store) janitor(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Len returns the number of entries held (one per key and limit).
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.len()
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns how many entries have been evicted because the store
// was full (see Options.MaxKeys).
func (s *Store) Evictions() uint64 { return s.evictions.Load() }

// Refund implements floodgate.Store.
func (s *Store) Refund(_ context.Context, set *algo.Set, key string, cost int64) error {
	h := s.hash(set, key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.clock.UnixNano()
	for i := range set.Len() {
		r := set.At(i)
		k := ruleKey(h, i)
		switch r.Kind() {
		case algo.GCRA:
			sh.refundGCRA(r, k, now, cost)
		case algo.SlidingLog:
			if l, ok := sh.logs[k]; ok {
				r.RefundLog(l, now, cost)
			}
		default:
			if st, ok := sh.wins.get(k); ok {
				if next := r.Refund(st, now, cost); next == (algo.State{}) {
					sh.wins.remove(k)
				} else {
					sh.wins.put(k, next)
				}
			}
		}
	}
	return nil
}

// Reset implements floodgate.Store.
func (s *Store) Reset(_ context.Context, set *algo.Set, key string) error {
	h := s.hash(set, key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := range set.Len() {
		k := ruleKey(h, i)
		sh.removeGCRA(k)
		sh.wins.remove(k)
		delete(sh.logs, k)
	}
	return nil
}

// refundGCRA refunds cost units of k's TAT, deleting the entry when the
// bucket is full again. The caller holds the shard lock; lock-free decisions
// may still move the TAT, so every write is a compare-and-swap on the value
// read.
func (sh *shard) refundGCRA(r *algo.Transition, k uint64, now, cost int64) {
	t := sh.tats.Load()
	if t == nil {
		return
	}
	slot := t.find(k)
	if slot == nil {
		return
	}
	for {
		v := slot.tat.Load()
		next := r.Refund(algo.State{A: v}, now, cost)
		if next.A == 0 {
			if t.kill(slot, v) {
				return
			}
		} else if slot.tat.CompareAndSwap(v, next.A) {
			return
		}
	}
}

// removeGCRA deletes k's entry. The caller holds the shard lock.
func (sh *shard) removeGCRA(k uint64) {
	t := sh.tats.Load()
	if t == nil {
		return
	}
	if slot := t.find(k); slot != nil {
		for killed := false; !killed; {
			killed = t.kill(slot, slot.tat.Load())
		}
	}
}
