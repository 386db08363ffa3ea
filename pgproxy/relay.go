package pgproxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"time"

	"github.com/floodgate-go/floodgate/pgproxy/pgwire"
)

// The two directions of a connection run in their own goroutines:
//
//   - serverToClient reads the server in large chunks and writes each chunk
//     to the client in one write, looking only at message headers. It
//     rewrites BackendKeyData and notes each ReadyForQuery: its transaction
//     status, and how many the server has sent.
//   - clientToServer reads the client message by message, charges queries,
//     and forwards through a buffer that is flushed before every read that
//     may block.
//
// The server owes one ReadyForQuery per Query, FunctionCall and Sync
// forwarded (and one for the startup): expected counts those, received
// those that arrived. When they are equal, the server has answered all, and
// status is the transaction status the next query runs in. A query is
// charged unless that status is known to be a transaction block ('T' or
// 'E'); a query denied while the server still owes answers waits for them,
// so a denial is only ever answered when the server owes nothing and its
// status is known to be idle: the reply then never overtakes a pipelined
// answer, and no transaction is cut in half.

// serverToClient relays the server's bytes to the client.
func (c *conn) serverToClient() error {
	buf := make([]byte, serverBufSize)
	have, skip := 0, 0 // bytes in buf; bytes of a message in transit still to come
	for {
		n, rerr := c.up.Read(buf[have:])
		if n == 0 && rerr != nil {
			return rerr
		}
		have += n
		pos, readys, asks, st, perr := scanServer(c, buf[:have], &skip)
		if pos > 0 {
			if err := c.toClient(buf[:pos], skip > 0, readys, asks, st); err != nil {
				return err
			}
			have = copy(buf, buf[pos:have])
		}
		if perr != nil {
			return perr
		}
		if rerr != nil {
			return rerr
		}
	}
}

// scanServer walks the server's bytes in buf, the first *skip of which
// end a message already passed on, up to the last whole message it may
// pass on: pos bytes, then *skip bytes of the message in transit still to
// come. It rewrites BackendKeyData in place, and counts the ReadyForQuery
// messages (readys; st is the last one's status) and the authentication
// requests that want an answer (asks). Both relays frame the server's
// stream with it.
func scanServer(c *conn, buf []byte, skip *int) (pos int, readys, asks int64, st byte, perr error) {
	have := len(buf)
	if *skip > 0 {
		pos = min(*skip, have)
		*skip -= pos
	}
	for *skip == 0 && have-pos >= pgwire.HeaderSize {
		typ, size, err := pgwire.ServerHeader(buf[pos:])
		if err != nil {
			return pos, readys, asks, st, err
		}
		switch typ {
		case 'Z', 'K':
			// Small messages the proxy reads whole: wait for the rest
			// of one split across reads.
			if size > pgwire.HeaderSize+4+pgwire.MaxSecretLen {
				return pos, readys, asks, st, pgwire.Violation("the server sent message type %q of %d bytes", typ, size)
			}
			if have-pos < size {
				return pos, readys, asks, st, nil
			}
			if typ == 'K' {
				c.backendKey(buf[pos+pgwire.HeaderSize : pos+size])
			} else if size == 6 {
				readys++
				st = buf[pos+5]
			}
		case 'R':
			// Only its code is read: whether the server now waits for
			// the client's answer.
			if size < pgwire.HeaderSize+4 {
				return pos, readys, asks, st, pgwire.Violation("the server sent an Authentication message of %d bytes", size)
			}
			if have-pos < pgwire.HeaderSize+4 {
				return pos, readys, asks, st, nil
			}
			if pgwire.AuthExpectsResponse(binary.BigEndian.Uint32(buf[pos+pgwire.HeaderSize:])) {
				asks++
			}
		}
		if have-pos < size {
			*skip = size - (have - pos)
			return have, readys, asks, st, nil
		}
		pos += size
	}
	return pos, readys, asks, st, nil
}

