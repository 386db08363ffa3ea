package pgproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/pgproxy/pgmode"
	"github.com/floodgate-go/floodgate/pgproxy/pgwire"
)

// Defaults for Config's zero values.
const (
	// DefaultMaxMessageSize is PostgreSQL's own bound on one message
	// (MaxAllocSize less one byte): a larger length can only be garbage.
	DefaultMaxMessageSize = pgwire.MaxMessageSize
	// DefaultMaxStartupSize is PostgreSQL's bound on a startup packet
	// (MAX_STARTUP_PACKET_LENGTH).
	DefaultMaxStartupSize = pgwire.MaxStartupSize
	// DefaultConnectTimeout bounds dialing the upstream server, TLS included.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultStartupTimeout bounds a client's startup: from accepting the
	// connection to the StartupMessage (or CancelRequest), TLS handshake and
	// PROXY header included. Authentication is the server's to time out
	// (authentication_timeout). It is pgmode.DefaultStartupTimeout, which
	// the daemon's postgres.bounds.header_timeout defaults to as well.
	DefaultStartupTimeout = pgmode.DefaultStartupTimeout
	// DefaultRejectLogInterval is the least time between two log lines about
	// rejected queries of one scope.
	DefaultRejectLogInterval = time.Second
)

// Config configures a Proxy. Its fields map one-to-one onto the daemon's
// postgres listener in YAML.
type Config struct {
	// Listen is the address ListenAndServe listens on, e.g.
	// "127.0.0.1:6432". Serve ignores it.
	Listen string

	// Upstream is the PostgreSQL server every client connection is paired
	// with, as host:port.
	Upstream string

	// TLS, when set, makes the proxy terminate TLS for clients: SSLRequest
	// is answered 'S', and a connection that starts with a TLS ClientHello
	// (sslnegotiation=direct) is served. It must hold a certificate. When
	// nil, SSLRequest is answered 'N' and direct TLS connections are closed.
	// The proxy adds the ALPN protocol "postgresql", which direct TLS
	// requires.
	TLS *tls.Config

	// UpstreamTLS, when set, makes the proxy speak TLS to Upstream; a server
	// that refuses is an upstream connect error. Its ServerName defaults to
	// Upstream's host. Independent of TLS.
	UpstreamTLS *tls.Config

	// Limits are the query and connection limits; SetLimits replaces them.
	Limits Limits

	// ProxyProtocolFrom lists the load balancers trusted to send a PROXY
	// protocol header (v1 or v2) naming the real client. A connection from
	// one of them may start with such a header; from any other peer, a
	// header is not read (the connection then fails as malformed), so no
	// client can choose its own address. Entries follow clientip's rule of
	// a trusted peer (clientip.ParsePrefix: no host bits set, not every
	// address; IPv4 written in IPv6 read as IPv4) and a peer is matched as
	// clientip.Prefixes.Contains matches it (its zone removed, so
	// fe80::1%eth0 is in fe80::/10).
	ProxyProtocolFrom clientip.Prefixes

	// ChargeEmptyQuery charges simple queries that hold only whitespace,
	// semicolons and comments, such as the "-- ping" and ";" connection
	// pools send to check a connection. By default they pass uncharged.
	ChargeEmptyQuery bool

	// Replication says what happens to replication connections (a startup
	// parameter replication other than false/off/no/0).
	Replication ReplicationMode

	// MaxMessageSize bounds a client message after startup, length field
	// included; a larger one closes the client's connection. 0 means
	// DefaultMaxMessageSize.
	MaxMessageSize int

	// MaxStartupSize bounds a startup packet. 0 means DefaultMaxStartupSize.
	MaxStartupSize int

	// ConnectTimeout bounds dialing Upstream. 0 means DefaultConnectTimeout.
	ConnectTimeout time.Duration

	// StartupTimeout bounds a client's startup. 0 means
	// DefaultStartupTimeout.
	StartupTimeout time.Duration

	// RejectLogInterval is the least time between two log lines about
	// rejected queries of one scope; the lines in between are counted and
	// the count is logged with the next one. 0 means
	// DefaultRejectLogInterval; negative logs every rejection.
	RejectLogInterval time.Duration

	// Logger receives connection errors and sampled rejections. Nil
	// discards them.
	Logger *slog.Logger

	// Observer is told what the proxy does: queries decided, waits,
	// connections, bytes relayed. metrics.NewPostgres returns one that
	// exports Prometheus metrics. Nil means nobody.
	Observer Observer
}

