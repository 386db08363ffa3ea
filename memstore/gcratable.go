package memstore

import (
	"math"
	"sync/atomic"
)

// gcraTable holds GCRA state (one TAT per key) so that a decision on an
// existing key needs no lock: it finds the slot with atomic loads and
// updates the TAT with compare-and-swap. A shard mutex still serialises
// every change of structure (insert, delete, rebuild), and those changes
// never move a live entry under a reader's feet:
//
//   - Deletion leaves a tombstone: the slot's TAT is first swapped to dead,
//     then its key to tombKey, so a reader either wins the race with an
//     update (and the entry lives on) or sees dead and retries under the
//     lock.
//   - Inserts publish the TAT before the key, so a reader that sees the key
//     sees its TAT.
//   - A rebuild (to grow, shrink or drop tombstones) freezes each old slot's
//     TAT (sets the sign bit with compare-and-swap) before copying it, and
//     publishes the new table after copying all. An update racing with the
//     rebuild either lands before the freeze, and is copied, or fails on the
//     frozen value and retries under the lock, on the new table.
//
// TATs are Unix nanoseconds, positive, so a negative value marks a slot
// that readers must not use.
type gcraTable struct {
	slots []gcraSlot
	mask  uint64
	live  int // entries with a live key; changed under the shard mutex only
	used  int // live entries and tombstones
}

type gcraSlot struct {
	key atomic.Uint64
	tat atomic.Int64
}

const (
	emptyKey = 0
	tombKey  = 1
	deadTAT  = math.MinInt64
)

func newGCRATable(size int) *gcraTable {
	return &gcraTable{slots: make([]gcraSlot, size), mask: uint64(size - 1)}
}

// find returns the slot holding key, or nil. It is safe without the lock.
func (t *gcraTable) find(key uint64) *gcraSlot {
	for i := key & t.mask; ; i = (i + 1) & t.mask {
		switch t.slots[i].key.Load() {
		case key:
			return &t.slots[i]
		case emptyKey:
			return nil
		}
	}
}

// hasRoom reports whether one more entry fits without a rebuild, keeping
// the table at most 3/4 full of entries and tombstones.
func (t *gcraTable) hasRoom() bool { return (t.used+1)*4 <= len(t.slots)*3 }

// insert adds key, which must be absent, with tat. The caller holds the
// shard mutex and has checked hasRoom.
func (t *gcraTable) insert(key uint64, tat int64) {
	for i := key & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		switch s.key.Load() {
		case emptyKey:
			t.used++
		case tombKey:
		default:
			continue
		}
		s.tat.Store(tat) // before the key: a reader that sees the key sees the TAT
		s.key.Store(key)
		t.live++
		return
	}
}

// kill deletes the entry in s if its TAT is still old, leaving a
// tombstone. It reports false when a concurrent update changed the TAT
// first. The caller holds the shard mutex.
func (t *gcraTable) kill(s *gcraSlot, old int64) bool {
	if old < 0 || !s.tat.CompareAndSwap(old, deadTAT) {
		return false
	}
	s.key.Store(tombKey)
	t.live--
	return true
}

// rebuilt returns a copy of t sized for its live entries plus extra, without
// tombstones, freezing every slot of t as it copies it. The caller holds the
// shard mutex and publishes the result.
func (t *gcraTable) rebuilt(extra int) *gcraTable {
	size := minTableSize
	for size*3 < (t.live+extra)*8 { // at most 3/8 full after the rebuild
		size *= 2
	}
	nt := newGCRATable(size)
	for i := range t.slots {
		s := &t.slots[i]
		key := s.key.Load()
		if key == emptyKey || key == tombKey {
			continue
		}
		for {
			v := s.tat.Load()
			if v < 0 {
				break
			}
			if s.tat.CompareAndSwap(v, v|deadTAT) {
				nt.insert(key, v)
				break
			}
		}
	}
	return nt
}
