// Package daemon is floodgate serve: it turns a configuration file
// (package config) into running listeners (proxy, checkapi, envoyrls,
// pgproxy, admin, status) over an engine (memstore, redisstore, hybrid,
// failover), with metrics (package metrics), and swaps in each new
// configuration its file watcher (Watch) delivers.
//
// A reload rebuilds the policies, routes and Envoy rules and swaps them in
// atomically; the engine, and so every key's state, stays. A policy whose
// limits did not change therefore keeps its clients' counts, and a policy
// whose limits changed starts from the state it had (engines keep state by
// policy name). The storage section and the listeners' addresses cannot
// change by a reload: a new storage is an error (the old configuration keeps
// serving) and new addresses are logged as needing a restart.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/admin"
	"github.com/floodgate-go/floodgate/checkapi"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/envoyrls"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/buildinfo"
	"github.com/floodgate-go/floodgate/internal/certfile"
	"github.com/floodgate-go/floodgate/internal/denylog"
	"github.com/floodgate-go/floodgate/internal/netguard"
	"github.com/floodgate-go/floodgate/internal/yamlpos"
	"github.com/floodgate-go/floodgate/metrics"
	"github.com/floodgate-go/floodgate/pgproxy"
	"github.com/floodgate-go/floodgate/proxy"
	"github.com/floodgate-go/floodgate/telemetry"
)

// A Daemon serves one configuration at a time. Build it with New, run it
// with Run, and hand it new configurations with Apply.
type Daemon struct {
	log       *slog.Logger
	level     *slog.LevelVar  // the log's level, which a reload may change
	transport *http.Transport // every generation's proxy's, to the upstream
	reg       *prometheus.Registry
	m         *metrics.Metrics
	engine    *engine
	conc      *concLimits // the routes' concurrency limits, kept across reloads
	overrides *runtimeOverrides
	run       *runner
	check     *checkapi.API        // nil without a check listener
	envoy     *envoyrls.Service    // nil without an envoy listener
	pg        *pgproxy.Proxy       // nil without a postgres listener
	admin     *admin.Admin         // nil without an admin listener
	tel       *telemetry.Telemetry // nil without a telemetry section
	status    *statusPage
	cur       atomic.Pointer[generation]
	mu        sync.Mutex // serialises Apply

	noStatus bool // Options.NoStatus

	reloads      *prometheus.CounterVec
	reloadErrors prometheus.Counter
	lastReload   prometheus.Gauge
	shadowed     *prometheus.CounterVec
	upstreamErrs *prometheus.CounterVec
	clientErrs   *prometheus.CounterVec
	connsRefused *prometheus.CounterVec
}

// Options are what the command line adds to a configuration.
type Options struct {
	// Logger overrides the configuration's log section, e.g. in tests
	// (a reload then cannot change the level).
	Logger *slog.Logger

	// LogOutput is where the daemon's own logger (the log section's
	// format and level) writes. Nil means os.Stderr.
	LogOutput io.Writer

	// NoStatus leaves decisions unrecorded: the status page then shows no
	// top keys. The benchmarks use it to measure what recording costs.
	NoStatus bool

	// Clock, when set, replaces the storage section's engine with a memory
	// engine on this clock (with the section's memory.max_keys); every
	// policy, route and front end is built as serve builds it. floodgate
	// replay decides recorded traffic so, on the log's own time.
	Clock clock.Clock
}

