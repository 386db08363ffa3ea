package failover

import (
	"fmt"
	"strings"
)

// A Policy says what a Store decides when its remote store fails, times out,
// or is not called because the breaker is open. The zero Policy is not
// valid: New insists on a choice, because each one is wrong for some limits.
type Policy uint8

const (
	// FailOpen allows the request. Result.Source is SourceFailOpen; the
	// Result carries no state (Remaining, ResetAfter and RetryAfter are
	// zero), so front ends should not advertise a remaining quota for it.
	FailOpen Policy = iota + 1

	// FailClosed denies the request. Result.Source is SourceFailClosed and
	// RetryAfter is the time until the breaker next probes the remote store
	// (or its back-off when it is not open). A front end answers 503, not
	// 429: the limiter, not the client, failed.
	FailClosed

	// FallbackLocal decides on Options.Local, a store in this process, with
	// the same limits. Result.Source is SourceHybridFallback. While the
	// remote store is down each instance enforces the whole limit on its
	// own, so N instances admit up to N times the limit; the hybrid package
	// falls back on a fraction of the limit instead.
	FallbackLocal
)

var policyNames = [...]string{
	FailOpen:      "fail_open",
	FailClosed:    "fail_closed",
	FallbackLocal: "fallback_local",
}

// String returns the policy's configuration name, e.g. "fail_closed".
func (p Policy) String() string {
	if p > 0 && int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

// ParsePolicy maps a configuration name (as returned by String; case and
// dashes do not matter, so "fail-open" works) to its Policy.
func ParsePolicy(s string) (Policy, error) {
	norm := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	for p := FailOpen; int(p) < len(policyNames); p++ {
		if norm == policyNames[p] {
			return p, nil
		}
	}
	return 0, fmt.Errorf("failover: unknown failure policy %q (use one of %s)", s, strings.Join(policyNames[1:], ", "))
}

func (p Policy) valid() bool { return p >= FailOpen && p <= FallbackLocal }
