package memstore

import (
	"context"
	"math"
	"runtime"
	"time"

	"github.com/floodgate-go/floodgate"
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
	if sh.tats.n >= sh.wins.n && sh.tats.n > 0 {
		evictFrom(&sh.tats, k, func(tat int64) int64 { return tat })
		return
	}
	if sh.wins.n > 0 {
		evictFrom(&sh.wins, k, func(st floodgate.State) int64 { return st.A })
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
		dropped += sh.tats.sweep(func(tat int64) bool { return tat <= now })
		dropped += sh.wins.sweep(func(st floodgate.State) bool { return st.A <= now })
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
func (s *Store) Refund(_ context.Context, set *floodgate.LimitSet, key string, cost int64) error {
	h := s.hash(set, key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.clock.UnixNano()
	for i := range set.Rules {
		r := &set.Rules[i]
		k := ruleKey(h, i)
		switch r.Algorithm {
		case floodgate.GCRA, floodgate.TokenBucket:
			if tat, ok := sh.tats.get(k); ok {
				if next := r.Refund(floodgate.State{A: tat}, now, cost); next.A == 0 {
					sh.tats.remove(k)
				} else {
					sh.tats.put(k, next.A)
				}
			}
		case floodgate.SlidingLog:
			if l, ok := sh.logs[k]; ok {
				r.RefundLog(l, now, cost)
			}
		default:
			if st, ok := sh.wins.get(k); ok {
				if next := r.Refund(st, now, cost); next == (floodgate.State{}) {
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
func (s *Store) Reset(_ context.Context, set *floodgate.LimitSet, key string) error {
	h := s.hash(set, key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := range set.Rules {
		k := ruleKey(h, i)
		sh.tats.remove(k)
		sh.wins.remove(k)
		delete(sh.logs, k)
	}
	return nil
}
