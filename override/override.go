// Package override holds limits changed while the service runs: raise one
// customer's limit during an incident, throttle an abusive tenant for an
// hour, without editing the configuration and reloading every instance.
//
// An Entry gives one key (or every key of one tier) of one policy either
// limits of its own or a multiple of the limits it would get otherwise, until
// it expires. Entries live in a Store that every instance reads: in Redis
// (redisstore.Overrides) when the instances share one, in memory (NewMemory)
// for a single instance. A Table is one instance's view of a Store,
// refreshed in the background; Table.Limiter wraps a policy's limiter so
// that its decisions follow the table.
//
// Which limits a key gets, first match wins: a runtime entry for the key,
// the file's override for the key (Policy.Overrides), a runtime entry for
// the key's tier, the file's tier (Policy.Tiers), the policy's limits. A
// multiplier multiplies what the key would get from the rest of that list.
// Every setting of an entry keeps its state apart from the file's and from
// earlier settings (a raised limit starts full; when it ends the key meets
// its old state again, refilled by the time that passed): see
// floodgate.PolicyLimiter.Derive.
package override

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/floodgate-go/floodgate"
)

// Bounds on what an entry may hold, so that a Store read back from a shared
// engine stays small whoever wrote it.
const (
	// MaxTTL is the longest an entry may last. An override is for an
	// incident or a customer's trial; what lasts longer belongs in the
	// configuration file.
	MaxTTL = 90 * 24 * time.Hour

	// MaxTargetLen bounds Key and Tier, in bytes.
	MaxTargetLen = 4096

	// MaxTextLen bounds By and Reason, in bytes.
	MaxTextLen = 1024

	// MaxMultiplier bounds Multiplier from above; MinMultiplier from below.
	MaxMultiplier = 1000
	MinMultiplier = 0.001
)

// ErrInvalid is wrapped by every error about an entry that cannot be kept.
var ErrInvalid = errors.New("override: invalid entry")

// ErrFull is the error of a Store that holds as many entries as it may.
var ErrFull = errors.New("override: the store holds the most entries it may; delete some first")

// An Entry is one override set at runtime.
type Entry struct {
	// Policy is the name of the policy it changes.
	Policy string

	// Key is the key it applies to, spelt as the policy's limiter is
	// asked about it (as /v1/keys and the file's overrides spell it); or
	// Tier, every key of that tier (Policy.Tiers) that has no override of
	// its own. Exactly one of the two is set.
	Key, Tier string

	// Limits are the limits the key gets instead; or Multiplier, by which
	// the limits it would get otherwise are multiplied (see Scale).
	// Exactly one of the two is set.
	Limits     []floodgate.Limit
	Multiplier float64

	// Expires is when the entry stops applying.
	Expires time.Time

	// Created is when it was set, By who set it and Reason why: the audit
	// trail the status page and the admin API show.
	Created    time.Time
	By, Reason string
}

// ID names the entry's target within a Store: two entries of one ID
// replace each other.
func (e *Entry) ID() ID { return ID{Policy: e.Policy, Key: e.Key, Tier: e.Tier} }

// An ID is what an entry applies to: a policy and a key or a tier.
type ID struct{ Policy, Key, Tier string }

// String writes the ID for logs and errors: "api key user:42" or
// "api tier free".
func (id ID) String() string {
	if id.Tier != "" {
		return id.Policy + " tier " + id.Tier
	}
	return id.Policy + " key " + id.Key
}

// Validate checks the ID's own fields: a policy, and exactly one of Key and
// Tier, each within MaxTargetLen and valid UTF-8.
func (id ID) Validate() error {
	switch {
	case id.Policy == "":
		return fmt.Errorf("%w: no policy", ErrInvalid)
	case (id.Key == "") == (id.Tier == ""):
		return fmt.Errorf("%w: give a key or a tier, one of the two", ErrInvalid)
	}
	for _, f := range []struct{ name, v string }{{"policy", id.Policy}, {"key", id.Key}, {"tier", id.Tier}} {
		if len(f.v) > MaxTargetLen {
			return fmt.Errorf("%w: the %s is %d bytes, more than %d", ErrInvalid, f.name, len(f.v), MaxTargetLen)
		}
		if !utf8.ValidString(f.v) {
			return fmt.Errorf("%w: the %s is not valid UTF-8", ErrInvalid, f.name)
		}
	}
	return nil
}

