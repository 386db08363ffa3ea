package concurrency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Defaults for Options' zero values.
const (
	// DefaultName names a Limiter whose Options.Name is empty.
	DefaultName = "concurrency"

	// DefaultMaxWait is the backlog timeout of a Limiter with a wait
	// queue: a request that has waited a second for a slot is one whose
	// client is about to give up.
	DefaultMaxWait = time.Second

	// DefaultPollInterval is how often the first waiter of a key asks the
	// store again. Releases through this Limiter wake it at once; polling
	// finds slots freed elsewhere (another instance, an expired lease).
	DefaultPollInterval = 10 * time.Millisecond
)

// Options configures a Limiter.
type Options struct {
	// Name names the Limiter's slots in its store, so that limiters with
	// different names never share them. Empty means DefaultName.
	Name string

	// Limit is the number of slots of every key. Exactly one of Limit and
	// Controller must be set.
	Limit int

	// Controller sets the limit instead of Limit, from the latency and
	// outcome every Permit reports (package adaptive). Its limit applies
	// to every key of the Limiter.
	Controller Controller

	// MaxWaiting is the most requests that may wait for a slot of one key
	// in this process. 0 means no queue: a request that finds its key full
	// is refused at once (ReasonFull).
	MaxWaiting int

	// MaxWait is the backlog timeout, the longest a request waits in the
	// queue. 0 means DefaultMaxWait. It is used only with MaxWaiting.
	MaxWait time.Duration

	// PollInterval is how often the first waiter of a key asks the store
	// again (see DefaultPollInterval). 0 means the default.
	PollInterval time.Duration
}

// A Limiter admits at most its limit of holders per key at once. It is
// safe for concurrent use.
type Limiter struct {
	store      Store
	local      *Local // store, when it is a Local: Permits hold counted slots
	name       string
	limit      int
	ctl        Controller
	maxWaiting int
	maxWait    time.Duration
	poll       time.Duration

	prefix string // random, so tokens of every process differ
	seq    atomic.Uint64

	waiting atomic.Int64 // requests in every queue; 0 lets Release skip mu
	mu      sync.Mutex
	queues  map[string]*queue
	spare   []*queue // empty, with their timers, for reuse; under mu
}

// New returns a Limiter over store.
func New(store Store, o Options) (*Limiter, error) {
	switch {
	case store == nil:
		return nil, fmt.Errorf("%w: no store given; use concurrency.NewLocal() for slots in this process", ErrInvalid)
	case o.Limit < 0:
		return nil, fmt.Errorf("%w: limit %d is negative", ErrInvalid, o.Limit)
	case (o.Limit > 0) == (o.Controller != nil):
		return nil, fmt.Errorf("%w: set exactly one of Limit (a fixed number of slots) and Controller (an adaptive limit)", ErrInvalid)
	case o.MaxWaiting < 0:
		return nil, fmt.Errorf("%w: MaxWaiting %d is negative; use 0 for no wait queue", ErrInvalid, o.MaxWaiting)
	case o.MaxWait < 0:
		return nil, fmt.Errorf("%w: MaxWait %s is negative; use 0 for the default of %s", ErrInvalid, o.MaxWait, DefaultMaxWait)
	case o.PollInterval < 0:
		return nil, fmt.Errorf("%w: PollInterval %s is negative; use 0 for the default of %s", ErrInvalid, o.PollInterval, DefaultPollInterval)
	}
	local, _ := store.(*Local)
	l := &Limiter{
		store: store, local: local, name: o.Name, limit: o.Limit, ctl: o.Controller,
		maxWaiting: o.MaxWaiting, maxWait: o.MaxWait, poll: o.PollInterval,
		prefix: randomToken()[:12] + "-",
		queues: make(map[string]*queue),
	}
	if l.name == "" {
		l.name = DefaultName
	}
	if l.maxWait == 0 {
		l.maxWait = DefaultMaxWait
	}
	if l.poll == 0 {
		l.poll = DefaultPollInterval
	}
	return l, nil
}

// Name returns the Limiter's name.
func (l *Limiter) Name() string { return l.name }

