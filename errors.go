package floodgate

import (
	"errors"

	"github.com/floodgate-go/floodgate/algo"
)

// Sentinel errors that callers branch on with errors.Is. The wrapping error
// always says which value was wrong and what to do about it.
var (
	// ErrInvalidLimit reports a Limit that cannot work: a rate or period that
	// is not positive, a negative burst, or numbers too large or too fine for
	// the engine that has to keep them.
	ErrInvalidLimit = algo.ErrInvalid

	// ErrInvalidPolicy reports a Policy without a name, without limits, or
	// with more limits than one decision can check.
	ErrInvalidPolicy = errors.New("floodgate: invalid policy")

	// ErrInvalidCost reports a negative cost. A cost of zero is valid: it
	// peeks at the state without charging it.
	ErrInvalidCost = errors.New("floodgate: invalid cost")

	// ErrClosed reports a call to a Store after its Close. Engines return it
	// (wrapped) from every later call, so a limiter whose store was closed
	// fails loudly instead of deciding on frozen state. Failure policies do
	// not treat it as an outage: a closed store is a programming error, not
	// a remote engine that may come back.
	ErrClosed = errors.New("floodgate: store is closed; create a new one")

	// ErrCorruptState reports state of one key that an engine cannot read,
	// such as a value of a foreign type or format under its key prefix. It
	// fails that key's decisions only, and charges nothing; failure
	// policies do not treat it as an outage. The wrapping error names the
	// key to delete.
	ErrCorruptState = errors.New("floodgate: corrupt limiter state")
)
