package pgproxy

import (
	"sync"
	"sync/atomic"
	"time"
)

// Queries that wait under MaxWait queue in arrival order, one queue per
// limit: a scope and its key (GlobalKey, a user, an address). The rules:
//
//   - A query that arrives while one of its limits has a queue does not
//     ask the limiter: it joins the first such queue (in scope order) at
//     its tail. It never takes a unit that an earlier query waits for.
//   - A query denied under a scope with a MaxWait joins that scope's queue
//     for its key, placed by arrival.
//   - Only a query at the head of its queue asks the limiter, and only when
//     no earlier query waits in the queue of another of its limits; if one
//     does, it moves behind that one. So of the queries sharing a limit,
//     the earliest is served first, and each queue has one query asking,
//     however many wait.
//   - The head that is denied again sleeps the RetryAfter the limiter gave
//     and asks again, and is charged when that succeeds: when its turn
//     comes. A head denied by another of its limits moves to that limit's
//     queue, keeping its place by arrival.
//   - A query leaves at once when it passes, when its client cancels it or
//     disconnects, and when its wait would pass MaxWait (the head: as soon
//     as the limiter's RetryAfter says so; any other: when MaxWait has
//     passed). The next in line is woken as it leaves.
//
// The queues hold what one proxy knows. Proxies sharing a Redis store each
// keep their own: the limit is exact across them (every pass is one atomic
// charge in the store), the order is per proxy, and the heads of all the
// proxies ask the store about once per RetryAfter each.
//
// The queues are built on AllowN and its RetryAfter. A limiter that can
// reserve (book a unit at arrival for the instant it may pass) would order
// waiters across proxies as well, and would not lose the time between a
// unit's instant and the head's wake-up; the queues would then only keep
// each client's place and its cancellation.

// queueKey names one limit's queue.
type queueKey struct {
	scope scopeID
	key   string
}

// waitQueues are a proxy's queues.
type waitQueues struct {
	mu     sync.Mutex
	seq    uint64
	lists  map[queueKey]*waitList
	queued atomic.Int64 // waiters in all the lists: 0 lets queries skip the lock
}

// waitList is one limit's queue, in arrival order.
type waitList struct {
	key        queueKey
	head, tail *waiter
}

// A waiter is a query in a queue.
type waiter struct {
	seq     uint64 // arrival order
	arrived time.Time
	keys    [numScopes]string // the query's keys; "" for a scope without a limiter
	list    *waitList         // the queue it is in; nil when in none
	prev    *waiter
	next    *waiter
	wake    chan struct{} // signalled when it may have become eligible
}

func newWaiter() *waiter { return &waiter{wake: make(chan struct{}, 1)} }

func (q *waitQueues) init() { q.lists = make(map[queueKey]*waitList) }

// contended reports whether one of w's limits whose scope may wait has a
// queue.
func (q *waitQueues) contended(w *waiter, mayWait func(scopeID) bool) bool {
	if q.queued.Load() == 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for s, k := range w.keys {
		if k != "" && mayWait(scopeID(s)) && q.lists[queueKey{scopeID(s), k}] != nil {
			return true
		}
	}
	return false
}

// joinFirst puts w, just arrived, at the tail of the first queue among
// keys whose scope may wait (mayWait) and that holds queries already. It
// reports whether there was one; if not, w is in no queue and the query
// may ask the limiter.
func (q *waitQueues) joinFirst(w *waiter, now time.Time, mayWait func(scopeID) bool) bool {
	if q.queued.Load() == 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for s, k := range w.keys {
		if k == "" || !mayWait(scopeID(s)) {
			continue
		}
		if l := q.lists[queueKey{scopeID(s), k}]; l != nil {
			q.seq++
			w.seq, w.arrived = q.seq, now
			q.insert(l, w)
			return true
		}
	}
	return false
}

// join puts w in the queue of (s, its key for s), by arrival. A waiter new
// to the queues gets its arrival now.
func (q *waitQueues) join(w *waiter, s scopeID, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.seq == 0 {
		q.seq++
		w.seq, w.arrived = q.seq, now
	}
	k := queueKey{s, w.keys[s]}
	if w.list != nil && w.list.key == k {
		return
	}
	q.unlink(w)
	l := q.lists[k]
	if l == nil {
		l = &waitList{key: k}
		q.lists[k] = l
	}
	q.insert(l, w)
}

// turn reports whether w may ask the limiter: it heads its queue and no
// earlier query waits in the queue of another of its limits. If one does,
// w moves behind it, and the query w left at the head of its queue is
// woken.
func (q *waitQueues) turn(w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.list == nil || w.list.head != w {
		return false
	}
	for s, k := range w.keys {
		if k == "" || s == int(w.list.key.scope) {
			continue
		}
		if l := q.lists[queueKey{scopeID(s), k}]; l != nil && l.head.seq < w.seq {
			q.unlink(w)
			q.insert(l, w)
			return false
		}
	}
	return true
}

// leave takes w out of its queue and wakes the query that then heads it.
func (q *waitQueues) leave(w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.unlink(w)
}

// insert places w in l by arrival, from the tail (where arrivals go), and
// wakes it if it is the head.
func (q *waitQueues) insert(l *waitList, w *waiter) {
	after := l.tail
	for after != nil && after.seq > w.seq {
		after = after.prev
	}
	w.list, w.prev = l, after
	if after == nil {
		w.next, l.head = l.head, w
	} else {
		w.next, after.next = after.next, w
	}
	if w.next != nil {
		w.next.prev = w
	} else {
		l.tail = w
	}
	q.queued.Add(1)
	if l.head == w {
		signal(w.wake)
		if w.next != nil {
			// The former head, no longer at the front: it will find out
			// when it next asks whether it is its turn.
			signal(w.next.wake)
		}
	}
}

// unlink takes w out of its list, dropping the list when it empties, and
// wakes the new head.
func (q *waitQueues) unlink(w *waiter) {
	l := w.list
	if l == nil {
		return
	}
	wasHead := l.head == w
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.list, w.prev, w.next = nil, nil, nil
	q.queued.Add(-1)
	if l.head == nil {
		delete(q.lists, l.key)
	} else if wasHead {
		signal(l.head.wake)
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// A clock tells the time and makes timers; tests replace it.
type clock interface {
	Now() time.Time
	NewTimer(d time.Duration) timer
}

type timer interface {
	C() <-chan time.Time
	Stop() bool
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }
