//go:build linux

package pgproxy

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/floodgate-go/floodgate/pgproxy/pgwire"
)

// On Linux, a plain-TCP connection is relayed by an event loop once the
// server has its StartupMessage: the goroutine that accepted it (and read
// the PROXY header and the startup) hands both sockets over and returns.
// A proxy runs one loop per two of GOMAXPROCS (at least one), started with
// its first connection: the server and the clients usually share the
// machine, and on 2 CPUs one loop cost 20–50% less CPU per transaction than
// two (docs/BENCHMARKS.md), as more events come per epoll_wait. Each is a
// goroutine locked to its thread around epoll_wait over non-blocking
// sockets, level-triggered. A connection's events are handled where they
// arrive:
//
//   - The client readable: one read into the connection's buffer (bufSize),
//     then each whole message (or, for one larger than the buffer, its
//     start) goes through route, the per-message decision both relays share,
//     inline: what passes is appended to the server's output, and the
//     output is written in one write when the event is done.
//   - The server readable: one read (serverBufSize), framed by scanServer
//     and passed on by toClient, as the goroutine relay does, to the
//     client's output, written in one write.
//   - A write that does not finish leaves the rest in the output and asks
//     for EPOLLOUT; meanwhile the other side is not read (a slow reader
//     holds the stream it reads, not the proxy's memory).
//   - A decision that may block (route returns errPark: a limiter not
//     Limits.Local, a line under MaxWait, answers the server owes, a
//     concurrent-query slot) parks the connection: the loop stops reading
//     the client, watches it only for a hang-up, and a goroutine decides
//     (route again, blocking); its verdict comes back to the loop, which
//     resumes. The server side of a parked connection goes on being
//     relayed.
//
// TLS connections (to the client or the server) stay on the goroutine
// relay: the loop moves bytes, and TLS records want crypto/tls's own
// reads and writes.

// loopEvent is what a loop is told about one of its connections.
type loopEvent uint8

const (
	loopAdd     loopEvent = iota // a new connection
	loopDecided                  // a parked decision is taken
	loopWrite                    // output was queued for the client off the loop
	loopClose                    // close it
	loopCount                    // tests: send the number of connections to lc.count
)

type loopMsg struct {
	lc  *loopConn
	ev  loopEvent
	v   verdict
	err error
}

// loops are a proxy's event loops.
type loops struct {
	mu      sync.Mutex
	all     []*loop // the rotation: the loops running
	next    atomic.Uint32
	started bool // the loops were started (or could not be)
	stopped bool
	wg      sync.WaitGroup
	n       int // how many loops to start; 0: half of GOMAXPROCS, at least one
}

// pick returns a loop for a new connection, starting the loops with the
// first, or nil when none runs: they could not be started, every one has
// failed, or the proxy is closing.
func (ls *loops) pick(p *Proxy) *loop {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.stopped {
		return nil
	}
	if !ls.started {
		ls.started = true
		n := ls.n
		if n <= 0 {
			n = (runtime.GOMAXPROCS(0) + 1) / 2
		}
		for range n {
			lp, err := newLoop(p)
			if err != nil {
				p.log.Warn("pgproxy: cannot start an event loop; relaying with goroutines", "err", err)
				for _, lp := range ls.all {
					lp.send(loopMsg{}) // a nil connection stops it
				}
				ls.all = nil
				return nil
			}
			ls.all = append(ls.all, lp)
			ls.wg.Go(lp.run)
		}
	}
	if len(ls.all) == 0 {
		return nil
	}
	return ls.all[int(ls.next.Add(1))%len(ls.all)]
}

// remove takes lp, which has failed, out of the rotation, and returns how
// many loops are left in it.
func (ls *loops) remove(lp *loop) int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.all = slices.DeleteFunc(ls.all, func(l *loop) bool { return l == lp })
	return len(ls.all)
}