// New builds the engine, the metrics and the front ends of cfg. It does not
// listen yet: call Start. `floodgate validate` runs New (and Close) on the
// file it checks, so a file that validates builds exactly what serve builds;
// only binding the listeners is left to Start.
func New(cfg *config.Config, o Options) (*Daemon, error) {
	d := &Daemon{log: o.Logger, level: new(slog.LevelVar), reg: prometheus.NewRegistry(), noStatus: o.NoStatus,
		transport: proxy.NewTransport()}
	if d.log == nil {
		w := o.LogOutput
		if w == nil {
			w = os.Stderr
		}
		d.level.Set(logLevel(cfg.Log))
		d.log = newLogger(w, cfg.Log.Format, d.level)
	}
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := metrics.New(d.reg, metrics.Options{})
	if err != nil {
		return nil, err
	}
	d.m = m
	d.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "config_reloads_total",
		Help: "Configuration reloads by result (success or error)."}, []string{"result"})
	d.reloadErrors = prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "config_reload_errors_total",
		Help: "Configuration reloads rejected; the previous configuration kept serving."})
	d.lastReload = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metrics.Namespace, Name: "config_last_reload_success_timestamp_seconds",
		Help: "When the configuration in service was loaded, in Unix seconds."})
	d.shadowed = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "shadow_denials_total",
		Help: "Requests a shadow route or descriptor would have refused, by route or descriptor."}, []string{"name"})
	d.upstreamErrs = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "proxy_upstream_errors_total",
		Help: "Proxied requests answered 502 because the upstream failed, by route; a client's fault is not counted here."}, []string{"route"})
	d.clientErrs = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "proxy_client_errors_total",
		Help: "Proxied requests that failed by their client's fault, by route and reason (body_timeout: answered 408; body_broken: 400; gone: the client went away before its answer, e.g. a reset HTTP/2 stream)."}, []string{"route", "reason"})
	d.connsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "connections_refused_total",
		Help: "Connections closed as they were accepted, by listener and by the bound they were over (listener: max_connections, per_client: max_connections_per_client)."}, []string{"listener", "reason"})
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metrics.Namespace, Name: "build_info",
		Help: "The floodgate binary serving: its version, commit and Go version (always 1)."}, []string{"version", "revision", "goversion"})
	bi := buildinfo.Read()
	buildInfo.WithLabelValues(bi.Version, bi.Revision, bi.GoVersion).Set(1)
	d.reg.MustRegister(d.reloads, d.reloadErrors, d.lastReload, d.shadowed, d.upstreamErrs, d.clientErrs, d.connsRefused, buildInfo)

	if d.engine, err = newEngine(cfg.Storage, o.Clock, m, d.reg, d.log); err != nil {
		return nil, errAt(cfg, "storage", err)
	}
	if d.overrides, err = newRuntimeOverrides(d.engine, cfg.Storage, o.Clock, d.log); err != nil {
		d.engine.close()
		return nil, errAt(cfg, "storage", err)
	}
	d.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metrics.Namespace, Name: "runtime_overrides",
		Help: "Runtime overrides in force (set through /v1/overrides, on this instance or another sharing its Redis)."},
		func() float64 { return float64(len(d.overrides.table.Entries())) }))
	if d.conc, err = newConcLimits(d.engine, cfg.Storage); err != nil {
		d.engine.close()
		return nil, errAt(cfg, "storage", err)
	}
	if d.status, err = d.newStatus(cfg); err != nil {
		d.engine.close()
		return nil, err
	}
	if d.tel, err = telemetry.New(cfg.Telemetry, d.reg, d.log); err != nil {
		d.engine.close()
		return nil, errAt(cfg, "telemetry", err)
	}
	g, err := d.build(cfg)
	if err != nil {
		d.engine.close()
		d.dropTelemetry()
		return nil, err
	}
	d.engine.setLeases(g.cfg)
	d.cur.Store(g)
	d.conc.commit()
	if errs := d.newFrontEnds(g); len(errs) > 0 {
		d.engine.close()
		d.dropTelemetry()
		return nil, errs.Sorted()
	}
	for _, f := range d.run.fronts {
		d.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metrics.Namespace, Name: "connections_open",
			Help: "Connections accepted within the listener's bounds and not yet closed.", ConstLabels: prometheus.Labels{"listener": f.name}},
			func() float64 { return float64(d.run.open(f.name)) }))
	}
	d.reloads.WithLabelValues("success")
	d.reloads.WithLabelValues("error")
	d.lastReload.SetToCurrentTime()
	return d, nil
}