// Limit returns the number of slots per key now.
func (l *Limiter) Limit() int {
	if l.ctl != nil {
		return max(1, l.ctl.Limit())
	}
	return l.limit
}

// Waiting returns the number of requests waiting in the Limiter's queues,
// for status pages and tests.
func (l *Limiter) Waiting() int { return int(l.waiting.Load()) }

// Adaptive reports whether a Controller sets the limit, so that a front
// end knows whether measuring each request's outcome is worth its cost.
func (l *Limiter) Adaptive() bool { return l.ctl != nil }

// Acquire asks for a slot of key ("" is a key like any other: one pool for
// every request), waiting in the queue when the Limiter has one. When
// res.Allowed, the Permit holds the slot until its Release; otherwise the
// Permit is nil (whose Release does nothing, so `defer p.Release()` is
// safe either way) and res.Reason says why.
func (l *Limiter) Acquire(ctx context.Context, key string) (Result, *Permit) {
	// Over a Local, a Permit's slot is counted rather than named by a
	// token: the Permit releases it once, and it never expires.
	var token string
	if l.local == nil {
		token = l.nextToken()
	}
	res, g := l.acquire(ctx, key, token, 0)
	if !res.Allowed {
		return res, nil
	}
	p := &Permit{l: l, key: key, local: g.local, inFlight: res.InFlight}
	if l.ctl != nil {
		p.start = time.Now() // only a Controller reads the work's latency
	}
	if token != "" {
		p.h = &hold{l: l, key: key, token: token}
		if g.Lease > 0 {
			p.h.heartbeat(g.Lease)
			runtime.AddCleanup(p, func(h *hold) { go h.release() }, p.h)
		}
	}
	return res, p
}

// TryAcquire takes a slot of key when one is free now, without waiting
// and without a call that could block: it asks only a Local store, in
// this process's memory. It reports false, having taken nothing, when the
// store is not a Local (ask Acquire, which may go to the network), when
// requests wait in key's queue (a slot that frees goes to them first, so
// taking it here would jump the line), and when key's slots are all
// held. The caller that gets false and may wait calls Acquire, which
// waits or refuses as the Limiter is configured. The Permit of a true
// answer is Acquire's.
func (l *Limiter) TryAcquire(key string) (*Permit, bool) {
	if l.local == nil {
		return nil, false
	}
	if l.queued(key) {
		return nil, false
	}
	limit := l.Limit()
	g, err := l.local.acquire(l.name, key, "", true, limit, 0)
	if err != nil || !g.Acquired {
		return nil, false
	}
	p := &Permit{l: l, key: key, local: g.local, inFlight: g.InFlight}
	if l.ctl != nil {
		p.start = time.Now()
	}
	return p, true
}

// Do runs work while it holds a slot of key, and frees the slot when work
// returns (reporting the Outcome it returns to the Controller) or panics
// (reporting nothing: Ignore). It returns the decision, the Result work was
// given; a refused request's work is not run. It is Acquire with a
// deferred ReleaseWith, for a front end that serves every admitted request
// within one call: over a Local store it holds the slot without a Permit,
// so that an admitted request allocates nothing.
func (l *Limiter) Do(ctx context.Context, key string, work func(Result) Outcome) Result {
	if l.local == nil {
		res, p := l.Acquire(ctx, key)
		if !res.Allowed {
			return res
		}
		o := Ignore
		defer func() { p.ReleaseWith(o) }()
		o = work(res)
		return res
	}
	res, g := l.acquire(ctx, key, "", 0)
	if !res.Allowed {
		return res
	}
	var start time.Time
	if l.ctl != nil {
		start = time.Now()
	}
	o := Ignore
	defer func() { l.releaseCounted(key, g.local, start, res.InFlight, o) }()
	o = work(res)
	return res
}

// releaseCounted frees a counted slot of key, whose holders in the Local
// are h (see Acquire), granted at start with inFlight holders, whose work
// ended with o.
func (l *Limiter) releaseCounted(key string, h *holders, start time.Time, inFlight int, o Outcome) {
	if l.waiting.Load() == 0 || !l.handOff(key, h) {
		l.local.releaseCounted(l.name, key, h)
		l.wake(key)
	}
	l.observe(start, inFlight, o)
}

