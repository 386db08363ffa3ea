package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// DefaultShutdownTimeout is how long Shutdown lets in-flight requests finish
// when Config.ShutdownTimeout is zero.
const DefaultShutdownTimeout = 15 * time.Second

// Config is the daemon's listeners, the YAML keys of the same names. A nil
// listener is not started.
type Config struct {
	Proxy *ProxyConfig
	Check *CheckConfig
	Envoy *EnvoyConfig
	Admin *AdminConfig

	// Logger receives the listeners' logs. Nil means slog.Default(); a
	// listener's own Logger wins over it.
	Logger *slog.Logger

	// ShutdownTimeout bounds how long Run's shutdown waits for in-flight
	// requests; 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
}

// Server runs the listeners of a Config. The admin routes are served only
// on the admin listener; the proxy and the check API never answer them.
type Server struct {
	cfg   Config
	log   *slog.Logger
	proxy *Proxy
	check *CheckAPI
	envoy *RLS
	admin *Admin

	mu      sync.Mutex
	started bool
	http    []*listener
	errc    chan error
}

// listener is one HTTP listener.
type listener struct {
	name string
	ln   net.Listener
	srv  *http.Server
}

// Addrs are the addresses the listeners are bound to, nil for listeners not
// configured; with port 0 in Listen, they tell the port chosen.
type Addrs struct {
	Proxy, Check, Envoy, Admin net.Addr
}

// New validates cfg and builds its handlers; Start binds the listeners.
func New(cfg Config) (*Server, error) {
	s := &Server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.cfg.ShutdownTimeout <= 0 {
		s.cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	var errs []error
	if c := cfg.Proxy; c != nil {
		pc := *c
		if pc.Logger == nil {
			pc.Logger = s.log
		}
		p, err := NewProxy(pc)
		if err != nil {
			errs = append(errs, err)
		}
		s.proxy = p
	}
	if c := cfg.Check; c != nil {
		cc := *c
		if cc.Logger == nil {
			cc.Logger = s.log
		}
		s.check = NewCheckAPI(cc)
	}
	if c := cfg.Envoy; c != nil {
		ec := *c
		if ec.Logger == nil {
			ec.Logger = s.log
		}
		e, err := NewRLS(ec)
		if err != nil {
			errs = append(errs, err)
		}
		s.envoy = e
	}
	if c := cfg.Admin; c != nil {
		s.admin = NewAdmin(*c)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// Proxy returns the reverse proxy, nil when not configured.
func (s *Server) Proxy() *Proxy { return s.proxy }

// Check returns the check API, nil when not configured.
func (s *Server) Check() *CheckAPI { return s.check }

// Envoy returns the Envoy rate limit service, nil when not configured.
func (s *Server) Envoy() *RLS { return s.envoy }

// Admin returns the admin handler, nil when not configured.
func (s *Server) Admin() *Admin { return s.admin }

// Start binds every configured listener and serves them in the background.
// When one cannot be bound, none is left open.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("server: already started")
	}
	var lns []net.Listener
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	listen := func(what, addr string) (net.Listener, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("server: %s listener: %w", what, err)
		}
		lns = append(lns, ln)
		return ln, nil
	}
	errLog := slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)
	add := func(name, addr string, h http.Handler, tc *tls.Config) error {
		ln, err := listen(name, addr)
		if err != nil {
			return err
		}
		srv := &http.Server{
			Handler:           h,
			TLSConfig:         tc,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          errLog,
		}
		s.http = append(s.http, &listener{name: name, ln: ln, srv: srv})
		return nil
	}
	if s.proxy != nil {
		if err := add("proxy", s.cfg.Proxy.Listen, s.proxy, s.proxy.TLSConfig()); err != nil {
			return err
		}
	}
	if s.check != nil {
		if err := add("check", s.cfg.Check.Listen, s.check, nil); err != nil {
			return err
		}
	}
	if s.admin != nil {
		if err := add("admin", s.cfg.Admin.Listen, s.admin, nil); err != nil {
			return err
		}
	}
	var envoyLn net.Listener
	if s.envoy != nil {
		ln, err := listen("envoy", s.cfg.Envoy.Listen)
		if err != nil {
			return err
		}
		envoyLn = ln
	}
	s.started = true
	s.errc = make(chan error, len(s.http)+1)
	for _, l := range s.http {
		go func() {
			var err error
			if l.srv.TLSConfig != nil {
				err = l.srv.ServeTLS(l.ln, "", "")
			} else {
				err = l.srv.Serve(l.ln)
			}
			if !errors.Is(err, http.ErrServerClosed) {
				s.errc <- fmt.Errorf("server: %s listener: %w", l.name, err)
			}
		}()
		s.log.Info("listening", slog.String("listener", l.name), slog.String("addr", l.ln.Addr().String()))
	}
	if envoyLn != nil {
		s.envoy.bind(envoyLn)
		go func() {
			if err := s.envoy.serve(); err != nil {
				s.errc <- fmt.Errorf("server: envoy listener: %w", err)
			}
		}()
		s.log.Info("listening", slog.String("listener", "envoy"), slog.String("addr", envoyLn.Addr().String()))
	}
	return nil
}

// Addrs returns the bound addresses; call it after Start.
func (s *Server) Addrs() Addrs {
	s.mu.Lock()
	defer s.mu.Unlock()
	var a Addrs
	for _, l := range s.http {
		switch l.name {
		case "proxy":
			a.Proxy = l.ln.Addr()
		case "check":
			a.Check = l.ln.Addr()
		case "admin":
			a.Admin = l.ln.Addr()
		}
	}
	if s.envoy != nil {
		a.Envoy = s.envoy.addr()
	}
	return a
}

// Shutdown drains the server: readiness turns false, the listeners stop
// accepting, in-flight requests (and Envoy calls) finish until ctx ends,
// then whatever is left is closed. The admin listener goes last, so probes
// see the draining state until the end. It returns ctx's error when
// requests had to be cut off. Connections taken over by a protocol upgrade
// (WebSockets through the proxy) are not tracked by net/http and end with
// the process.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.admin != nil {
		s.admin.SetDraining(true)
	}
	s.mu.Lock()
	ls := s.http
	s.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(ls)+1)
	for i, l := range ls {
		if l.name == "admin" {
			continue
		}
		wg.Go(func() { errs[i] = shutdownHTTP(ctx, l.srv) })
	}
	if s.envoy != nil {
		wg.Go(func() { errs[len(ls)] = s.envoy.shutdown(ctx) })
	}
	wg.Wait()
	for i, l := range ls {
		if l.name == "admin" {
			errs[i] = shutdownHTTP(ctx, l.srv)
		}
	}
	return errors.Join(errs...)
}

// shutdownHTTP drains srv until ctx ends, then closes what is left.
func shutdownHTTP(ctx context.Context, srv *http.Server) error {
	err := srv.Shutdown(ctx)
	if err != nil {
		srv.Close()
	}
	return err
}

// Run starts the server, serves until ctx ends or a listener fails, then
// shuts down within Config.ShutdownTimeout.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Start(); err != nil {
		return err
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-s.errc:
		s.log.Error("listener failed; shutting down", slog.Any("error", serveErr))
	}
	s.log.Info("shutting down", slog.Duration("timeout", s.cfg.ShutdownTimeout))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	err := s.Shutdown(sctx)
	return errors.Join(serveErr, err)
}
