package concurrency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
)

// A Reason says why a Limiter refused a request. The zero Reason is that of
// an admitted one.
type Reason uint8

const (
	// ReasonNone: the request was admitted.
	ReasonNone Reason = iota

	// ReasonFull: every slot of the key was taken and the Limiter has no
	// wait queue (Options.MaxWaiting is 0).
	ReasonFull

	// ReasonQueueFull: every slot was taken and the wait queue held
	// Options.MaxWaiting requests already.
	ReasonQueueFull

	// ReasonTimeout: the request waited Options.MaxWait without a slot
	// coming free.
	ReasonTimeout

	// ReasonCanceled: the caller's context ended first (before the request
	// was decided, or while it waited).
	ReasonCanceled

	// ReasonFailClosed: the store failed and its failure mode refuses.
	// The limiter, not the client, failed: an HTTP front end answers 503.
	ReasonFailClosed

	// ReasonError: the store failed with an error no failure mode absorbs
	// (a closed store, a key holding data floodgate did not write), or the
	// call was invalid. Result.Error says which.
	ReasonError
)

var reasonNames = [...]string{
	ReasonNone:       "",
	ReasonFull:       "full",
	ReasonQueueFull:  "queue-full",
	ReasonTimeout:    "timeout",
	ReasonCanceled:   "canceled",
	ReasonFailClosed: "fail-closed",
	ReasonError:      "error",
}

// String returns the reason's name: "" for ReasonNone, else "full",
// "queue-full", "timeout", "canceled", "fail-closed" or "error".
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// The errors Result.Err returns, one per Reason, for callers that branch
// with errors.Is.
var (
	ErrFull       = errors.New("concurrency: every slot of the key is taken; retry when work in flight finishes, or give the limiter a wait queue (Options.MaxWaiting)")
	ErrQueueFull  = errors.New("concurrency: every slot is taken and the wait queue is full; shed the request or retry later")
	ErrTimeout    = errors.New("concurrency: no slot came free within the backlog timeout (Options.MaxWait)")
	ErrCanceled   = errors.New("concurrency: the caller gave up before a slot was granted")
	ErrFailClosed = errors.New("concurrency: the store failed and its failure mode refuses; check the store's health")

	// ErrLeaseLost reports a renewal or release of a lease that no longer
	// holds its slot: it ran out (its holder did not renew in time) or was
	// released. Acquire a new one.
	ErrLeaseLost = errors.New("concurrency: the lease no longer holds a slot (it expired or was released); acquire a new one")

	// ErrInvalid reports an invalid argument or option.
	ErrInvalid = errors.New("concurrency: invalid argument")
)

// A Result is a Limiter's answer to "may this work start now?".
type Result struct {
	// Allowed reports whether the request holds a slot.
	Allowed bool

	// Reason says why it was refused; ReasonNone when allowed.
	Reason Reason

	// Name is the Limiter's name (Options.Name).
	Name string

	// Limit is the number of slots of the key when the request was
	// decided: Options.Limit, or the Controller's limit then.
	Limit int

	// InFlight is the number of holders of the key after the decision,
	// this request included when allowed, or -1 when the store did not say
	// (a failure mode decided without it).
	InFlight int

	// Waited is how long the request spent in the wait queue.
	Waited time.Duration

	// RetryAfter is a hint for a refused request: for ReasonFailClosed the
	// time until the store's breaker next tries the store, else zero (a slot
	// comes free when work in flight ends, which no one can predict).
	RetryAfter time.Duration

	// Source names what decided: the store's Source ("local", "redis"), or
	// a failure mode's (floodgate.SourceFailOpen, SourceFailClosed,
	// "local-fallback").
	Source floodgate.Source

	// Error is the failure behind ReasonError, else nil.
	Error error
}