// observe reports to the Controller work granted at start with inFlight
// holders that ended with o.
func (l *Limiter) observe(start time.Time, inFlight int, o Outcome) {
	if l.ctl != nil && o != Ignore {
		l.ctl.Observe(Sample{RTT: time.Since(start), InFlight: max(inFlight, 0), Outcome: o})
	}
}

// AcquireLease is Acquire for a holder in another process: the slot is held
// for ttl, and its holder renews it with RenewLease (before ttl passes) and
// ends it with ReleaseLease, naming it by Lease.Token. A holder that stops
// renewing loses the slot when ttl runs out. Leases report nothing to a
// Controller.
func (l *Limiter) AcquireLease(ctx context.Context, key string, ttl time.Duration) (Result, Lease) {
	if ttl <= 0 {
		return Result{Name: l.name, Reason: ReasonError, InFlight: -1,
			Error: fmt.Errorf("%w: lease ttl %s is not positive", ErrInvalid, ttl)}, Lease{}
	}
	token := randomToken()
	res, _ := l.acquire(ctx, key, token, ttl)
	if !res.Allowed {
		return res, Lease{}
	}
	return res, Lease{Key: key, Token: token, TTL: ttl}
}

// RenewLease extends the lease by its TTL from now. It returns ErrLeaseLost
// when the lease no longer holds a slot, or the store's error.
func (l *Limiter) RenewLease(ctx context.Context, lease Lease) error {
	if lease.Token == "" || lease.TTL <= 0 {
		return fmt.Errorf("%w: lease without a token or ttl", ErrInvalid)
	}
	held, err := l.store.Renew(ctx, l.name, lease.Key, lease.Token, lease.TTL)
	switch {
	case err != nil:
		return err
	case !held:
		return ErrLeaseLost
	}
	return nil
}

// ReleaseLease ends the lease and wakes a waiter. Releasing a lease twice,
// or one that ran out, does nothing.
func (l *Limiter) ReleaseLease(ctx context.Context, lease Lease) error {
	if lease.Token == "" {
		return fmt.Errorf("%w: lease without a token", ErrInvalid)
	}
	err := l.store.Release(ctx, l.name, lease.Key, lease.Token)
	l.wake(lease.Key)
	return err
}

// acquire decides one request: at once when the key has no queue, else
// through the queue.
func (l *Limiter) acquire(ctx context.Context, key, token string, ttl time.Duration) (Result, Grant) {
	if ctx.Err() != nil {
		return Result{Name: l.name, Reason: ReasonCanceled, Limit: l.Limit(), InFlight: -1}, Grant{}
	}
	if !l.queued(key) {
		res, g, final := l.try(ctx, key, token, ttl)
		if final || l.maxWaiting == 0 {
			return res, g
		}
	}
	return l.wait(ctx, key, token, ttl)
}

// queued reports whether requests wait in key's queue.
func (l *Limiter) queued(key string) bool {
	if l.waiting.Load() == 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queues[key]
	return q != nil && len(q.w) > 0
}

// try asks the store once; token "" asks a Local for a counted slot (see
// Acquire). final reports an answer no waiting can change.
func (l *Limiter) try(ctx context.Context, key, token string, ttl time.Duration) (res Result, g Grant, final bool) {
	limit := l.Limit()
	var err error
	if token == "" {
		g, err = l.local.acquire(l.name, key, "", true, limit, 0)
	} else {
		g, err = l.store.Acquire(ctx, l.name, key, token, limit, ttl)
	}
	res = Result{Name: l.name, Limit: limit, InFlight: g.InFlight, Source: g.Source, RetryAfter: g.RetryAfter}
	switch {
	case err != nil:
		if ctx.Err() != nil {
			res.Reason, res.InFlight = ReasonCanceled, -1
			return res, g, true
		}
		res.Reason, res.Error, res.InFlight = ReasonError, err, -1
		return res, g, true
	case g.Acquired:
		res.Allowed = true
		return res, g, true
	case g.Source == floodgate.SourceFailClosed:
		res.Reason = ReasonFailClosed
		return res, g, true
	}
	res.Reason = ReasonFull
	return res, g, false
}