// toClient passes b, the server's bytes that scanServer framed (mid: b
// ends inside a message), to the client, then the proxy's replies held
// for a message boundary, and publishes the ReadyForQuery messages and
// authentication requests b holds.
func (c *conn) toClient(b []byte, mid bool, readys, asks int64, st byte) error {
	if readys > 0 && c.adm.slot.holding.Load() {
		// The slot comes back before the ReadyForQuery that ends
		// its query reaches the client (slot.go): counting the
		// ones about to be written, the server may owe nothing.
		c.releaseAt(c.received.Load()+readys, st)
	}
	c.wmu.Lock()
	if c.clientDone {
		c.wmu.Unlock()
		return errFatalSent
	}
	werr := c.writeClient(b)
	c.midMsg = mid
	if readys > 0 || asks > 0 {
		// Published only once the message is on its way, so that
		// a reply clientToServer writes next comes after it.
		c.status.Store(uint32(st))
		c.authAsked.Add(asks)
		c.received.Add(readys)
	}
	if werr == nil && !c.midMsg && len(c.pending) > 0 {
		werr = c.writeClient(c.pending)
		c.pending = c.pending[:0]
		if c.fatalQueued {
			c.clientDone = true
			close(c.fatalWritten)
			c.wmu.Unlock()
			return errFatalSent
		}
	}
	c.wmu.Unlock()
	c.p.obs.Relayed(ServerToClient, len(b))
	if readys > 0 && c.adm.slot.holding.Load() {
		// Again, now that received counts them: a query refused
		// meanwhile (slotDone) may have seen the old count.
		c.releaseIfDone()
	}
	if readys > 0 || asks > 0 {
		select {
		case c.readyCh <- struct{}{}:
		default:
		}
	}
	return werr
}

// kickLoop has the event loop write what a decision taken off the loop
// queued for the client.
func (c *conn) kickLoop() {
	if lc := c.lc; lc != nil && lc.parked {
		lc.post(loopWrite)
	}
}

// writeClient writes b to the client, under wmu: on the event loop, it
// goes to the connection's output, which the loop writes.
func (c *conn) writeClient(b []byte) error {
	if lc := c.lc; lc != nil {
		lc.queueClient(b)
		return nil
	}
	_, err := c.client.Write(b)
	return err
}

// errFatalSent ends the relay to the client once the proxy has sent it a
// FATAL.
var errFatalSent = errors.New("FATAL sent to the client")

// writeReply writes a reply of the proxy's own to the client, after what
// the server has sent so far.
func (c *conn) writeReply(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.clientDone {
		return errFatalSent
	}
	if c.midMsg {
		c.pending = append(c.pending, b...)
		return nil
	}
	err := c.writeClient(b)
	c.kickLoop()
	return err
}

// fatal sends the client a FATAL ErrorResponse at the next message
// boundary of the stream to it, after which nothing more is written to it.
// When a server message is in transit, the FATAL follows it, if the rest
// of that message comes within fatalWait.
func (c *conn) fatal(e pgwire.ErrorResponse) {
	b := e.Append(nil)
	c.wmu.Lock()
	if c.clientDone {
		c.wmu.Unlock()
		return
	}
	if !c.midMsg {
		c.clientDone = true
		if c.lc == nil {
			_ = c.client.SetWriteDeadline(time.Now().Add(fatalWait))
		}
		_ = c.writeClient(append(c.pending, b...))
		c.wmu.Unlock()
		return
	}
	c.pending = append(c.pending, b...)
	c.fatalQueued = true
	c.wmu.Unlock()
	if c.lc != nil {
		return // the loop closes the connection once it is written, or at fatalWait
	}
	t := time.NewTimer(fatalWait)
	defer t.Stop()
	select {
	case <-c.fatalWritten:
	case <-c.ctx.Done():
	case <-t.C:
	}
}

// fatalWait bounds how long a FATAL waits for the message before it.
const fatalWait = time.Second

// clientToServer relays the client's messages to the server and charges
// queries.
func (c *conn) clientToServer() error {
	r := c.cr
	max := c.p.cfg.MaxMessageSize
	for {
		if r.Buffered() < pgwire.HeaderSize {
			if err := c.flush(); err != nil {
				return err
			}
		}
		hdr, err := r.Peek(pgwire.HeaderSize)
		if err != nil {
			if len(hdr) > 0 && errors.Is(err, io.EOF) {
				return pgwire.Violation("the connection ended inside a message header")
			}
			return err
		}
		typ, size, err := pgwire.ClientHeader(hdr, max)
		if err != nil {
			return err
		}
		if size <= r.Size() {
			// Decided whole, as the event loop decides it.
			if _, err := c.peek(size); err != nil {
				return err
			}
		}
		b, _ := r.Peek(r.Buffered())
		v, err := c.route(typ, size, b, false)
		if err != nil {
			return err
		}
		if v&verdictForward != 0 {
			err = c.forward(size)
		} else {
			err = c.skip(size)
		}
		if err != nil {
			return err
		}
		if v&verdictEnd != 0 {
			return c.flush()
		}
	}
}