// ReplicationMode says how replication connections are treated; it lives
// in package pgmode, which the configuration reads without this package.
type ReplicationMode = pgmode.ReplicationMode

// The replication modes.
const (
	// ReplicationCharge limits the queries of replication connections like
	// any other (replication commands are simple queries).
	ReplicationCharge = pgmode.ReplicationCharge
	// ReplicationExempt relays replication connections without query
	// limits; connection limits still apply.
	ReplicationExempt = pgmode.ReplicationExempt
	// ReplicationRefuse answers replication connections FATAL 28000 before
	// they reach the server.
	ReplicationRefuse = pgmode.ReplicationRefuse
)

// Limits are the limits a Proxy applies. A zero Limits limits nothing.
type Limits struct {
	// Global, PerUser and PerIP limit queries, checked in this order and
	// all or nothing: a query denied by one scope is refunded to the scopes
	// before it. Global's key is the constant GlobalKey, PerUser's the
	// startup parameter user, PerIP's the client's address (IPv6 by /64).
	Global, PerUser, PerIP Scope

	// Connections limit the rate of new connections.
	Connections ConnLimits

	// ConcurrentQueries, when set, bounds the queries of one user in
	// flight at once, keyed by the startup parameter user: a connection
	// holds one of its user's slots from a Query, FunctionCall or executing
	// extended cycle until the server's ReadyForQuery that ends all it has
	// sent outside a transaction block (a pipelining connection holds one
	// slot, as the server runs one query of it at a time; a transaction
	// holds it from its first statement to its end, idle or not), and
	// gives it back when it disconnects. The slot is free again before
	// that ReadyForQuery reaches the client. A query that finds its user's
	// slots taken waits in the Limiter's FIFO queue (Options.MaxWaiting,
	// MaxWait), else is answered ERROR 53300 and the session goes on; a
	// statement inside a transaction block is never refused. The slot is
	// taken before the rate limits are asked, and given back when they
	// deny the query.
	ConcurrentQueries *concurrency.Limiter

	// Local says that the limiters of Global, PerUser and PerIP answer
	// from this process's memory (memstore) and never block. On Linux the
	// event loop then decides a query where it reads it; otherwise, and
	// whenever a decision may wait (in line under MaxWait, for answers the
	// server owes, for a concurrent-query slot), the connection stops
	// being read while a goroutine decides, so that a store's round trip
	// never stalls the loop's other connections. Set it only when it
	// holds: a Redis round trip decided inline holds up every connection
	// of its loop.
	Local bool
}

// A Scope is one level of query limits.
type Scope struct {
	// Limiter decides; nil means this scope limits nothing. Its policy's
	// overrides give single users or addresses their own limits.
	Limiter floodgate.Limiter

	// MaxWait, when positive, makes a query that this scope denies wait
	// instead of failing, if it would pass within MaxWait of its arrival.
	// A waiting query ends early when the client sends a CancelRequest for
	// it or disconnects.
	MaxWait time.Duration
}

// ConnLimits limit the rate at which new connections are accepted, checked
// after the StartupMessage and before the server sees the connection. A
// connection denied is answered FATAL 53300.
type ConnLimits struct {
	// PerUser is keyed by the startup parameter user, PerIP by the client's
	// address; nil limits nothing. PerUser is checked first.
	PerUser, PerIP floodgate.Limiter
}

// GlobalKey is the key of every query under Limits.Global, so proxies that
// share a store share one global limit.
const GlobalKey = "global"

// A Proxy relays PostgreSQL connections to one upstream server and limits
// their queries. It is safe for concurrent use.
type Proxy struct {
	cfg       Config
	tls       *tls.Config // cfg.TLS with ALPN "postgresql"
	upTLS     *tls.Config
	log       *slog.Logger
	limits    atomic.Pointer[Limits]
	trusted   clientip.Prefixes
	cancels   cancelMap
	queues    waitQueues
	clock     clock
	obs       Observer
	rejectLog [numScopes]sampler
	loops     loops // the event loops (loop_linux.go)
	loopStats struct{ conns, parked, stopped atomic.Uint64 }

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closed    bool
	wg        sync.WaitGroup
}