// A queue is the FIFO of waiters for one key. Only its head asks the
// store; the others wait their turn, so that a slot goes to the request
// that has waited longest. A counted slot of a Local (see Acquire) is not
// freed while a counted waiter is first in the queue: its release hands
// it to that waiter (handOff), as a channel hands a value to a blocked
// receiver, so that a request served from the queue wakes one goroutine,
// not two.
type queue struct {
	w    []*waiter
	key  string      // under mu
	poll *time.Timer // wakes the head every PollInterval; stopped once the queue is empty
}

// newQueue makes the queue of key, under mu.
func (l *Limiter) newQueue(key string) *queue {
	var q *queue
	if n := len(l.spare); n > 0 {
		q = l.spare[n-1]
		l.spare = l.spare[:n-1]
		q.poll.Reset(l.poll)
	} else {
		q = &queue{}
		q.poll = time.AfterFunc(l.poll, func() { l.pollQueue(q) })
	}
	q.key = key
	l.queues[key] = q
	return q
}

// pollQueue wakes the head of q, which asks the store again, and keeps
// doing so every PollInterval while q has waiters: polling finds slots freed
// elsewhere (another Limiter or instance, an expired lease, a limit the
// Controller raised). It is one timer per queue, not per waiter, so that a
// request through a busy queue sets no timer for it.
func (l *Limiter) pollQueue(q *queue) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(q.w) == 0 || l.queues[q.key] != q {
		return // the queue emptied: its timer stopped, or is reset on reuse
	}
	signal(q.w[0].ch)
	q.poll.Reset(l.poll)
}

type waiter struct {
	ch      chan struct{} // a wake-up; buffered, so a wake is never lost
	head    atomic.Bool
	counted bool // it waits for a counted slot of a Local; set before it joins a queue

	// granted is set, under the Limiter's mu, by a release that handed
	// the waiter its slot and took it out of the queue; inFlight is the
	// number of holders then.
	granted  atomic.Bool
	inFlight int
	local    *holders // the holders of the slot handed over

	deadline *time.Timer // stopped while the waiter is not in a queue
}

// waiters keeps waiters with their channel and timers for reuse: a busy
// queue takes and leaves one per request.
var waiters = sync.Pool{New: func() any {
	w := &waiter{ch: make(chan struct{}, 1), deadline: time.NewTimer(time.Hour)}
	w.deadline.Stop()
	return w
}}

func getWaiter() *waiter { return waiters.Get().(*waiter) }

// putWaiter returns w, out of every queue, to the pool. Since Go 1.23 a
// stopped timer delivers no stale tick, so only a wake-up left in ch needs
// draining.
func putWaiter(w *waiter) {
	w.deadline.Stop()
	select {
	case <-w.ch:
	default:
	}
	w.head.Store(false)
	w.granted.Store(false)
	w.local = nil
	waiters.Put(w)
}

func (l *Limiter) wait(ctx context.Context, key, token string, ttl time.Duration) (Result, Grant) {
	start := time.Now()
	l.mu.Lock()
	q := l.queues[key]
	if q == nil {
		q = l.newQueue(key)
	}
	if len(q.w) >= l.maxWaiting {
		l.mu.Unlock()
		return Result{Name: l.name, Reason: ReasonQueueFull, Limit: l.Limit(), InFlight: -1}, Grant{}
	}
	w := getWaiter()
	w.head.Store(len(q.w) == 0)
	w.counted = token == ""
	q.w = append(q.w, w)
	l.waiting.Add(1)
	l.mu.Unlock()
	defer putWaiter(w) // once out of the queue: every return below took it out

	w.deadline.Reset(l.maxWait)
	for {
		if w.head.Load() || w.granted.Load() {
			res, g, final := l.tryHead(ctx, key, token, ttl, w)
			if final {
				res.Waited = time.Since(start)
				return res, g
			}
		}
		// w.ch brings a release's wake-up or hand-off, or the queue's poll.
		var reason Reason
		select {
		case <-w.ch:
			continue
		case <-w.deadline.C:
			reason = ReasonTimeout
		case <-ctx.Done():
			reason = ReasonCanceled
		}
		l.mu.Lock()
		granted := l.leave(key, w, true)
		l.mu.Unlock()
		if granted {
			// A release handed w its slot before it could leave: it is
			// served (as a head that won its try against the deadline is).
			return l.granted(w, start)
		}
		return Result{Name: l.name, Reason: reason, Limit: l.Limit(), InFlight: -1, Waited: time.Since(start)}, Grant{}
	}
}

