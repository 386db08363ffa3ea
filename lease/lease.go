// Package lease answers most decisions on a shared limit from memory by
// leasing blocks of its budget from the remote store that keeps it (Redis).
//
// A lease of k units is taken with one remote Decide of cost k, charged
// exactly as k requests would be, and then up to k decisions are answered
// from the block in memory, at memory-engine speed. Because the units are
// charged before they are handed out, the shared limit is never exceeded,
// whatever the number of instances: the price is under-admission, the
// units leased by one instance and not yet used being unavailable to the
// others. Held back at any moment: at most the sum of the outstanding
// blocks, each at most the Store's cap (docs/leases.md gives the bound in
// requests).
//
// The block size k follows demand: the units this instance decided for
// the key over the last Options.Horizon, at most Options.MaxFraction of the
// smallest capacity of the key's limits and at most the policy's cap
// (Options.MaxLease, Options.Cap). A key seen once gets no lease (k = 1):
// its request goes to the remote store as without this package, exactly
// and at the same cost (its first decision only marks its hash slot as
// seen; a key gets an entry when decided again within a Horizon); so does
// a key whose k is below Options.MinLease
// (4) and its cap, whose block would cost Redis more calls (the lease and
// the refund of what is left) than it saves. A hot key's next block is taken in the background
// when the current one runs below half of k, one refill per key at a time,
// so that its requests never wait on the remote store.
//
// A block is used only while it is valid:
//
//   - GCRA and token bucket: a block's units are charged to the bucket
//     when it is taken, so they may be used until Options.TTL after.
//     Every admission is then covered by a charge made at most TTL before
//     it, and the bucket never goes below empty.
//   - Fixed and sliding windows: a block charged in a window is counted in
//     that window only, so it may be used until the window ends (and TTL),
//     never after. A lease is not taken when less than Options.Horizon of
//     the window is left; the key is then decided remotely, exactly.
//   - Sliding log: a log counts each unit at the instant it is charged, so
//     a unit used later would escape the sliding period. Sets with a
//     sliding_log limit are never leased: every decision goes remote.
//
// Unused units are refunded to the remote store (Store.Refund) when a
// block expires, when the key's demand drops to nothing for a Horizon, and
// on Close. A refund gives back only what is certain not to have been
// handed out or to have refilled on its own: a window's units only while
// the window has at least Options.RefundMargin to run, a bucket's units
// less those the bucket would have refilled since the charge (see
// refundable). What is not refunded is lost until the window or the
// bucket moves on, as the state of a crashed instance is.
//
// Each decision answered from a block is a Verdict with Source "lease":
// Remaining is the remote Remaining seen when the newest block was taken
// plus the units this instance still holds (the shared state as last seen,
// less local use); Index and ResetAfter are the ones of that remote
// Verdict. Reserve and Cancel go to the remote store: a reservation is
// exact, as without leases, and sees the units held by blocks as used.
// Reset drops the key's blocks without refunding them and resets the
// remote state; a block whose lease was in flight during a Reset is
// dropped too.
//
// Failures: while a block is valid, its units are answered from memory
// even if the remote store is down: they were charged while it was up, so
// the limit holds. A refill that fails is retried after a Horizon; a
// request the blocks cannot cover goes to the remote store. Give New the
// failover.Store of the engine (lease.New(failover.New(engine, ...), o)):
// requests the blocks cannot cover then get its failure mode exactly as
// without leases, while blocks are taken and refunded through its Guard,
// never from a failure-mode verdict (which charges nothing in Redis). A
// refill answered by a failure mode anyway (a remote that fails open
// itself) makes no block.
//
// Plain counting: a decision marked by package internal/chargedenied (the
// Envoy service counting as envoyproxy/ratelimit counts) is counted by
// redisstore in a plain count (INCRBY, no script), apart from the script's
// state. The key's blocks are then taken and refunded with the same mark,
// so they are charged to the count its other decisions read: a block is an
// INCRBY of k, admitted while the count stays within the limit. A block
// that does not fit is charged all the same, as a denied hit is there: the
// window's last units, fewer than k, are lost to everyone until it ends.
// When a key's marking changes, its blocks go back to the count they were
// charged in.
package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/internal/chargedenied"
	"github.com/floodgate-go/floodgate/internal/isnil"
)

// Source is the Source of a decision answered from a leased block.
const Source = "lease"

