package outbound

import (
	"context"
	"sync"
	"time"
)

// A PauseStore holds the pauses of upstreams: the instants before which no
// caller may send to them. The Transport sets a pause when an upstream
// answers 429 (or 503 with a Retry-After) or says it has nothing left, and
// asks before every request. A store shared by several processes
// (RedisPauses) pauses every instance on one instance's 429.
//
// A PauseStore cannot fail: a store that loses its backend falls back to
// something it can still answer with, and says so in its documentation.
type PauseStore interface {
	// Pause holds upstream until until. A pause never shortens one already
	// held: the later instant wins.
	Pause(ctx context.Context, upstream string, until time.Time)

	// PausedUntil returns when upstream's pause ends, or the zero Time
	// when it is not paused.
	PausedUntil(ctx context.Context, upstream string) time.Time
}

// maxMemoryPauses bounds the upstreams a MemoryPauses holds at once. Only
// paused upstreams take room, and an expired pause is dropped to make room
// for a new one; past the bound, new pauses are not kept.
const maxMemoryPauses = 4096

// MemoryPauses is a PauseStore for one process. The zero value is ready to
// use; it is safe for concurrent use.
type MemoryPauses struct {
	mu sync.Mutex
	m  map[string]time.Time
}

var _ PauseStore = (*MemoryPauses)(nil)

// NewMemoryPauses returns an empty MemoryPauses.
func NewMemoryPauses() *MemoryPauses { return &MemoryPauses{} }

// Pause implements PauseStore.
func (p *MemoryPauses) Pause(_ context.Context, upstream string, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = make(map[string]time.Time)
	}
	if cur, ok := p.m[upstream]; ok {
		if until.After(cur) {
			p.m[upstream] = until
		}
		return
	}
	if len(p.m) >= maxMemoryPauses {
		now := time.Now()
		for k, t := range p.m {
			if !t.After(now) {
				delete(p.m, k)
			}
		}
		if len(p.m) >= maxMemoryPauses {
			return
		}
	}
	p.m[upstream] = until
}

// PausedUntil implements PauseStore.
func (p *MemoryPauses) PausedUntil(_ context.Context, upstream string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.m[upstream]
	if !ok {
		return time.Time{}
	}
	if !t.After(time.Now()) {
		delete(p.m, upstream)
		return time.Time{}
	}
	return t
}