// tryHead asks the store for w, the head of key's queue, or takes the
// slot a release handed it. A final answer takes w out of the queue. A
// counted waiter asks under mu, so that a release never hands it a slot
// while it takes one of its own.
func (l *Limiter) tryHead(ctx context.Context, key, token string, ttl time.Duration, w *waiter) (res Result, g Grant, final bool) {
	if w.granted.Load() {
		// Set once, under mu, by the release that took w out of the queue.
		res, g = l.granted(w, time.Time{})
		return res, g, true
	}
	if !w.counted {
		res, g, final = l.try(ctx, key, token, ttl)
		if final {
			l.mu.Lock()
			l.leave(key, w, res.InFlight < 0 || res.InFlight < res.Limit)
			l.mu.Unlock()
		}
		return res, g, final
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.granted.Load() {
		res, g = l.granted(w, time.Time{})
		return res, g, true
	}
	res, g, final = l.try(ctx, key, token, ttl)
	if final {
		l.leave(key, w, res.InFlight < 0 || res.InFlight < res.Limit)
	}
	return res, g, final
}

// granted is the answer to w, handed a slot by a release, waiting since
// start (zero: the caller sets Waited).
func (l *Limiter) granted(w *waiter, start time.Time) (Result, Grant) {
	res := Result{Allowed: true, Name: l.name, Limit: l.Limit(), InFlight: w.inFlight, Source: LocalSource}
	if !start.IsZero() {
		res.Waited = time.Since(start)
	}
	return res, Grant{Acquired: true, InFlight: w.inFlight, Source: LocalSource, local: w.local}
}

// leave takes w out of key's queue, under mu, unless a release handed it
// a slot (and took it out) already, which it reports. A head that leaves
// passes the turn on; the next head asks the store at once when more
// says a slot may be free (the one that let w in may not have been the
// only one), and otherwise at the queue's next poll or release.
func (l *Limiter) leave(key string, w *waiter, more bool) (granted bool) {
	if w.granted.Load() {
		return true
	}
	q := l.queues[key]
	for i, x := range q.w {
		if x == w {
			l.remove(key, q, i, more)
			break
		}
	}
	return false
}

// remove takes the i-th waiter out of q, key's queue, under mu (see leave
// for more).
func (l *Limiter) remove(key string, q *queue, i int, more bool) {
	q.w = append(q.w[:i], q.w[i+1:]...)
	l.waiting.Add(-1)
	// No one signals a waiter once it is out of the queue: signals are
	// sent under mu, to waiters in a queue.
	if len(q.w) == 0 {
		delete(l.queues, key)
		q.poll.Stop()
		if len(l.spare) < maxSpare {
			l.spare = append(l.spare, q)
		}
		return
	}
	if h := q.w[0]; i == 0 && !h.head.Load() {
		h.head.Store(true)
		if more {
			signal(h.ch)
		}
	}
}

// handOff gives the caller's counted slot of key to the first waiter of
// key's queue when it waits for a counted slot and the limit has room for
// it still (a Controller may have lowered it), and reports whether it did.
// The slot then stays held in the store, by the waiter.
func (l *Limiter) handOff(key string, h *holders) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queues[key]
	if q == nil || len(q.w) == 0 || !q.w[0].counted {
		return false
	}
	n := l.local.holding(h)
	if n > l.Limit() {
		return false
	}
	w := q.w[0]
	w.inFlight, w.local = n, h
	w.granted.Store(true)
	l.remove(key, q, 0, n < l.Limit())
	signal(w.ch)
	return true
}