// stop ends the loops, closing any connection left on them, and waits for
// them.
func (ls *loops) stop() {
	ls.mu.Lock()
	ls.stopped = true
	all := ls.all
	ls.all = nil
	ls.mu.Unlock()
	for _, lp := range all {
		lp.send(loopMsg{})
	}
	ls.wg.Wait()
}

// A loop is one event loop.
type loop struct {
	p      *Proxy
	epfd   int
	evfd   int // an eventfd that wakes it for its inbox
	conns  map[int32]*loopConn
	events []unix.EpollEvent

	mu      sync.Mutex
	inbox   []loopMsg
	spare   []loopMsg
	woken   bool // an eventfd write is pending
	stopped bool // its descriptors are closed: drop what is sent
}

func newLoop(p *Proxy) (*loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(evfd)}); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return nil, err
	}
	return &loop{p: p, epfd: epfd, evfd: evfd, conns: make(map[int32]*loopConn), events: make([]unix.EpollEvent, 128)}, nil
}

// send puts m in the loop's inbox and wakes it, and reports whether it
// did: a loop that has stopped takes nothing.
func (lp *loop) send(m loopMsg) bool {
	lp.mu.Lock()
	if lp.stopped {
		lp.mu.Unlock()
		return false
	}
	lp.inbox = append(lp.inbox, m)
	wake := !lp.woken
	lp.woken = true
	lp.mu.Unlock()
	if wake {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, _ = unix.Write(lp.evfd, one[:])
	}
	return true
}

func (lp *loop) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		n, err := unix.EpollWait(lp.epfd, lp.events, -1)
		if err != nil && err != unix.EINTR {
			lp.fail(err)
			return
		}
		for i := range max(n, 0) {
			ev := lp.events[i]
			if ev.Fd == int32(lp.evfd) {
				if !lp.drain() {
					lp.shutdown()
					return
				}
				continue
			}
			lc := lp.conns[ev.Fd]
			if lc == nil {
				continue
			}
			lc.handle(ev.Fd == lc.cfd, ev.Events)
		}
	}
}

// drain handles the inbox; false means stop.
func (lp *loop) drain() bool {
	var b [8]byte
	_, _ = unix.Read(lp.evfd, b[:])
	lp.mu.Lock()
	msgs := lp.inbox
	lp.inbox, lp.spare = lp.spare[:0], nil
	lp.woken = false
	lp.mu.Unlock()
	stop := false
	for i, m := range msgs {
		lc := m.lc
		msgs[i] = loopMsg{}
		if lc == nil {
			stop = true
			continue
		}
		if m.ev == loopCount {
			lc.count <- len(lp.conns) / 2
			continue
		}
		if lc.closed {
			continue
		}
		switch m.ev {
		case loopAdd:
			lc.add()
		case loopDecided:
			lc.decided(m.v, m.err)
		case loopWrite:
			lc.pump()
		case loopClose:
			lc.closeNow()
		}
	}
	lp.mu.Lock()
	if lp.spare == nil {
		lp.spare = msgs[:0]
	}
	lp.mu.Unlock()
	return !stop
}

// fail stops a loop whose epoll_wait failed: it leaves the rotation, so
// that new sessions go to the loops still running (to the goroutine relay
// once none is), and closes its connections. It is logged once and
// counted in LoopStats.Stopped.
func (lp *loop) fail(err error) {
	running := lp.p.loops.remove(lp)
	lp.p.loopStats.stopped.Add(1)
	then := "new sessions go to the event loops still running"
	if running == 0 {
		then = "no event loop runs: new sessions are relayed by goroutines"
	}
	lp.p.log.Error("pgproxy: an event loop stopped, its epoll_wait failed; its sessions are closed, "+then,
		"err", err, "sessions_closed", len(lp.conns)/2, "loops_running", running)
	lp.shutdown()
}

