// Package concurrency limits how much work is in flight at once: at most N
// holders per key, where a rate limit bounds how much work starts per
// period.
//
// A Limiter hands out Permits:
//
//	lim, _ := concurrency.New(concurrency.NewLocal(), concurrency.Options{Name: "reports", Limit: 4})
//	res, p := lim.Acquire(ctx, "")
//	if !res.Allowed {
//		return res.Err() // full, queue full, timed out, canceled or failed closed
//	}
//	defer p.Release()
//
// Every Permit is released exactly once: Release is idempotent, so a
// deferred Release and an explicit one never free two slots, and a deferred
// Release runs when the work panics. Limiter.Do is Acquire and a deferred
// release in one call, without a Permit over a Local store. A slot is never
// freed by anything but its own Permit (or Do), or its lease running out (a
// lease for another process, or any hold in a shared store whose holder
// stopped renewing).
//
// # Waiting
//
// With Options.MaxWaiting > 0, a request that finds its key full waits in a
// bounded FIFO queue of this Limiter for at most Options.MaxWait (the
// backlog timeout) or until its context ends, whichever comes first. A
// request that finds the queue full is refused at once (ReasonQueueFull).
// Over a Local, a release hands its slot straight to the first waiter.
// The queue belongs to one process: with a shared store each instance
// queues its own requests, and the instances share the slots.
//
// TryAcquire never waits: over a Local it takes a free slot of a key with
// no queue and otherwise answers false, taking nothing and asking no other
// store, so that an event loop takes a slot where it reads the request and
// hands the request to a goroutine (Acquire) only when it must wait.
//
// # Stores
//
// A Store holds the slots. NewLocal keeps them in this process. The
// redislease package keeps them in Redis, shared by every instance, as
// leases that expire when their holder dies: a Permit of a Limiter over such
// a store renews its lease while it is held (a heartbeat), so a slow holder
// keeps its slot and a killed one frees it within one lease.
//
// The lease primitives (AcquireLease, RenewLease, ReleaseLease) let a front
// end hold slots for a client in another process, which renews and releases
// by token.
//
// # Adaptive limits
//
// Options.Controller replaces the fixed Limit by one that moves: every
// Permit reports its latency and outcome (Permit.ReleaseWith) to the
// Controller, which sets the limit. The adaptive package has two, a gradient
// on measured latency and AIMD; they shed load when the work slows down
// instead of queueing it.
//
// docs/concurrency.md explains how to choose between them.
package concurrency
