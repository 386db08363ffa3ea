package failover

import (
	"fmt"
	"strings"

	"github.com/floodgate-go/floodgate"
)

// A Mode says what a Store decides when its remote store fails, times out,
// or is not called because the breaker is open. The zero Mode is not valid:
// New insists on a choice, because each one is wrong for some limits.
type Mode uint8

const (
	// FailOpen allows the request. Result.Source is floodgate.SourceFailOpen
	// and the Result carries no state (no Set, Remaining, ResetAfter or
	// RetryAfter), so front ends do not advertise a remaining quota for it.
	FailOpen Mode = iota + 1

	// FailClosed denies the request. Result.Source is
	// floodgate.SourceFailClosed and RetryAfter is the time until the
	// breaker next probes the remote store (or its back-off when it is not
	// open). A front end answers 503, not 429: the limiter, not the client,
	// failed.
	FailClosed

	// LocalFallback decides on Options.Local, a store in this process, with
	// the same limits. Result.Source is floodgate.SourceLocalFallback. While the remote
	// store is down each instance enforces the whole limit on its own, so N
	// instances admit up to N times the limit; the hybrid package falls back
	// on a fraction of the limit instead.
	LocalFallback
)

// modeNames are the modes' names, the same words the Sources of their
// decisions use.
var modeNames = [...]string{
	FailOpen:      string(floodgate.SourceFailOpen),
	FailClosed:    string(floodgate.SourceFailClosed),
	LocalFallback: string(floodgate.SourceLocalFallback),
}

// String returns the mode's name: "fail-open", "fail-closed" or
// "local-fallback", the Source its decisions carry.
func (p Mode) String() string {
	if p > 0 && int(p) < len(modeNames) {
		return modeNames[p]
	}
	return fmt.Sprintf("mode(%d)", uint8(p))
}

// ParseMode maps a name (as String returns it; case, dashes and underscores
// do not matter, so "fail_closed" in a YAML file works) to its Mode.
func ParseMode(s string) (Mode, error) {
	norm := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "_", "-")
	for p := FailOpen; int(p) < len(modeNames); p++ {
		if norm == modeNames[p] {
			return p, nil
		}
	}
	return 0, fmt.Errorf("failover: unknown failure mode %q (use one of %s)", s, strings.Join(modeNames[1:], ", "))
}

func (p Mode) valid() bool { return p >= FailOpen && p <= LocalFallback }
