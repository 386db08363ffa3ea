package pgproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/pgproxy/pgwire"
)

// A connection holds at most one slot of Limits.ConcurrentQueries: taken
// when a query starts while it holds none, given back when the server has
// answered everything sent (received == expected), the last ReadyForQuery
// reports no transaction block (status 'I'), and no query holding it is
// still on its way (slot.open: from takeSlot until expect counts its
// ReadyForQuery). The slot type orders the two relays' views of that.
//
// A transaction holds its slot from the statement that opens it to the
// ReadyForQuery that reports it ended, idle moments included, so a
// statement inside a transaction block never waits for a slot and is never
// refused one: a refusal there would fail the client's statement while the
// server's transaction went on, and the client's COMMIT would commit half
// of it. (This is how transaction pooling counts a server connection.)
//
// A slot comes back before the answer that ends its query is written to
// the client (serverToClient, replyDenied): a client that sends its next
// query on reading that answer, on any connection of the same user, finds
// the slot free.

// A slot is a connection's concurrent-query slot: the Permit it holds, if
// any, and when it may be given back. Its methods order the two relays'
// views of it; the conn decides when to take one (takeSlot) and tells it
// what the server owes.
type slot struct {
	mu      sync.Mutex
	permit  *concurrency.Permit // the slot held, or nil (mu)
	open    bool                // a query that holds the slot is not yet forwarded whole (mu)
	closed  bool                // the connection ended: a slot acquired now is given back at once (mu)
	holding atomic.Bool         // permit != nil, read without mu by the server-to-client relay
}

// reuse reports whether a slot is held, and if so opens it for the query
// at hand.
func (s *slot) reuse() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.permit != nil {
		s.open = true
	}
	return s.permit != nil
}

// hold makes p, a slot just taken, the connection's, unless the connection
// has ended meanwhile (then p is given back and hold reports false).
func (s *slot) hold(p *concurrency.Permit) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		p.Release()
		return false
	}
	s.permit, s.open = p, true
	s.holding.Store(true)
	return true
}

// expect counts a ReadyForQuery the server now owes in expected; the query
// that held the slot open is then on its way.
func (s *slot) expect(expected *atomic.Int64) {
	if !s.holding.Load() {
		expected.Add(1)
		return
	}
	s.mu.Lock()
	expected.Add(1)
	s.open = false
	s.mu.Unlock()
}

// done closes the slot of a query that was not forwarded after all.
func (s *slot) done() {
	s.mu.Lock()
	s.open = false
	s.mu.Unlock()
}

// releaseAt gives the slot back when received ReadyForQuery messages are
// all the server owes (expected) and status, the last one's, is idle.
func (s *slot) releaseAt(received int64, status byte, expected *atomic.Int64) {
	s.mu.Lock()
	if s.permit != nil && !s.open && status == 'I' && received == expected.Load() {
		s.permit.Release()
		s.permit = nil
		s.holding.Store(false)
	}
	s.mu.Unlock()
}

// drop gives the slot back when the connection ends; a slot acquired
// after it is given back at once (hold).
func (s *slot) drop() {
	s.mu.Lock()
	s.closed = true
	if s.permit != nil {
		s.permit.Release()
		s.permit = nil
		s.holding.Store(false)
	}
	s.mu.Unlock()
}

// takeSlot makes sure the connection holds a slot before a query is
// forwarded, waiting for one in the Limiter's queue. When it refuses, it
// has answered the client like admitQuery does. A non-nil error ends the
// connection. With inline set, it takes a free slot (TryAcquire) and
// returns errPark, having changed nothing, where it would wait or ask a
// store that is not in this process.
func (c *conn) takeSlot(extended, inline bool) (bool, error) {
	lim := c.p.limits.Load().ConcurrentQueries
	if lim == nil && !c.adm.slot.holding.Load() {
		return true, nil
	}
	if c.adm.slot.reuse() {
		return true, nil
	}
	if lim == nil || c.inTransaction() {
		// A transaction that began while no limit was set (a reload added
		// it) runs to its end without a slot rather than be cut in half.
		return true, nil
	}
	if inline {
		// A free slot of a Local store is taken where the query is read;
		// a wait, or a store elsewhere, is a goroutine's.
		p, ok := lim.TryAcquire(c.params.User)
		if !ok {
			return false, errPark
		}
		return c.holdSlot(p)
	}
	select { // a CancelRequest meant for an earlier query must not end this one
	case <-c.cancelWait:
	default:
	}
	if err := c.flush(); err != nil {
		return false, err
	}
	res, p, canceled, err := c.acquire(lim)
	if err != nil {
		return false, err
	}
	if res.Allowed {
		return c.holdSlot(p)
	}
	// The refusal must not overtake the answers to uncharged queries
	// pipelined before it.
	if err := c.awaitReady(); err != nil {
		return false, err
	}
	if c.inTransaction() {
		// Those queries opened a transaction (one that began without a
		// slot, as above): the query runs in it, never refused.
		return true, nil
	}
	if canceled {
		e := pgwire.ErrorResponse{Severity: "ERROR", Code: "57014", Message: "canceling statement due to user request",
			Detail: "The query was waiting for a concurrent-query slot and had not reached the server."}
		return false, c.replyDenied(e, extended)
	}
	c.p.obs.ConcurrentQueryRefused()
	c.p.rejectLog[scopeUser].log(c.p, slog.LevelInfo, "pgproxy: too many concurrent queries",
		"user", c.params.User, "client", c.ipLog, "reason", res.Reason.String(), "in_flight", res.InFlight)
	return false, c.replyDenied(slotRejection(c.params.User, res), extended)
}

