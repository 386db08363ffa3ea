// Package netguard bounds how many connections a listener holds, in all
// and from one client address, so that no client can take a listener's
// file descriptors and memory for itself by opening connections and
// leaving them open. Every listener of the daemon (the reverse proxy, the
// check API, the Envoy service, the PostgreSQL proxy, the admin listener)
// accepts through one Listener.
//
// A connection over a bound is accepted and closed at once, never left
// waiting in the kernel's backlog: the client learns at once that it was
// refused, and the listener keeps accepting everyone else.
package netguard

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/clientip"
)

// Limits are the bounds of one Listener. A zero field is no bound.
type Limits struct {
	// MaxConns bounds the connections open at once.
	MaxConns int

	// MaxConnsPerClient bounds the connections open at once from one
	// client address: an IPv4 address, or an IPv6 /64 (which one
	// subscriber is given), as the library keys clients by default.
	MaxConnsPerClient int

	// Exempt lists the peers MaxConnsPerClient does not apply to: the
	// load balancers every client's connections come through, each of
	// which is many clients. They still count towards MaxConns.
	Exempt clientip.Prefixes
}

// A Reason says which bound refused a connection.
type Reason string

// The reasons.
const (
	ReasonListener Reason = "listener"   // MaxConns
	ReasonClient   Reason = "per_client" // MaxConnsPerClient
)

// A Listener is a net.Listener whose Accept refuses the connections over
// its Limits. It is safe for concurrent use.
type Listener struct {
	net.Listener

	limits   atomic.Pointer[Limits]
	onRefuse func(peer netip.Addr, why Reason)

	mu     sync.Mutex
	open   int
	client map[string]int // open connections by client key
}

// Wrap returns ln bounded by l. onRefuse, when not nil, is called for each
// connection refused (to count it or log it), before the connection is
// closed, and must not block.
func Wrap(ln net.Listener, l Limits, onRefuse func(peer netip.Addr, why Reason)) *Listener {
	g := &Listener{Listener: ln, onRefuse: onRefuse, client: make(map[string]int)}
	g.SetLimits(l)
	return g
}

// SetLimits replaces the limits. Connections already open stay open: a
// lower bound refuses new connections until enough of them have closed.
func (g *Listener) SetLimits(l Limits) { g.limits.Store(&l) }

// Open returns the number of connections accepted and not yet closed.
func (g *Listener) Open() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// Accept waits for the next connection within the limits; connections over
// them are closed as they arrive. Its errors are the wrapped listener's.
func (g *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := g.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c, ok := g.admit(nc); ok {
			return c, nil
		}
	}
}

// admit counts nc in, or closes it and reports false when a bound is
// reached.
func (g *Listener) admit(nc net.Conn) (net.Conn, bool) {
	l := g.limits.Load()
	peer := peerOf(nc)
	key := ""
	if l.MaxConnsPerClient > 0 && peer.IsValid() && !l.Exempt.Contains(peer) {
		key = (*clientip.Resolver)(nil).AddrKey(peer)
	}
	why := Reason("")
	g.mu.Lock()
	switch {
	case l.MaxConns > 0 && g.open >= l.MaxConns:
		why = ReasonListener
	case key != "" && g.client[key] >= l.MaxConnsPerClient:
		why = ReasonClient
	default:
		g.open++
		if key != "" {
			g.client[key]++
		}
	}
	g.mu.Unlock()
	if why != "" {
		// The refusal is reported before the client can see it, so that
		// whoever watches the counts and got the reset finds it counted.
		if g.onRefuse != nil {
			g.onRefuse(peer, why)
		}
		// No lingering: the refused client gets a reset, and the
		// descriptor is free at once.
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		nc.Close()
		return nil, false
	}
	return &conn{Conn: nc, g: g, key: key}, true
}

func (g *Listener) release(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open--
	if key != "" {
		if n := g.client[key] - 1; n > 0 {
			g.client[key] = n
		} else {
			delete(g.client, key)
		}
	}
}

// peerOf is the IP address at the other end of nc, the zero Addr when it
// has none (a Unix socket).
func peerOf(nc net.Conn) netip.Addr {
	if ta, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	ap, err := netip.ParseAddrPort(nc.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// A conn is an admitted connection; closing it frees its place once,
// however often it is closed.
type conn struct {
	net.Conn
	g    *Listener
	key  string
	once sync.Once
}

// NetConn returns the connection it wraps, whose bytes it passes
// unchanged: a server may relay that connection's socket itself (pgproxy's
// event loops do), closing the wrapper when it is done.
func (c *conn) NetConn() net.Conn { return c.Conn }

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.g.release(c.key) })
	return err
}
