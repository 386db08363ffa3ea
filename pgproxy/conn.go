package pgproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/floodgate-go/floodgate/pgproxy/pgwire"
	"github.com/floodgate-go/floodgate/pgproxy/proxyproto"
)

var errTooManyFiles = syscall.EMFILE

// Buffer sizes, per connection: large enough that a round of pipelined
// messages travels in one read and one write, small enough that thousands
// of idle sessions cost little. Client messages larger than bufSize stream
// through without being held whole; the server's answers pass through in
// chunks of serverBufSize.
const (
	bufSize       = 16 << 10 // the client reader and the upstream writer
	serverBufSize = 32 << 10 // the server-to-client chunk
)

// A conn is one client connection and, after startup, its upstream
// connection.
type conn struct {
	p      *Proxy
	raw    net.Conn // the client's TCP connection
	client net.Conn // raw, or the TLS connection over it
	cr     *bufio.Reader
	ip     netip.Addr // the client's address (PROXY protocol applied)
	ipLog  string     // ip redacted for logs

	params pgwire.StartupParams

	// connMu guards the fields close reads that serve sets once it runs:
	// client (after TLS) and up.
	connMu sync.Mutex
	up     net.Conn
	uw     *bufio.Writer
	upN    int // bytes written to uw since the last Flush

	ctx    context.Context
	cancel context.CancelFunc

	// Set once by the server-to-client relay when BackendKeyData passes,
	// read by cancel requests.
	keyMu        sync.Mutex
	upPID        uint32
	upSecret     []byte
	clientPID    uint32 // 0 until registered
	clientSecret []byte

	// cancelWait is signalled by a CancelRequest for this connection, to
	// end a query waiting under MaxWait.
	cancelWait chan struct{}
	waiter     *waiter // this connection's place in line, when its query waits

	// state shared by the two relay directions; see relay.go.
	wmu          sync.Mutex    // serialises writes to the client
	midMsg       bool          // the last write to the client ended inside a message (wmu)
	pending      []byte        // replies to write once at a message boundary (wmu)
	fatalQueued  bool          // pending ends with a FATAL (wmu)
	clientDone   bool          // a FATAL was written: nothing more goes to the client (wmu)
	fatalWritten chan struct{} // closed when a queued FATAL is written
	authAsked    atomic.Int64  // authentication requests the server sent that want an answer
	expected     atomic.Int64
	received     atomic.Int64
	status       atomic.Uint32 // last ReadyForQuery status
	readyCh      chan struct{} // signalled on every ReadyForQuery

	// client-to-server state
	started      bool      // the server has ended the startup (its first ReadyForQuery)
	authAnswered int64     // answers to authentication requests forwarded
	upMid        bool      // the last write to the server ended inside a message
	inCycle      bool      // inside an extended-protocol cycle (after its first message, before Sync)
	discarding   bool      // dropping a rejected cycle's messages up to its Sync
	exempt       bool      // no query limits (replication)
	adm          admission // the decisions under the limits (scope.go)
	out          []byte    // scratch for replies

	closeOnce sync.Once

	// lc is the connection's state on an event loop, once handed to one
	// (loop_linux.go); nil while it is relayed by goroutines. Set under
	// connMu before the loop sees the connection.
	lc *loopConn
}

func newConn(p *Proxy, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{
		p:          p,
		adm:        admission{obs: p.obs},
		raw:        nc,
		client:     nc,
		ctx:        ctx,
		cancel:     cancel,
		cancelWait: make(chan struct{}, 1),
		waiter:     newWaiter(),
		readyCh:    make(chan struct{}, 1),

		fatalWritten: make(chan struct{}),
	}
	return c
}

// close ends both connections; the relay goroutines then return, or the
// event loop closes them.
func (c *conn) close() {
	c.closeOnce.Do(func() {
		c.cancel()
		c.connMu.Lock()
		defer c.connMu.Unlock()
		if c.lc != nil {
			c.lc.post(loopClose)
			return
		}
		c.raw.Close()
		if c.client != c.raw {
			c.client.Close()
		}
		if c.up != nil {
			c.up.Close()
		}
	})
}

