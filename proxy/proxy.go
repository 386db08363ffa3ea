// Package proxy is floodgate's rate-limiting reverse proxy: requests are
// matched to routes, each route's limits decided through httplimit, and what
// passes is forwarded upstream with httputil.ReverseProxy (streaming,
// WebSockets, HTTP/2 over TLS with certificate rotation, shadow routes, 502
// on upstream failure, 408 or 400 when the client fails to send its request,
// 400 for a path no upstream should be handed).
package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/concurrency/throttle"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
	"github.com/floodgate-go/floodgate/internal/certfile"
	"github.com/floodgate-go/floodgate/internal/denylog"
	"github.com/floodgate-go/floodgate/internal/pathnet"
)

// ErrInvalidConfig is wrapped by every configuration error of this package.
var ErrInvalidConfig = errors.New("proxy: invalid config")

// Config configures the rate-limiting reverse proxy.
type Config struct {
	// Upstream is the URL requests are forwarded to, e.g.
	// "http://127.0.0.1:3000". Empty means the built-in DemoUpstream,
	// served in process.
	Upstream string

	// TLS, when set, serves the listener over TLS (and HTTP/2) with the
	// certificate files it names, reloaded when they change.
	TLS *TLSFiles

	// TrustedProxies lists the peers (CIDR prefixes or addresses) whose
	// X-Forwarded-For, X-Forwarded-Host and X-Forwarded-Proto are passed on
	// upstream, with the peer appended. From any other peer these headers,
	// Forwarded and X-Real-IP are dropped and replaced by what the proxy
	// saw. The routes' key functions trust clients separately (a
	// clientip.Resolver), usually with the same list.
	TrustedProxies []string

	// Headers selects the rate-limit header fields of responses.
	Headers httplimit.Headers

	// Body selects the body of 429 responses.
	Body httplimit.Body

	// Routes are matched in order; the first that matches a request limits
	// it. A request no route matches is forwarded unlimited; a last route
	// with an empty Match is a default route.
	Routes []Route

	// Logger receives upstream errors and denials (sampled). Nil means
	// slog.Default().
	Logger *slog.Logger

	// RawKeys writes keys as they are in the denial log lines; false, the
	// default, writes floodgate.RedactKey's stand-ins.
	RawKeys bool

	// OnShadow, when set, is called for every request a shadow route would
	// have refused (res is the decision; its Source is fail-closed when the
	// engine failed closed). It runs on the request's goroutine: count a
	// metric.
	OnShadow func(route string, res floodgate.Result)

	// OnUpstreamError, when set, is called for every request answered 502
	// because the upstream could not be reached or failed mid-response.
	// A request that failed by its client's fault is not the upstream's
	// and is reported to OnClientError instead.
	OnUpstreamError func(route string, err error)

	// OnClientError, when set, is called for every request that failed by
	// its client's fault (see ClientFault): a body sent too slowly or cut
	// off, or a client gone before its answer (an HTTP/2 stream reset, a
	// closed connection). Such requests are logged at info level, not as
	// errors, and are not limiting decisions: a client gone before its
	// request was decided is neither charged nor counted as a denial.
	OnClientError func(route string, why ClientFault)

	// TunnelIdleTimeout closes a WebSocket (or any other upgraded)
	// connection after this long without a byte in either direction; 0
	// means never. The daemon sets it to the listener's idle_timeout.
	TunnelIdleTimeout time.Duration

	// Transport carries requests upstream. Nil means NewTransport(). Proxies
	// that replace one another (a reload) share one, so that the upstream
	// connections they keep open are reused, not left behind.
	Transport http.RoundTripper
}