// Policies is the number of policies in service, those of the PostgreSQL
// proxy and of the Envoy rules included.
func (d *Daemon) Policies() int { return len(d.cur.Load().limiters) }

// Logger is the daemon's logger.
func (d *Daemon) Logger() *slog.Logger { return d.log }

// Registry is the daemon's metrics registry, which /metrics serves.
func (d *Daemon) Registry() *prometheus.Registry { return d.reg }

// Config returns the configuration in service.
func (d *Daemon) Config() *config.Config { return d.cur.Load().cfg }

// Addrs are the addresses the listeners are bound to, nil for listeners
// not configured; with port 0 in a listen address, they tell the port
// chosen.
type Addrs struct {
	Proxy, Check, Envoy, Postgres, Admin net.Addr
}

// Addrs returns the listeners' addresses once Start has bound them.
func (d *Daemon) Addrs() Addrs {
	return Addrs{
		Proxy:    d.run.addr("proxy"),
		Check:    d.run.addr("check"),
		Envoy:    d.run.addr("envoy"),
		Postgres: d.run.addr("postgres"),
		Admin:    d.run.addr("admin"),
	}
}

// Start binds the listeners and serves in the background. When one cannot
// be bound, none is left open.
func (d *Daemon) Start() error {
	d.overrides.start()
	if err := d.run.start(); err != nil {
		d.overrides.shutdown()
		return err
	}
	d.status.start()
	return nil
}

// Failed delivers the error of a listener that stopped serving on its own
// (after Start).
func (d *Daemon) Failed() <-chan error { return d.run.failed() }

// Shutdown stops a daemon started with Start: readiness fails first, the
// listeners stop accepting, in-flight requests and sessions finish (up to
// ctx), the admin listener goes last, and the engine closes.
func (d *Daemon) Shutdown(ctx context.Context) error {
	err := d.run.shutdown(ctx)
	d.status.shutdown()
	d.overrides.shutdown()
	d.engine.close()
	// Last, so that the metrics exported hold every decision made. A
	// receiver that is down is logged, not an error of the shutdown.
	if terr := d.tel.Shutdown(ctx); terr != nil {
		d.log.Warn("telemetry: the last export failed", "error", terr)
	}
	return err
}

// Close releases what New built, for a daemon that was never started
// (`floodgate validate`).
func (d *Daemon) Close() {
	d.status.shutdown()
	d.overrides.shutdown()
	d.engine.close()
	d.dropTelemetry()
}

// dropTelemetry stops the exporters of a daemon that served nothing, so
// nothing is exported: the canceled context skips their last export.
func (d *Daemon) dropTelemetry() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d.tel.Shutdown(ctx)
}

// Apply swaps in cfg. On an error the configuration in service keeps
// serving; the error is logged and counted
// (floodgate_config_reload_errors_total).
func (d *Daemon) Apply(cfg *config.Config) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.apply(cfg)
	d.status.reloaded(cfg, err)
	if err != nil {
		d.reloads.WithLabelValues("error").Inc()
		d.reloadErrors.Inc()
		d.log.Error("configuration rejected; the previous one keeps serving", "file", cfg.File, "error", err)
		return err
	}
	d.reloads.WithLabelValues("success").Inc()
	d.lastReload.SetToCurrentTime()
	d.log.Info("configuration reloaded", "file", cfg.File, "version", short(cfg.Digest))
	return nil
}

// ReloadFailed records a configuration that could not even be loaded (a
// parse error the watcher reported).
func (d *Daemon) ReloadFailed(err error) {
	d.status.reloaded(nil, err)
	d.reloads.WithLabelValues("error").Inc()
	d.reloadErrors.Inc()
	d.log.Error("configuration rejected; the previous one keeps serving", "error", err)
}