func (c *conn) serve() {
	c.p.obs.ClientConnected()
	onLoop := false
	defer func() {
		if !onLoop { // else the loop finishes it
			c.finish()
		}
	}()
	// The deadline covers the PROXY header, TLS and the startup packet.
	_ = c.raw.SetDeadline(time.Now().Add(c.p.cfg.StartupTimeout))
	c.cr = bufio.NewReaderSize(c.raw, bufSize)
	if err := c.readClientAddr(); err != nil {
		c.fail("PROXY protocol header", c.raw, err)
		return
	}
	packet, ok := c.startup()
	if !ok {
		return
	}
	_ = c.raw.SetDeadline(time.Time{})
	onLoop = c.relay(packet)
}

// finish undoes what serve set up, once the connection has ended.
func (c *conn) finish() {
	c.p.obs.ClientDisconnected()
	c.close()
	c.adm.slot.drop()
	c.p.cancels.remove(c)
	c.p.untrack(c)
}

// readClientAddr sets the client's address: the peer's, or the one named
// by a PROXY header (package proxyproto, v1 or v2), which is read only when
// the peer is trusted to send one (Config.ProxyProtocolFrom, matched by clientip.Prefixes: zone
// removed, IPv4 written in IPv6 folded to IPv4).
func (c *conn) readClientAddr() error {
	peer := addrOf(c.raw.RemoteAddr())
	c.setIP(peer)
	if !c.p.trusted.Contains(peer) {
		return nil
	}
	h, err := proxyproto.Read(c.cr)
	var he *proxyproto.HeaderError
	if errors.As(err, &he) {
		return pgwire.Violation("%s", he.Message)
	}
	if err != nil {
		return err
	}
	if a := h.Client(); a.IsValid() { // else the peer is the client (LOCAL, UNKNOWN)
		c.setIP(a)
	}
	return nil
}

// addrOf returns the IP address of a connection's peer, as the connection
// reports it (zone included); clientip normalises it where it is compared
// and keyed.
func addrOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr()
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr()
	}
	return netip.Addr{}
}

// setIP sets the client's address and its per-IP key, which clientip
// spells (clientip.Resolver.AddrKey, with its default prefixes), as it does
// for the listener's connection bound.
func (c *conn) setIP(a netip.Addr) {
	c.ip = a
	c.adm.ipKey, c.ipLog = ipKey(a), redactIP(a.Unmap().WithZone(""))
}

// fail logs why a client connection is closed before it is relayed. A
// protocol violation is answered first, with a FATAL ErrorResponse on w
// (the connection in the state the client expects: plain before a TLS
// handshake, TLS after it); nil w answers nothing.
func (c *conn) fail(stage string, w net.Conn, err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return // the client went away; nothing to report
	}
	var pe *pgwire.ProtocolError
	if errors.As(err, &pe) {
		c.p.obs.Malformed()
		if w != nil {
			_ = w.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = w.Write(pe.Fatal().Append(nil))
		}
	}
	c.p.log.Warn("pgproxy: closing client connection", "stage", stage, "client", c.ipLog, "err", err)
}

// startup runs the startup phase until a StartupMessage, which it returns
// to be forwarded. It answers SSLRequest and GSSENCRequest, serves direct
// TLS and CancelRequest.
func (c *conn) startup() (packet []byte, ok bool) {
	first, err := c.cr.Peek(1)
	if err != nil {
		c.fail("startup", nil, err)
		return nil, false
	}
	if first[0] == tlsHandshake {
		if c.p.tls == nil {
			// The client reads what follows as TLS: the FATAL reaches it as
			// garbage at worst, and as the reason with clients that check.
			c.fail("startup", c.raw, pgwire.Violation("the client started TLS directly (sslnegotiation=direct), and the proxy has no TLS certificate; connect with sslnegotiation=postgres, or set the proxy's TLS"))
			return nil, false
		}
		if !c.startTLS(true) {
			return nil, false
		}
	}
	for {
		code, packet, err := pgwire.ReadStartup(c.cr, c.p.cfg.MaxStartupSize)
		if err == nil {
			err = pgwire.CheckStartupCode(code, len(packet))
		}
		if err != nil {
			c.fail("startup", c.client, err)
			return nil, false
		}
		switch code {
		case pgwire.CodeSSLRequest, pgwire.CodeGSSENCRequest:
			if c.client != c.raw {
				c.fail("startup", c.client, pgwire.Violation("an encryption request inside an encrypted connection"))
				return nil, false
			}
			if code == pgwire.CodeGSSENCRequest || c.p.tls == nil {
				if _, err := c.raw.Write([]byte{'N'}); err != nil {
					c.fail("startup", nil, err)
					return nil, false
				}
				continue
			}
			if c.cr.Buffered() > 0 {
				// Bytes sent before the handshake would be taken as if
				// they came over TLS (CVE-2021-23214). PostgreSQL's words.
				c.fail("startup", c.raw, pgwire.Violation("received unencrypted data after SSL request"))
				return nil, false
			}
			if _, err := c.raw.Write([]byte{'S'}); err != nil {
				c.fail("startup", nil, err)
				return nil, false
			}
			if !c.startTLS(false) {
				return nil, false
			}
		case pgwire.CodeCancelRequest:
			c.forwardCancel(packet)
			return nil, false
		default: // 3.x, CheckStartupCode says
			sp, err := pgwire.ParseStartupMessage(packet)
			if err != nil {
				c.fail("startup", c.client, err)
				return nil, false
			}
			c.params = sp
			c.adm.user = sp.User
			return packet, true
		}
	}
}

