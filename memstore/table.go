package memstore

// table is an open-addressing hash table with linear probing, keyed by
// 64-bit hashes that are already uniformly spread (so the low bits index it
// directly). Key 0 marks an empty slot; callers never use it.
//
// A table of our own instead of a Go map: one probe finds a slot that is
// then updated in place (a map needs a lookup and an assignment), a key costs
// 8 bytes instead of a string, entries can be sampled at a random position
// for eviction, deletion needs no tombstones (backward shift), and the table
// shrinks when keys go idle, where Go maps never give memory back.
type table[V any] struct {
	slots []slot[V]
	n     int
	mask  uint64
}

type slot[V any] struct {
	key uint64
	val V
}

const minTableSize = 8

// lookup returns the index of key's slot, or of the empty slot where key
// would be inserted. The table must not be empty (see reserve).
func (t *table[V]) lookup(key uint64) (i uint64, found bool) {
	i = key & t.mask
	for {
		switch t.slots[i].key {
		case key:
			return i, true
		case 0:
			return i, false
		}
		i = (i + 1) & t.mask
	}
}

// reserve makes room for one more key, keeping the load at most 3/4 so that
// probes stay short. It reports whether the table was rebuilt, which moves
// every slot.
func (t *table[V]) reserve() bool {
	if (t.n+1)*4 <= len(t.slots)*3 {
		return false
	}
	size := len(t.slots) * 2
	if size < minTableSize {
		size = minTableSize
	}
	t.resize(size)
	return true
}

func (t *table[V]) resize(size int) {
	old := t.slots
	t.slots = make([]slot[V], size)
	t.mask = uint64(size - 1)
	for _, s := range old {
		if s.key != 0 {
			i, _ := t.lookup(s.key)
			t.slots[i] = s
		}
	}
}

// get returns the value stored for key.
func (t *table[V]) get(key uint64) (v V, ok bool) {
	if t.n == 0 {
		return v, false
	}
	i, ok := t.lookup(key)
	if !ok {
		return v, false
	}
	return t.slots[i].val, true
}

// put stores v for key.
func (t *table[V]) put(key uint64, v V) {
	if len(t.slots) == 0 {
		t.reserve()
	}
	i, found := t.lookup(key)
	if found {
		t.slots[i].val = v
		return
	}
	if t.reserve() {
		i, _ = t.lookup(key)
	}
	t.slots[i] = slot[V]{key: key, val: v}
	t.n++
}

// remove deletes key if present.
func (t *table[V]) remove(key uint64) {
	if t.n == 0 {
		return
	}
	if i, found := t.lookup(key); found {
		t.deleteAt(i)
	}
}

// deleteAt empties slot i and shifts later entries of its probe run back, so
// that every key stays reachable from its home slot without tombstones.
func (t *table[V]) deleteAt(i uint64) {
	j := i
	for {
		j = (j + 1) & t.mask
		k := t.slots[j].key
		if k == 0 {
			break
		}
		home := k & t.mask
		// The entry at j may move to i unless its home lies cyclically in (i, j].
		if (i < j && (home <= i || home > j)) || (i > j && home <= i && home > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot[V]{}
	t.n--
}

// sweep deletes every entry for which drop returns true and shrinks the table
// when it has become mostly empty. It returns how many entries it deleted.
func (t *table[V]) sweep(drop func(V) bool) int {
	deleted := 0
	for i := uint64(0); i < uint64(len(t.slots)); {
		if t.slots[i].key != 0 && drop(t.slots[i].val) {
			// deleteAt may shift a later entry into i: look at i again.
			t.deleteAt(i)
			deleted++
			continue
		}
		i++
	}
	if len(t.slots) > minTableSize && t.n*8 < len(t.slots) {
		size := minTableSize
		for size*3 < t.n*4*2 { // leave the table at most 3/8 full
			size *= 2
		}
		if t.n == 0 {
			t.slots, t.mask = nil, 0
		} else {
			t.resize(size)
		}
	}
	return deleted
}
