// Package admin is floodgate's operators' listener: Prometheus /metrics,
// /healthz and /readyz for probes, the effective configuration, key
// inspection and reset (/v1/keys), runtime overrides (/v1/overrides), pprof when asked for, and the routes other
// packages add (the status page). Everything but the probes and the metrics
// needs the admin token when one is set; off loopback without one, nothing
// that changes state is served.
package admin

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/pathnet"
	"github.com/floodgate-go/floodgate/internal/webguard"
	"github.com/floodgate-go/floodgate/status"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Config configures the admin listener.
type Config struct {
	// Listen is the address the listener is bound to, e.g.
	// "127.0.0.1:9090": off loopback, requests that change state need the
	// Token. Keep it off the public network: it tells how the service is
	// limited.
	Listen string

	// Pprof serves net/http/pprof under /debug/pprof/.
	Pprof bool

	// Token, when set, must be sent as "Authorization: Bearer <token>" to
	// read /v1/config and /debug/pprof/. /metrics, /healthz and /readyz stay
	// open for scrapers and probes.
	Token string

	// Gatherer is what /metrics serves. Nil means prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer

	// Config returns the effective configuration for /v1/config, secrets
	// already redacted. Nil answers 404.
	Config func() ([]byte, error)

	// Ready reports whether the service can serve: its configuration is
	// loaded and its engine reachable, or its failure policy serves without
	// it. It runs on every /readyz with a deadline of ReadyTimeout. Nil
	// means always ready. While the Server drains, /readyz fails whatever
	// Ready says.
	Ready func(ctx context.Context) error

	// ReadyTimeout bounds Ready; 0 means one second.
	ReadyTimeout time.Duration

	// Handlers are further routes by ServeMux pattern (e.g. "GET
	// /v1/status"), behind Token like /v1/config.
	Handlers map[string]http.Handler

	// AllowedHosts are the names, besides IP addresses and localhost, that
	// requests may give as their Host (e.g. "floodgate.internal"): any
	// other Host is refused (403) but for /metrics, /healthz and /readyz,
	// so that a web page whose name an attacker points at this address (DNS
	// rebinding) cannot read or change anything.
	AllowedHosts []string

	// Open are further routes served without the Token: pages and assets
	// that hold no data themselves (the status page asks Handlers for it).
	Open map[string]http.Handler

	// Keys, when set, serves key inspection (GET /v1/keys?policy=P&key=K,
	// a peek that charges nothing) and reset (DELETE, the same query) over
	// the limiters it returns, the policies in service by name.
	Keys func() map[string]floodgate.Limiter

	// KeyShapes, when set, returns by policy the shapes of the keys the
	// configuration makes (see ShapeMatches): /v1/keys refuses a key of
	// none of them (400, naming the shapes) unless asked with any_shape,
	// since such a key is never limited and "not limited" would mislead.
	// A policy without shapes takes any key.
	KeyShapes func() map[string][]string

	// Recent, when set, returns a key's last decisions for /v1/keys.
	Recent func(policy, key string) []status.Record

	// Overrides, when set with Keys, serves the runtime overrides
	// (/v1/overrides; see Overrides).
	Overrides *Overrides

	// Explain, when set, serves POST /v1/explain: what the front ends
	// would do with a described request (see ExplainRequest).
	Explain func(ctx context.Context, req *ExplainRequest) (*Explanation, error)

	// Registerer receives floodgate_key_resets_total. Nil means
	// prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer

	// Logger receives key resets. Nil means slog.Default().
	Logger *slog.Logger

	// RawKeys writes keys unredacted in the reset log lines. Default
	// false: keys are redacted (floodgate.RedactKey).
	RawKeys bool
}

// Admin is the admin listener's handler: /metrics, /healthz, /readyz,
// /v1/config, /v1/keys and, when enabled, /debug/pprof/. Off loopback it
// needs a Token (New refuses to build one without), and every route but the
// probes and /metrics refuses a Host it does not know and a cross-site
// request that may change state.
type Admin struct {
	cfg      Config
	mux      *http.ServeMux
	draining atomic.Bool
	token    atomic.Pointer[string] // Config.Token, then SetToken's
}

// ErrNoToken is New's error for an admin listener off loopback without a
// token: anyone on that network could read the limits and reset keys.
var ErrNoToken = errors.New("admin: a listener off loopback needs a token (admin.token or admin.token_file); or listen on 127.0.0.1")