// ErrProxyClosed is returned by Serve and ListenAndServe after Close or
// Shutdown.
var ErrProxyClosed = errors.New("pgproxy: proxy closed")

// New validates cfg and returns a Proxy. It does not listen yet: call Serve
// or ListenAndServe.
func New(cfg Config) (*Proxy, error) {
	if cfg.Upstream == "" {
		return nil, errors.New("pgproxy: Config.Upstream is empty; set it to the PostgreSQL server's host:port")
	}
	host, _, err := net.SplitHostPort(cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("pgproxy: Config.Upstream %q is not host:port: %w", cfg.Upstream, err)
	}
	if cfg.MaxMessageSize < 0 || cfg.MaxStartupSize < 0 || cfg.ConnectTimeout < 0 || cfg.StartupTimeout < 0 {
		return nil, errors.New("pgproxy: MaxMessageSize, MaxStartupSize, ConnectTimeout and StartupTimeout must not be negative; 0 means the default")
	}
	if cfg.MaxMessageSize == 0 {
		cfg.MaxMessageSize = DefaultMaxMessageSize
	}
	if cfg.MaxMessageSize < 5 {
		return nil, fmt.Errorf("pgproxy: MaxMessageSize %d is below the smallest message (5 bytes)", cfg.MaxMessageSize)
	}
	if cfg.MaxStartupSize == 0 {
		cfg.MaxStartupSize = DefaultMaxStartupSize
	}
	if cfg.MaxStartupSize < 8 {
		return nil, fmt.Errorf("pgproxy: MaxStartupSize %d is below the smallest startup packet (8 bytes)", cfg.MaxStartupSize)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.StartupTimeout == 0 {
		cfg.StartupTimeout = DefaultStartupTimeout
	}
	if cfg.RejectLogInterval == 0 {
		cfg.RejectLogInterval = DefaultRejectLogInterval
	}
	if cfg.Replication > ReplicationRefuse {
		return nil, fmt.Errorf("pgproxy: unknown ReplicationMode %d", cfg.Replication)
	}
	if err := cfg.Limits.validate(); err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg:       cfg,
		log:       cfg.Logger,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*conn]struct{}),
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if cfg.TLS != nil {
		if len(cfg.TLS.Certificates) == 0 && cfg.TLS.GetCertificate == nil && cfg.TLS.GetConfigForClient == nil {
			return nil, errors.New("pgproxy: Config.TLS has no certificate; set Certificates (or GetCertificate), or leave TLS nil to refuse TLS")
		}
		p.tls = cfg.TLS.Clone()
		p.tls.NextProtos = append([]string{alpnPostgres}, p.tls.NextProtos...)
	}
	if cfg.UpstreamTLS != nil {
		p.upTLS = cfg.UpstreamTLS.Clone()
		if p.upTLS.ServerName == "" {
			p.upTLS.ServerName = host
		}
	}
	for _, pfx := range cfg.ProxyProtocolFrom {
		// Each entry is held to clientip's rule of a trusted peer, as
		// clientip.ParsePrefixes (the daemon's reader) holds it.
		if !pfx.IsValid() {
			return nil, errors.New("pgproxy: Config.ProxyProtocolFrom holds an invalid prefix")
		}
		folded, err := clientip.ParsePrefix(pfx.String())
		if err != nil {
			return nil, fmt.Errorf("pgproxy: Config.ProxyProtocolFrom %s: %v", pfx, err)
		}
		p.trusted = append(p.trusted, folded)
	}
	p.cancels.m = make(map[uint32]*conn)
	p.queues.init()
	p.clock = systemClock{}
	if p.obs = cfg.Observer; p.obs == nil {
		p.obs = nopObserver{}
	}
	p.limits.Store(&cfg.Limits)
	return p, nil
}

// alpnPostgres is the ALPN protocol PostgreSQL clients offer.
const alpnPostgres = "postgresql"

