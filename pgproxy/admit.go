package pgproxy

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/pgproxy/pgwire"
)

// admitQuery decides a query (a simple Query or FunctionCall, or an
// extended cycle at its first message) under the limits, waiting in line
// under MaxWait when it may (see queue.go). When it denies, it has answered
// the client: an ErrorResponse, then for a simple query a ReadyForQuery
// (for a cycle, the caller sends that at the cycle's Sync). A non-nil error
// ends the connection. With inline set, it returns errPark, having charged
// and changed nothing, where it would block: a limiter not Limits.Local,
// answers the server owes, a line to join.
func (c *conn) admitQuery(extended, inline bool) (bool, error) {
	lim := c.loadLimits()
	if lim == nil {
		return true, nil
	}
	select { // a CancelRequest meant for an earlier query must not end this one
	case <-c.cancelWait:
	default:
	}
	m := c.p.obs
	q := &c.p.queues
	w := c.waiter
	for s := range numScopes {
		w.keys[s] = ""
		if c.adm.lims[s] != nil {
			w.keys[s] = c.adm.key(s)
		}
	}
	w.seq = 0
	select { // a wake-up left from an earlier wait
	case <-w.wake:
	default:
	}
	mayWait := func(s scopeID) bool { return lim.scope(s).MaxWait > 0 }
	for {
		owed := c.received.Load() != c.expected.Load()
		if !owed && c.status.Load() != 'I' {
			m.QueryUncharged(UnchargedTransaction)
			return true, nil
		}
		if inline && (!lim.Local || q.queued.Load() != 0) {
			return false, errPark
		}
		if owed && q.contended(w, mayWait) {
			// The query may run inside a transaction that a pipelined
			// query opens, where it is not charged: learn the status
			// before taking a place in line.
			if err := c.awaitReady(); err != nil {
				return false, err
			}
			if lim = c.loadLimits(); lim == nil {
				return true, nil
			}
			continue
		}
		now := c.p.clock.Now()
		if !owed && q.joinFirst(w, now, mayWait) {
			return c.waitTurn(extended, time.Time{})
		}
		res, scope, err := c.adm.allow(c.ctx)
		if err == nil && scope == scopeNone {
			c.adm.countAllowed()
			return true, nil
		}
		if c.ctx.Err() != nil {
			return false, c.ctx.Err()
		}
		if owed {
			if inline {
				return false, errPark // denied: nothing was charged
			}
			// As above: the status decides whether it is charged at all.
			if err := c.awaitReady(); err != nil {
				return false, err
			}
			if lim = c.loadLimits(); lim == nil {
				return true, nil
			}
			continue
		}
		if err == nil && waitable(res) {
			if mw := lim.scope(scope).MaxWait; mw > 0 && res.RetryAfter <= mw {
				if inline {
					return false, errPark
				}
				q.join(w, scope, now)
				return c.waitTurn(extended, now.Add(res.RetryAfter))
			}
			if lim.scope(scope).MaxWait > 0 { // it might have waited, but not long enough
				m.WaitStarted()
				m.WaitEnded(scope, WaitRejected, 0)
			}
		}
		return false, c.deny(scope, res, err, extended)
	}
}

// waitable reports whether a denial may be waited out: the limiter says
// when the query would pass.
func waitable(res floodgate.Result) bool {
	return res.Source != floodgate.SourceFailClosed && res.RetryAfter != floodgate.RetryNever
}

// waitTurn waits in line for the query's turn, then asks the limiter until
// the query passes or cannot pass within MaxWait. due is when the query
// would pass by the limiter's last answer, zero when it has not asked yet.
// A query refused is answered only once its wait is over and counted: the
// client that has its answer finds the metrics saying so.
func (c *conn) waitTurn(extended bool, due time.Time) (bool, error) {
	ok, answer, err := c.waitInLine(extended, due)
	if answer != nil {
		return false, answer()
	}
	return ok, err
}