// Validate reports whether e can be kept: its ID, exactly one of Limits
// and Multiplier, limits each valid on their own (floodgate.Limit.Validate;
// whether the policy's store can keep them is checked where the entry is
// applied), a multiplier between MinMultiplier and MaxMultiplier, an
// expiry after Created and at most MaxTTL after it, and By and Reason within
// MaxTextLen.
func (e *Entry) Validate() error {
	if err := e.ID().Validate(); err != nil {
		return err
	}
	switch {
	case len(e.Limits) > 0 && e.Multiplier != 0:
		return fmt.Errorf("%w: give limits or a multiplier, not both", ErrInvalid)
	case len(e.Limits) == 0 && e.Multiplier == 0:
		return fmt.Errorf("%w: give limits (e.g. rate: 500/s) or a multiplier (e.g. 2)", ErrInvalid)
	case len(e.Limits) > floodgate.MaxLimits:
		return fmt.Errorf("%w: %d limits, more than the %d one decision checks", ErrInvalid, len(e.Limits), floodgate.MaxLimits)
	case e.Multiplier != 0 && !(e.Multiplier >= MinMultiplier && e.Multiplier <= MaxMultiplier):
		return fmt.Errorf("%w: multiplier %g is outside %g to %d", ErrInvalid, e.Multiplier, MinMultiplier, MaxMultiplier)
	case e.Created.IsZero() || e.Expires.IsZero():
		return fmt.Errorf("%w: an entry needs the time it was set and an expiry", ErrInvalid)
	case !e.Expires.After(e.Created):
		return fmt.Errorf("%w: it expires (%s) before it was set (%s)", ErrInvalid, e.Expires.Format(time.RFC3339), e.Created.Format(time.RFC3339))
	case e.Expires.Sub(e.Created) > MaxTTL:
		return fmt.Errorf("%w: it lasts %s, more than %s (90 days); put lasting limits in the configuration file", ErrInvalid, e.Expires.Sub(e.Created).Round(time.Second), MaxTTL)
	case len(e.By) > MaxTextLen || len(e.Reason) > MaxTextLen:
		return fmt.Errorf("%w: by and reason are at most %d bytes each", ErrInvalid, MaxTextLen)
	case !utf8.ValidString(e.By) || !utf8.ValidString(e.Reason):
		return fmt.Errorf("%w: by and reason must be valid UTF-8", ErrInvalid)
	}
	for i, l := range e.Limits {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("%w: limit %d (%s): %v", ErrInvalid, i+1, l, err)
		}
	}
	return nil
}

// Scale returns the limits multiplied by m: each rate, and each burst that
// is set, multiplied and rounded down, never below one unit. A window
// limit's burst, when set, stays equal to its rate. The periods, algorithms
// and alignments are kept, so a limit of 100/min ×2 is 200/min.
func Scale(limits []floodgate.Limit, m float64) []floodgate.Limit {
	out := make([]floodgate.Limit, len(limits))
	for i, l := range limits {
		window := l.Algorithm != floodgate.GCRA && l.Algorithm != floodgate.TokenBucket
		l.Rate = scale(l.Rate, m)
		if l.Burst != 0 {
			if window {
				l.Burst = l.Rate
			} else {
				l.Burst = scale(l.Burst, m)
			}
		}
		out[i] = l
	}
	return out
}

func scale(n int64, m float64) int64 {
	f := math.Floor(float64(n) * m)
	switch {
	case f < 1:
		return 1
	case f >= math.MaxInt64/2:
		return math.MaxInt64 / 2
	}
	return int64(f)
}

// A Store keeps entries where every instance that shares it reads them.
// Implementations are safe for concurrent use.
type Store interface {
	// Put adds e, or replaces the entry of its ID. It returns ErrFull
	// when the store holds its most entries and e's ID is not among them.
	Put(ctx context.Context, e Entry) error

	// Delete removes the entry of id, reporting whether there was one.
	Delete(ctx context.Context, id ID) (bool, error)

	// List returns the entries, expired ones included until the store
	// drops them. A Table reads it when Version changed.
	List(ctx context.Context) ([]Entry, error)

	// Version changes whenever an entry is put or deleted, so that a
	// Table need not read the list while it stays the same.
	Version(ctx context.Context) (uint64, error)
}