// NewTransport is the transport a proxy uses when Config.Transport is nil:
// http.DefaultTransport's settings with enough idle connections for a
// proxy's concurrency (the default keeps 2 per host, so a proxy under load
// would open and close a connection per request), and without transparent
// compression: the upstream sees the client's own Accept-Encoding and the
// client gets the upstream's encoding, where the default would ask for gzip
// on a client's behalf and spend the proxy's CPU decompressing it.
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 1024
	t.MaxIdleConns = 1024
	t.DisableCompression = true
	return t
}

// TLSFiles names a certificate and its key, PEM files.
type TLSFiles struct {
	Cert string
	Key  string
}

// A Route limits the requests it matches.
type Route struct {
	// Name identifies the route in logs and OnShadow; empty means a name
	// made of its match ("route 2").
	Name string

	// Match selects the requests; the zero Match selects all.
	Match httpmatch.Match

	// Shadow decides and counts but never refuses: a request the limits
	// would refuse (429, or 503 when the engine fails closed) is forwarded,
	// reported to OnShadow and logged, and gets no rate-limit header
	// fields, so clients see no difference. It is the safe way to roll out
	// a new limit.
	Shadow bool

	// Limits are the rules a matched request must pass. Empty means
	// the route is unlimited. The proxy builds one httplimit.Middleware per
	// route from them with the proxy's Headers and Body.
	Limits []httplimit.Rule

	// Concurrency, when set, bounds the route's requests in flight
	// upstream: it wraps the upstream inside the limits, so a request the
	// limits refuse never takes a slot. Its refusals are its own (429 per
	// key, 503 shared, X-Concurrency-* fields).
	Concurrency *throttle.Throttler
}

// Proxy is the rate-limiting reverse proxy, an http.Handler. It is safe for
// concurrent use; SetRoutes replaces its routes while it serves.
type Proxy struct {
	cfg        Config
	upstream   http.Handler // what requests no route matched go to
	target     *url.URL     // nil for the demo upstream
	transport  http.RoundTripper
	trusted    clientip.Prefixes
	routes     atomic.Pointer[[]*route]
	sample     *denylog.Sampler
	errs       denylog.Errors // upstream failures, at error level
	clientErrs denylog.Errors // client faults, at info level
	tls        *certfile.Pair
}

type route struct {
	name   string
	match  *httpmatch.Matcher
	desc   string // the Match, as written
	shadow bool
	mw     *httplimit.Middleware // nil for a route without limits; Evaluate and Explain use it
	h      http.Handler
}

// New validates cfg and returns its proxy.
func New(cfg Config) (*Proxy, error) {
	p := &Proxy{cfg: cfg, sample: denylog.New(cfg.Logger, cfg.RawKeys)}
	p.errs.Log = p.sample.Logger()
	p.clientErrs.Log, p.clientErrs.Level = p.sample.Logger(), slog.LevelInfo
	var errs []error
	trusted, err := clientip.ParsePrefixes(cfg.TrustedProxies)
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: proxy trusted proxies: %v", ErrInvalidConfig, err))
	}
	p.trusted = trusted
	if cfg.Upstream == "" {
		p.upstream = DemoUpstream()
	} else {
		u, err := url.Parse(cfg.Upstream)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%w: proxy upstream %q: %v", ErrInvalidConfig, cfg.Upstream, err))
		case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			errs = append(errs, fmt.Errorf("%w: proxy upstream %q: give an absolute http:// or https:// URL", ErrInvalidConfig, cfg.Upstream))
		default:
			p.target = u
			p.transport = cfg.Transport
			if p.transport == nil {
				p.transport = NewTransport()
			}
			p.upstream = p.reverseProxy(u, "")
		}
	}
	if cfg.TLS != nil {
		c, err := certfile.Load(cfg.TLS.Cert, cfg.TLS.Key, "proxy", &p.errs)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: proxy tls: %v", ErrInvalidConfig, err))
		}
		p.tls = c
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := p.SetRoutes(cfg.Routes); err != nil {
		return nil, err
	}
	return p, nil
}