func (d *Daemon) apply(cfg *config.Config) error {
	old := d.cur.Load().cfg
	if refused := refusedChanges(old, cfg); len(refused) > 0 {
		return refusal(cfg, refused)
	}
	g, err := d.build(cfg)
	if err != nil {
		return err
	}
	if d.pg != nil {
		if err := d.pg.SetLimits(d.postgresLimits(cfg.Postgres, g)); err != nil {
			return errAt(cfg, "postgres", err)
		}
	}
	// Everything is built: swap. A request sees the old generation or the
	// new one, never a mix.
	d.engine.setLeases(g.cfg)
	d.cur.Store(g)
	d.conc.commit()
	if d.check != nil {
		d.check.SetPolicies(g.limiters)
		d.check.SetHeaders(checkHeaders(cfg))
		d.check.SetToken(cfg.Check.Token)
	}
	if d.envoy != nil {
		d.envoy.SetRules(cfg.Envoy.Rules, g.limiters)
		d.envoy.SetMode(envoyMode(cfg.Envoy))
		d.envoy.SetToken(cfg.Envoy.Token)
	}
	if d.admin != nil {
		d.admin.SetToken(cfg.Admin.Token)
	}
	d.engine.setCredentials(cfg.Storage.Redis)
	d.setConnLimits(cfg)
	d.level.Set(logLevel(cfg.Log))
	d.run.setDelay(cfg.ShutdownDelay.D())
	names := make([]string, 0, len(g.limiters))
	for name := range g.limiters {
		names = append(names, name)
	}
	d.m.Retain(names)
	return nil
}

// setConnLimits gives every listener the connection bounds of cfg (the
// bounds and the exempt peers), which apply from the next connection on.
func (d *Daemon) setConnLimits(cfg *config.Config) {
	if p := cfg.Proxy; p != nil {
		d.run.setLimits("proxy", connLimits(p.Bounds, proxyExempt(p)))
	}
	if c := cfg.Check; c != nil {
		d.run.setLimits("check", connLimits(c.Bounds, nil))
	}
	if e := cfg.Envoy; e != nil {
		d.run.setLimits("envoy", connLimits(e.Bounds, nil))
	}
	if pg := cfg.Postgres; pg != nil {
		d.run.setLimits("postgres", connLimits(pg.Bounds, postgresExempt(pg)))
	}
	if a := cfg.Admin; a != nil {
		d.run.setLimits("admin", connLimits(a.Bounds, nil))
	}
}

// proxyExempt are the peers the proxy listener does not bound per client:
// its trusted proxies, each of which carries many clients' connections
// (validated with the configuration).
func proxyExempt(p *config.Proxy) clientip.Prefixes {
	ps, _ := clientip.ParsePrefixes(p.ClientIP.TrustedProxies)
	return ps
}

// postgresExempt are the load balancers trusted to send a PROXY header.
func postgresExempt(pg *config.Postgres) clientip.Prefixes {
	ps, _ := clientip.ParsePrefixes(pg.ProxyProtocolFrom)
	return ps
}

// envoyBounds are the Envoy listener's bounds as the service takes them:
// header_timeout to set a connection up, idle_timeout for a connection
// without calls.
func envoyBounds(b config.Bounds) envoyrls.Bounds {
	return envoyrls.Bounds{MaxHeaderBytes: b.MaxHeaderBytes, MaxConcurrentStreams: b.MaxConcurrentStreams,
		ConnectionTimeout: b.HeaderTimeout.D(), IdleTimeout: b.IdleTimeout.D()}
}

// A generation is everything built from one configuration: the limiters
// and the reverse proxy (its upstream, headers, trust and routes), swapped
// as a whole on a reload.
type generation struct {
	cfg      *config.Config
	limiters map[string]floodgate.Limiter
	proxy    *proxy.Proxy         // nil without a proxy section
	proxyTLS *tls.Config          // the proxy's certificates, nil for plain HTTP
	pgConc   *concurrency.Limiter // the PostgreSQL proxy's concurrent queries, nil without
}