// shutdown closes the loop's connections and descriptors.
func (lp *loop) shutdown() {
	for _, lc := range lp.conns {
		lc.closeNow()
	}
	lp.mu.Lock()
	lp.stopped = true
	msgs := lp.inbox
	lp.inbox = nil
	lp.mu.Unlock()
	for _, m := range msgs {
		if m.lc != nil && !m.lc.closed {
			m.lc.closeNow() // added but never registered
		}
	}
	unix.Close(lp.evfd)
	unix.Close(lp.epfd)
}

// A loopConn is a connection's relay state on its loop. The loop alone
// touches it, but for cout (under conn.wmu) and while the connection is
// parked, when the deciding goroutine runs route over cbuf.
type loopConn struct {
	c        *conn
	lp       *loop
	cfd, ufd int32

	cbuf              []byte // the client's bytes: cbuf[cr:cw] unread; nil while none are
	cr, cw            int
	msgSize           int // the client message streamed through, when larger than cbuf
	fwdRest, dropRest int // its bytes still to forward or drop

	uout []byte // for the server: uout[uw:] unwritten
	uw   int

	sbuf  []byte // the server's bytes: sbuf[:shave] not yet passed on; nil while none are
	shave int
	sskip int // bytes of a server message in transit still to come

	cout []byte // for the client (conn.wmu): cout[cwo:] unwritten
	cwo  int

	parked   bool
	ptyp     byte
	psize    int
	gone     chan struct{} // closed when the client hangs up while parked
	goneDone bool

	cev, uev uint32 // the events each descriptor is registered for; 0: not registered

	ending     bool // no more client reads; close once the outputs are written
	cerr, serr error
	timer      *time.Timer
	closed     bool

	count chan int // loopCount's answer
}

// toLoop hands a plain-TCP connection whose startup the server has to an
// event loop, and reports whether it did.
func (p *Proxy) toLoop(c *conn) bool {
	if c.client != c.raw {
		return false // TLS
	}
	ct, ok1 := tcpConn(c.raw)
	ut, ok2 := c.up.(*net.TCPConn)
	if !ok1 || !ok2 {
		return false
	}
	lp := p.loops.pick(p)
	if lp == nil {
		return false
	}
	cfd, err := dupFD(ct)
	if err != nil {
		return false
	}
	ufd, err := dupFD(ut)
	if err != nil {
		unix.Close(cfd)
		return false
	}
	lc := &loopConn{c: c, lp: lp, cfd: int32(cfd), ufd: int32(ufd), gone: make(chan struct{})}
	if n := c.cr.Buffered(); n > 0 {
		// What the client sent after its startup, read with it. It fits:
		// the startup's reader and the loop's client buffer are both
		// bufSize.
		b, _ := c.cr.Peek(n)
		lc.takeClientBuf()
		lc.cw = copy(lc.cbuf, b)
	}
	c.connMu.Lock()
	if c.ctx.Err() != nil {
		c.connMu.Unlock()
		unix.Close(cfd)
		unix.Close(ufd)
		return false
	}
	c.lc = lc
	cr := c.cr
	c.cr = nil // the startup's reader: the loop reads from here on
	// Sent under connMu: before any loopClose close sends.
	if !lp.send(loopMsg{lc: lc, ev: loopAdd}) {
		// The loop has stopped since pick chose it (its epoll_wait
		// failed; a proxy stops its loops only once its connections have
		// ended): the goroutines relay, over both sockets, which close
		// closes if the proxy is closing.
		c.lc, c.cr = nil, cr
		c.connMu.Unlock()
		lc.dropClientBuf()
		unix.Close(cfd)
		unix.Close(ufd)
		return false
	}
	ct.Close() // the loop holds duplicates of both sockets; c.raw, when it wraps ct, is closed with the connection
	c.up.Close()
	c.connMu.Unlock()
	p.loopStats.conns.Add(1)
	return true
}