// A verdict is what becomes of a client message.
type verdict uint8

const (
	verdictForward verdict = 1 << iota // pass it to the server (else drop it)
	verdictEnd                         // then end the session
)

// errPark is route's answer, when it may not block, to a decision that
// may: it has charged nothing (a concurrent-query slot it took stays the
// connection's, as route run again would take it), and the caller asks
// again off the event loop, where route may block.
var errPark = errors.New("the decision must wait")

// route decides the client's next message, of type typ and size bytes
// (header included), b being what is buffered of the client's stream from
// its start: the whole message when it fits the buffer. It charges
// queries, waits in line, answers refusals, and says whether the message
// goes to the server. With inline set it never blocks: where it would, it
// returns errPark having charged nothing. Both relays call it for every
// client message, so the rules of what is charged live here alone.
func (c *conn) route(typ byte, size int, b []byte, inline bool) (verdict, error) {
	m := c.p.obs
	if !c.started && typ != 'X' {
		if typ == 'p' {
			// An answer to the server's authentication request;
			// never charged.
			c.authAnswered++
			return verdictForward, nil
		}
		if err := c.awaitStartup(typ, inline); err != nil {
			return 0, err
		}
	}
	if c.discarding {
		switch typ {
		case 'S':
			c.discarding, c.inCycle = false, false
			if err := c.writeReply(pgwire.AppendReadyForQuery(c.out[:0], byte(c.status.Load()))); err != nil {
				return 0, err
			}
		case 'X':
			return verdictEnd, nil
		}
		return 0, nil
	}
	switch typ {
	case 'Q', 'F':
		charge := true
		if c.exempt {
			charge = false
			m.QueryUncharged(UnchargedReplication)
		} else if typ == 'Q' && !c.p.cfg.ChargeEmptyQuery && size-pgwire.HeaderSize <= pgwire.MaxEmptyCheck && len(b) >= size {
			if pgwire.EmptyQuery(b[pgwire.HeaderSize:size]) {
				charge = false
				m.QueryUncharged(UnchargedEmpty)
			}
		}
		if charge {
			ok, err := c.takeSlot(false, inline)
			if err == nil && ok {
				ok, err = c.admitQuery(false, inline) // a refusal gives the slot back (replyDenied)
			}
			if err != nil {
				return 0, err
			}
			c.inCycle = false
			if !ok {
				return 0, nil
			}
		}
		c.inCycle = false
		c.expect()
	case 'P', 'B', 'D', 'E', 'C':
		if !c.inCycle {
			if c.exempt {
				m.QueryUncharged(UnchargedReplication)
			} else if pgwire.CycleExecutes(b) {
				ok, err := c.takeSlot(true, inline)
				if err == nil && ok {
					ok, err = c.admitQuery(true, inline) // a refusal gives the slot back (replyDenied)
				}
				if err != nil {
					return 0, err
				}
				if !ok {
					c.inCycle, c.discarding = true, true
					return 0, nil
				}
			}
			c.inCycle = true
		}
	case 'S':
		c.inCycle = false
		c.expect()
	case 'X':
		return verdictForward | verdictEnd, nil
	}
	return verdictForward, nil
}

