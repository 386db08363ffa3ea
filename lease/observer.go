package lease

// An Observer is told what a Store does with its leases, for metrics
// (metrics.NewLease implements it). Its methods must be cheap and safe for
// concurrent use. They run when blocks are taken or given back, never on
// a decision answered from a block; Store.Held tells the units held.
type Observer interface {
	// Leased: a block of units was taken from the remote store for a key
	// of policy (one refill).
	Leased(policy string, units int64)

	// Refunded: units of expired or released blocks went back to the
	// remote store.
	Refunded(policy string, units int64)

	// Lost: units of expired or released blocks that could not go back
	// (their window ended, their bucket refilled by itself, or the refund
	// failed). The remote state frees them when its window or bucket
	// moves on.
	Lost(policy string, units int64)

	// Failed: a refill failed on the remote store; the key is decided
	// remotely until the next try.
	Failed(policy string)
}

type nopObserver struct{}

func (nopObserver) Leased(string, int64)   {}
func (nopObserver) Refunded(string, int64) {}
func (nopObserver) Lost(string, int64)     {}
func (nopObserver) Failed(string)          {}