// Defaults for Options' zero values.
const (
	DefaultHorizon      = 50 * time.Millisecond
	DefaultTTL          = 250 * time.Millisecond
	DefaultMaxFraction  = 0.1
	DefaultMaxLease     = 1000
	DefaultMinLease     = 4
	DefaultMaxKeys      = 10_000
	DefaultRefundMargin = 20 * time.Millisecond
	DefaultClockSkew    = 20 * time.Millisecond
	DefaultCallTimeout  = time.Second
)

// Options configures a Store. The zero value takes every default.
type Options struct {
	// Horizon is how far ahead a block is sized: the units this instance
	// decided for a key over the last Horizon. Default 50ms.
	Horizon time.Duration

	// TTL is the longest a block is used after it was taken; its unused
	// units are then refunded. Default 250ms. Window limits end a block
	// earlier, at the end of their window.
	TTL time.Duration

	// MaxFraction caps a block at this fraction of the smallest capacity
	// of the key's limits, in (0, 1]. Default 0.1.
	MaxFraction float64

	// MaxLease caps a block in units, whatever the limits. Default 1000.
	MaxLease int64

	// MinLease is the smallest block worth taking: a block costs a remote
	// call to take and, unused, another to refund, so a key whose demand
	// over a Horizon is below MinLease (and below its cap) is decided
	// remotely, as without leases. It keeps keys hit at random, a couple
	// of times in a Horizon by chance, from costing Redis more than
	// without leases. Default 4.
	MinLease int64

	// Cap, when set, gives each policy's own cap in units, in place of
	// MaxLease: a positive cap, 0 for MaxLease, or a negative number for
	// no leases at all (every decision of the policy goes remote). It is
	// called when a block is sized, so it must be cheap and safe for
	// concurrent use.
	Cap func(policy string) int64

	// MaxKeys bounds the keys that hold blocks or demand counts. A key
	// beyond it is decided remotely, exactly, until the janitor has freed
	// room. Default 10000.
	MaxKeys int

	// RefundMargin is how long a refund may take to reach the remote
	// store: a window's units are refunded only while the window has
	// more than this to run, and a bucket's refund leaves out what the
	// bucket refills in this time. Default 20ms.
	RefundMargin time.Duration

	// ClockSkew is how far this host's clock may be from the remote
	// store's. It shortens a block when the end of one of its windows is
	// computed on the local clock (a set of several limits whose window
	// did not drive the remote verdict). Default 20ms.
	ClockSkew time.Duration

	// CallTimeout bounds the store's own calls to the remote store
	// (refills and refunds), which have no caller's context. Default 1s.
	CallTimeout time.Duration

	// Observer is told of leases, refunds and held units (metrics.NewLease
	// implements it). Nil: nobody.
	Observer Observer
}

