package floodgate

import (
	"math"
	"time"
)

// RetryNever is the RetryAfter of a request that can never pass: its cost is
// above the Capacity of one of its limits.
const RetryNever = time.Duration(math.MaxInt64)

// A Source names what made a decision.
type Source string

// The sources a Result may carry.
const (
	// SourceMemory: the in-memory engine decided.
	SourceMemory Source = "memory"
	// SourceRedis: the Redis engine decided.
	SourceRedis Source = "redis"
	// SourceHybridLocal: the local filter of a hybrid engine denied the
	// request without asking Redis.
	SourceHybridLocal Source = "hybrid:local"
	// SourceHybridGlobal: the local filter passed the request and Redis
	// decided it.
	SourceHybridGlobal Source = "hybrid:global"
	// SourceHybridFallback: the remote engine failed, was too slow, or was
	// skipped because its circuit breaker is open, and a local store
	// decided (a hybrid's local filter, or failover's FallbackLocal store).
	SourceHybridFallback Source = "hybrid:local-fallback"
	// SourceFailOpen: the engine failed and the failure policy allowed the
	// request.
	SourceFailOpen Source = "fail-open"
	// SourceFailClosed: the engine failed and the failure policy denied the
	// request.
	SourceFailClosed Source = "fail-closed"
	// SourcePolicy: the policy alone decided, without asking an engine: the
	// cost is above a limit's capacity and can never pass.
	SourcePolicy Source = "policy"
)

// A Result is the answer to "may cost units for key pass now?".
type Result struct {
	// Allowed reports whether the units passed and were charged.
	Allowed bool

	// Limit is the limit that drives this answer: the one that denied (the
	// one with the longest RetryAfter when several did), or, when allowed,
	// the one with the fewest units remaining.
	Limit Limit

	// Remaining is how many units could still pass now under Limit, after
	// this request's charge when it was allowed. It is never negative and
	// never above Limit.Capacity().
	Remaining int64

	// ResetAfter is how long until every limit of the policy is back to full
	// capacity if nothing else passes.
	ResetAfter time.Duration

	// RetryAfter is how long until the same request would pass if nothing
	// else passes: zero when allowed, RetryNever when it can never pass.
	RetryAfter time.Duration

	// Source names what decided.
	Source Source

	// Policy is the name of the policy that decided.
	Policy string
}

// A Decision is one limit's answer, the output of a state transition.
// Engines fold the decisions of a policy's limits into a Result with
// LimitSet.Combine.
type Decision struct {
	Allowed    bool
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
}