// reverseProxy forwards to u for the named route ("" for requests no route
// matched). Each route has its own, sharing the transport, so that the
// error handler knows the route without a per-request context value.
func (p *Proxy) reverseProxy(u *url.URL, name string) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			p.forwarded(pr)
			if pr.Out.Body != nil && pr.Out.Body != http.NoBody {
				// The request the error handler gets: a body that
				// failed tells the client's fault from the upstream's.
				pr.Out.Body = newClientBody(pr.Out.Body)
			}
		},
		Transport: p.transport,
		// Server-sent events and answers of unknown length (streamed,
		// chunked) are flushed at every write by ReverseProxy itself. An
		// answer of known length is flushed when it ends, or flushInterval
		// after a write, so one that trickles still reaches the client.
		// Flushing those at every write (-1) would also flush the header
		// alone from a timer goroutine: a second write system call and a
		// goroutine per response.
		FlushInterval: flushInterval,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.upstreamError(w, r, name, err)
		},
		ErrorLog:   slog.NewLogLogger(p.sample.Logger().Handler(), slog.LevelWarn),
		BufferPool: copyBuffers,
	}
}

// flushInterval bounds how long part of an answer of known length waits in
// the proxy's buffers.
const flushInterval = 50 * time.Millisecond

// copyBuffers lends the reverse proxies their body copy buffers; without a
// pool, ReverseProxy allocates 32 KiB for every response it copies.
var copyBuffers = &bufferPool{}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

// forwarded sets X-Forwarded-For, -Host and -Proto: passed on with the peer
// appended from a trusted proxy, else replaced by what this proxy saw, so a
// client cannot plant an address for the upstream to trust.
func (p *Proxy) forwarded(pr *httputil.ProxyRequest) {
	in := pr.In.Header
	if p.trusted.ContainsPeer(pr.In.RemoteAddr) {
		if v := in["X-Forwarded-For"]; len(v) > 0 {
			pr.Out.Header["X-Forwarded-For"] = v
		}
		pr.SetXForwarded()
		if v := in["X-Forwarded-Host"]; len(v) > 0 {
			pr.Out.Header["X-Forwarded-Host"] = v
		}
		if v := in["X-Forwarded-Proto"]; len(v) > 0 {
			pr.Out.Header["X-Forwarded-Proto"] = v
		}
		return
	}
	pr.Out.Header.Del("Forwarded")
	pr.Out.Header.Del("X-Real-Ip")
	pr.SetXForwarded()
}

// upstreamError answers a request that failed upstream: 502 through the
// writer the proxy was given, so a count rule's writer sees the failure
// (count-failed rules keep the charge), unless the client was at fault
// (clientError).
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, route string, err error) {
	if why, ok := faultOf(r); ok {
		p.clientError(w, r, route, why, err)
		return
	}
	if p.cfg.OnUpstreamError != nil {
		p.cfg.OnUpstreamError(route, err)
	}
	p.errs.Error(r.Context(), "proxy: upstream failed", slog.String("route", route), slog.Any("error", err))
	w.Header()["Content-Type"] = []string{"application/problem+json"}
	w.WriteHeader(http.StatusBadGateway)
	w.Write([]byte(badGatewayBody))
}

const badGatewayBody = `{"type":"about:blank","title":"Bad Gateway","status":502,` +
	`"detail":"The upstream service could not be reached."}` + "\n"

// SetRoutes replaces the routes atomically: a request is routed by the old
// list or the new one. Limiter state lives in the limiters, so a route
// rebuilt over the same limiters keeps its clients' state.
func (p *Proxy) SetRoutes(routes []Route) error {
	out := make([]*route, 0, len(routes))
	var errs []error
	for i, rt := range routes {
		r, err := p.compile(i, rt)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, r)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	p.routes.Store(&out)
	return nil
}

