package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/internal/netguard"
)

// A frontEnd is one listener of the daemon as the runner sees it: every
// front end (the reverse proxy, the check API, the Envoy service, the
// PostgreSQL proxy, the admin listener) is started, drained and stopped the
// same way.
type frontEnd struct {
	name string // "proxy", "check", "envoy", "postgres", "admin"
	addr string // the configured listen address

	// serve serves on ln until shutdown; it returns nil once shut down.
	serve func(ln net.Listener) error

	// shutdown stops accepting, lets what is in flight finish until ctx
	// ends, then cuts off what is left, returning ctx's error if it had to.
	shutdown func(ctx context.Context) error

	// limits bound the connections the listener accepts (netguard): start
	// wraps the listener in guard, which a reload gives new limits.
	limits netguard.Limits
	guard  *netguard.Listener
}

// connLimits are the connection bounds of b, per client but for the
// peers in exempt (the load balancers in front of the listener).
func connLimits(b config.Bounds, exempt clientip.Prefixes) netguard.Limits {
	return netguard.Limits{MaxConns: b.MaxConnections, MaxConnsPerClient: b.MaxConnectionsPerClient, Exempt: exempt}
}

// httpFrontEnd serves h over HTTP (over TLS when tc is set) within the
// listener's bounds b; exempt are the peers not bound per client.
func httpFrontEnd(name, addr string, h http.Handler, tc *tls.Config, b config.Bounds, exempt clientip.Prefixes, log *slog.Logger) *frontEnd {
	srv := &http.Server{
		Handler:           withBodyTimeout(h, b.BodyTimeout.D()),
		TLSConfig:         tc,
		MaxHeaderBytes:    b.MaxHeaderBytes,
		ReadHeaderTimeout: b.HeaderTimeout.D(),
		IdleTimeout:       b.IdleTimeout.D(),
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: b.MaxConcurrentStreams},
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return &frontEnd{
		name:   name,
		addr:   addr,
		limits: connLimits(b, exempt),
		serve: func(ln net.Listener) error {
			var err error
			if tc != nil {
				err = srv.ServeTLS(ln, "", "")
			} else {
				err = srv.Serve(ln)
			}
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return err
		},
		shutdown: func(ctx context.Context) error {
			err := srv.Shutdown(ctx)
			if err != nil {
				srv.Close()
			}
			return err
		},
	}
}

// withBodyTimeout bounds reading a request's body to d from the end of its
// header. http.Server's ReadTimeout would bound the header and body
// together from the request's first byte, and would stay set while the
// handler waits for the upstream, when net/http's background read of the
// connection would cancel the request; here the deadline is lifted as soon
// as the body has been read.
func withBodyTimeout(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(d)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// A deadlineBody is a request body read under a deadline, which it lifts
// once the body is read to its end.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// A runner starts the front ends, reports the first that fails, and drains
// them: readiness off first (draining), then, after delay, every listener
// but the admin one at once, the admin listener last, so probes see the
// draining state until the end.
type runner struct {
	log      *slog.Logger
	fronts   []*frontEnd
	draining func()                                     // turns readiness off; may be nil
	onRefuse func(listener string, why netguard.Reason) // counts refused connections; may be nil
	delay    atomic.Int64                               // nanoseconds between readiness off and closing the listeners

	mu      sync.Mutex
	started bool
	addrs   map[string]net.Addr
	errc    chan error
}

// setDelay sets the delay between readiness off and closing the listeners.
func (r *runner) setDelay(d time.Duration) { r.delay.Store(int64(d)) }

// start binds every front end's address and serves them in the
// background. When one cannot be bound, none is left open.
func (r *runner) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return errors.New("daemon: already started")
	}
	lns := make([]net.Listener, 0, len(r.fronts))
	for _, f := range r.fronts {
		ln, err := net.Listen("tcp", f.addr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return fmt.Errorf("%s listener: %w", f.name, err)
		}
		lns = append(lns, ln)
	}
	r.started = true
	r.addrs = make(map[string]net.Addr, len(lns))
	r.errc = make(chan error, len(lns))
	for i, f := range r.fronts {
		f.guard = netguard.Wrap(lns[i], f.limits, r.refused(f.name))
		ln := f.guard
		r.addrs[f.name] = ln.Addr()
		go func() {
			if err := f.serve(ln); err != nil {
				r.errc <- fmt.Errorf("%s listener: %w", f.name, err)
			}
		}()
		r.log.Info("listening", slog.String("listener", f.name), slog.String("addr", ln.Addr().String()))
	}
	return nil
}

// refused is the netguard callback of the named listener: it counts the
// refusal by reason.
func (r *runner) refused(name string) func(netip.Addr, netguard.Reason) {
	if r.onRefuse == nil {
		return nil
	}
	return func(_ netip.Addr, why netguard.Reason) { r.onRefuse(name, why) }
}

// setLimits gives the named listener new connection bounds, from its next
// connection on; before start, its front end keeps them for start.
func (r *runner) setLimits(name string, l netguard.Limits) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.fronts {
		if f.name == name {
			f.limits = l
			if f.guard != nil {
				f.guard.SetLimits(l)
			}
		}
	}
}

// open returns the connections open on the named listener.
func (r *runner) open(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.fronts {
		if f.name == name && f.guard != nil {
			return f.guard.Open()
		}
	}
	return 0
}

// addr returns the bound address of the named front end, nil before start
// or when it is not configured.
func (r *runner) addr(name string) net.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addrs[name]
}

// failed delivers the error of a front end that stopped serving on its own.
func (r *runner) failed() <-chan error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errc
}

// shutdown drains the front ends until ctx ends; see runner.
func (r *runner) shutdown(ctx context.Context) error {
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	if !started {
		return nil
	}
	if r.draining != nil {
		r.draining()
	}
	// Load balancers stop sending new requests once they see readiness
	// fail; until then the listeners keep serving.
	if delay := time.Duration(r.delay.Load()); delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
	}
	errs := make([]error, len(r.fronts))
	var wg sync.WaitGroup
	for i, f := range r.fronts {
		if f.name != "admin" {
			wg.Go(func() { errs[i] = f.shutdown(ctx) })
		}
	}
	wg.Wait()
	for i, f := range r.fronts {
		if f.name == "admin" {
			errs[i] = f.shutdown(ctx)
		}
	}
	return errors.Join(errs...)
}
