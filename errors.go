package floodgate

import "errors"

// Sentinel errors that callers branch on with errors.Is. The wrapping error
// always says which value was wrong and what to do about it.
var (
	// ErrInvalidLimit reports a Limit that cannot work: a rate or period that
	// is not positive, a negative burst, or numbers too large or too fine for
	// the engine that has to keep them.
	ErrInvalidLimit = errors.New("floodgate: invalid limit")

	// ErrInvalidPolicy reports a Policy without a name, without limits, or
	// with more limits than one decision can check.
	ErrInvalidPolicy = errors.New("floodgate: invalid policy")

	// ErrInvalidCost reports a negative cost. A cost of zero is valid: it
	// peeks at the state without charging it.
	ErrInvalidCost = errors.New("floodgate: invalid cost")
)