// Err returns nil for an admitted request, else the error of its Reason
// (ErrFull, ErrQueueFull, …; Result.Error itself for ReasonError).
func (r Result) Err() error {
	switch r.Reason {
	case ReasonNone:
		if r.Allowed {
			return nil
		}
	case ReasonFull:
		return ErrFull
	case ReasonQueueFull:
		return ErrQueueFull
	case ReasonTimeout:
		return ErrTimeout
	case ReasonCanceled:
		return ErrCanceled
	case ReasonFailClosed:
		return ErrFailClosed
	case ReasonError:
		if r.Error != nil {
			return r.Error
		}
	}
	return fmt.Errorf("%w: refused with reason %s", ErrInvalid, r.Reason)
}

// An Outcome is how a piece of work ended, for the Controller.
type Outcome uint8

const (
	// Success: the work completed; its latency is a sample of the
	// resource's speed.
	Success Outcome = iota

	// Dropped: the work failed because the resource was overloaded (a
	// timeout, a 503 or 429 from the upstream). Adaptive controllers cut
	// the limit on it.
	Dropped

	// Ignore: the work says nothing about the resource (the client went
	// away, a 4xx of its own making); the Controller does not see it.
	Ignore
)

// A Sample is what one Permit reports to the Controller when released.
type Sample struct {
	// RTT is the time from the grant of the slot to its release.
	RTT time.Duration

	// InFlight is the number of holders of the key when the slot was
	// granted, this one included (0 when the store did not say).
	InFlight int

	// Outcome is how the work ended; never Ignore (those are not reported).
	Outcome Outcome
}

// A Controller sets a Limiter's limit from what its Permits report: the
// adaptive package's Gradient and AIMD. Limit is read on every Acquire and
// Observe called on every release that is not Ignore, from many goroutines:
// both must be safe for concurrent use, and quick.
type Controller interface {
	// Limit returns the limit now; values below 1 count as 1.
	Limit() int

	// Observe records one sample.
	Observe(Sample)
}

// A Grant is a Store's answer to Acquire.
type Grant struct {
	// Acquired reports whether the token now holds a slot.
	Acquired bool

	// InFlight is the number of holders after the call (this one
	// included when acquired), or -1 when unknown.
	InFlight int

	// Lease is how long the hold lasts unless renewed; 0 means until it is
	// released (an in-process store, or a failure mode's decision that no
	// store holds).
	Lease time.Duration

	// Source names what decided (see Result.Source).
	Source floodgate.Source

	// RetryAfter is Result.RetryAfter for a store that failed closed.
	RetryAfter time.Duration

	local *holders // a counted hold's holders in a Local, for its release
}

// A Store keeps the holders of every key. Holders are named by tokens the
// caller makes unique; a Store never frees a slot but on Release of its token
// or expiry of its lease. Local and redislease.Store implement it; the
// Limiter is its user.
//
// name is the Limiter's name (Options.Name), so that limiters with
// different names never share slots of one key. Every method must be safe
// for concurrent use.
type Store interface {
	// Acquire makes token a holder of key if fewer than limit hold it
	// now, for ttl (or the store's default lease when ttl is 0; an
	// in-process store's default is "until released"). Expired holds do not
	// count. The error is non-nil only when the store failed and no failure
	// mode decided instead.
	Acquire(ctx context.Context, name, key, token string, limit int, ttl time.Duration) (Grant, error)

	// Renew extends token's hold of key to ttl from now (the store's
	// default lease when ttl is 0). It reports false when token holds no
	// slot any more: its lease ran out and was removed, or it was released.
	Renew(ctx context.Context, name, key, token string, ttl time.Duration) (bool, error)

	// Release ends token's hold of key. Releasing a token that holds no
	// slot does nothing.
	Release(ctx context.Context, name, key, token string) error
}

// A Lease is a slot held on behalf of a holder in another process, which
// proves it by Token: the front end of a check API hands Token to its
// client, and renews and releases by it.
type Lease struct {
	// Key is the key the slot belongs to, as given to AcquireLease.
	Key string

	// Token names the hold. It is random and unguessable, so that a client
	// cannot renew or release another's slot.
	Token string

	// TTL is how long the hold lasts after each acquisition or renewal.
	TTL time.Duration
}