// New returns the admin handler of cfg. The error is ErrNoToken, or the
// registration of its metric.
func New(cfg Config) (*Admin, error) {
	if cfg.Token == "" && cfg.Listen != "" && !pathnet.Loopback(cfg.Listen) {
		return nil, ErrNoToken
	}
	a := &Admin{cfg: cfg, mux: http.NewServeMux()}
	a.SetToken(cfg.Token)
	if a.cfg.ReadyTimeout <= 0 {
		a.cfg.ReadyTimeout = time.Second
	}
	g := cfg.Gatherer
	if g == nil {
		g = prometheus.DefaultGatherer
	}
	a.mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	a.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	a.mux.HandleFunc("GET /readyz", a.readyz)
	a.mux.Handle("GET /v1/config", a.auth(http.HandlerFunc(a.config)))
	if cfg.Pprof {
		a.mux.Handle("/debug/pprof/", a.auth(http.HandlerFunc(pprof.Index)))
		a.mux.Handle("/debug/pprof/cmdline", a.auth(http.HandlerFunc(pprof.Cmdline)))
		a.mux.Handle("/debug/pprof/profile", a.auth(http.HandlerFunc(pprof.Profile)))
		a.mux.Handle("/debug/pprof/symbol", a.auth(http.HandlerFunc(pprof.Symbol)))
		a.mux.Handle("/debug/pprof/trace", a.auth(http.HandlerFunc(pprof.Trace)))
	}
	if cfg.Keys != nil {
		k, err := newKeys(cfg)
		if err != nil {
			return nil, err
		}
		a.mux.Handle("GET /v1/keys", a.auth(k))
		a.mux.Handle("DELETE /v1/keys", a.auth(k))
		if cfg.Overrides != nil {
			o := &overridesHandler{o: cfg.Overrides, keys: k, log: k.log, raw: cfg.RawKeys}
			for _, m := range []string{"GET", "PUT", "DELETE"} {
				a.mux.Handle(m+" /v1/overrides", a.auth(o))
			}
		}
	}
	if cfg.Explain != nil {
		a.mux.Handle("POST /v1/explain", a.auth(explainHandler(cfg.Explain)))
	}
	for pattern, h := range cfg.Handlers {
		a.mux.Handle(pattern, a.auth(h))
	}
	for pattern, h := range cfg.Open {
		a.mux.Handle(pattern, h)
	}
	return a, nil
}

// SetToken replaces the token, e.g. when a reload read a rotated
// token_file: the next request needs the new one. An empty token turns the
// check off.
func (a *Admin) SetToken(token string) { a.token.Store(&token) }

func (a *Admin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/metrics", "/healthz", "/readyz":
		// Probes and scrapers, by whatever name they know the listener.
	default:
		if !webguard.HostAllowed(r, a.cfg.AllowedHosts) {
			writeText(w, http.StatusForbidden, "Host "+strconv.Quote(r.Host)+" is not a name of this listener; list it in admin.allowed_hosts")
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if !webguard.SameOrigin(r) {
				writeText(w, http.StatusForbidden, "a cross-site request may not change state here")
				return
			}
		}
	}
	a.mux.ServeHTTP(w, r)
}

// SetDraining marks the service as shutting down: /readyz fails from now
// on, so load balancers stop sending traffic before the listeners close.

func (a *Admin) SetDraining(d bool) { a.draining.Store(d) }

func (a *Admin) readyz(w http.ResponseWriter, r *http.Request) {
	if a.draining.Load() {
		writeText(w, http.StatusServiceUnavailable, "draining")
		return
	}
	if a.cfg.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), a.cfg.ReadyTimeout)
		defer cancel()
		if err := a.cfg.Ready(ctx); err != nil {
			writeText(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
			return
		}
	}
	writeText(w, http.StatusOK, "ready")
}

func (a *Admin) config(w http.ResponseWriter, _ *http.Request) {
	if a.cfg.Config == nil {
		writeText(w, http.StatusNotFound, "no configuration to show")
		return
	}
	b, err := a.cfg.Config()
	if err != nil {
		writeText(w, http.StatusInternalServerError, "rendering the configuration: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	w.Write(b)
}

// auth requires the bearer token, when one is configured.
func (a *Admin) auth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := *a.token.Load()
		if token == "" {
			h.ServeHTTP(w, r)
			return
		}
		if !webguard.Bearer(r, token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate admin"`)
			writeText(w, http.StatusUnauthorized, "send the admin token as Authorization: Bearer <token>")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func writeText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	w.Write([]byte(msg + "\n"))
}
