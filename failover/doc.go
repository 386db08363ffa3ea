// Package failover decides what a rate limiter does when its remote engine
// (Redis) fails or is slow, and keeps an outage from costing a timeout on
// every request.
//
// A Store wraps a remote floodgate.Store with an explicit failure Mode:
//
//   - FailOpen: allow the request (Source "fail-open"). Availability first:
//     a dead Redis must not take the service down with it.
//   - FailClosed: deny the request (Source "fail-closed"). Protection
//     first: the limit guards money or a fragile backend. A front end answers
//     503 Service Unavailable, not 429: the client did nothing wrong.
//   - LocalFallback: decide on a local store in this process (Source
//     "local-fallback"). The limit holds per instance instead of
//     across instances until Redis is back.
//
// None of them returns an error for a failed decision: the failure is the
// policy's to absorb, and it is reported through BreakerOptions.OnError and
// Guard.Stats instead.
//
// Every call to the remote store goes through a Breaker, which bounds it
// with two timeouts and a circuit breaker; a Guard is a Breaker over a
// floodgate.Store, and any other call to a backend (a lease script, an HTTP
// round trip) goes through Breaker.Do. A call answered after Timeout
// (DefaultTimeout, 100 ms) is slow: counted, and its answer used, since a
// machine whose CPUs are saturated makes every call late without anything
// being down. Only a call unanswered after SlowTimeout (DefaultSlowTimeout,
// 500 ms) fails. The breaker opens on a failure rate: when, over the last
// Window (DefaultWindow), at least MinCalls calls were made
// (DefaultMinCalls) and at least FailureRate of them failed
// (DefaultFailureRate), so a few errors among many answers leave it closed,
// while a dead Redis opens it after MinCalls calls. Decisions then go
// straight to the policy, with neither a round trip nor a timeout. After a
// short back-off (DefaultBackoff, doubling up to DefaultMaxBackoff while
// Redis stays down) the breaker lets one probe through; the probe's success
// closes it again. The caller's own context ending is never counted as a
// failure of the remote store.
//
// The hybrid package builds on Guard: a local filter in front of Redis whose
// verdict stands whenever the Guard reports a failure.
//
// docs/failure.md explains how to choose a policy and tune the breaker.
package failover