// tlsHandshake is the first byte of a TLS ClientHello record.
const tlsHandshake = 0x16

func (c *conn) startTLS(direct bool) bool {
	tc := tls.Server(&bufConn{Conn: c.raw, r: c.cr}, c.p.tls)
	if err := tc.HandshakeContext(c.ctx); err != nil {
		c.fail("TLS handshake", nil, err)
		return false
	}
	if direct && tc.ConnectionState().NegotiatedProtocol != alpnPostgres {
		// PostgreSQL insists on it too: without ALPN, a TLS connection
		// meant for another protocol could be replayed here.
		c.fail("TLS handshake", tc, pgwire.Violation(`received direct SSL connection request without ALPN protocol negotiation extension; the client must offer the ALPN protocol "postgresql"`))
		tc.Close()
		return false
	}
	c.connMu.Lock()
	c.client = tc
	c.connMu.Unlock()
	c.cr = bufio.NewReaderSize(tc, bufSize)
	return true
}

// bufConn reads through a bufio.Reader that may hold bytes already
// peeked from the connection.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// reject writes an ErrorResponse to the client during startup.
func (c *conn) reject(e pgwire.ErrorResponse) {
	_ = c.client.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.client.Write(e.Append(nil))
}

// dialUpstream connects to the server, with TLS when configured.
func (c *conn) dialUpstream(ctx context.Context) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.p.cfg.ConnectTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", c.p.cfg.Upstream)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if c.p.upTLS == nil {
		return nc, nil
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	if _, err := nc.Write(pgwire.SSLRequest[:]); err != nil {
		nc.Close()
		return nil, err
	}
	var answer [1]byte
	if _, err := io.ReadFull(nc, answer[:]); err != nil {
		nc.Close()
		return nil, fmt.Errorf("read the answer to SSLRequest: %w", err)
	}
	if answer[0] != 'S' {
		nc.Close()
		return nil, fmt.Errorf("the server refused TLS (answered %q to SSLRequest); configure ssl on the server or unset UpstreamTLS", answer[0])
	}
	tc := tls.Client(nc, c.p.upTLS)
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	_ = nc.SetDeadline(time.Time{})
	return tc, nil
}

