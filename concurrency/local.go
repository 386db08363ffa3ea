package concurrency

import (
	"context"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
)

// LocalSource is the Source of the decisions of a Local store.
const LocalSource floodgate.Source = "local"

// Local is a Store in this process's memory. Holds acquired with ttl 0
// last until released, since a holder in this process cannot die without
// it; holds with a ttl (leases for other processes) also end when it runs
// out. It is safe for concurrent use; the zero Local is not, use NewLocal.
type Local struct {
	clock floodgate.Clock

	mu    sync.Mutex
	keys  map[localKey]*holders
	spare []*holders // empty, for reuse; under mu
}

type localKey struct{ name, key string }

type holders struct {
	tokens   map[string]int64 // token → expiry in clock nanoseconds, 0 for none
	expiring int              // tokens with an expiry
}

// NewLocal returns an empty Local store on floodgate.SystemClock.
func NewLocal() *Local { return NewLocalClock(floodgate.SystemClock) }

// NewLocalClock returns an empty Local store whose leases run out by
// clock, for tests that move time by hand.
func NewLocalClock(clock floodgate.Clock) *Local {
	return &Local{clock: clock, keys: make(map[localKey]*holders)}
}

var _ Store = (*Local)(nil)

// Acquire implements Store. It never fails.
func (s *Local) Acquire(_ context.Context, name, key, token string, limit int, ttl time.Duration) (Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := localKey{name, key}
	h := s.keys[k]
	if h == nil {
		h = s.newHolders()
		s.keys[k] = h
	}
	if len(h.tokens) >= limit && h.expiring > 0 {
		s.sweep(h)
	}
	if _, ok := h.tokens[token]; ok {
		// A token already holding is not a second holder.
		return Grant{Acquired: true, InFlight: len(h.tokens), Lease: max(ttl, 0), Source: LocalSource}, nil
	}
	if len(h.tokens) >= limit {
		if len(h.tokens) == 0 {
			s.drop(k, h)
		}
		return Grant{InFlight: len(h.tokens), Source: LocalSource}, nil
	}
	var exp int64
	if ttl > 0 {
		exp = s.clock.UnixNano() + int64(ttl)
		h.expiring++
	}
	h.tokens[token] = exp
	return Grant{Acquired: true, InFlight: len(h.tokens), Lease: max(ttl, 0), Source: LocalSource}, nil
}

// Renew implements Store. A hold without expiry stays without one unless
// ttl is positive.
func (s *Local) Renew(_ context.Context, name, key, token string, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.keys[localKey{name, key}]
	if h == nil {
		return false, nil
	}
	exp, ok := h.tokens[token]
	now := s.clock.UnixNano()
	if !ok || (exp != 0 && exp <= now) {
		return false, nil
	}
	if ttl > 0 {
		if exp == 0 {
			h.expiring++
		}
		h.tokens[token] = now + int64(ttl)
	}
	return true, nil
}

// Release implements Store.
func (s *Local) Release(_ context.Context, name, key, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := localKey{name, key}
	h := s.keys[k]
	if h == nil {
		return nil
	}
	if exp, ok := h.tokens[token]; ok {
		delete(h.tokens, token)
		if exp != 0 {
			h.expiring--
		}
	}
	if len(h.tokens) == 0 {
		s.drop(k, h)
	}
	return nil
}

// newHolders returns an empty holders, a spare one when there is one: a
// key whose work is short empties and fills again on most requests, and
// its map's table is worth keeping.
func (s *Local) newHolders() *holders {
	if n := len(s.spare); n > 0 {
		h := s.spare[n-1]
		s.spare = s.spare[:n-1]
		return h
	}
	return &holders{tokens: make(map[string]int64)}
}

// drop forgets key k, whose holders h is empty, and keeps h as a spare.
func (s *Local) drop(k localKey, h *holders) {
	delete(s.keys, k)
	if len(s.spare) < maxSpare {
		s.spare = append(s.spare, h)
	}
}

// maxSpare bounds the spare holders a Local keeps.
const maxSpare = 64

// InFlight returns the number of live holders of key under the Limiter
// name, for tests and status pages.
func (s *Local) InFlight(name, key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.keys[localKey{name, key}]
	if h == nil {
		return 0
	}
	s.sweep(h)
	return len(h.tokens)
}

// sweep drops the holds of h whose lease has run out.
func (s *Local) sweep(h *holders) {
	now := s.clock.UnixNano()
	for t, exp := range h.tokens {
		if exp != 0 && exp <= now {
			delete(h.tokens, t)
			h.expiring--
		}
	}
}
