package lease

import (
	"sync"
	"time"

	"github.com/floodgate-go/floodgate/algo"
)

// An entry is one key's blocks and demand. Its fields are guarded by mu.
type entry struct {
	mu  sync.Mutex
	set *algo.Set
	key string

	blocks []block // in the order taken, which is the order they end in for one set

	// The remote Verdict of the newest block: what a decision from a
	// block reports.
	remaining  int64
	index      int
	resetAfter int64 // ns

	// Demand: units decided in the Horizon that began at since, and in
	// the one before it (rate).
	since, units, rate int64

	lastSeen   int64
	refilling  bool
	refillDone chan struct{} // closed when the refill in flight ends; nil if none
	retryAt    int64         // no refill before this instant (a denial, a failure)
	gen        uint64        // bumped by Reset: a lease in flight is dropped
}

// A block is units leased with one remote charge.
type block struct {
	size, left int64
	charged    int64 // when the charging call was sent
	deadline   int64 // used strictly before this instant
	refundBy   int64 // refunded only up to this instant (windows)
}

// observe counts cost units decided at now and rolls the demand window.
func (e *entry) observe(now, cost int64, horizon time.Duration) {
	h := int64(horizon)
	if now-e.since >= h {
		if now-e.since < 2*h {
			e.rate = e.units
		} else {
			e.rate = 0
		}
		e.since, e.units = now, 0
	}
	e.units += cost
}

// want is the block to lease: the demand of a Horizon, capped by limit.
func (e *entry) want(limit int64) int64 {
	return min(max(e.rate, e.units), limit)
}

// left is the units held in blocks.
func (e *entry) left() int64 {
	var n int64
	for _, b := range e.blocks {
		n += b.left
	}
	return n
}

// dropExpired removes and returns the blocks no longer usable at now.
func (e *entry) dropExpired(now int64) []block {
	var out []block
	keep := e.blocks[:0]
	for _, b := range e.blocks {
		switch {
		case b.deadline <= now:
			out = append(out, b)
		case b.left > 0:
			keep = append(keep, b)
		}
	}
	clear(e.blocks[len(keep):])
	e.blocks = keep
	return out
}

// take answers cost units from the blocks valid at now, all or none. The
// caller has dropped the expired blocks.
func (e *entry) take(now, cost int64) (algo.Verdict, bool) {
	if e.left() < cost {
		return algo.Verdict{}, false
	}
	need := cost
	for i := range e.blocks {
		n := min(need, e.blocks[i].left)
		e.blocks[i].left -= n
		need -= n
		if need == 0 {
			break
		}
	}
	left := e.left()
	t := e.set.At(e.index)
	return algo.Verdict{
		Decision: algo.Decision{
			Allowed:    true,
			Remaining:  min(e.remaining+left, t.Capacity()),
			ResetAfter: time.Duration(e.resetAfter),
		},
		Index:  e.index,
		Source: Source,
	}, true
}

// startRefill marks a refill in flight. The caller holds mu.
func (e *entry) startRefill() {
	e.refilling = true
	e.refillDone = make(chan struct{})
}

// endRefillLocked marks the refill in flight ended. The caller holds mu.
func (e *entry) endRefillLocked() {
	if e.refilling {
		close(e.refillDone)
	}
	e.refilling = false
	e.refillDone = nil
}
