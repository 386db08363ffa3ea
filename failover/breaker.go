package failover

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// BreakerState is the state of a Guard's circuit breaker.
type BreakerState int32

const (
	// Closed: calls go to the remote store. Calls and failures are
	// counted over a sliding window; when enough calls were made and
	// enough of them failed, the breaker opens.
	Closed BreakerState = iota

	// Open: calls are not made; the owner's failure policy decides at once.
	// When the back-off ends, the next call becomes the probe.
	Open

	// HalfOpen: one probe is in flight. Other calls are not made until it
	// answers: success closes the breaker, failure opens it again with a
	// doubled back-off.
	HalfOpen
)

var stateNames = [...]string{Closed: "closed", Open: "open", HalfOpen: "half_open"}

// String returns "closed", "open" or "half_open".
func (s BreakerState) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// A Transition is one change of a breaker's state, with why it happened,
// for a log line. Reason is a sentence such as "12 of 20 calls failed
// within 10s (60% >= 50%); last: ..." or "probe answered".
type Transition struct {
	From, To BreakerState
	Reason   string
}

// windowSlots is how many slots the breaker's window is cut into: the
// failure rate is that of the calls of the last windowSlots slots, the
// current one included, so the window it looks at is between nine and ten
// tenths of GuardOptions.Window long.
const windowSlots = 10

// A slot counts the calls and failures of one tenth of the window.
type slot struct {
	epoch atomic.Int64 // which tenth of time it counts (clock / slot length); written last
	calls atomic.Int64
	fails atomic.Int64
}

// breaker is a failure-rate circuit breaker: it opens when, over the last
// window, at least minCalls calls were made and at least a rate of them
// failed, or when minCalls calls in a row failed within the window with an
// error other than a timeout, or when UnreachableInRow of them in a row
// could not even connect (see unreachable). A burst of errors in a busy
// service is then a small rate and keeps it closed, and so is a starved
// machine, whose calls time out together; a dead remote store, which fails
// every call, opens it after minCalls calls, however many successes of the
// seconds before still fill the window; and a remote store whose host
// refuses the connection, which no amount of waiting answers, opens it
// after UnreachableInRow calls.
//
// The closed state, which is where every healthy decision runs, costs a
// clock read and an atomic add per call; the slot's counters are reset by
// the first call of each tenth of the window, under mu. Transitions take
// mu too, which is never held across a call to the remote store. While
// open, deciding whether to skip costs a clock read and an atomic load.
type breaker struct {
	state  atomic.Int32
	until  atomic.Int64 // while open: clock time from which a probe may go
	opened atomic.Uint64
	probes atomic.Uint64
	slots  [windowSlots]slot
	streak streak // failures other than timeouts since the last answered call
	down   streak // of those, the failures to connect since the last other outcome

	mu      sync.Mutex
	backoff time.Duration // the current back-off; under mu

	minCalls  int64   // calls in the window before the rate counts; <= 0 never opens
	rate      float64 // share of failed calls that opens
	slotNs    int64   // length of a slot
	window    time.Duration
	base, max time.Duration
	clock     floodgate.Clock
	notify    func(Transition)
}

// init sets up the window; the breaker starts closed with empty slots.
func (b *breaker) init(window time.Duration) {
	b.window = window
	b.slotNs = max(int64(window)/windowSlots, 1)
	b.clear()
}

// clear empties the window: every slot's epoch is older than any clock
// time, so the next call into it starts it over. The caller holds mu, or
// owns b.
func (b *breaker) clear() {
	for i := range b.slots {
		b.slots[i].epoch.Store(math.MinInt64)
	}
	b.streak.n.Store(0)
	b.down.n.Store(0)
}

// A streak counts failures in a row within one window.
type streak struct {
	n     atomic.Int64
	since atomic.Int64 // clock time of the streak's first failure
}

// add counts a failure at now and returns the length of the streak: a
// streak that began a window or more ago starts over at now.
func (s *streak) add(now, window int64) int64 {
	row := s.n.Add(1)
	if row == 1 {
		s.since.Store(now)
	} else if now-s.since.Load() >= window {
		s.n.Store(1)
		s.since.Store(now)
		row = 1
	}
	return row
}

// reset ends the streak.
func (s *streak) reset() {
	if s.n.Load() != 0 {
		s.n.Store(0)
	}
}

// slotAt returns the slot counting the instant now, started over if it
// last counted an older tenth.
func (b *breaker) slotAt(now int64) *slot {
	e := now / b.slotNs
	s := &b.slots[uint64(e)%windowSlots]
	if s.epoch.Load() < e {
		b.mu.Lock()
		if s.epoch.Load() < e {
			s.calls.Store(0)
			s.fails.Store(0)
			s.epoch.Store(e)
		}
		b.mu.Unlock()
	}
	return s
}

// tally sums the calls and failures of the window ending at now.
func (b *breaker) tally(now int64) (calls, fails int64) {
	e := now / b.slotNs
	for i := range b.slots {
		s := &b.slots[i]
		if se := s.epoch.Load(); se > e-windowSlots && se <= e {
			calls += s.calls.Load()
			fails += s.fails.Load()
		}
	}
	return calls, fails
}