func (p *Proxy) compile(i int, rt Route) (*route, error) {
	r := &route{name: rt.Name, shadow: rt.Shadow, desc: rt.Match.String()}
	if r.name == "" {
		r.name = fmt.Sprintf("route %d", i+1)
	}
	m, err := rt.Match.Compile()
	if err != nil {
		return nil, fmt.Errorf("%w: proxy %s: %v", ErrInvalidConfig, r.name, err)
	}
	r.match = m
	next := p.upstream
	if p.target != nil {
		next = p.reverseProxy(p.target, r.name)
	}
	if rt.Concurrency != nil {
		next = rt.Concurrency.Handler(next)
	}
	if len(rt.Limits) == 0 {
		r.h = next
		return r, nil
	}
	rules := make([]httplimit.Rule, len(rt.Limits))
	for j, ru := range rt.Limits {
		rules[j] = ru
		if ru.Limiter != nil {
			rules[j].Limiter = &loggedLimiter{Limiter: ru.Limiter, p: p, shadow: rt.Shadow}
		}
		if pick := ru.LimiterFor; pick != nil {
			// The limiter differs per request, so its wrapper is made per
			// request: one small allocation, for such rules only.
			rules[j].LimiterFor = func(r *http.Request) floodgate.Limiter {
				if l := pick(r); l != nil {
					return &loggedLimiter{Limiter: l, p: p, shadow: rt.Shadow}
				}
				return nil
			}
		}
	}
	name := r.name
	cfg := httplimit.Config{Rules: rules, Headers: p.cfg.Headers, Body: p.cfg.Body, Logger: p.sample.Logger(),
		OnError: func(w http.ResponseWriter, r *http.Request, err error) bool {
			if r.Context().Err() != nil {
				// The client went away before its request was decided:
				// nothing was charged or counted, and nothing is sent.
				p.clientError(w, r, name, ClientGone, err)
				return false
			}
			return httplimit.ServeOnError(w, r, err)
		}}
	if rt.Shadow {
		cfg.Headers = httplimit.Headers{DisableXRateLimit: true, DisableRateLimit: true, DisableRetryAfter: true}
		cfg.OnLimited = func(w http.ResponseWriter, _ *http.Request, res floodgate.Result) {
			if sw, ok := w.(*shadowWriter); ok {
				sw.res, sw.refused = res, true
			}
		}
	}
	mw, err := httplimit.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", r.name, err)
	}
	r.mw = mw
	if rt.Shadow {
		r.h = &shadowHandler{p: p, name: r.name, next: next}
		r.h.(*shadowHandler).limited = mw.Handler(passHandler{next})
		return r, nil
	}
	r.h = mw.Handler(next)
	return r, nil
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := httpmatch.CheckPath(r.URL.Path); err != nil {
		// No route can be trusted to see this path as the upstream will.
		badPath(w, err)
		return
	}
	if clean := pathnet.CleanPath(r.URL.Path); clean != r.URL.Path && r.URL.Path != "*" {
		// Routes decide on the path the upstream will serve: a client must
		// not dodge the limits of /admin/ by asking for /public/../admin/.
		// As http.ServeMux does, send it to the clean path (308 keeps the
		// method and body).
		u := *r.URL
		u.Path, u.RawPath = clean, ""
		http.Redirect(w, r, u.RequestURI(), http.StatusPermanentRedirect)
		return
	}
	if p.cfg.TunnelIdleTimeout > 0 && r.Header["Upgrade"] != nil {
		w = &tunnelWriter{ResponseWriter: w, idle: p.cfg.TunnelIdleTimeout}
	}
	for _, rt := range *p.routes.Load() {
		if rt.match.Match(r) {
			rt.h.ServeHTTP(w, r)
			return
		}
	}
	p.upstream.ServeHTTP(w, r)
}

// badPath answers 400 for a path httpmatch.CheckPath refuses.
func badPath(w http.ResponseWriter, err error) {
	w.Header()["Content-Type"] = []string{"application/problem+json"}
	w.WriteHeader(http.StatusBadRequest)
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", "Bad Request", http.StatusBadRequest, err.Error()})
	w.Write(append(b, '\n'))
}

