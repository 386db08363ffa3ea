package memstore

import (
	"context"
	"time"

	"github.com/floodgate-go/floodgate/algo"
)

// Reserve implements floodgate.Store: the reservation is decided and
// booked under the shard lock (algo.Set.Reserve), every TAT written with
// compare-and-swap, since lock-free decisions of a one-limit policy may
// move it meanwhile: a one-limit reservation that loses the race decides
// again on the new TAT, so none over-admits.
func (s *Store) Reserve(_ context.Context, set *algo.Set, key string, cost int64, maxWait time.Duration) (algo.Verdict, algo.Ticket, error) {
	if s.closed.Load() {
		return algo.Verdict{}, algo.Ticket{}, errClosed
	}
	h := s.hash(set, key)
	sh := s.shardOf(h)
	if set.Len() == 1 {
		// An existing key of a one-limit policy, the common case, books
		// without the lock, as decideGCRA decides.
		if t := sh.tats.Load(); t != nil {
			if slot := t.find(ruleKey(h, 0)); slot != nil {
				if v, tk, ok := s.casReserve(slot, set, cost, maxWait); ok {
					return v, tk, nil
				}
			}
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := set.Len()
	var keys [algo.MaxTransitions]uint64
	var read, next [algo.MaxTransitions]algo.State
	for i := range n {
		keys[i] = ruleKey(h, i)
	}
	for {
		now := s.clock.UnixNano()
		for i := range n {
			read[i] = algo.State{A: sh.tat(keys[i])}
		}
		v := set.Reserve(read[:n], next[:n], now, cost, int64(maxWait), Source)
		if !v.Allowed {
			return v, algo.Ticket{}, nil
		}
		t := algo.Ticket{At: now + int64(v.RetryAfter)}
		if cost == 0 {
			return v, t, nil
		}
		if n == 1 {
			if !s.storeTAT(sh, keys[0], read[0].A, next[0].A, now) {
				continue // a lock-free decision moved the TAT: decide again
			}
			t.Next[0], t.Prev[0] = next[0].A, read[0].A
			return v, t, nil
		}
		for i := range n {
			r := set.At(i)
			want := next[i].A
			for !s.storeTAT(sh, keys[i], read[i].A, want, now) {
				// Only a one-limit policy of the same name decides these
				// keys lock-free: add this charge on top, never lose it.
				read[i].A = sh.tat(keys[i])
				want = max(read[i].A, t.At) + cost*r.Interval()
			}
			t.Next[i], t.Prev[i] = want, read[i].A
		}
		return v, t, nil
	}
}

// casReserve books a reservation on the TAT in slot with
// compare-and-swap, deciding again whenever another caller moved it first.
// It reports false when the slot is frozen or dead: the caller must retry
// under the shard lock.
func (s *Store) casReserve(slot *gcraSlot, set *algo.Set, cost int64, maxWait time.Duration) (algo.Verdict, algo.Ticket, bool) {
	var read, next [1]algo.State
	for {
		tat := slot.tat.Load()
		if tat < 0 {
			return algo.Verdict{}, algo.Ticket{}, false
		}
		now := s.clock.UnixNano()
		read[0].A = tat
		v := set.Reserve(read[:], next[:], now, cost, int64(maxWait), Source)
		if !v.Allowed {
			return v, algo.Ticket{}, true
		}
		t := algo.Ticket{At: now + int64(v.RetryAfter)}
		if cost == 0 || slot.tat.CompareAndSwap(tat, next[0].A) {
			t.Next[0], t.Prev[0] = next[0].A, tat
			return v, t, true
		}
	}
}

// storeTAT replaces k's TAT read with next, inserting k when read is 0 and
// k is absent. It reports false when the TAT is no longer read. The caller
// holds the shard lock.
func (s *Store) storeTAT(sh *shard, k uint64, read, next, now int64) bool {
	var slot *gcraSlot
	if t := sh.tats.Load(); t != nil {
		slot = t.find(k)
	}
	if slot == nil {
		if read != 0 {
			return false
		}
		s.insertGCRA(sh, k, next, now)
		return true
	}
	return slot.tat.CompareAndSwap(read, next)
}

// Cancel implements floodgate.Store (algo.Transition.Unreserve on every
// limit of set).
func (s *Store) Cancel(_ context.Context, set *algo.Set, key string, cost int64, tk algo.Ticket) error {
	if s.closed.Load() {
		return errClosed
	}
	h := s.hash(set, key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tats.Load()
	if t == nil {
		return nil
	}
	for i := range set.Len() {
		r := set.At(i)
		slot := t.find(ruleKey(h, i))
		if slot == nil {
			continue
		}
		for {
			now := s.clock.UnixNano()
			v := slot.tat.Load()
			nx := r.Unreserve(algo.State{A: v}, now, tk.At, tk.Prev[i], tk.Next[i], cost)
			if nx.A == v {
				break
			}
			if nx.A == 0 {
				if t.kill(slot, v) {
					break
				}
			} else if slot.tat.CompareAndSwap(v, nx.A) {
				break
			}
		}
	}
	return nil
}