// wake tells the head waiter of key that a slot came free.
func (l *Limiter) wake(key string) {
	if l.waiting.Load() == 0 {
		return
	}
	l.mu.Lock()
	if q := l.queues[key]; q != nil && len(q.w) > 0 {
		signal(q.w[0].ch)
	}
	l.mu.Unlock()
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (l *Limiter) nextToken() string {
	var b [32]byte
	return string(strconv.AppendUint(append(b[:0], l.prefix...), l.seq.Add(1), 36))
}

func randomToken() string {
	var b [16]byte
	rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// A Permit holds one slot until its Release. Its methods are safe for
// concurrent use, and a nil Permit's do nothing.
//
// A Permit dropped without Release keeps its slot: in a Local store until
// the process ends. A Permit over a leasing store (redislease) is the
// exception: its heartbeat keeps no reference to it, so once it is garbage
// collected the heartbeat stops, the slot is released, and a forgotten
// Release costs a slot for a while rather than for the life of the process.
// Release it all the same: the collector runs when it likes.
type Permit struct {
	l        *Limiter
	key      string
	h        *hold       // the slot held by token; nil for a counted slot of a Local
	local    *holders    // a counted slot's holders in the Local
	released atomic.Bool // for a counted slot (a hold has its own)
	start    time.Time   // of the grant, when the Limiter has a Controller
	inFlight int
}

// hold is the part of a Permit held by token that its heartbeat uses:
// everything but the Permit itself, so that a Permit without a Release can
// be collected.
type hold struct {
	l     *Limiter
	key   string
	token string

	released atomic.Bool
	lost     atomic.Bool

	mu    sync.Mutex // guards timer against release
	timer *time.Timer
}

// Release frees the slot and reports the work's latency as a Success to
// the Controller. Only the first Release or ReleaseWith of a Permit counts;
// later ones do nothing. Call it with defer, so that a panic frees the slot
// too.
func (p *Permit) Release() { p.ReleaseWith(Success) }

// ReleaseWith is Release with the work's outcome: Dropped when the
// resource was overloaded (a timeout, a 503), Ignore when the work says
// nothing about it (the client went away).
func (p *Permit) ReleaseWith(o Outcome) {
	if p == nil {
		return
	}
	if p.h != nil {
		if p.h.release() {
			p.l.observe(p.start, p.inFlight, o)
		}
		return
	}
	if p.released.CompareAndSwap(false, true) {
		p.l.releaseCounted(p.key, p.local, p.start, p.inFlight, o)
	}
}

// Lost reports whether the Permit's lease ran out before it was renewed,
// in which case the store may have given its slot to another holder. It
// stays false for stores whose holds do not expire.
func (p *Permit) Lost() bool { return p != nil && p.h != nil && p.h.lost.Load() }

// release frees the slot the first time it is called and reports whether
// it did.
func (h *hold) release() bool {
	if !h.released.CompareAndSwap(false, true) {
		return false
	}
	h.mu.Lock()
	if h.timer != nil {
		h.timer.Stop()
	}
	h.mu.Unlock()
	// The caller's context may have ended with the work; the slot must be
	// freed all the same, so release uses a context of its own. A store
	// that cannot be reached bounds the call itself (its Guard), and its
	// lease frees the slot later.
	h.l.store.Release(context.Background(), h.l.name, h.key, h.token)
	h.l.wake(h.key)
	return true
}

// heartbeat renews the lease every third of it while the Permit is held,
// so that a slow holder keeps its slot; a renewal that fails is tried again
// at the next beat, which leaves two chances before the lease runs out.
func (h *hold) heartbeat(lease time.Duration) {
	every := max(lease/3, time.Millisecond)
	h.mu.Lock()
	defer h.mu.Unlock()
	var beat func()
	beat = func() {
		if h.released.Load() {
			return
		}
		held, err := h.l.store.Renew(context.Background(), h.l.name, h.key, h.token, lease)
		if err == nil && !held {
			h.lost.Store(true)
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.released.Load() {
			h.timer = time.AfterFunc(every, beat)
		}
	}
	h.timer = time.AfterFunc(every, beat)
}