// tcpConn is the TCP connection of nc: nc itself, or the one it wraps when
// it has a NetConn method (as a listener that counts its connections
// returns; see Serve). The loop relays the TCP connection's socket and
// closes nc, the wrapper, only when the connection ends. A TLS connection
// is never unwrapped: its bytes are not the client's.
func tcpConn(nc net.Conn) (*net.TCPConn, bool) {
	for range 4 {
		switch c := nc.(type) {
		case *net.TCPConn:
			return c, true
		case *tls.Conn:
			return nil, false
		case interface{ NetConn() net.Conn }:
			nc = c.NetConn()
		default:
			return nil, false
		}
	}
	return nil, false
}

// dupFD duplicates a connection's socket, non-blocking like the original.
func dupFD(tc *net.TCPConn) (int, error) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return -1, err
	}
	nfd := -1
	var derr error
	if err := rc.Control(func(fd uintptr) {
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return -1, err
	}
	return nfd, nil
}

// The loop's buffers are taken from pools while a connection has bytes in
// flight and given back when they are passed on, so that an idle
// connection holds none: a client buffer (bufSize) for what the client
// sent and for the server's output, a server buffer (serverBufSize) for
// what the server sent and for the client's output.
var (
	clientBufs = sync.Pool{New: func() any { return new([bufSize]byte) }}
	serverBufs = sync.Pool{New: func() any { return new([serverBufSize]byte) }}
)

func (lc *loopConn) takeClientBuf() { lc.cbuf = clientBufs.Get().(*[bufSize]byte)[:] }

// dropClientBuf gives the client buffer back, empty; not while a parked
// decision reads it.
func (lc *loopConn) dropClientBuf() {
	if lc.cbuf != nil && !lc.parked {
		clientBufs.Put((*[bufSize]byte)(lc.cbuf))
		lc.cbuf = nil
	}
}

func (lc *loopConn) dropServerBuf() {
	if lc.sbuf != nil {
		serverBufs.Put((*[serverBufSize]byte)(lc.sbuf))
		lc.sbuf = nil
	}
}

// clientOut and serverOut return out, or an empty buffer from the pool
// when out has none, to append the server's or the client's output to.
func clientOut(out []byte) []byte {
	if out == nil {
		return clientBufs.Get().(*[bufSize]byte)[:0]
	}
	return out
}

func serverOut(out []byte) []byte {
	if out == nil {
		return serverBufs.Get().(*[serverBufSize]byte)[:0]
	}
	return out
}

// release gives an output that has been written back to its pool (one
// that outgrew its buffer goes to the collector) and returns nil.
func release(out []byte) []byte {
	switch cap(out) {
	case bufSize:
		clientBufs.Put((*[bufSize]byte)(out[:bufSize]))
	case serverBufSize:
		serverBufs.Put((*[serverBufSize]byte)(out[:serverBufSize]))
	}
	return nil
}

func (lc *loopConn) post(ev loopEvent) { lc.lp.send(loopMsg{lc: lc, ev: ev}) }

// queueClient appends b to the client's output; the caller holds wmu.
func (lc *loopConn) queueClient(b []byte) { lc.cout = append(serverOut(lc.cout), b...) }

func (lc *loopConn) add() {
	lc.lp.conns[lc.cfd] = lc
	lc.lp.conns[lc.ufd] = lc
	lc.processClient() // bytes read with the startup
	lc.pump()
}

// handle serves the events of one descriptor.
func (lc *loopConn) handle(client bool, ev uint32) {
	hup := ev&(unix.EPOLLHUP|unix.EPOLLERR|unix.EPOLLRDHUP) != 0
	if client {
		switch {
		case lc.parked:
			if hup && !lc.goneDone {
				lc.goneDone = true
				close(lc.gone)
			}
		case ev&unix.EPOLLIN != 0 || hup:
			if !lc.ending {
				lc.readClient()
			}
		}
	} else if ev&unix.EPOLLIN != 0 || hup {
		lc.readServer()
	}
	if !lc.closed {
		lc.pump()
	}
}