// loggedLimiter logs the denials of a route's limiter, key redacted. It
// embeds the limiter, keeping its name and methods.
type loggedLimiter struct {
	floodgate.Limiter
	p      *Proxy
	shadow bool
}

func (l *loggedLimiter) AllowN(ctx context.Context, key string, cost int64) (floodgate.Result, error) {
	res, err := l.Limiter.AllowN(ctx, key, cost)
	if err == nil && !res.Allowed {
		l.p.sample.Denied(ctx, "proxy", key, &res, l.shadow)
	}
	return res, err
}

// A shadow route runs its middleware over a shadowWriter. The middleware
// either passes the request on (passHandler marks the writer, and from then
// on it is the client's writer) or refuses it: OnLimited records the
// decision, and a 503 or 500 it writes itself is swallowed. A refused
// request is then forwarded anyway, over the client's writer. Nothing was
// charged for it, so count rules have nothing to settle.
type shadowHandler struct {
	p       *Proxy
	name    string
	next    http.Handler
	limited http.Handler
}

func (h *shadowHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &shadowWriter{ResponseWriter: w}
	h.limited.ServeHTTP(sw, r)
	if sw.passed || !sw.refused && r.Context().Err() != nil {
		// Passed and served, or the client went away before its request
		// was decided (Config.OnClientError has it).
		return
	}
	if !sw.refused {
		// The middleware wrote a refusal of its own: the engine failed
		// closed (503) or a Cost function failed (500).
		sw.res = floodgate.Result{Source: floodgate.SourceFailClosed}
	}
	if h.p.cfg.OnShadow != nil {
		h.p.cfg.OnShadow(h.name, sw.res)
	}
	h.next.ServeHTTP(w, r)
}

// passHandler marks the shadow writer passed and hands the request on.
type passHandler struct{ next http.Handler }

func (h passHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if sw := findShadow(w); sw != nil {
		sw.passed = true
	}
	h.next.ServeHTTP(w, r)
}

// findShadow finds the shadowWriter under the writers the middleware put
// on top of it (a count rule's status writer).
func findShadow(w http.ResponseWriter) *shadowWriter {
	for {
		switch v := w.(type) {
		case *shadowWriter:
			return v
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return nil
		}
	}
}

// shadowWriter hides what the middleware writes before it passes the
// request on: header fields go to a scratch map, a refusal is recorded, not
// sent.
type shadowWriter struct {
	http.ResponseWriter
	scratch http.Header
	passed  bool
	refused bool
	res     floodgate.Result
}

func (w *shadowWriter) Header() http.Header {
	if w.passed {
		return w.ResponseWriter.Header()
	}
	if w.scratch == nil {
		w.scratch = make(http.Header)
	}
	return w.scratch
}

func (w *shadowWriter) WriteHeader(code int) {
	if w.passed {
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *shadowWriter) Write(b []byte) (int, error) {
	if w.passed {
		return w.ResponseWriter.Write(b)
	}
	return len(b), nil
}

// Unwrap returns the client's writer, for http.ResponseController: the
// reverse proxy flushes and hijacks (WebSockets) through it.
func (w *shadowWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher for handlers that test for it.
func (w *shadowWriter) Flush() {
	if w.passed {
		http.NewResponseController(w.ResponseWriter).Flush()
	}
}

// Hijack implements http.Hijacker for handlers that test for it.
func (w *shadowWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// TLSConfig returns the listener's TLS configuration (certificates reloaded
// from Config.TLS as they change, HTTP/2 offered), or nil when the proxy
// serves plain HTTP.
func (p *Proxy) TLSConfig() *tls.Config {
	if p.tls == nil {
		return nil
	}
	return p.tls.TLSConfig("h2", "http/1.1")
}
