package floodgate

import (
	"time"

	"github.com/floodgate-go/floodgate/algo"
)

// RetryNever is the RetryAfter of a request that can never pass: its cost is
// above the Capacity of one of its limits.
const RetryNever = algo.Never

// A Source names what made a decision. Engines and compositions define
// their own (memstore.Source is "memory", redisstore.Source "redis", the
// hybrid package's "hybrid:local" and "hybrid:global"); the ones below are
// shared by every engine and front end.
type Source string

// The sources front ends act on.
const (
	// SourceFailOpen: the engine failed and its failure policy allowed the
	// request. The Result read no state, so a front end advertises no quota.
	SourceFailOpen Source = "fail-open"

	// SourceFailClosed: the engine failed and its failure policy denied the
	// request. The limiter, not the client, failed: an HTTP front end
	// answers 503, not 429.
	SourceFailClosed Source = "fail-closed"

	// SourceLocalFallback: the remote engine failed, timed out or was cut
	// off by its circuit breaker, and a store in this process decided
	// instead: a failover.Store's Options.Local under LocalFallback (the
	// whole limit, per instance) or a hybrid store's local filter (its share
	// of the limit). The limit holds per instance until the remote engine is
	// back.
	SourceLocalFallback Source = "local-fallback"

	// SourcePolicy: the policy alone decided, without asking an engine: the
	// cost is above a limit's capacity and can never pass.
	SourcePolicy Source = "policy"

	// SourcePenalty: the key is in its policy's penalty (Policy.Penalty),
	// started by an earlier denial: refused without asking the limits,
	// until RetryAfter, which is also ResetAfter; Remaining is 0.
	SourcePenalty Source = "penalty"
)

// A Result is the answer to "may cost units for key pass now?". Every field
// describes one limit, the one that drove the answer, so headers built from
// a Result never mix two limits' numbers.
type Result struct {
	// Allowed reports whether the units passed and were charged.
	Allowed bool

	// Limit is the limit that drove this answer: the one that denied (the
	// one with the longest RetryAfter when several did), or, when allowed,
	// the one with the fewest units remaining. It is Set.Limit(Index).
	Limit Limit

	// Index is the position of Limit in Set.
	Index int

	// Set is the list of limits that applied to the key (the policy's
	// defaults, an override or a tier). It is nil when no limit was
	// consulted: a fail-open Result, or the Result of an error.
	Set *LimitSet

	// Remaining is how many units could still pass now under Limit, after
	// this request's charge when it was allowed. It is never negative and
	// never above Limit.Capacity().
	Remaining int64

	// ResetAfter is how long until Limit is back to full capacity if nothing
	// else passes.
	ResetAfter time.Duration

	// RetryAfter is how long until the same request would pass if nothing
	// else passes: zero when allowed, RetryNever when it can never pass.
	RetryAfter time.Duration

	// Source names what decided.
	Source Source

	// Policy is the name of the policy that decided.
	Policy string
}

// FromFailureMode reports whether a failure mode decided r because the
// remote engine failed, timed out or was cut off by its circuit breaker:
// whether r.Source is SourceFailOpen, SourceFailClosed or
// SourceLocalFallback. No other Source counts: SourcePolicy is a decision
// made without an engine, not a failure, and an engine's own Sources
// (memory, redis, hybrid:local, hybrid:global) are decisions on the state
// it holds.
func (r Result) FromFailureMode() bool {
	switch r.Source {
	case SourceFailOpen, SourceFailClosed, SourceLocalFallback:
		return true
	}
	return false
}

// HasState reports whether r's Limit, Remaining and ResetAfter describe
// the state of a limit that was read: false when r has no Set (a
// fail-open Result, or the Result of an error) or its Source is
// SourceFailOpen or SourceFailClosed, the failure modes that decide
// without reading any state. A SourceLocalFallback Result has state, the
// local store's. Front ends advertise a quota only for a Result with state.
func (r Result) HasState() bool {
	return r.Set != nil && r.Source != SourceFailOpen && r.Source != SourceFailClosed
}

// result builds the Result of set's Verdict v.
func (s *LimitSet) result(v algo.Verdict) Result {
	return Result{
		Allowed:    v.Allowed,
		Limit:      s.limits[v.Index],
		Index:      v.Index,
		Set:        s,
		Remaining:  v.Remaining,
		ResetAfter: v.ResetAfter,
		RetryAfter: v.RetryAfter,
		Source:     Source(v.Source),
		Policy:     s.policy,
	}
}