func (lc *loopConn) readClient() {
	if lc.cbuf == nil {
		lc.takeClientBuf()
	}
	n, err := unix.Read(int(lc.cfd), lc.cbuf[lc.cw:])
	if err == unix.EAGAIN || err == unix.EINTR {
		if lc.cr == lc.cw {
			lc.dropClientBuf()
		}
		return
	}
	if err != nil {
		lc.end(err, nil)
		return
	}
	if n == 0 {
		lc.clientEOF()
		return
	}
	lc.cw += n
	lc.processClient()
}

// clientEOF ends a connection whose client closed it: cleanly at a
// message boundary, as a protocol violation inside a message.
func (lc *loopConn) clientEOF() {
	switch avail := lc.cw - lc.cr; {
	case lc.fwdRest > 0 || lc.dropRest > 0:
		lc.end(truncated(lc.msgSize, lc.msgSize-lc.fwdRest-lc.dropRest), nil)
	case avail >= pgwire.HeaderSize:
		_, size, _ := pgwire.ClientHeader(lc.cbuf[lc.cr:lc.cw], lc.c.p.cfg.MaxMessageSize)
		lc.end(truncated(size, avail), nil)
	case avail > 0:
		lc.end(pgwire.Violation("the connection ended inside a message header"), nil)
	default:
		lc.end(io.EOF, nil)
	}
}

// processClient decides and passes on the client's buffered messages,
// until it parks, ends, or needs more bytes.
func (lc *loopConn) processClient() {
	c := lc.c
	max := c.p.cfg.MaxMessageSize
	fwd := 0
	for !lc.parked && !lc.ending && !lc.closed {
		if rest := lc.fwdRest + lc.dropRest; rest > 0 {
			k := min(rest, lc.cw-lc.cr)
			if k == 0 {
				break
			}
			if lc.fwdRest > 0 {
				lc.uout = append(clientOut(lc.uout), lc.cbuf[lc.cr:lc.cr+k]...)
				lc.fwdRest -= k
				fwd += k
				c.upMid = lc.fwdRest > 0
			} else {
				lc.dropRest -= k
			}
			lc.cr += k
			continue
		}
		avail := lc.cw - lc.cr
		if avail < pgwire.HeaderSize {
			break
		}
		typ, size, err := pgwire.ClientHeader(lc.cbuf[lc.cr:lc.cw], max)
		if err != nil {
			lc.end(err, nil)
			break
		}
		if size <= bufSize && avail < size {
			break // decided whole
		}
		v, err := c.route(typ, size, lc.cbuf[lc.cr:lc.cw], true)
		if err == errPark {
			lc.park(typ, size)
			break
		}
		if err != nil {
			lc.end(err, nil)
			break
		}
		fwd += lc.apply(v, size)
	}
	if fwd > 0 {
		c.p.obs.Relayed(ClientToServer, fwd)
	}
	if !lc.parked {
		lc.compact()
	}
}

func (lc *loopConn) compact() {
	if lc.cr == lc.cw {
		lc.cr, lc.cw = 0, 0
		lc.dropClientBuf()
	} else if lc.cr > 0 {
		lc.cw = copy(lc.cbuf, lc.cbuf[lc.cr:lc.cw])
		lc.cr = 0
	}
}

// apply carries out route's verdict on the message at cr, size bytes, and
// returns how many bytes it forwarded.
func (lc *loopConn) apply(v verdict, size int) int {
	k := min(size, lc.cw-lc.cr)
	n := 0
	if v&verdictForward != 0 {
		lc.uout = append(clientOut(lc.uout), lc.cbuf[lc.cr:lc.cr+k]...)
		lc.fwdRest = size - k
		lc.c.upMid = lc.fwdRest > 0
		n = k
	} else {
		lc.dropRest = size - k
	}
	lc.msgSize = size
	lc.cr += k
	if v&verdictEnd != 0 {
		lc.ending = true // closed once the server has the Terminate
		lc.armTimer()
	}
	return n
}

