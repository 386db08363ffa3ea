package memstore

import (
	"context"
	"runtime"
	"time"

	"github.com/floodgate-go/floodgate/algo"
)

// evict removes, among a sample of the entries of sh's largest table, the
// one that carries the least debt, making room for k. An entry's debt is
// what its loss would admit: the units it still counts against its key
// times how long it still counts them (until its expiry, State.A). A full
// bucket has none; a fresh key charged once has little; an exhausted key
// has the most, so a flood of fresh keys evicts fresh keys and not the keys
// it would free. GCRA's debt is its time until full alone, as its units
// come back one at a time: that time is already its units times their
// interval. Debts are compared within one table only.
//
// Sampling keeps eviction O(1), as in Redis's approximated LRU; the walk
// starts at k's hash, which clients cannot predict. The price is that an
// exhausted key is lost when every entry of its sample is exhausted too.
func (s *Store) evict(sh *shard, k uint64, now int64) {
	s.evictions.Add(1)
	t := sh.tats.Load()
	gcra := 0
	if t != nil {
		gcra = t.live
	}
	switch max(gcra, sh.fixed.n, sh.sliding.n, len(sh.logs)) {
	case 0: // nothing to evict; makeRoom does not call for this
	case gcra:
		evictGCRA(t, k, now)
	case sh.fixed.n:
		evictWindow(&sh.fixed, k, now, algo.FixedWindow)
	case sh.sliding.n:
		evictWindow(&sh.sliding, k, now, algo.SlidingWindow)
	default:
		sh.evictLog(now)
	}
}

// leastDebt walks a table of size slots (a power of two) from start and
// returns, among the first evictSamples slots that debt reports live, the
// one with the least debt.
func leastDebt(size int, start uint64, debt func(i uint64) (d int64, live bool)) (best uint64, least int64, found bool) {
	mask := uint64(size - 1)
	seen := 0
	for i, probes := start&mask, 0; seen < evictSamples && probes < size; i, probes = (i+1)&mask, probes+1 {
		d, live := debt(i)
		if !live {
			continue
		}
		if seen == 0 || d < least {
			best, least = i, d
		}
		seen++
	}
	return best, least, seen > 0
}

// evictGCRA deletes the sampled GCRA entry with the earliest TAT. A
// lock-free decision may move a sampled TAT meanwhile; the deletion then
// fails and the sample is taken again.
func evictGCRA(t *gcraTable, start uint64, now int64) {
	for attempt := 0; attempt < 8; attempt++ {
		i, debt, found := leastDebt(len(t.slots), start, func(i uint64) (int64, bool) {
			s := &t.slots[i]
			if key := s.key.Load(); key == emptyKey || key == tombKey {
				return 0, false
			}
			tat := s.tat.Load()
			return tat - now, tat >= 0
		})
		if !found || t.kill(&t.slots[i], debt+now) {
			return
		}
		start += evictSamples
	}
}

// evictWindow deletes the sampled window entry with the least debt.
func evictWindow(t *table[algo.State], start uint64, now int64, kind algo.Kind) {
	i, _, found := leastDebt(len(t.slots), start, func(i uint64) (int64, bool) {
		return algo.Debt(kind, t.slots[i].val, now), t.slots[i].key != 0
	})
	if found {
		t.deleteAt(i)
	}
}

// evictLog deletes the sampled log with the least debt. Map iteration
// starts at a random entry.
func (sh *shard) evictLog(now int64) {
	victim, least, n := uint64(0), int64(0), 0
	for k, l := range sh.logs {
		if d := l.debt(now); n == 0 || d < least {
			victim, least = k, d
		}
		if n++; n == evictSamples {
			break
		}
	}
	delete(sh.logs, victim)
}

// debt is the units the log holds times the time until its newest
// admission stops counting. Checking a cost of 0 drops the admissions that
// have expired, which nobody needs any more.
func (l *keyLog) debt(now int64) int64 {
	d := l.rule.CheckLog(&l.Log, now, 0)
	return algo.DebtOf(l.rule.Capacity()-d.Remaining, l.Expiry()-now)
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
		expired := func(st algo.State) bool { return st.A <= now }
		dropped += sh.fixed.sweep(expired)
		dropped += sh.sliding.sweep(expired)
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
	if s.closed.Load() {
		return errClosed
	}
	h := s.hash(set, key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.clock.UnixNano()
	for i := range set.Len() {
		// A reservation not yet due was timed behind the units a refund
		// would give back: nothing back on any limit (algo's Reserved).
		if r := set.At(i); r.Reserved(algo.State{A: sh.tat(ruleKey(h, i))}, now) {
			return nil
		}
	}
	for i := range set.Len() {
		r := set.At(i)
		k := ruleKey(h, i)
		switch r.Kind() {
		case algo.GCRA:
			sh.refundGCRA(r, k, now, cost)
		case algo.SlidingLog:
			if l, ok := sh.logs[k]; ok {
				r.RefundLog(&l.Log, now, cost)
			}
		default:
			wins := sh.windows(r)
			if st, ok := wins.get(k); ok {
				if next := r.Refund(st, now, cost); next == (algo.State{}) {
					wins.remove(k)
				} else {
					wins.put(k, next)
				}
			}
		}
	}
	return nil
}

// Reset implements floodgate.Store.
func (s *Store) Reset(_ context.Context, set *algo.Set, key string) error {
	if s.closed.Load() {
		return errClosed
	}
	h := s.hash(set, key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := range set.Len() {
		k := ruleKey(h, i)
		sh.removeGCRA(k)
		sh.fixed.remove(k)
		sh.sliding.remove(k)
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
		if r.Reserved(algo.State{A: v}, now) {
			return // a lock-free reservation came first
		}
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
