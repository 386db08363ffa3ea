package floodgate

import (
	"context"
	"fmt"
	"time"
)

// The bounds of Policy.Penalty. A penalty shorter than a second cannot be
// told to a client honestly (Retry-After counts whole seconds); the longest
// is what one engine limit spans (algo.MaxSpan), rounded down to days.
const (
	MinPenalty = time.Second
	MaxPenalty = 90 * 24 * time.Hour
)

// penaltyVariant is the LimitSet.Variant of a policy's penalty: its state
// lives in the engine beside the policy's own, under its own set ID.
const penaltyVariant = "penalty"

// ValidatePenalty reports whether d is a valid Policy.Penalty: 0 (no
// penalty) or between MinPenalty and MaxPenalty.
func ValidatePenalty(d time.Duration) error {
	switch {
	case d == 0:
		return nil
	case d < 0:
		return fmt.Errorf("%w: penalty %s is negative; give a positive duration such as 15m, or none for no penalty", ErrInvalidPolicy, d)
	case d < MinPenalty:
		return fmt.Errorf("%w: penalty %s is shorter than %s, the least a Retry-After header can tell; give at least 1s", ErrInvalidPolicy, d, MinPenalty)
	case d > MaxPenalty:
		return fmt.Errorf("%w: penalty %s is longer than %s (90 days), the longest an engine keeps; give a shorter one", ErrInvalidPolicy, d, MaxPenalty)
	}
	return nil
}

// penaltyLimit is the limit a penalty of d is kept as: one unit per d with
// a burst of one. Charging it once on a denial empties it for exactly d; a
// look (cost 0) tells whether it is empty and for how long; a second
// charge while it is empty is denied and so changes nothing.
func penaltyLimit(d time.Duration) Limit {
	return Limit{Rate: 1, Period: d, Burst: 1, Algorithm: GCRA}
}

// compilePenalty builds the penalty set of policy for d; nil when d is 0.
// Its local limit is itself, so a hybrid store's filter keeps the whole
// penalty rather than a share of it (the share of one unit is one unit
// anyway, and a policy with Local limits leaves the store no fraction).
func compilePenalty(policy string, d time.Duration, v func(Limit) error) (*LimitSet, error) {
	if d == 0 {
		return nil, nil
	}
	if err := ValidatePenalty(d); err != nil {
		return nil, fmt.Errorf("policy %s: %w", policy, err)
	}
	l := []Limit{penaltyLimit(d)}
	s, err := newLimitSet(policy, penaltyVariant, l, v)
	if err != nil {
		return nil, err
	}
	if err := s.withLocal(l, v); err != nil {
		return nil, err
	}
	return s, nil
}

// penaltyResult is the Result of a request refused by a penalty that ends
// in d: nothing remains until then, and set's limit i is the one named.
func penaltyResult(set *LimitSet, i int, d time.Duration) Result {
	return Result{
		Limit:      set.limits[i],
		Index:      i,
		Set:        set,
		ResetAfter: d,
		RetryAfter: d,
		Source:     SourcePenalty,
		Policy:     set.policy,
	}
}

// penalised looks (cost 0) at key's penalty. It reports whether the key is
// in one, and if so the Result that refuses it. A failure mode's answer
// read no penalty: the decision goes on to the policy's own limits, which
// the same failure mode decides.
func (l *PolicyLimiter) penalised(ctx context.Context, set *LimitSet, key string) (Result, bool, error) {
	v, err := l.store.Decide(ctx, l.p.penalty.set, key, 0)
	if err != nil {
		return Result{Policy: l.p.name}, false, fmt.Errorf("floodgate: policy %s: penalty: %w", l.p.name, err)
	}
	switch Source(v.Source) {
	case SourceFailOpen, SourceFailClosed:
		return Result{}, false, nil
	}
	if v.Remaining > 0 {
		return Result{}, false, nil
	}
	return penaltyResult(set, 0, v.ResetAfter), true, nil
}

// startPenalty charges key's penalty after res, a denial by the policy's
// limits, and returns the Result that tells the client: refused until the
// penalty ends. If another decision started the penalty in between, the
// charge is denied and changes nothing, and the Result tells that
// penalty's end. If the engine could not keep the penalty (an error, a
// failure mode), res stands: the request is refused either way.
func (l *PolicyLimiter) startPenalty(ctx context.Context, key string, res Result) Result {
	v, err := l.store.Decide(ctx, l.p.penalty.set, key, 1)
	if err != nil {
		return res
	}
	switch Source(v.Source) {
	case SourceFailOpen, SourceFailClosed:
		return res
	}
	// Charged or already in force, the penalty ends when its limit is full
	// again.
	return penaltyResult(res.Set, res.Index, v.ResetAfter)
}
