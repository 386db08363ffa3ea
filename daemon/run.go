package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
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
}

// httpFrontEnd serves h over HTTP (over TLS when tc is set) with the
// server-wide timeouts.
func httpFrontEnd(name, addr string, h http.Handler, tc *tls.Config, log *slog.Logger) *frontEnd {
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         tc,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return &frontEnd{
		name: name,
		addr: addr,
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

// A runner starts the front ends, reports the first that fails, and drains
// them: readiness off first (draining), then, after delay, every listener
// but the admin one at once, the admin listener last, so probes see the
// draining state until the end.
type runner struct {
	log      *slog.Logger
	fronts   []*frontEnd
	draining func()       // turns readiness off; may be nil
	delay    atomic.Int64 // nanoseconds between readiness off and closing the listeners

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
		ln := lns[i]
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