func (l *Limits) validate() error {
	for _, s := range []struct {
		name string
		sc   Scope
	}{{"Global", l.Global}, {"PerUser", l.PerUser}, {"PerIP", l.PerIP}} {
		if s.sc.MaxWait < 0 {
			return fmt.Errorf("pgproxy: Limits.%s.MaxWait %s is negative; use 0 for no waiting", s.name, s.sc.MaxWait)
		}
		if s.sc.MaxWait > 0 && s.sc.Limiter == nil {
			return fmt.Errorf("pgproxy: Limits.%s has a MaxWait but no Limiter", s.name)
		}
	}
	return nil
}

// SetLimits replaces the limits atomically. Connections stay open; each
// query is decided under the limits in force when it arrives. A limiter
// that is kept (or rebuilt over the same store and policy name) keeps its
// state.
func (p *Proxy) SetLimits(l Limits) error {
	if err := l.validate(); err != nil {
		return err
	}
	p.limits.Store(&l)
	return nil
}

// LoopStats are counts of what a Proxy's event loops did since it
// started, for status pages and tests.
type LoopStats struct {
	// Connections is the number of connections relayed by an event loop
	// after their startup (plain TCP on Linux; the others are relayed by
	// goroutines).
	Connections uint64
	// Parked is the number of decisions a loop could not take where it
	// read the query and handed to a goroutine: a limiter not
	// Limits.Local, a wait in line or for a concurrent-query slot, answers
	// the server still owed. With Local limits and nothing to wait for it
	// stays 0.
	Parked uint64
	// Stopped is the number of loops that stopped on their own (their
	// epoll_wait failed), closing their connections; each is logged at
	// Warn. New sessions go to the loops still running, and to goroutines
	// once none runs.
	Stopped uint64
}

// LoopStats returns what the event loops did.
func (p *Proxy) LoopStats() LoopStats {
	return LoopStats{Connections: p.loopStats.conns.Load(), Parked: p.loopStats.parked.Load(), Stopped: p.loopStats.stopped.Load()}
}

// Limits returns the limits in force.
func (p *Proxy) Limits() Limits { return *p.limits.Load() }

// ListenAndServe listens on Config.Listen and serves until Close.
func (p *Proxy) ListenAndServe() error {
	if p.cfg.Listen == "" {
		return errors.New("pgproxy: Config.Listen is empty; set it to host:port")
	}
	ln, err := net.Listen("tcp", p.cfg.Listen)
	if err != nil {
		return fmt.Errorf("pgproxy: listen: %w", err)
	}
	return p.Serve(ln)
}

// Serve accepts connections on ln until Close or Shutdown, and closes ln.
// It returns ErrProxyClosed after those, or the listener's error.
//
// On Linux a plain-TCP connection is relayed by an event loop after its
// startup. A listener that wraps its connections (to count them, say)
// keeps that when its wrapper has a method NetConn() net.Conn returning
// the *net.TCPConn (or another such wrapper), and passes bytes unchanged:
// the loop relays the TCP socket and closes the wrapper when the
// connection ends. Other wrappers are relayed by goroutines.
func (p *Proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return ErrProxyClosed
	}
	p.listeners[ln] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, ln)
		p.mu.Unlock()
		ln.Close()
	}()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return ErrProxyClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTooManyFiles) {
				// Out of file descriptors, say: retry rather than stop
				// serving, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				p.log.Warn("pgproxy: accept failed; retrying", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("pgproxy: accept: %w", err)
		}
		backoff = 0
		c := newConn(p, nc)
		if !p.track(c) {
			nc.Close()
			return ErrProxyClosed
		}
		go c.serve()
	}
}

func (p *Proxy) track(c *conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	return true
}

func (p *Proxy) untrack(c *conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	p.wg.Done()
}

// Close stops every listener and closes every connection at once.
func (p *Proxy) Close() error {
	p.stopListening()
	p.mu.Lock()
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.loops.stop()
	return nil
}

// Shutdown stops every listener, then waits for the open connections to
// end until ctx is done, when it closes those left. It returns ctx's error
// if it had to close any.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.stopListening()
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		p.loops.stop()
		return nil
	case <-ctx.Done():
		p.Close()
		return ctx.Err()
	}
}

func (p *Proxy) stopListening() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for ln := range p.listeners {
		ln.Close()
	}
}