// build makes the limiters, routes and Envoy rules of cfg on the daemon's
// engine.
func (d *Daemon) build(cfg *config.Config) (*generation, error) {
	policies, err := cfg.FloodgatePolicies()
	if err != nil {
		return nil, err
	}
	d.conc.begin()
	if cfg.Envoy != nil && cfg.Envoy.Rules != nil {
		for name, p := range cfg.Envoy.Rules.Policies() {
			policies[name] = p
		}
	}
	g := &generation{cfg: cfg, limiters: make(map[string]floodgate.Limiter, len(policies))}
	leases := cfg.Leases()
	var errs config.Errors
	for name, p := range policies {
		if len(p.Tiers) > 0 && p.TierOf == nil {
			p.TierOf = tierOfKey
		}
		lim, err := floodgate.New(d.engine.storeFor(leases, name), p)
		if err != nil {
			errs = append(errs, errorsAt(cfg, yamlpos.MapKeyPath("policies", name), err)...)
			continue
		}
		wrapped := d.tel.Limiter(d.m.Limiter(d.overrides.table.Limiter(lim)), rawKeys(cfg))
		if !d.noStatus {
			wrapped = d.status.wrap(wrapped)
		}
		g.limiters[name] = wrapped
	}
	if len(errs) > 0 {
		return nil, errs.Sorted()
	}
	if cfg.Postgres != nil && cfg.Postgres.Concurrency != nil {
		if g.pgConc, err = d.conc.postgres(cfg.Postgres.Concurrency); err != nil {
			return nil, errAt(cfg, "postgres.concurrency", err)
		}
	}
	if cfg.Proxy != nil {
		if err := d.buildProxy(g); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// buildProxy makes the reverse proxy of g's configuration over the
// daemon's one upstream transport.
func (d *Daemon) buildProxy(g *generation) error {
	cfg, p := g.cfg, g.cfg.Proxy
	routes, err := proxyRoutes(p, g.limiters, d.conc)
	if err != nil {
		return errAt(cfg, "proxy", err)
	}
	pc := proxy.Config{
		TrustedProxies: p.ClientIP.TrustedProxies,
		Headers:        p.Headers,
		Body:           p.Body,
		Routes:         routes,
		Logger:         d.log,
		RawKeys:        rawKeys(cfg),
		Transport:      d.transport,
		OnShadow: func(route string, _ floodgate.Result) {
			d.shadowed.WithLabelValues(route).Inc()
		},
		OnUpstreamError: func(route string, _ error) {
			d.upstreamErrs.WithLabelValues(route).Inc()
		},
		OnClientError: func(route string, why proxy.ClientFault) {
			d.clientErrs.WithLabelValues(route, string(why)).Inc()
		},
		// A hijacked connection is no longer the server's to close when
		// idle: the proxy closes its tunnels itself.
		TunnelIdleTimeout: p.Bounds.IdleTimeout.D(),
	}
	if p.Upstream != config.DemoUpstream {
		pc.Upstream = p.Upstream
	}
	if p.TLS != nil {
		pc.TLS = &proxy.TLSFiles{Cert: p.TLS.Cert, Key: p.TLS.Key}
	}
	px, err := proxy.New(pc)
	if err != nil {
		return errAt(cfg, "proxy", err)
	}
	g.proxy = px
	if p.TLS != nil {
		if g.proxyTLS, err = withClientCA(px.TLSConfig(), p.TLS.ClientCA); err != nil {
			return errAt(cfg, "proxy.tls.client_ca", err)
		}
	}
	return nil
}

// checkHeaders is the check API's header selection: the proxy's headers, so
// that a client deciding through the check API answers its own clients
// with the fields the proxy would send; every family without a proxy.
func checkHeaders(cfg *config.Config) httplimit.Headers {
	if cfg.Proxy == nil {
		return httplimit.Headers{}
	}
	return cfg.Proxy.Headers
}

// newFrontEnds builds the front ends of g's configuration and the runner
// that serves them, reporting every front end that cannot be built at the
// configuration's position.
func (d *Daemon) newFrontEnds(g *generation) config.Errors {
	cfg := g.cfg
	var errs config.Errors
	fail := func(path string, err error) { errs = append(errs, errorsAt(cfg, path, err)...) }
	d.run = &runner{log: d.log, onRefuse: func(listener string, why netguard.Reason) {
		d.connsRefused.WithLabelValues(listener, string(why)).Inc()
	}}
	d.run.setDelay(cfg.ShutdownDelay.D())
	if p := cfg.Proxy; p != nil && g.proxy != nil {
		// The listener serves the generation in service: a reload swaps
		// the whole proxy (upstream, headers, trust, routes, certificates).
		h := d.tel.HTTP("proxy", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { d.cur.Load().proxy.ServeHTTP(w, r) }), true)
		var tc *tls.Config
		if g.proxyTLS != nil {
			// Each handshake takes the generation's TLS settings: rotated or
			// moved certificate files and client CAs apply on a reload.
			tc = &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: g.proxyTLS.NextProtos,
				GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return d.cur.Load().proxyTLS, nil }}
		}
		d.run.fronts = append(d.run.fronts, httpFrontEnd("proxy", p.Listen, h, tc, p.Bounds, proxyExempt(p), d.log))
	}
	if c := cfg.Check; c != nil {
		cc, err := d.conc.checkLimits(c.Concurrency)
		if err != nil {
			fail("check.concurrency", err)
		}
		d.check = checkapi.New(checkapi.Config{Timeout: checkTimeout(cfg), Policies: g.limiters, Logger: d.log, RawKeys: rawKeys(cfg), Token: c.Token, AllowedHosts: c.AllowedHosts, Concurrency: cc, Headers: checkHeaders(cfg)})
		d.run.fronts = append(d.run.fronts, httpFrontEnd("check", c.Listen, d.tel.HTTP("check", d.check, false), nil, c.Bounds, nil, d.log))
	}
	if e := cfg.Envoy; e != nil {
		// Every engine of the daemon returns by its call's deadline
		// (DeadlineBound on the Redis Guard).
		ec := envoyrls.Config{ResponseHeaders: e.ResponseHeaders, Timeout: checkTimeout(cfg), DeadlineBound: true,
			Mode: envoyMode(e), Store: d.engine.store, Token: e.Token,
			Rules: e.Rules, Limiters: g.limiters, Logger: d.log, RawKeys: rawKeys(cfg),
			OnShadow: func(name string, _ floodgate.Result) { d.shadowed.WithLabelValues(name).Inc() },
			Bounds:   envoyBounds(e.Bounds), ServerOptions: d.tel.GRPC()}
		path, err := "envoy", error(nil)
		if e.TLS != nil {
			// As the PostgreSQL listener's: rotated certificate files are
			// served from the next connection on.
			var pair *certfile.Pair
			if pair, err = certfile.Load(e.TLS.Cert, e.TLS.Key, "envoy", &denylog.Errors{Log: d.log}); err != nil {
				path = "envoy.tls"
			} else if ec.TLS, err = withClientCA(pair.TLSConfig(), e.TLS.ClientCA); err != nil {
				path = "envoy.tls.client_ca"
			}
		}
		var svc *envoyrls.Service
		if err == nil {
			svc, err = envoyrls.New(ec)
		}
		if err != nil {
			fail(path, err)
		} else {
			d.envoy = svc
			d.run.fronts = append(d.run.fronts, &frontEnd{name: "envoy", addr: e.Listen, serve: svc.Serve, shutdown: svc.Shutdown,
				limits: connLimits(e.Bounds, nil)})
		}
	}
	if pg := cfg.Postgres; pg != nil {
		if p, path, err := d.newPostgres(g); err != nil {
			fail(path, err)
		} else {
			d.pg = p
			d.run.fronts = append(d.run.fronts, &frontEnd{name: "postgres", addr: pg.Listen, limits: connLimits(pg.Bounds, postgresExempt(pg)),
				serve: func(ln net.Listener) error {
					if err := p.Serve(ln); !errors.Is(err, pgproxy.ErrProxyClosed) {
						return err
					}
					return nil
				},
				shutdown: p.Shutdown})
		}
	}
	if a := cfg.Admin; a != nil && a.Listen != "" {
		ac := admin.Config{
			Listen:       a.Listen,
			Pprof:        a.Pprof,
			Token:        a.Token,
			Gatherer:     d.reg,
			Registerer:   d.reg,
			Logger:       d.log,
			RawKeys:      a.RawKeys,
			AllowedHosts: a.AllowedHosts,
			Keys:         func() map[string]floodgate.Limiter { return d.cur.Load().limiters },
			Overrides:    &admin.Overrides{Table: d.overrides.table, Entry: d.overrideEntry},
			KeyShapes:    func() map[string][]string { return configKeyShapes(d.cur.Load().cfg) },
			Explain:      d.Explain,
			Config:       func() ([]byte, error) { return config.MarshalRedacted(d.cur.Load().cfg) },
			Ready: func(ctx context.Context) error {
				return d.engine.ready(ctx, d.cur.Load().cfg.Storage)
			},
		}
		if !d.noStatus {
			ac.Recent = d.status.st.Recent
		}
		d.status.routes(&ac)
		if adm, err := admin.New(ac); err != nil {
			fail("admin", err)
		} else {
			d.admin = adm
			d.run.draining = func() { adm.SetDraining(true) }
			d.run.fronts = append(d.run.fronts, httpFrontEnd("admin", a.Listen, adm, nil, a.Bounds, nil, d.log))
		}
	}
	return errs
}

// errorsAt is err as errors of the configuration at path: with their
// position, so that `floodgate validate` and a refused reload point at the
// line to fix. Errors that already have one keep it.
func errorsAt(cfg *config.Config, path string, err error) config.Errors {
	var ces config.Errors
	if errors.As(err, &ces) {
		return ces
	}
	var ce *config.Error
	if errors.As(err, &ce) {
		return config.Errors{ce}
	}
	return config.Errors{{Pos: cfg.Position(path), Path: path, Msg: err.Error(), Err: err}}
}

// errAt is errorsAt as one error.
func errAt(cfg *config.Config, path string, err error) error { return errorsAt(cfg, path, err) }

// checkTimeout bounds a decision of the check and Envoy APIs: a little more
// than two of the engine's calls (a decision and the refund of an
// all-or-nothing request), each bounded by the slow timeout, so that a hung
// Redis is answered by the failure mode and a slow one by Redis, not by the
// API's deadline.
func checkTimeout(cfg *config.Config) time.Duration {
	if !cfg.Storage.Remote() {
		return 0
	}
	return 2*cfg.Storage.Failure.SlowTimeout.D() + 100*time.Millisecond
}

// tierOfKey reads the tier a route put in front of a key ("tier:pro|…");
// keys without one get the policy's own limits.
func tierOfKey(key string) string {
	rest, ok := strings.CutPrefix(key, "tier:")
	if !ok {
		return ""
	}
	tier, _, _ := strings.Cut(rest, "|")
	return tier
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}

// withClientCA returns tc requiring client certificates signed by one in the
// PEM file caFile (mutual TLS), or tc as it is for an empty caFile.
func withClientCA(tc *tls.Config, caFile string) (*tls.Config, error) {
	if caFile == "" {
		return tc, nil
	}
	pool, err := certfile.Pool(caFile)
	if err != nil {
		return nil, err
	}
	tc = tc.Clone()
	tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	return tc, nil
}

// rawKeys reports whether keys are shown and logged as they are
// (admin.raw_keys), on the status page and in the denial log lines alike.
func rawKeys(cfg *config.Config) bool { return cfg.Admin != nil && cfg.Admin.RawKeys }

// envoyMode is how the envoy section asks descriptors to be counted.
func envoyMode(e *config.Envoy) envoyrls.Mode {
	return envoyrls.Mode{ShadowMode: e.ShadowMode, Independent: e.Descriptors == "independent",
		ChargeDenied: e.ChargeDenied, ErrorStatus: e.EngineErrors == "status", DynamicMetadata: e.DynamicMetadata}
}
