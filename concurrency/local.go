package concurrency

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
)

// LocalSource is the Source of the decisions of a Local store.
const LocalSource floodgate.Source = "local"

// Defaults of LocalOptions' zero values.
const (
	// DefaultMaxKeys bounds the holds of a Local: a few hundred bytes each
	// (the key, the token, their maps), so the default holds a Local to
	// about a hundred megabytes whatever its clients do.
	DefaultMaxKeys = 1 << 18

	// DefaultSweepInterval is how often a Local that holds leases drops
	// those that ran out.
	DefaultSweepInterval = time.Second
)

// ErrStoreFull reports a new hold refused because a Local holds
// LocalOptions.MaxKeys holds already and none of them has run out. The
// store refuses the newcomer rather than forget a holder: a forgotten
// holder's slot would be given to another while it still works.
var ErrStoreFull = errors.New("concurrency: the store holds its maximum of holds (MaxKeys) and none has expired; new holders are refused until some are released or run out (raise MaxKeys, or give leases shorter TTLs)")

// LocalOptions configures a Local. The zero value is a good default.
type LocalOptions struct {
	// MaxKeys bounds the holds kept: one per holder of a key, each
	// Permit or lease. When it is reached, holds whose lease ran out are
	// dropped first; if none has, a new holder is refused with
	// ErrStoreFull (ReasonError), on any key: no holder is ever evicted,
	// since its slot would then admit one more than the limit. Holders of
	// a key keep renewing and releasing. 0 means DefaultMaxKeys; -1 means
	// no bound.
	MaxKeys int

	// Clock tells the time leases run out by. Nil means
	// clock.System.
	Clock clock.Clock

	// SweepInterval is how often a janitor drops the holds whose lease ran
	// out; it runs only while some hold has a lease, so a Local of holds
	// without expiry (Permits of this process) runs no goroutine. 0 means
	// DefaultSweepInterval; negative disables the janitor (call Sweep).
	SweepInterval time.Duration
}

// Local is a Store in this process's memory. Holds acquired with ttl 0
// last until released, since a holder in this process cannot die without
// it; holds with a ttl (leases for other processes) also end when it runs
// out: a janitor drops them every SweepInterval, so leases abandoned on as
// many keys as clients care to name cost memory for one TTL, not until
// their keys are asked for again. At most MaxKeys holds are kept. It is
// safe for concurrent use; the zero Local is not, use NewLocal.
type Local struct {
	clock    clock.Clock
	maxHolds int           // 0: no bound
	interval time.Duration // of the janitor; negative: none

	mu         sync.Mutex
	keys       map[localKey]*holders
	peak       int        // the most keys since keys was last rebuilt
	spare      []*holders // empty, for reuse; under mu
	parked     parkedKeys // keys emptied of holders, kept a while
	holds      int        // tokens of every key
	expiring   int        // of them, those with an expiry
	nextExpiry int64      // no hold expires before; math.MaxInt64 for none
	janitor    bool       // the janitor runs
}

type localKey struct{ name, key string }

type holders struct {
	tokens   map[string]int64 // token → expiry in clock nanoseconds, 0 for none
	counted  int              // holds without a token (see acquire)
	expiring int              // tokens with an expiry
	parked   bool             // in Local.parked
}

// n is the number of holders.
func (h *holders) n() int { return len(h.tokens) + h.counted }

// NewLocal returns an empty Local store with the default options.
func NewLocal() *Local { return NewLocalWith(LocalOptions{}) }

// NewLocalClock returns an empty Local store whose leases run out by
// clock, for tests that move time by hand.
func NewLocalClock(clock clock.Clock) *Local { return NewLocalWith(LocalOptions{Clock: clock}) }

// NewLocalWith returns an empty Local store configured by o.
func NewLocalWith(o LocalOptions) *Local {
	s := &Local{clock: o.Clock, maxHolds: o.MaxKeys, interval: o.SweepInterval,
		keys: make(map[localKey]*holders), nextExpiry: math.MaxInt64}
	if s.clock == nil {
		s.clock = clock.System
	}
	switch {
	case o.MaxKeys == 0:
		s.maxHolds = DefaultMaxKeys
	case o.MaxKeys < 0:
		s.maxHolds = 0
	}
	if s.interval == 0 {
		s.interval = DefaultSweepInterval
	}
	return s
}

var _ Store = (*Local)(nil)

// Acquire implements Store. It fails only with ErrStoreFull.
func (s *Local) Acquire(_ context.Context, name, key, token string, limit int, ttl time.Duration) (Grant, error) {
	return s.acquire(name, key, token, false, limit, ttl)
}

// acquire is Acquire, and when counted is true a hold without a token:
// a Permit of a Limiter over this store, whose one Release the Limiter
// guarantees, is counted rather than named, so that a request pays for no
// token and no entry of its own (the admitted path of an in-process
// Throttle). Counted holds never expire; they are released by release.
func (s *Local) acquire(name, key, token string, counted bool, limit int, ttl time.Duration) (Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := localKey{name, key}
	h := s.keys[k]
	if h != nil && h.n() >= limit && h.expiring > 0 {
		s.expire(k, h, s.clock.UnixNano())
	}
	if h != nil {
		if _, ok := h.tokens[token]; ok && !counted {
			// A token already holding is not a second holder.
			return Grant{Acquired: true, InFlight: h.n(), Lease: max(ttl, 0), Source: LocalSource}, nil
		}
		if h.n() >= limit {
			return Grant{InFlight: h.n(), Source: LocalSource}, nil
		}
	} else if limit <= 0 {
		return Grant{Source: LocalSource}, nil
	}
	if s.maxHolds > 0 && s.holds >= s.maxHolds {
		if now := s.clock.UnixNano(); now >= s.nextExpiry {
			s.sweep(now)
			h = s.keys[k]
		}
		if s.holds >= s.maxHolds {
			n := 0
			if h != nil {
				n = h.n()
			}
			return Grant{InFlight: n, Source: LocalSource}, ErrStoreFull
		}
	}
	if h == nil {
		h = s.newHolders()
		s.keys[k] = h
		s.peak = max(s.peak, len(s.keys))
	}
	s.holds++
	if counted {
		h.counted++
		return Grant{Acquired: true, InFlight: h.n(), Source: LocalSource, local: h}, nil
	}
	var exp int64
	if ttl > 0 {
		exp = s.clock.UnixNano() + int64(ttl)
		s.expires(h, exp)
	}
	h.tokens[token] = exp
	return Grant{Acquired: true, InFlight: h.n(), Lease: max(ttl, 0), Source: LocalSource}, nil
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
		if exp != 0 {
			h.expiring--
			s.expiring--
		}
		exp = now + int64(ttl)
		s.expires(h, exp)
		h.tokens[token] = exp
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
		s.forget(h, token, exp)
	}
	if h.n() == 0 {
		s.emptied(k, h)
	}
	return nil
}