func (o *Options) defaults() error {
	switch {
	case o.Horizon < 0 || o.TTL < 0 || o.RefundMargin < 0 || o.ClockSkew < 0 || o.CallTimeout < 0:
		return errors.New("lease: durations must not be negative; 0 means the default")
	case o.MaxFraction < 0 || o.MaxFraction > 1 || math.IsNaN(o.MaxFraction):
		return fmt.Errorf("lease: MaxFraction %g is outside (0, 1]; 0 means the default (%g)", o.MaxFraction, DefaultMaxFraction)
	case o.MaxLease < 0:
		return fmt.Errorf("lease: MaxLease %d is negative; 0 means the default (%d)", o.MaxLease, DefaultMaxLease)
	case o.MinLease < 0:
		return fmt.Errorf("lease: MinLease %d is negative; 0 means the default (%d)", o.MinLease, DefaultMinLease)
	case o.MaxKeys < 0:
		return fmt.Errorf("lease: MaxKeys %d is negative; 0 means the default (%d)", o.MaxKeys, DefaultMaxKeys)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.Horizon, DefaultHorizon)
	def(&o.TTL, DefaultTTL)
	def(&o.RefundMargin, DefaultRefundMargin)
	def(&o.ClockSkew, DefaultClockSkew)
	def(&o.CallTimeout, DefaultCallTimeout)
	if o.MaxFraction == 0 {
		o.MaxFraction = DefaultMaxFraction
	}
	if o.MaxLease == 0 {
		o.MaxLease = DefaultMaxLease
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.MinLease == 0 {
		o.MinLease = DefaultMinLease
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	return nil
}

// A Store is a floodgate.Store that answers from blocks leased from a
// remote Store. It is safe for concurrent use. Close it before the remote
// store, so that its unused units go back.
type Store struct {
	remote floodgate.Store // decides what blocks cannot
	lessor floodgate.Store // takes and refunds blocks: remote, or its Guard
	o      Options
	base   time.Time // monotonic origin of now()

	shards [shards]shard
	held   atomic.Int64 // units in blocks, over every key

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the janitor, refills and refunds

	closeOnce sync.Once
	mu        sync.Mutex  // orders wg.Add after close with Close
	closed    atomic.Bool // set under mu

	// seen is when a hash slot of keys without an entry was last decided
	// (s.now()+1; 0: never): a key gets an entry, and its demand a count,
	// only when decided again within a Horizon, so that keys decided once
	// in a while cost a decision no more than a look-up and a store.
	seen [seenSlots]atomic.Int64
}

var _ floodgate.Store = (*Store)(nil)

const shards = 64

// seenSlots is the size of Store.seen (128 KiB). A key that shares its
// slot with another decided within a Horizon gets an entry a decision
// early, which costs memory, never a lease it would not get otherwise.
const seenSlots = 1 << 14

type shard struct {
	mu sync.RWMutex
	m  map[entryKey]*entry
}

type entryKey struct {
	set *algo.Set
	key string
}

// New returns a Store that leases from remote. It starts the janitor that
// refunds expired blocks and forgets idle keys.
func New(remote floodgate.Store, o Options) (*Store, error) {
	if isnil.Value(remote) {
		return nil, fmt.Errorf("lease: no remote store given (the store is nil: %T)", remote)
	}
	lessor := remote
	if fs, ok := remote.(*failover.Store); ok {
		// Its failure-mode verdicts charge nothing in Redis: blocks are
		// taken and refunded through its Guard, past the failure mode.
		lessor = fs.Guard()
	}
	if _, ok := remote.(*Store); ok {
		return nil, errors.New("lease: the remote store is already a lease.Store")
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	s := &Store{remote: remote, lessor: lessor, o: o, base: time.Now()}
	for i := range s.shards {
		s.shards[i].m = make(map[entryKey]*entry)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.janitor()
	return s, nil
}

// Remote returns the store the leases are taken from.
func (s *Store) Remote() floodgate.Store { return s.remote }

// now is monotonic nanoseconds since New.
func (s *Store) now() int64 { return int64(time.Since(s.base)) }

// Leasable reports whether set's limits can be leased at all: every limit
// but sliding_log.
func Leasable(set *algo.Set) bool {
	for i := range set.Len() {
		if set.At(i).Kind() == algo.SlidingLog {
			return false
		}
	}
	return true
}

// capFor is the largest block for set: 0 when the set is never leased.
func (s *Store) capFor(set *algo.Set) int64 {
	if !Leasable(set) {
		return 0
	}
	c := s.o.MaxLease
	if s.o.Cap != nil {
		switch pc := s.o.Cap(set.Policy()); {
		case pc < 0:
			return 0
		case pc > 0:
			c = pc
		}
	}
	frac := int64(float64(set.Capacity()) * s.o.MaxFraction)
	return min(c, frac, set.Capacity())
}

// hashOf is FNV-1a of k's key, mixed with its set's ID.
func hashOf(k entryKey) uint64 {
	h := uint64(14695981039346656037) ^ k.set.ID()
	for i := 0; i < len(k.key); i++ {
		h ^= uint64(k.key[i])
		h *= 1099511628211
	}
	return h
}

// entry returns key's entry, making one when create is set and there is
// room; nil otherwise.
func (s *Store) entry(set *algo.Set, key string, create bool) *entry {
	k := entryKey{set, key}
	return s.entryOf(k, hashOf(k), create, 0)
}

// entryOf is entry for k of hash h. With create, a key without an entry
// gets one only when seen at now within a Horizon of another decision of
// its seen slot.
func (s *Store) entryOf(k entryKey, h uint64, create bool, now int64) *entry {
	sh := &s.shards[h%shards]
	sh.mu.RLock()
	e := sh.m[k]
	sh.mu.RUnlock()
	if e != nil || !create {
		return e
	}
	if last := s.seen[(h/shards)%seenSlots].Swap(now + 1); last == 0 || now+1-last > int64(s.o.Horizon) {
		return nil
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e = sh.m[k]; e != nil {
		return e
	}
	if len(sh.m) >= (s.o.MaxKeys+shards-1)/shards {
		return nil
	}
	e = &entry{set: k.set, key: k.key}
	sh.m[k] = e
	return e
}

// Decide implements floodgate.Store: from the key's blocks when they hold
// cost units, else from the remote store.
func (s *Store) Decide(ctx context.Context, set *algo.Set, key string, cost int64) (algo.Verdict, error) {
	if cost <= 0 || s.isClosed() {
		return s.remote.Decide(ctx, set, key, cost)
	}
	limit := s.capFor(set)
	if limit < 2 {
		return s.remote.Decide(ctx, set, key, cost)
	}
	now := s.now()
	k := entryKey{set, key}
	e := s.entryOf(k, hashOf(k), true, now)
	if e == nil {
		return s.remote.Decide(ctx, set, key, cost)
	}
	plain := chargedenied.On(ctx)
	e.mu.Lock()
	var switched []block
	if e.plain != plain {
		// The key is counted the other way now (the Envoy service's mode
		// changed): its blocks and a lease in flight were charged in the
		// other count, where the blocks go back.
		switched, e.blocks = e.blocks, nil
		e.gen++
		e.plain = plain
	}
	e.lastSeen = now
	e.observe(now, cost, s.o.Horizon)
	expired := e.dropExpired(now)
	v, ok := e.take(now, cost)
	want := e.want(limit)
	refill := want >= max(min(s.o.MinLease, limit), 2) && !e.refilling && e.left() < max(want/2, cost) && now >= e.retryAt
	if refill {
		e.startRefill()
	}
	gen := e.gen
	e.mu.Unlock()
	if len(switched) > 0 && !s.spawn(func() { s.refundBlocks(set, key, switched, now, !plain) }) {
		s.refundBlocks(set, key, switched, now, !plain)
	}
	if len(expired) > 0 && !s.spawn(func() { s.refundBlocks(set, key, expired, now, plain) }) {
		s.refundBlocks(set, key, expired, now, plain) // closed: Close waits for nothing more
	}
	if refill && !s.spawn(func() { s.refill(e, want, gen, plain) }) {
		e.mu.Lock()
		e.endRefillLocked()
		e.mu.Unlock()
	}
	if ok {
		s.held.Add(-cost)
		return v, nil
	}
	// The blocks cannot cover the request: the remote store decides it,
	// exactly, as without leases.
	return s.remote.Decide(ctx, set, key, cost)
}

// spawn runs f in a goroutine the Store waits for on Close, unless closed.
func (s *Store) spawn(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

func (s *Store) isClosed() bool { return s.closed.Load() }

// refill takes a block of want units for e from the remote store, in its
// plain count when plain.
func (s *Store) refill(e *entry, want int64, gen uint64, plain bool) {
	set := e.set
	ctx, cancel := context.WithTimeout(s.ctx, s.o.CallTimeout)
	defer cancel()
	if plain {
		ctx = chargedenied.With(ctx)
	}
	for attempt := 0; attempt < 2; attempt++ {
		t0 := s.now()
		wall := time.Now()
		end, ok := s.windowEnd(set, wall, algo.Verdict{Index: -1})
		if ok && end < int64(s.o.Horizon) {
			// Too close to a window's end: decide this key remotely until
			// the next window.
			s.endRefill(e, t0+end)
			return
		}
		v, err := s.lessor.Decide(ctx, set, e.key, want)
		if err != nil || failureSource(v.Source) {
			// The remote store is failing: retry after a Horizon. A
			// failure-mode verdict charged nothing remote.
			s.o.Observer.Failed(set.Policy())
			s.endRefill(e, s.now()+int64(s.o.Horizon))
			return
		}
		if v.Allowed {
			b := s.newBlock(set, want, t0, wall, v)
			s.o.Observer.Leased(set.Policy(), want)
			e.mu.Lock()
			if e.gen != gen || b.deadline <= s.now() {
				// A Reset came between, or the block is already over: it
				// must not be used. It is not refunded either: a Reset
				// wiped its charge, and a window that ended took it along.
				e.endRefillLocked()
				e.mu.Unlock()
				s.o.Observer.Lost(set.Policy(), want)
				return
			}
			e.blocks = append(e.blocks, b)
			e.remaining, e.index, e.resetAfter = v.Remaining, v.Index, int64(v.ResetAfter)
			e.endRefillLocked()
			e.mu.Unlock()
			s.held.Add(want)
			return
		}
		// Denied: a smaller block may still fit.
		if v.RetryAfter == algo.Never || v.Remaining < 2 || attempt == 1 {
			s.endRefill(e, s.now()+min(max(int64(v.RetryAfter), int64(s.o.Horizon)), int64(s.o.TTL)))
			return
		}
		want = min(want, v.Remaining)
	}
}

// endRefill ends a refill that took no block; no lease is tried before
// retryAt.
func (s *Store) endRefill(e *entry, retryAt int64) {
	e.mu.Lock()
	e.endRefillLocked()
	e.retryAt = retryAt
	e.mu.Unlock()
}

func failureSource(src string) bool {
	switch floodgate.Source(src) {
	case floodgate.SourceFailOpen, floodgate.SourceFailClosed, floodgate.SourceLocalFallback:
		return true
	}
	return false
}

// windowEnd returns, in ns from the call, the earliest end of a window of
// set's window limits, and false when set has none. The limit that drove
// v (Index ≥ 0, v allowed) is read from v, exactly, on the remote store's
// clock; the others from the local clock wall, less ClockSkew.
func (s *Store) windowEnd(set *algo.Set, wall time.Time, v algo.Verdict) (int64, bool) {
	end, found := int64(math.MaxInt64), false
	now := wall.UnixNano()
	for i := range set.Len() {
		t := set.At(i)
		var left int64
		switch t.Kind() {
		case algo.FixedWindow:
			if i == v.Index && v.Allowed {
				left = int64(v.ResetAfter) // end − now of the charged window
			} else {
				_, we := t.Window(now)
				left = we - now - int64(s.o.ClockSkew)
			}
		case algo.SlidingWindow:
			if i == v.Index && v.Allowed {
				// ResetAfter runs to one period after the current
				// window's end.
				left = int64(v.ResetAfter) - t.Span()
			} else {
				left = t.Span() - now%t.Span() - int64(s.o.ClockSkew)
			}
		default:
			continue
		}
		found = true
		end = min(end, left)
	}
	return end, found
}

// newBlock is the block of want units charged by v, whose call started at
// t0 (monotonic) and wall.
func (s *Store) newBlock(set *algo.Set, want, t0 int64, wall time.Time, v algo.Verdict) block {
	b := block{size: want, left: want, charged: t0, deadline: t0 + int64(s.o.TTL), refundBy: math.MaxInt64}
	if end, ok := s.windowEnd(set, wall, v); ok {
		b.deadline = min(b.deadline, t0+end)
		b.refundBy = t0 + end - int64(s.o.RefundMargin)
	}
	return b
}

// refundable is how many of b's unused units may go back at now without
// giving back more than was leased and not used:
//
//   - a window's, all of them while the window has more than RefundMargin
//     to run, none after;
//   - a bucket's (GCRA), all of them less what the bucket would have
//     refilled by the time the refund lands. The charge moved the bucket's
//     instant (TAT) by size×I; without the unused units it would lie at
//     least used×I after the charge, so until then the refund gives back
//     exactly the unused charge, and after that each interval I that
//     passed is one unit the bucket has regained by itself.
func (s *Store) refundable(set *algo.Set, b block, now int64) int64 {
	u := b.left
	if u <= 0 {
		return 0
	}
	if now > b.refundBy {
		return 0
	}
	landed := now - b.charged + int64(s.o.RefundMargin)
	used := b.size - u
	for i := range set.Len() {
		t := set.At(i)
		if t.Kind() != algo.GCRA {
			continue
		}
		iv := t.Interval()
		over := landed - used*iv
		if over > 0 {
			lost := (over + iv - 1) / iv
			u = min(u, max(b.left-lost, 0))
		}
	}
	return u
}

// refundBlocks gives back what can be of blocks taken from key, to the
// remote store's plain count when plain.
func (s *Store) refundBlocks(set *algo.Set, key string, bs []block, now int64, plain bool) {
	var units, held int64
	for _, b := range bs {
		units += s.refundable(set, b, now)
		held += b.left
	}
	if held == 0 {
		return
	}
	s.held.Add(-held)
	if units < held {
		s.o.Observer.Lost(set.Policy(), held-units)
	}
	if units == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.o.CallTimeout)
	defer cancel()
	if plain {
		ctx = chargedenied.With(ctx)
	}
	if err := s.lessor.Refund(ctx, set, key, units); err != nil {
		s.o.Observer.Lost(set.Policy(), units)
		return
	}
	s.o.Observer.Refunded(set.Policy(), units)
}

// Refund implements floodgate.Store: the units go back to the remote
// store, where every charge is.
func (s *Store) Refund(ctx context.Context, set *algo.Set, key string, cost int64) error {
	return s.remote.Refund(ctx, set, key, cost)
}

// Reset implements floodgate.Store: it drops key's blocks, unrefunded,
// waits for a lease in flight to land (and drops it: its charge may or may
// not be one the reset wipes), then resets the remote state, so that the
// key starts afresh with no charge of this Store's left over.
//
// A block taken by a decision racing with the Reset may have been charged
// before or after the remote reset: once the reset is done, blocks are
// dropped again, and a lease still in flight is dropped when it lands.
// Both err strict: at worst a few units stay charged unused.
func (s *Store) Reset(ctx context.Context, set *algo.Set, key string) error {
	e := s.entry(set, key, false)
	if e != nil {
		if landed := s.dropBlocks(e); landed != nil {
			select {
			case <-landed:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	err := s.remote.Reset(ctx, set, key)
	if e != nil {
		s.dropBlocks(e)
	}
	return err
}

// dropBlocks drops e's blocks unrefunded, makes a lease in flight be
// dropped when it lands, whose end it returns (nil: none in flight), and
// forgets e's demand: a key that was reset is leased as a key seen for
// the first time, so its first request after the reset is decided by the
// remote store alone, without a block taken beside it.
func (s *Store) dropBlocks(e *entry) <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	s.held.Add(-e.left())
	e.blocks = nil
	e.gen++
	e.since, e.units, e.rate = 0, 0, 0
	return e.refillDone
}

// Reserve implements floodgate.Store by reserving on the remote store:
// reservations are exact, and see the units held in blocks as used.
func (s *Store) Reserve(ctx context.Context, set *algo.Set, key string, cost int64, maxWait time.Duration) (algo.Verdict, algo.Ticket, error) {
	return s.remote.Reserve(ctx, set, key, cost, maxWait)
}

// Cancel implements floodgate.Store by cancelling on the remote store.
func (s *Store) Cancel(ctx context.Context, set *algo.Set, key string, cost int64, t algo.Ticket) error {
	return s.remote.Cancel(ctx, set, key, cost, t)
}

// ValidateLimit implements floodgate.Store: the remote store must keep l.
func (s *Store) ValidateLimit(l floodgate.Limit) error { return s.remote.ValidateLimit(l) }

// Close stops leasing, waits for refills in flight and refunds every
// block's unused units. Decisions after Close go to the remote store. It
// does not close the remote store.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed.Store(true)
		s.mu.Unlock()
		s.cancel()
		s.wg.Wait()
		s.sweep(math.MaxInt64)
	})
	return nil
}

// janitor refunds expired blocks, gives back the blocks of keys whose
// demand stopped, and forgets idle keys, every Horizon.
func (s *Store) janitor() {
	defer s.wg.Done()
	t := time.NewTicker(s.o.Horizon)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			s.sweep(s.now())
		}
	}
}

// sweep refunds what must go back at now; math.MaxInt64 (Close) gives back
// every block and forgets every key.
func (s *Store) sweep(now int64) {
	all := now == math.MaxInt64
	if all {
		now = s.now()
	}
	type refund struct {
		set   *algo.Set
		key   string
		bs    []block
		plain bool
	}
	for i := range s.shards {
		sh := &s.shards[i]
		var refunds []refund
		sh.mu.Lock()
		for k, e := range sh.m {
			e.mu.Lock()
			var bs []block
			switch {
			case all:
				bs, e.blocks = e.blocks, nil
			default:
				bs = e.dropExpired(now)
				e.observe(now, 0, s.o.Horizon)
				if len(e.blocks) > 0 && e.rate == 0 && e.units == 0 && now-e.lastSeen > int64(s.o.Horizon) {
					// Demand stopped: give the units back to the others.
					bs, e.blocks = append(bs, e.blocks...), nil
				}
			}
			idle := len(e.blocks) == 0 && !e.refilling && now-e.lastSeen > int64(s.o.TTL)
			e.mu.Unlock()
			if len(bs) > 0 {
				refunds = append(refunds, refund{k.set, k.key, bs, e.plain})
			}
			if all || idle {
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
		for _, r := range refunds {
			s.refundBlocks(r.set, r.key, r.bs, now, r.plain)
		}
	}
}

// Held returns the units this Store holds in blocks, over every key: the
// units it keeps from the other instances now.
func (s *Store) Held() int64 { return s.held.Load() }

// Keys returns how many keys the Store tracks.
func (s *Store) Keys() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}