// holdSlot makes p, a slot just taken, the connection's, unless the
// connection has ended meanwhile.
func (c *conn) holdSlot(p *concurrency.Permit) (bool, error) {
	if !c.adm.slot.hold(p) {
		return false, c.ctx.Err()
	}
	return true, nil
}

// errCanceled marks a slot wait ended by the client's CancelRequest.
var errCanceled = errors.New("canceled by the client")

// acquire waits for a slot of the connection's user, ending the wait when
// the client sends a CancelRequest (canceled) or disconnects (an error).
// The client is watched only once the wait has lasted slotWatchDelay: a
// slot that is free costs no goroutine and no deadline calls.
func (c *conn) acquire(lim *concurrency.Limiter) (concurrency.Result, *concurrency.Permit, bool, error) {
	ctx, cancel := context.WithCancelCause(c.ctx)
	defer cancel(nil)
	var (
		mu      sync.Mutex
		watch   *watcher
		stopped bool
	)
	done := make(chan struct{})
	t := time.AfterFunc(slotWatchDelay, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		watch = c.watchClient()
		go func() {
			select {
			case <-watch.gone:
				cancel(errClientGone)
			case <-c.cancelWait:
				cancel(errCanceled)
			case <-done:
			}
		}()
	})
	res, p := lim.Acquire(ctx, c.params.User)
	t.Stop()
	mu.Lock()
	stopped = true
	w := watch
	mu.Unlock()
	close(done)
	if w != nil {
		w.stop()
	}
	cause := context.Cause(ctx)
	switch {
	case res.Allowed:
		return res, p, false, nil
	case c.ctx.Err() != nil:
		return res, nil, false, c.ctx.Err()
	case errors.Is(cause, errClientGone):
		return res, nil, false, errClientGone
	case errors.Is(cause, errCanceled):
		return res, nil, true, nil
	}
	return res, nil, false, nil
}

// slotWatchDelay is how long a slot wait lasts before the client is
// watched for a disconnect or a CancelRequest.
const slotWatchDelay = time.Millisecond

// slotRejection is the ErrorResponse of a query refused a slot.
func slotRejection(user string, res concurrency.Result) pgwire.ErrorResponse {
	e := pgwire.ErrorResponse{Severity: "ERROR", Code: "53300", Message: "too many concurrent queries"}
	switch res.Reason {
	case concurrency.ReasonFull, concurrency.ReasonQueueFull, concurrency.ReasonTimeout:
		e.Detail = fmt.Sprintf("The user %q has %d queries in flight, the most the proxy's concurrent-query limit allows (%s).", user, res.Limit, res.Reason)
		e.Hint = "Run fewer queries at once (a smaller connection pool), or ask for a higher limit. The query was not run; the session is still usable."
	default:
		e.Detail = fmt.Sprintf("The concurrent-query limit of user %q could not be checked (%s), and its failure policy refuses queries.", user, res.Reason)
		e.Hint = "The concurrency limiter's store is unavailable; retry later. The query was not run; the session is still usable."
	}
	return e
}

// expect counts a ReadyForQuery the server now owes; the query that held
// the slot open is then on its way.
func (c *conn) expect() { c.adm.slot.expect(&c.expected) }

// slotDone closes the slot of a query that was not forwarded after all,
// giving it back when nothing else is owed.
func (c *conn) slotDone() {
	if !c.adm.slot.holding.Load() {
		return
	}
	c.adm.slot.done()
	c.releaseIfDone()
}

// inTransaction reports whether the server owes nothing and its last
// ReadyForQuery put the session in a transaction block ('T', or 'E' for a
// failed one): the next query runs inside it.
func (c *conn) inTransaction() bool {
	return c.received.Load() == c.expected.Load() && c.status.Load() != 'I'
}

// releaseIfDone gives the slot back when the server has answered all and
// the session is not in a transaction block.
func (c *conn) releaseIfDone() {
	c.releaseAt(c.received.Load(), byte(c.status.Load()))
}

// releaseAt gives the slot back when received ReadyForQuery messages are
// all the server owes and status, the last one's, is idle. The
// server-to-client relay calls it with the ReadyForQuery messages it is
// about to write counted, so that the slot is free before the client can
// read them.
func (c *conn) releaseAt(received int64, status byte) {
	c.adm.slot.releaseAt(received, status, &c.expected)
}