// releaseCounted ends one counted hold of key, whose holders are h (the
// Grant's): h stays the key's while the hold lasts, so the release looks
// nothing up.
func (s *Local) releaseCounted(name, key string, h *holders) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.counted == 0 {
		return // cannot happen: the Limiter releases each counted hold once
	}
	h.counted--
	s.holds--
	if h.n() == 0 {
		s.emptied(localKey{name, key}, h)
	}
}

// holding returns the number of holders in h, the holders of a key the
// caller holds.
func (s *Local) holding(h *holders) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return h.n()
}

// expires counts a hold of h that runs out at exp, and has the janitor
// look for it.
func (s *Local) expires(h *holders, exp int64) {
	h.expiring++
	s.expiring++
	s.nextExpiry = min(s.nextExpiry, exp)
	if !s.janitor && s.interval > 0 {
		s.janitor = true
		go s.runJanitor()
	}
}

// forget removes token, whose expiry is exp, from h.
func (s *Local) forget(h *holders, token string, exp int64) {
	delete(h.tokens, token)
	s.holds--
	if exp != 0 {
		h.expiring--
		s.expiring--
	}
}

// runJanitor sweeps every interval until no hold has an expiry left.
func (s *Local) runJanitor() {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for range t.C {
		s.mu.Lock()
		if now := s.clock.UnixNano(); now >= s.nextExpiry {
			s.sweep(now)
		}
		done := s.expiring == 0
		if done {
			s.janitor = false
		}
		s.mu.Unlock()
		if done {
			return
		}
	}
}

// Sweep drops every hold whose lease has run out. The janitor calls it
// every SweepInterval; call it yourself when the janitor is disabled.
func (s *Local) Sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(s.clock.UnixNano())
}

// sweep drops the holds that ran out by now and the keys left without
// holders, and rebuilds the key map once most of it is gone (a Go map
// keeps its largest size).
func (s *Local) sweep(now int64) {
	next := int64(math.MaxInt64)
	for k, h := range s.keys {
		if h.expiring == 0 {
			continue
		}
		if s.expire(k, h, now); h.n() == 0 {
			continue
		}
		for _, exp := range h.tokens {
			if exp != 0 {
				next = min(next, exp)
			}
		}
	}
	s.nextExpiry = next
	if s.peak >= 1024 && len(s.keys) < s.peak/4 {
		keys := make(map[localKey]*holders, len(s.keys))
		for k, h := range s.keys {
			keys[k] = h
		}
		s.keys, s.peak = keys, len(keys)
	}
}

// expire drops the holds of h, the holders of k, that ran out by now.
func (s *Local) expire(k localKey, h *holders, now int64) {
	for t, exp := range h.tokens {
		if exp != 0 && exp <= now {
			s.forget(h, t, exp)
		}
	}
	if h.n() == 0 {
		s.emptied(k, h)
	}
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

// emptied parks key k, whose holders h has just emptied: k stays in the
// map until maxSpare keys emptied after it, so that a key whose work is
// short (empty between most of its requests) is not deleted and inserted
// again on every request. The oldest parked key is then forgotten if it is
// empty still, and its holders kept as a spare. At most maxSpare empty keys
// are kept.
func (s *Local) emptied(k localKey, h *holders) {
	if h.parked {
		return
	}
	p := &s.parked
	if p.n == len(p.keys) {
		old := p.keys[p.first]
		p.keys[p.first] = parkedKey{}
		p.first = (p.first + 1) % len(p.keys)
		p.n--
		old.h.parked = false
		if old.h.n() == 0 {
			delete(s.keys, old.k)
			if len(s.spare) < maxSpare {
				s.spare = append(s.spare, old.h)
			}
		}
	}
	h.parked = true
	p.keys[(p.first+p.n)%len(p.keys)] = parkedKey{k, h}
	p.n++
}

// parkedKeys is a ring of keys whose holders emptied, oldest first. A key
// is in it once (holders.parked): it may have holders again meanwhile.
type parkedKeys struct {
	keys     [maxSpare]parkedKey
	first, n int
}

type parkedKey struct {
	k localKey
	h *holders
}

// maxSpare bounds the spare holders a Local keeps, and its parked keys.
const maxSpare = 64

// InFlight returns the number of live holders of key under the Limiter
// name, for tests and status pages.
func (s *Local) InFlight(name, key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := localKey{name, key}
	h := s.keys[k]
	if h == nil {
		return 0
	}
	s.expire(k, h, s.clock.UnixNano())
	return h.n()
}

// Len returns the number of holds the store keeps, those whose lease ran
// out but that no sweep has dropped yet included.
func (s *Local) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holds
}
