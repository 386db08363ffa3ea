package failover

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// BreakerState is the state of a Guard's circuit breaker.
type BreakerState int32

const (
	// Closed: calls go to the remote store. Consecutive failures are
	// counted; enough of them open the breaker.
	Closed BreakerState = iota

	// Open: calls are not made; the owner's failure policy decides at once.
	// When the back-off ends, the next call becomes the probe.
	Open

	// HalfOpen: one probe is in flight. Other calls are not made until it
	// answers: success closes the breaker, failure opens it again with a
	// doubled back-off.
	HalfOpen
)

var stateNames = [...]string{Closed: "closed", Open: "open", HalfOpen: "half_open"}

// String returns "closed", "open" or "half_open".
func (s BreakerState) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// breaker is a consecutive-failure circuit breaker.
//
// The closed state, which is where every healthy decision runs, costs one
// atomic load per call and a store only when a failure streak ends, so
// callers do not contend on a shared cache line. Transitions take mu, which
// is never held across a call to the remote store. While open, deciding
// whether to skip costs a clock read and an atomic load.
type breaker struct {
	state    atomic.Int32
	failures atomic.Int32 // consecutive failures while closed
	until    atomic.Int64 // while open: clock time from which a probe may go
	opened   atomic.Uint64
	probes   atomic.Uint64

	mu      sync.Mutex
	backoff time.Duration // the current back-off; under mu

	threshold int32 // consecutive failures that open; <= 0 never opens
	base, max time.Duration
	clock     floodgate.Clock
	notify    func(from, to BreakerState)
}

// acquire reports whether a call may go to the remote store and whether it
// is the probe of a half-open breaker. Exactly one caller wins the probe.
func (b *breaker) acquire() (probe, ok bool) {
	switch BreakerState(b.state.Load()) {
	case Closed:
		return false, true
	case Open:
		if b.clock.UnixNano() < b.until.Load() {
			return false, false
		}
		if b.state.CompareAndSwap(int32(Open), int32(HalfOpen)) {
			b.probes.Add(1)
			b.changed(Open, HalfOpen)
			return true, true
		}
	}
	return false, false
}

// success records a call that the remote store answered.
func (b *breaker) success(probe bool) {
	if probe {
		b.mu.Lock()
		b.state.Store(int32(Closed))
		b.failures.Store(0)
		b.backoff = b.base
		b.mu.Unlock()
		b.changed(HalfOpen, Closed)
		return
	}
	// Only a closed breaker counts streaks; an answer to a call that
	// started before the breaker opened proves little, and only the probe
	// may close it.
	if b.failures.Load() != 0 && BreakerState(b.state.Load()) == Closed {
		b.failures.Store(0)
	}
}

// failure records a call that failed or timed out.
func (b *breaker) failure(probe bool) {
	if b.threshold <= 0 {
		return
	}
	if probe {
		b.mu.Lock()
		b.backoff = min(2*b.backoff, b.max)
		b.until.Store(b.clock.UnixNano() + int64(b.jitter(b.backoff)))
		b.state.Store(int32(Open))
		b.mu.Unlock()
		b.changed(HalfOpen, Open)
		return
	}
	if b.failures.Add(1) < b.threshold || BreakerState(b.state.Load()) != Closed {
		return
	}
	b.mu.Lock()
	opened := BreakerState(b.state.Load()) == Closed
	if opened {
		b.backoff = b.base
		b.until.Store(b.clock.UnixNano() + int64(b.jitter(b.base)))
		b.state.Store(int32(Open))
		b.failures.Store(0)
		b.opened.Add(1)
	}
	b.mu.Unlock()
	if opened {
		b.changed(Closed, Open)
	}
}

// release gives back a probe that told nothing about the remote store
// because the caller gave up first. The breaker stays open with its
// back-off already over, so the next call probes.
func (b *breaker) release(probe bool) {
	if probe && b.state.CompareAndSwap(int32(HalfOpen), int32(Open)) {
		b.changed(HalfOpen, Open)
	}
}

// retryIn is how long until the breaker lets a call through again: the rest
// of its back-off while open, else the base back-off, a fair guess for a
// remote store that has just failed.
func (b *breaker) retryIn() time.Duration {
	if BreakerState(b.state.Load()) == Open {
		if d := time.Duration(b.until.Load() - b.clock.UnixNano()); d > 0 {
			return d
		}
	}
	return b.base
}

// jitter shortens d by up to a fifth at random, so that instances that saw
// the same outage begin do not all probe at the same instant. It never
// lengthens d: MaxBackoff stays a bound on how late recovery is noticed.
func (b *breaker) jitter(d time.Duration) time.Duration {
	if d < 5 {
		return d
	}
	return d - rand.N(d/5)
}

func (b *breaker) changed(from, to BreakerState) {
	if b.notify != nil {
		b.notify(from, to)
	}
}