// park stops reading the client while a goroutine takes the decision
// route could not take inline.
func (lc *loopConn) park(typ byte, size int) {
	lc.compact()
	lc.parked, lc.ptyp, lc.psize = true, typ, size
	lc.c.p.loopStats.parked.Add(1)
	b := lc.cbuf[lc.cr:lc.cw]
	c := lc.c
	go func() {
		v, err := c.route(typ, size, b, false)
		lc.lp.send(loopMsg{lc: lc, ev: loopDecided, v: v, err: err})
	}()
}

// decided resumes a parked connection.
func (lc *loopConn) decided(v verdict, err error) {
	lc.parked = false
	if err != nil {
		if errors.Is(err, errClientGone) {
			err = io.EOF
		}
		lc.end(err, nil)
	} else {
		if n := lc.apply(v, lc.psize); n > 0 {
			lc.c.p.obs.Relayed(ClientToServer, n)
		}
		lc.processClient()
	}
	if !lc.closed {
		lc.pump()
	}
}

func (lc *loopConn) readServer() {
	c := lc.c
	if lc.sbuf == nil {
		lc.sbuf = serverBufs.Get().(*[serverBufSize]byte)[:]
	}
	n, err := unix.Read(int(lc.ufd), lc.sbuf[lc.shave:])
	if err == unix.EAGAIN || err == unix.EINTR {
		if lc.shave == 0 {
			lc.dropServerBuf()
		}
		return
	}
	if n <= 0 {
		if err == nil {
			err = io.EOF
		}
		lc.end(nil, err)
		return
	}
	lc.shave += n
	pos, readys, asks, st, perr := scanServer(c, lc.sbuf[:lc.shave], &lc.sskip)
	if pos > 0 {
		werr := c.toClient(lc.sbuf[:pos], lc.sskip > 0, readys, asks, st)
		lc.shave = copy(lc.sbuf, lc.sbuf[pos:lc.shave])
		if werr != nil && !lc.ending {
			lc.end(nil, werr)
			return
		}
	}
	if perr != nil {
		lc.end(nil, perr)
		return
	}
	if lc.shave == 0 {
		lc.dropServerBuf()
	}
}

// end ends the connection for cerr (the client's side) or serr (the
// server's): a side that broke the protocol is named to the client in a
// FATAL, written before the close; any other end closes at once.
func (lc *loopConn) end(cerr, serr error) {
	if lc.closed {
		return
	}
	if lc.ending && lc.cerr == nil && lc.serr == nil {
		lc.cerr, lc.serr = cerr, serr
	}
	c := lc.c
	var pe *pgwire.ProtocolError
	switch {
	case errors.As(cerr, &pe) && !lc.ending:
		lc.cerr, lc.ending = cerr, true
		c.fatal(pe.Fatal())
		c.terminateUpstream()
		lc.armTimer()
	case errors.As(serr, &pe) && !lc.ending:
		lc.serr, lc.ending = serr, true
		c.fatal(lostSync(pe))
		lc.armTimer()
	default:
		if !lc.ending {
			lc.cerr, lc.serr = cerr, serr
		}
		lc.flushOnce()
		lc.closeNow()
	}
}

// armTimer bounds how long an ending connection waits for its output to
// be written (fatalWait, as a FATAL waits on the goroutine relay).
func (lc *loopConn) armTimer() {
	if lc.timer == nil {
		lc.timer = time.AfterFunc(fatalWait, func() { lc.post(loopClose) })
	}
}

// flushOnce writes what it can of the outputs, once each, before the
// connection closes: a write's error changes nothing then.
func (lc *loopConn) flushOnce() {
	_ = writeOut(lc.ufd, &lc.uout, &lc.uw)
	lc.c.wmu.Lock()
	_ = writeOut(lc.cfd, &lc.cout, &lc.cwo)
	lc.c.wmu.Unlock()
}