// awaitStartup holds a client message of type typ, other than an answer to
// authentication, until the server has ended the startup with its first
// ReadyForQuery: only an authenticated session is charged. A client that
// sends it while the server waits for its answer to an authentication
// request breaks the protocol, as PostgreSQL would tell it.
func (c *conn) awaitStartup(typ byte, inline bool) error {
	if err := c.flush(); err != nil {
		return err
	}
	for c.received.Load() == 0 {
		if c.authAsked.Load() > c.authAnswered {
			return pgwire.Violation("expected password response, got message type %d (%q)", typ, typ)
		}
		if inline {
			return errPark
		}
		select {
		case <-c.readyCh:
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
	}
	c.started = true
	return nil
}

// peek returns the next size bytes of the client, flushing what is
// buffered for the server first if it has to wait for them.
func (c *conn) peek(size int) ([]byte, error) {
	if c.cr.Buffered() < size {
		if err := c.flush(); err != nil {
			return nil, err
		}
	}
	b, err := c.cr.Peek(size)
	if errors.Is(err, io.EOF) {
		err = truncated(size, len(b))
	}
	return b, err
}

func truncated(size, got int) error {
	return pgwire.Violation("the connection ended inside a message of %d bytes, after %d", size, got)
}

// forward passes the client's next message, size bytes, to the server.
func (c *conn) forward(size int) error {
	c.upN += size
	if size <= c.cr.Size() {
		b, err := c.peek(size)
		if err != nil {
			return err
		}
		_, err = c.uw.Write(b)
		_, _ = c.cr.Discard(size)
		return err
	}
	if err := c.flush(); err != nil {
		return err
	}
	c.upMid = true
	n, err := io.CopyN(c.uw, c.cr, int64(size))
	if errors.Is(err, io.EOF) {
		return truncated(size, int(n))
	}
	c.upMid = err != nil
	return err
}

// skip drops the client's next message, size bytes.
func (c *conn) skip(size int) error {
	if c.cr.Buffered() < size {
		if err := c.flush(); err != nil {
			return err
		}
	}
	n, err := c.cr.Discard(size)
	if errors.Is(err, io.EOF) {
		err = truncated(size, n)
	}
	return err
}

// flush sends what is buffered for the server. On the event loop there is
// nothing to do: the loop writes to the server what each event produced.
func (c *conn) flush() error {
	if c.lc != nil {
		return nil
	}
	if c.upN > 0 {
		c.p.obs.Relayed(ClientToServer, c.upN)
		c.upN = 0
	}
	return c.uw.Flush()
}

var errClientGone = errors.New("client disconnected while its query waited")

// replyDenied answers a query the proxy does not forward. The slot the
// query took is given back first, as at a server's answer (slot.go).
func (c *conn) replyDenied(e pgwire.ErrorResponse, extended bool) error {
	c.slotDone()
	b := e.Append(c.out[:0])
	if !extended {
		b = pgwire.AppendReadyForQuery(b, byte(c.status.Load()))
	}
	c.out = b[:0]
	return c.writeReply(b)
}

// loadLimits sets the checks' limiters from the limits in force and returns
// those, or nil when no scope limits queries.
func (c *conn) loadLimits() *Limits {
	lim := c.p.limits.Load()
	if !c.adm.forQueries(lim) {
		return nil
	}
	return lim
}

func (l *Limits) scope(s scopeID) Scope {
	switch s {
	case scopeGlobal:
		return l.Global
	case scopeUser:
		return l.PerUser
	case scopeIP:
		return l.PerIP
	}
	return Scope{}
}

// awaitReady waits until the server has answered every query forwarded.
func (c *conn) awaitReady() error {
	if err := c.flush(); err != nil {
		return err
	}
	for c.received.Load() != c.expected.Load() {
		select {
		case <-c.readyCh:
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
	}
	return nil
}

// A watcher notices a client that disconnects while its query waits, when
// nothing else reads from it: it blocks reading one byte more than is
// buffered, which returns at once on EOF.
type watcher struct {
	c    *conn
	gone chan struct{}
	done chan struct{}
}

func (c *conn) watchClient() *watcher {
	if c.lc != nil {
		// The loop watches a parked connection for the client's hang-up.
		return &watcher{c: c, gone: c.lc.gone}
	}
	w := &watcher{c: c, gone: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		_, err := c.cr.Peek(c.cr.Buffered() + 1)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, bufio.ErrBufferFull) {
			close(w.gone)
		}
	}()
	return w
}

// stop ends the watch: a read deadline in the past wakes the blocked read,
// whose timeout leaves the reader usable.
func (w *watcher) stop() {
	if w.done == nil {
		return
	}
	_ = w.c.client.SetReadDeadline(time.Unix(1, 0))
	<-w.done
	_ = w.c.client.SetReadDeadline(time.Time{})
}
