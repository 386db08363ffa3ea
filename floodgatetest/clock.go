package floodgatetest

import (
	"sync/atomic"
	"time"
)

// Start is the instant every conformance case begins at: midnight UTC, so
// minute, hour and day windows all begin there too.
var Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// A Clock is a clock.Clock that moves only when told. It is safe for
// concurrent use.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a Clock standing at t.
func NewClock(t time.Time) *Clock {
	c := &Clock{}
	c.ns.Store(t.UnixNano())
	return c
}

// UnixNano implements clock.Clock.
func (c *Clock) UnixNano() int64 { return c.ns.Load() }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// Advance moves the clock forward by d (backward when d is negative).
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }
