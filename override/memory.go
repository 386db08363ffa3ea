package override

import (
	"context"
	"sort"
	"sync"
	"time"
)

// MaxEntries is the most entries a Store keeps (NewMemory's and
// redisstore's). An override is for a few keys at a time; a table this large
// still costs one map lookup per decision.
const MaxEntries = 10_000

// NewMemory returns a Store in this process's memory: for a single instance
// (the memory engine), or for tests. Its entries last as long as the
// process; the daemon's reloads keep them.
func NewMemory() Store { return &memory{entries: map[ID]Entry{}} }

type memory struct {
	mu      sync.Mutex
	entries map[ID]Entry
	version uint64
}

func (m *memory) Put(_ context.Context, e Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	id := e.ID()
	if _, ok := m.entries[id]; !ok && len(m.entries) >= MaxEntries {
		now := time.Now()
		for k, old := range m.entries {
			if !now.Before(old.Expires) {
				delete(m.entries, k)
			}
		}
		if len(m.entries) >= MaxEntries {
			return ErrFull
		}
	}
	e.Limits = append(e.Limits[:0:0], e.Limits...)
	m.entries[id] = e
	m.version++
	return nil
}

func (m *memory) Delete(_ context.Context, id ID) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.entries[id]; !ok {
		return false, nil
	}
	delete(m.entries, id)
	m.version++
	return true, nil
}

func (m *memory) List(context.Context) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Entry, 0, len(m.entries))
	for _, e := range m.entries {
		out = append(out, e)
	}
	Sort(out)
	return out, nil
}

func (m *memory) Version(context.Context) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.version, nil
}

// Sort orders entries by policy, then keys before tiers, then target: the
// order listings show them in.
func Sort(es []Entry) {
	sort.Slice(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if a.Policy != b.Policy {
			return a.Policy < b.Policy
		}
		if (a.Tier == "") != (b.Tier == "") {
			return a.Tier == ""
		}
		return a.Key+a.Tier < b.Key+b.Tier
	})
}