// pump writes the outputs, closes an ending connection whose outputs are
// written, and registers for the events the connection now waits for.
func (lc *loopConn) pump() {
	if lc.closed {
		return
	}
	c := lc.c
	if err := writeOut(lc.ufd, &lc.uout, &lc.uw); err != nil {
		lc.end(nil, err)
		return
	}
	c.wmu.Lock()
	if err := writeOut(lc.cfd, &lc.cout, &lc.cwo); err != nil {
		c.wmu.Unlock()
		lc.end(err, nil)
		return
	}
	coutBusy := len(lc.cout) > 0
	waitFatal := c.fatalQueued && !c.clientDone // a FATAL waits for the server's message in transit
	c.wmu.Unlock()
	uoutBusy := len(lc.uout) > 0
	if lc.ending && !uoutBusy && !coutBusy && !waitFatal {
		lc.closeNow()
		return
	}
	var cev, uev uint32
	switch {
	case lc.parked:
		if !lc.goneDone {
			cev = unix.EPOLLRDHUP
		}
	case !lc.ending && !uoutBusy:
		cev = unix.EPOLLIN | unix.EPOLLRDHUP
	}
	if coutBusy {
		cev |= unix.EPOLLOUT
	}
	if !coutBusy && (!lc.ending || waitFatal) {
		uev = unix.EPOLLIN | unix.EPOLLRDHUP
	}
	if uoutBusy {
		uev |= unix.EPOLLOUT
	}
	lc.register(lc.cfd, &lc.cev, cev)
	lc.register(lc.ufd, &lc.uev, uev)
}

// writeOut writes what it can of an output, (*out)[*w:], in one write to
// fd, and gives the output back to its pool once it is all written. It
// returns the write's error unless the socket is merely full (EAGAIN), the
// write interrupted or the output written.
func writeOut(fd int32, out *[]byte, w *int) error {
	if len(*out) <= *w {
		return nil
	}
	n, err := unix.Write(int(fd), (*out)[*w:])
	if n > 0 {
		*w += n
	}
	if *w == len(*out) {
		*out, *w = release(*out), 0
		return nil
	}
	if err == unix.EAGAIN || err == unix.EINTR {
		return nil
	}
	return err
}

// register sets the events fd waits for; none takes it out of the epoll
// set, where a hang-up, level-triggered, would wake the loop for ever.
func (lc *loopConn) register(fd int32, cur *uint32, want uint32) {
	if *cur == want {
		return
	}
	var err error
	switch {
	case want == 0:
		err = unix.EpollCtl(lc.lp.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	case *cur == 0:
		err = unix.EpollCtl(lc.lp.epfd, unix.EPOLL_CTL_ADD, int(fd), &unix.EpollEvent{Events: want, Fd: fd})
	default:
		err = unix.EpollCtl(lc.lp.epfd, unix.EPOLL_CTL_MOD, int(fd), &unix.EpollEvent{Events: want, Fd: fd})
	}
	if err != nil {
		lc.end(err, nil)
		return
	}
	*cur = want
}

// closeNow closes both sockets and finishes the connection.
func (lc *loopConn) closeNow() {
	if lc.closed {
		return
	}
	lc.closed = true
	c := lc.c
	c.closeOnce.Do(c.cancel)
	c.cancel() // a parked decision returns
	if lc.timer != nil {
		lc.timer.Stop()
	}
	if lc.cev != 0 {
		_ = unix.EpollCtl(lc.lp.epfd, unix.EPOLL_CTL_DEL, int(lc.cfd), nil)
	}
	if lc.uev != 0 {
		_ = unix.EpollCtl(lc.lp.epfd, unix.EPOLL_CTL_DEL, int(lc.ufd), nil)
	}
	delete(lc.lp.conns, lc.cfd)
	delete(lc.lp.conns, lc.ufd)
	unix.Close(int(lc.cfd))
	unix.Close(int(lc.ufd))
	if _, bare := c.raw.(*net.TCPConn); !bare {
		c.raw.Close() // a wrapper's own end (a listener's count of its connections)
	}
	if !lc.goneDone {
		lc.goneDone = true
		close(lc.gone)
	}
	c.logEnd(lc.cerr, lc.serr)
	c.finish()
}