// acquire reports whether a call may go to the remote store and whether it
// is the probe of a half-open breaker. Exactly one caller wins the probe.
func (b *breaker) acquire() (probe, ok bool) {
	switch BreakerState(b.state.Load()) {
	case Closed:
		return false, true
	case Open:
		if b.clock.UnixNano() < b.until.Load() {
			return false, false
		}
		if b.state.CompareAndSwap(int32(Open), int32(HalfOpen)) {
			b.probes.Add(1)
			b.changed(Open, HalfOpen, "the back-off is over; one call probes the remote store")
			return true, true
		}
	}
	return false, false
}

// success records a call that the remote store answered.
func (b *breaker) success(probe bool) {
	if probe {
		b.mu.Lock()
		b.clear()
		b.state.Store(int32(Closed))
		b.backoff = b.base
		b.mu.Unlock()
		b.changed(HalfOpen, Closed, "the probe was answered")
		return
	}
	// Only a closed breaker counts; an answer to a call that started
	// before the breaker opened proves little, and only the probe may
	// close it.
	if b.minCalls > 0 && BreakerState(b.state.Load()) == Closed {
		b.slotAt(b.clock.UnixNano()).calls.Add(1)
		b.streak.reset()
		b.down.reset()
	}
}

// failure records a call that failed or timed out with err.
func (b *breaker) failure(probe bool, err error, timedOut bool) {
	if b.minCalls <= 0 {
		return
	}
	if probe {
		b.mu.Lock()
		b.backoff = min(2*b.backoff, b.max)
		wait := b.jitter(b.backoff)
		b.until.Store(b.clock.UnixNano() + int64(wait))
		b.state.Store(int32(Open))
		b.mu.Unlock()
		b.changed(HalfOpen, Open, fmt.Sprintf("the probe failed (%v); next probe in %s", err, wait.Round(time.Millisecond)))
		return
	}
	if BreakerState(b.state.Load()) != Closed {
		return
	}
	now := b.clock.UnixNano()
	s := b.slotAt(now)
	s.calls.Add(1)
	s.fails.Add(1)
	var row, down int64
	switch {
	case timedOut:
		// A stall, which a starved machine makes of many calls at once:
		// the rate decides. It does not break a streak either.
		row, down = b.streak.n.Load(), b.down.n.Load()
	case unreachable(err):
		row, down = b.streak.add(now, int64(b.window)), b.down.add(now, int64(b.window))
	default:
		row = b.streak.add(now, int64(b.window))
		b.down.reset()
	}
	calls, fails := b.tally(now)
	byRate := calls >= b.minCalls && float64(fails) >= b.rate*float64(calls)
	byDown := down >= UnreachableInRow
	if !byRate && !byDown && row < b.minCalls {
		return
	}
	b.mu.Lock()
	opened := BreakerState(b.state.Load()) == Closed
	var wait time.Duration
	if opened {
		b.backoff = b.base
		wait = b.jitter(b.base)
		b.until.Store(now + int64(wait))
		b.state.Store(int32(Open))
		b.clear()
		b.opened.Add(1)
	}
	b.mu.Unlock()
	if opened {
		why := fmt.Sprintf("%d of %d calls failed within %s (%.0f%% >= %.0f%%)", fails, calls, b.window, 100*float64(fails)/float64(calls), 100*b.rate)
		switch {
		case byRate:
		case row >= b.minCalls:
			why = fmt.Sprintf("%d calls in a row failed", row)
		default:
			why = fmt.Sprintf("%d calls in a row could not connect", down)
		}
		b.changed(Closed, Open, fmt.Sprintf("%s, the last with: %v; first probe in %s", why, err, wait.Round(time.Millisecond)))
	}
}

// release gives back a probe that told nothing about the remote store
// because the caller gave up first. The breaker stays open with its
// back-off already over, so the next call probes.
func (b *breaker) release(probe bool) {
	if probe && b.state.CompareAndSwap(int32(HalfOpen), int32(Open)) {
		b.changed(HalfOpen, Open, "the probe's caller gave up before an answer; the next call probes")
	}
}

// retryIn is how long until the breaker lets a call through again: the rest
// of its back-off while open, else the base back-off, a fair guess for a
// remote store that has just failed.
func (b *breaker) retryIn() time.Duration {
	if BreakerState(b.state.Load()) == Open {
		if d := time.Duration(b.until.Load() - b.clock.UnixNano()); d > 0 {
			return d
		}
	}
	return b.base
}

// jitter shortens d by up to a fifth at random, so that instances that saw
// the same outage begin do not all probe at the same instant. It never
// lengthens d: MaxBackoff stays a bound on how late recovery is noticed.
func (b *breaker) jitter(d time.Duration) time.Duration {
	if d < 5 {
		return d
	}
	return d - rand.N(d/5)
}

func (b *breaker) changed(from, to BreakerState, reason string) {
	if b.notify != nil {
		b.notify(Transition{From: from, To: to, Reason: reason})
	}
}