// waitInLine is waitTurn's wait. It returns, for a query refused, the
// answer to write once the wait is over.
func (c *conn) waitInLine(extended bool, due time.Time) (bool, func() error, error) {
	m := c.p.obs
	q := &c.p.queues
	w := c.waiter
	waitScope := w.list.key.scope
	defer q.leave(w)
	m.WaitStarted()
	outcome := WaitPassed
	defer func() { m.WaitEnded(waitScope, outcome, c.p.clock.Now().Sub(w.arrived)) }()
	if err := c.flush(); err != nil {
		return false, nil, err
	}
	watch := c.watchClient()
	defer watch.stop()
	for {
		lim := c.loadLimits()
		if lim == nil {
			return true, nil, nil
		}
		scope := w.list.key.scope
		deadline := w.arrived.Add(lim.scope(scope).MaxWait)
		now := c.p.clock.Now()
		turn := q.turn(w)
		var until time.Time
		switch {
		case turn && (due.IsZero() || !now.Before(due)):
			r, denied, err := c.adm.allow(c.ctx)
			if err == nil && denied == scopeNone {
				c.adm.countAllowed()
				return true, nil, nil
			}
			if c.ctx.Err() != nil {
				return false, nil, c.ctx.Err()
			}
			if err != nil || !waitable(r) {
				outcome = WaitRejected
				return false, func() error { return c.deny(denied, r, err, extended) }, nil
			}
			due = now.Add(r.RetryAfter)
			if denied != scope {
				if lim.scope(denied).MaxWait == 0 {
					// Refused by a scope that does not wait.
					outcome = WaitRejected
					return false, func() error { return c.deny(denied, r, nil, extended) }, nil
				}
				q.join(w, denied, now)
				scope = denied
				deadline = w.arrived.Add(lim.scope(scope).MaxWait)
			}
			if due.After(deadline) {
				// The limiter says it cannot pass in time: no use waiting.
				outcome = WaitRejected
				return false, func() error { return c.deny(scope, r, nil, extended) }, nil
			}
			continue
		case turn:
			until = due // it passes then, MaxWait or not: it was due in time
		default:
			if !now.Before(deadline) {
				outcome = WaitRejected
				m.QueryChecked(scope, Denied)
				e := c.waitedOut(scope, lim.scope(scope).MaxWait)
				return false, func() error { return c.replyDenied(e, extended) }, nil
			}
			until = deadline
			due = time.Time{} // it asks afresh when its turn comes
		}
		t := c.p.clock.NewTimer(until.Sub(now))
		select {
		case <-t.C():
		case <-w.wake:
		case <-c.cancelWait:
			t.Stop()
			outcome = WaitCanceled
			e := pgwire.ErrorResponse{Severity: "ERROR", Code: "57014", Message: "canceling statement due to user request",
				Detail: "The query was waiting for the rate limit and had not reached the server."}
			return false, func() error { return c.replyDenied(e, extended) }, nil
		case <-watch.gone:
			t.Stop()
			outcome = WaitCanceled
			return false, nil, errClientGone
		case <-c.ctx.Done():
			t.Stop()
			outcome = WaitCanceled
			return false, nil, c.ctx.Err()
		}
		t.Stop()
	}
}

// deny counts and logs a query refused by scope (err: the check failed)
// and answers it.
func (c *conn) deny(scope scopeID, res floodgate.Result, err error, extended bool) error {
	m := c.p.obs
	p := c.p
	if err != nil {
		m.QueryChecked(scope, Failed)
		p.rejectLog[scope].log(p, slog.LevelError, "pgproxy: rate limit check failed; query rejected",
			"scope", scope.String(), "user", c.params.User, "client", c.ipLog, "err", err)
	} else {
		m.QueryChecked(scope, Denied)
		p.rejectLog[scope].log(p, slog.LevelInfo, "pgproxy: query rate limit exceeded",
			"scope", scope.String(), "user", c.params.User, "client", c.ipLog,
			"source", string(res.Source), "retry_after", res.RetryAfter)
	}
	return c.replyDenied(c.adm.rejection(scope, res, err != nil), extended)
}

// waitedOut is the ErrorResponse of a query whose turn did not come
// within MaxWait.
func (c *conn) waitedOut(scope scopeID, maxWait time.Duration) pgwire.ErrorResponse {
	e := c.adm.rejection(scope, floodgate.Result{}, false)
	e.Detail = fmt.Sprintf("The %s query rate limit%s is reached, and the query waited its max_wait (%s) in line without its turn coming.", scope.label(), c.adm.who(scope), maxWait)
	return e
}
