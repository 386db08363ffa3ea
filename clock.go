package floodgate

import (
	"sync"
	"sync/atomic"
	"time"
)

// A Clock tells the time as Unix nanoseconds. Engines take one so tests can
// pin time; production code uses SystemClock or a CoarseClock.
type Clock interface {
	UnixNano() int64
}

// SystemClock reads the wall clock once at start and advances it by the
// monotonic clock afterwards, so a wall-clock step (NTP, an operator) can never
// make a limiter see time run backwards.
var SystemClock Clock = systemClock{}

type systemClock struct{}

var clockBase = time.Now()

func (systemClock) UnixNano() int64 {
	return clockBase.UnixNano() + int64(time.Since(clockBase))
}

// ClockFunc adapts a function to the Clock interface.
type ClockFunc func() int64

// UnixNano calls f.
func (f ClockFunc) UnixNano() int64 { return f() }

// A CoarseClock caches SystemClock and refreshes it from a background
// goroutine every tick. Reading it is a single atomic load (about 1 ns) where
// reading the system clock costs 60–90 ns on small virtual machines.
//
// The cached value only ever lags real time, never leads it: a limiter that
// reads it sees slightly less time pass than really did, so it refills slightly
// later and errs strict, never lenient. The lag is at most one tick plus the
// delay before the Go scheduler runs the refresh goroutine (normally well
// under a millisecond; longer only when the process is starved of CPU).
// RetryAfter values computed from it are late by at most the same lag.
type CoarseClock struct {
	now  atomic.Int64
	stop chan struct{}
	once sync.Once
}

// DefaultTick is the refresh interval of a CoarseClock made with a zero tick.
const DefaultTick = time.Millisecond

// NewCoarseClock starts a CoarseClock that refreshes every tick (DefaultTick
// when tick <= 0). Call Stop to end its goroutine.
func NewCoarseClock(tick time.Duration) *CoarseClock {
	if tick <= 0 {
		tick = DefaultTick
	}
	c := &CoarseClock{stop: make(chan struct{})}
	c.now.Store(SystemClock.UnixNano())
	go c.run(tick)
	return c
}

func (c *CoarseClock) run(tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			// One writer and a monotonic source: the stored value never
			// decreases.
			c.now.Store(SystemClock.UnixNano())
		}
	}
}

// UnixNano returns the cached time.
func (c *CoarseClock) UnixNano() int64 { return c.now.Load() }

// Stop ends the refresh goroutine; the clock then stands still. Stop is
// idempotent.
func (c *CoarseClock) Stop() { c.once.Do(func() { close(c.stop) }) }
