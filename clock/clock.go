// Package clock is the time source of floodgate's engines: a Clock tells
// the time as Unix nanoseconds, so that tests can pin it; production code
// uses System, or a Coarse clock where a clock read per decision shows in
// profiles.
package clock

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// A Clock tells the time as Unix nanoseconds. Engines take one so tests can
// pin time; production code uses System or a Coarse clock.
type Clock interface {
	UnixNano() int64
}

// System reads the wall clock once at start and advances it by the
// monotonic clock afterwards, so a wall-clock step (NTP, an operator) can never
// make a limiter see time run backwards.
var System Clock = systemClock{}

type systemClock struct{}

var clockBase = time.Now()

func (systemClock) UnixNano() int64 {
	return clockBase.UnixNano() + int64(time.Since(clockBase))
}

// Func adapts a function to the Clock interface.
type Func func() int64

// UnixNano calls f.
func (f Func) UnixNano() int64 { return f() }

// A Coarse clock caches System so that reading the time costs an atomic
// load instead of a system clock read. Two things refresh it: a background
// goroutine every tick, and the reads themselves, one in refreshReads of
// which (on average) reads System and stores the result. The goroutine
// bounds the lag by about a tick while the process has CPU to spare. Under
// CPU saturation it may wait long for a CPU, but a goroutine that reads the
// clock is running, so the reads bound the lag: a limiter that reads the
// clock once per decision decides on a stale time for about refreshReads
// decisions after a pause, however loaded the machine.
//
// The cached value only ever lags real time, never leads it: every stored
// value is a reading of System taken before it was stored, and a store
// never replaces a later value with an earlier one, so the clock never runs
// backwards either. A limiter that reads it sees slightly less time pass than
// really did, so it refills slightly later and errs strict, never lenient.
// RetryAfter values computed from it are late by at most the same lag.
type Coarse struct {
	now  atomic.Int64
	stop chan struct{}
	once sync.Once
}

// DefaultTick is the refresh interval of a Coarse clock made with a zero tick.
const DefaultTick = time.Millisecond

// refreshReads is how many reads of a Coarse clock, on average, make one of
// them refresh it. A power of two. Readers pick themselves at random rather
// than by counting, so reading writes no shared memory.
const refreshReads = 32

// NewCoarse starts a Coarse clock that refreshes every tick (DefaultTick
// when tick <= 0). Call Stop to end its goroutine.
func NewCoarse(tick time.Duration) *Coarse {
	if tick <= 0 {
		tick = DefaultTick
	}
	c := &Coarse{stop: make(chan struct{})}
	c.now.Store(System.UnixNano())
	go c.run(tick)
	return c
}

func (c *Coarse) run(tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.refresh()
		}
	}
}

// refresh stores the system time unless a later one is already stored, and
// returns the stored time. The compare-and-swap keeps the clock monotonic
// with several writers: a writer that read the system clock earlier than
// another never stores over it.
func (c *Coarse) refresh() int64 {
	now := System.UnixNano()
	for {
		old := c.now.Load()
		if old >= now {
			return old
		}
		if c.now.CompareAndSwap(old, now) {
			return now
		}
	}
}

// UnixNano returns the cached time, refreshing it first once in about
// refreshReads calls.
func (c *Coarse) UnixNano() int64 {
	if rand.Uint64()&(refreshReads-1) == 0 {
		return c.refresh()
	}
	return c.now.Load()
}

// Stop ends the refresh goroutine. The clock then advances only when read,
// once in about refreshReads reads. Stop is idempotent.
func (c *Coarse) Stop() { c.once.Do(func() { close(c.stop) }) }