// relay connects the client to the server and relays both directions until
// either ends, or hands the connection to an event loop, which then relays
// it (onLoop).
func (c *conn) relay(startup []byte) (onLoop bool) {
	p := c.p
	if c.params.Replication {
		switch p.cfg.Replication {
		case ReplicationRefuse:
			c.reject(pgwire.ErrorResponse{Severity: "FATAL", Code: "28000", Message: "replication connections are not allowed through this proxy"})
			p.log.Info("pgproxy: refused a replication connection", "user", c.params.User, "client", c.ipLog)
			return false
		case ReplicationExempt:
			c.exempt = true
		}
	}
	if !c.admitConnection() {
		return false
	}
	up, err := c.dialUpstream(c.ctx)
	if err != nil {
		p.obs.UpstreamError()
		p.log.Error("pgproxy: cannot connect to the upstream server", "upstream", p.cfg.Upstream, "client", c.ipLog, "err", err)
		c.reject(pgwire.ErrorResponse{Severity: "FATAL", Code: "08006", Message: "the proxy could not connect to the database server",
			Hint: "The server may be down or unreachable from the proxy; see the proxy's log."})
		return false
	}
	c.connMu.Lock()
	if c.ctx.Err() != nil { // closed while dialing
		c.connMu.Unlock()
		up.Close()
		return false
	}
	c.up = up
	c.connMu.Unlock()
	if _, err := up.Write(startup); err != nil {
		p.obs.UpstreamError()
		p.log.Error("pgproxy: cannot write to the upstream server", "upstream", p.cfg.Upstream, "err", err)
		return false
	}
	p.obs.Relayed(ClientToServer, len(startup))
	// The server owes the ReadyForQuery that ends the startup.
	c.expected.Store(1)
	c.status.Store('I')
	if p.toLoop(c) {
		return true
	}
	c.uw = bufio.NewWriterSize(up, bufSize)

	// Whichever direction ends first ends the session: a server that went
	// away must not leave its client waiting on a live-looking connection.
	// A side that broke the protocol is named to the client in a FATAL
	// before the end.
	done := make(chan error, 1)
	go func() {
		err := c.serverToClient()
		var pe *pgwire.ProtocolError
		if errors.As(err, &pe) {
			c.fatal(lostSync(pe))
		}
		if !errors.Is(err, errFatalSent) {
			// After a FATAL of the client side's, that side closes, once
			// it has told the server.
			c.close()
		}
		done <- err
	}()
	cerr := c.clientToServer()
	var pe *pgwire.ProtocolError
	if errors.As(cerr, &pe) {
		// The FATAL first: a server that ends its session on the Terminate
		// must not end the client's connection before the FATAL is out.
		c.fatal(pe.Fatal())
		c.terminateUpstream()
	}
	c.close()
	c.logEnd(cerr, <-done)
	return false
}

// lostSync is the FATAL of a server that broke the protocol.
func lostSync(pe *pgwire.ProtocolError) pgwire.ErrorResponse {
	return pgwire.ErrorResponse{Severity: "FATAL", Code: pgwire.CodeProtocolViolation,
		Message: "lost synchronization with the server: " + pe.Message,
		Hint:    "The proxy closed the connection; see its log."}
}

// logEnd logs how a relayed connection ended: cerr ended the client's
// side, serr the server's.
func (c *conn) logEnd(cerr, serr error) {
	p := c.p
	for _, e := range []struct {
		dir string
		err error
	}{{"client to server", cerr}, {"server to client", serr}} {
		if e.err == nil || errors.Is(e.err, io.EOF) || errors.Is(e.err, net.ErrClosed) || errors.Is(e.err, context.Canceled) || errors.Is(e.err, errFatalSent) {
			continue
		}
		if errors.Is(e.err, pgwire.ErrProtocol) {
			p.obs.Malformed()
			p.log.Warn("pgproxy: closing a connection that broke the protocol", "direction", e.dir, "user", c.params.User, "client", c.ipLog, "err", e.err)
			continue
		}
		p.log.Debug("pgproxy: connection ended", "direction", e.dir, "user", c.params.User, "client", c.ipLog, "err", e.err)
	}
}

// terminateUpstream ends the server's session with a Terminate, when the
// stream to it stands at a message boundary, so that the server ends it
// cleanly instead of logging a lost connection.
func (c *conn) terminateUpstream() {
	if c.upMid {
		return
	}
	if c.lc != nil {
		c.lc.uout = pgwire.AppendTerminate(c.lc.uout)
		return
	}
	_ = c.up.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.uw.Write(pgwire.AppendTerminate(nil))
	_ = c.flush()
}

// admitConnection applies the connection limits.
func (c *conn) admitConnection() bool {
	if !c.adm.forConnection(c.p.limits.Load().Connections) {
		return true
	}
	res, denied, err := c.adm.allow(c.ctx)
	if err == nil && denied == scopeNone {
		return true
	}
	scope := denied
	p := c.p
	p.obs.ConnectionDenied(scope)
	e := pgwire.ErrorResponse{Severity: "FATAL", Code: "53300", Message: "too many new connections"}
	if err != nil {
		p.log.Error("pgproxy: connection limit check failed; refusing the connection", "scope", scope.String(), "user", c.params.User, "client", c.ipLog, "err", err)
		e.Detail = "The connection rate limit could not be checked."
	} else {
		e.Detail = fmt.Sprintf("The %s connection rate limit is reached; retry in %s.", scope.label(), retryText(res.RetryAfter))
		p.rejectLog[scope].log(p, slog.LevelInfo, "pgproxy: connection rate limit exceeded", "scope", scope.String(), "user", c.params.User, "client", c.ipLog)
	}
	e.Hint = "Open fewer connections, or reuse them through a connection pool."
	c.reject(e)
	return false
}
