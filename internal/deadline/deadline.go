// Package deadline gives a call a deadline without deriving a context that
// watches it. context.WithTimeout costs, on every call, a timer, a context
// registered with its parent, and a channel once anything waits on Done;
// a callee that bounds its own wait by the deadline it reads needs none
// of them.
package deadline

import (
	"context"
	"time"
)

// A ctx is its parent with an earlier deadline. Its Done is the parent's:
// it does not close at the deadline.
type ctx struct {
	context.Context
	at time.Time
}

// With returns parent with the deadline at, or parent itself when its own
// deadline comes first. The context's Deadline reports at and its Err
// reports context.DeadlineExceeded once at has passed, but its Done
// channel closes only with the parent's: only a callee that reads
// Deadline and bounds its own wait by it (redisstore's Store, go-redis
// with ContextTimeoutEnabled, the memory engine, which does not wait) is
// bounded by at. Give it to no other.
func With(parent context.Context, at time.Time) context.Context {
	if d, ok := parent.Deadline(); ok && !d.After(at) {
		return parent
	}
	return &ctx{Context: parent, at: at}
}

// Deadline implements context.Context.
func (c *ctx) Deadline() (time.Time, bool) { return c.at, true }

// Err implements context.Context: the parent's error, or
// context.DeadlineExceeded once the deadline has passed.
func (c *ctx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.at) {
		return context.DeadlineExceeded
	}
	return nil
}

// String names the context, as the context package's own do.
func (c *ctx) String() string { return "deadline.With(" + c.at.String() + ")" }
