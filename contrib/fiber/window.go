package fiberlimit

import (
	"time"

	"github.com/floodgate-go/floodgate"
)

// A Window is how the limits made from Max and Expiration count: the
// LimiterMiddleware of Fiber's limiter. FixedWindow, SlidingWindow and
// TokenBucket are the Windows there are.
type Window interface {
	limit(max int64, per time.Duration) floodgate.Limit
}

// FixedWindow counts as Fiber's default strategy does for the case it is
// chosen for: a key that has spent Max requests waits Expiration from its
// first one, so a 15-minute login lockout lasts 15 minutes.
//
// Fiber's window starts at a key's first request and admits Max more at
// once when it ends, so around the end of a window a key can pass up to
// 2×Max in a short span. FixedWindow is floodgate's sliding log
// (floodgate.SlidingLog): at most Max requests in any span of Expiration,
// each admitted request counting for Expiration from its own time. Where
// Fiber lets a second burst through right at the window's end, it lets
// requests through as the earlier ones age out: the same lockout, never
// the double burst. It keeps one entry per admitted request of the last
// Expiration, so a Max above algo.MaxSlidingLogRate is rejected; use
// TokenBucket for large maxima.
//
// Aligned counts in windows aligned to the clock instead
// (floodgate.FixedWindow: multiples of Expiration since the Unix epoch),
// which every instance and every key share: one counter per key, but a
// key that spends Max just before a boundary may start again right after
// it.
type FixedWindow struct {
	// Aligned selects windows aligned to the clock; false (the default)
	// counts from each key's own requests.
	Aligned bool
}

func (w FixedWindow) limit(max int64, per time.Duration) floodgate.Limit {
	if w.Aligned {
		return floodgate.Limit{Rate: max, Period: per, Algorithm: floodgate.FixedWindow}
	}
	return floodgate.Limit{Rate: max, Period: per, Algorithm: floodgate.SlidingLog}
}

// SlidingWindow counts as Fiber's SlidingWindow means to: the requests of
// the last Expiration, weighted over the previous window. Fiber estimates
// them from two counters of windows that start at the key's first request;
// SlidingWindow counts them exactly (floodgate.SlidingLog), so where
// Fiber's estimate lets a request through a little early or late, this
// answers what the estimate approximates: at most Max in any span of
// Expiration. A key that spent Max in a burst waits Expiration; Fiber's
// estimate keeps it out a little longer (Expiration/Max more). Memory is as
// FixedWindow's.
//
// Aligned uses floodgate.SlidingWindow instead: Cloudflare's two-counter
// estimate over windows aligned to the clock, in constant memory per key.
type SlidingWindow struct {
	// Aligned selects the two-counter estimate over clock-aligned windows;
	// false (the default) counts exactly.
	Aligned bool
}

func (w SlidingWindow) limit(max int64, per time.Duration) floodgate.Limit {
	if w.Aligned {
		return floodgate.Limit{Rate: max, Period: per, Algorithm: floodgate.SlidingWindow}
	}
	return floodgate.Limit{Rate: max, Period: per, Algorithm: floodgate.SlidingLog}
}

// TokenBucket is floodgate's default for its own middleware, which Fiber
// does not have: Max requests at once, refilled evenly, one every
// Expiration/Max (floodgate.GCRA). A key that spent Max in a burst may
// send its next request after Expiration/Max, not Expiration, so it
// smooths traffic rather than locking a key out; its state is one
// timestamp per key, whatever Max.
type TokenBucket struct{}

func (TokenBucket) limit(max int64, per time.Duration) floodgate.Limit {
	return floodgate.Limit{Rate: max, Period: per, Algorithm: floodgate.GCRA}
}
