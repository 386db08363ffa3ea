package httplimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/internal/isnil"
	"github.com/floodgate-go/floodgate/internal/statuswriter"
	"github.com/floodgate-go/floodgate/tokencost"
)

// MaxRules is the most rules one Middleware checks. The checks of a request
// are kept on the stack, so the bound keeps the hot path free of
// allocations.
const MaxRules = 8

// ErrInvalidConfig is wrapped by every error New returns.
var ErrInvalidConfig = errors.New("httplimit: invalid config")

// A KeyFunc returns the key a request is limited by: a client address, a
// user, an API key, a route, or a combination. It must be cheap and safe for
// concurrent use, since it runs on every request. A key built from what the
// client chooses freely (an unchecked header, a spoofable address) lets the
// client pick a fresh key per request; see the package documentation.
//
// A KeyFunc answers "" when the request has no key of its kind (a login
// form without its field): the rule then keys the request by its client
// address instead (Rule.NoKey), or skips it where the rule says so
// (Rule.SkipNoKey); "" is never a key that every such request shares.
type KeyFunc func(r *http.Request) string

// Count says which responses a rule's charge stands for.
type Count uint8

const (
	// CountAll charges every request the rule admits. It is the default.
	CountAll Count = iota

	// CountFailed keeps the charge only for requests whose response has a
	// status of 400 or more, or whose handler panicked: a login limit that
	// counts failed attempts and leaves users who log in alone. The request is
	// charged before the handler runs and refunded when it answers with a
	// status below 400, so concurrent attempts cannot slip past the limit
	// while their answers are pending.
	CountFailed

	// CountSuccessful keeps the charge only for responses with a status below
	// 400: a quota that failed requests do not use up. The request is charged
	// before the handler runs and refunded when it fails or panics.
	CountSuccessful
)

// A Rule is one limit of a Middleware: which requests it applies to, the
// limiter that decides, and the key and cost of each request.
type Rule struct {
	// Limiter decides for every request the rule matches. Exactly one of
	// Limiter and LimiterFor must be set; nil means LimiterFor picks.
	Limiter floodgate.Limiter

	// LimiterFor picks the limiter per request: a plan or tier known from
	// the request (for example from its authenticated account) rather than
	// from its key. Returning nil exempts the request from the rule. It must
	// be cheap and safe for concurrent use. A tier that follows from the key
	// alone is better expressed in the policy (floodgate.Policy.TierOf).
	// Nil means Limiter decides.
	LimiterFor func(r *http.Request) floodgate.Limiter

	// Key returns the key of a request. Nil means the client's address as
	// clientip's zero Config sees it: the connection's peer, never a header.
	// Behind a proxy use KeyByIP with a configured clientip.Resolver.
	Key KeyFunc

	// NoKey keys a request Key gave no key (""), tagged "nokey:" so that
	// it never meets a key Key makes. Nil means the client's address
	// (KeyByIP(nil)): a request that leaves its key out is limited as its
	// client, never in one bucket with every other such request.
	NoKey KeyFunc

	// SkipNoKey lets a request Key gave no key through the rule unlimited,
	// for rules that only make sense with a key; such requests are logged
	// (sampled) so that a key function that stopped finding its key shows.
	// Default false: NoKey keys them.
	SkipNoKey bool

	// Match selects the requests the rule applies to; nil means all. It runs
	// on the request as the middleware sees it, before any routing of the
	// handlers it wraps (see package httpmatch: PathPrefix, Methods, All).
	Match func(r *http.Request) bool

	// Cost returns the units a request costs; nil means 1. A cost of 0 lets
	// the request pass without charging it; a cost larger than a limit's
	// capacity can never pass and is answered 429 without Retry-After. A
	// negative cost is a bug in the Cost function, not a reason to stop
	// limiting: the request is answered 500 and the error logged, whatever
	// Config.OnError says.
	Cost func(r *http.Request) int64

	// Count selects the responses that count; the zero value, CountAll,
	// counts all.
	Count Count

	// ResponseCost, when set, returns what a request really cost once its
	// response is known: the tokens an LLM API reports in a response header
	// or trailer, say. The request is charged Cost (1 when nil) before the
	// handler runs, so it passes while budget remains; when the handler
	// returns, the difference to ResponseCost's answer is charged or
	// refunded. A charge larger than what is left puts the key in debt for
	// all of it, also beyond a limit's capacity (a reply of 5000 tokens
	// under PerHour(1000) keeps the key refused for four hours and more):
	// the rest is booked ahead with Limiter.ReserveN, up to a limit's span
	// plus algo.MaxReserveAhead; a policy with a window limit, which holds
	// no debt, is emptied instead. A negative answer means the cost is
	// unknown (a missing or unparsable header): the up-front charge stands.
	// The rate-limit headers are written before the handler runs, so
	// X-RateLimit-Remaining and RateLimit show the budget after the
	// up-front charge, not after settlement; the next response shows it.
	// It runs after the handler, with the status and the final header map
	// (trailers included), and only for responses the rule counts. Nil
	// means a request costs what Cost said, whatever its response.
	ResponseCost func(status int, h http.Header) int64

	// Tokens, when set, charges the rule in the tokens of an LLM API call
	// (package tokencost), counted as TokenCount says: the request is
	// charged the estimate its body gives (the output bound max_tokens,
	// the body's size for input, at the model's weight) before the handler
	// runs, and settled with the usage the response body or event stream
	// reports, read as the handler writes it (Handler's writer; other front
	// ends pass the body to Answer.Observe), as ResponseCost settles: the
	// difference is refunded, or charged into debt. A count the response
	// does not report in a way believed keeps its estimate. Rules that
	// share a Source read a request once. Tokens excludes Cost and
	// ResponseCost.
	Tokens     *tokencost.Source
	TokenCount tokencost.Count
}

// Headers selects the rate-limit header fields of responses. The zero value
// sends X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset (in
// seconds), RateLimit-Policy and RateLimit on every decided response, and
// Retry-After on 429 responses. See the package documentation for the
// formats.
type Headers struct {
	// DisableXRateLimit leaves out X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset; false sends them.
	DisableXRateLimit bool `yaml:"disable_x_ratelimit,omitempty"`

	// DisableRateLimit leaves out the RateLimit-Policy and RateLimit fields
	// of draft-ietf-httpapi-ratelimit-headers; false sends them.
	DisableRateLimit bool `yaml:"disable_ratelimit,omitempty"`

	// DisableRetryAfter leaves out Retry-After on 429 responses (and on
	// the 503 of a limiter that failed closed); false sends it.
	DisableRetryAfter bool `yaml:"disable_retry_after,omitempty"`

	// Source adds X-RateLimit-Source, naming what decided (memory, redis,
	// local-fallback, …). It tells operators more than clients, so it
	// is off by default: false leaves it out.
	Source bool `yaml:"source,omitempty"`

	// UnixReset sends X-RateLimit-Reset as the Unix time (in seconds, rounded
	// up) at which the limit is full again, instead of the seconds until
	// then. Relative seconds need no clock agreement with the client, so
	// they are the default: false sends seconds from now.
	UnixReset bool `yaml:"unix_reset,omitempty"`
}

// Body selects the body of the default 429 response.
type Body uint8

const (
	// BodyProblem is an RFC 9457 problem detail (application/problem+json)
	// of type quota-exceeded as draft-ietf-httpapi-ratelimit-headers defines
	// it, with the members type, title, status, detail, retry-after (when
	// the request can pass later) and violated-policies. It is the default.
	BodyProblem Body = iota

	// BodyJSON is {"error":"rate limit exceeded","retry_after":7}
	// (application/json), without retry_after when the request can never
	// pass.
	BodyJSON

	// BodyNone is the bare status with an empty body.
	BodyNone
)

// Config configures a Middleware. Rules is the only field that must be set;
// the zero value of every other field is the usual choice.
type Config struct {
	// Rules are the limits a request must pass; empty is an error (New
	// reports it), never a middleware that limits nothing. Every rule that matches a
	// request is checked, in order; when one denies, the units charged by
	// the rules before it are refunded (floodgate.AllowAll), so a denied
	// request consumes nothing anywhere. Order them from the widest to the
	// narrowest (global, per user, per IP).
	Rules []Rule

	// Skip exempts requests from every rule: they pass without a decision
	// and without rate-limit headers (health checks, internal callers).
	// Nil exempts none.
	Skip func(r *http.Request) bool

	// Headers selects the rate-limit header fields sent; the zero value
	// sends them all (see Headers).
	Headers Headers

	// Body selects the body of every refusal the middleware writes itself:
	// the 429 of a limit, the 503 of a limiter that failed closed or could
	// not decide, the 500 of an invalid cost. The zero value, BodyProblem,
	// is an RFC 9457 problem detail.
	Body Body

	// OnLimited writes the response to every refused request: a limit's
	// denial, and the refusals no limit made, whose Result's Source says
	// why (floodgate.SourceFailClosed or SourceError: 503; SourceInvalidCost:
	// 500; Status maps a Result to its status), so that one handler shapes
	// them all (an application's JSON error envelope). The rate-limit
	// headers, Retry-After included, are already set when it runs. Nil
	// means the status with the body Body selects.
	OnLimited func(w http.ResponseWriter, r *http.Request, res floodgate.Result)

	// OnError decides what happens to a request whose limiter could not
	// decide (an engine failure its failure policy did not absorb, a closed
	// store, one key's corrupt state), and to a request whose client went
	// away before it was decided: err is then the request context's error
	// (context.Canceled), and no limiter was asked, so nothing was charged
	// or counted. It either returns true to serve the request anyway, or
	// writes a response and returns false. Nil means ServeOnError. Every
	// error but a gone client's is also logged to Logger, at most once a
	// second.
	//
	// Fail-open is the default because a limiter that cannot decide protects
	// nothing, and refusing every request turns an outage of the limiter
	// into an outage of the service. Where overload is worse than refusal,
	// use UnavailableOnError, or better a failure mode in the engine
	// (package failover), which can fall back to local limits.
	OnError func(w http.ResponseWriter, r *http.Request, err error) (serve bool)

	// Logger receives limiter errors, at most one line a second, with the
	// number of errors not logged since the previous line. Nil means
	// slog.Default().
	Logger *slog.Logger

	// Clock tells the time for Headers.UnixReset. Nil means
	// clock.System.
	Clock clock.Clock

	// LogKeys writes the keys of failed decisions to the log as they are.
	// False, the default, names a key by floodgate.RedactKey's stand-in,
	// since keys are addresses, API keys and logins.
	LogKeys bool
}

// Middleware is rate-limiting net/http middleware. It is safe for concurrent
// use.
type Middleware struct {
	core      Evaluator
	rules     []Rule
	skip      func(*http.Request) bool
	onLimited func(http.ResponseWriter, *http.Request, floodgate.Result)
	onError   func(http.ResponseWriter, *http.Request, error) bool
}

// New validates cfg and returns its Middleware. Every problem found is
// reported, each in an error wrapping ErrInvalidConfig.
func New(cfg Config) (*Middleware, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	switch n := len(cfg.Rules); {
	case n == 0:
		bad("no rules; add at least one Rule with a Limiter")
	case n > MaxRules:
		bad("%d rules, more than the %d one middleware checks; combine limits into policies", n, MaxRules)
	}
	m := &Middleware{
		rules:     make([]Rule, len(cfg.Rules)),
		skip:      cfg.Skip,
		onLimited: cfg.OnLimited,
		onError:   cfg.OnError,
	}
	for i, r := range cfg.Rules {
		switch {
		case r.Limiter != nil && isnil.Value(r.Limiter):
			bad("rule %d: Limiter is a nil %T; set it to a limiter", i+1, r.Limiter)
		case r.Limiter == nil && r.LimiterFor == nil:
			bad("rule %d has no Limiter; set Limiter or LimiterFor", i+1)
		case r.Limiter != nil && r.LimiterFor != nil:
			bad("rule %d sets both Limiter and LimiterFor; keep one", i+1)
		}
		if r.Tokens != nil && (r.Cost != nil || r.ResponseCost != nil) {
			bad("rule %d sets Tokens and a Cost or ResponseCost; keep one", i+1)
		}
		if r.Count > CountSuccessful {
			bad("rule %d: unknown Count %d", i+1, r.Count)
		}
		if r.NoKey == nil {
			r.NoKey = KeyByIP(nil)
		}
		if r.Key == nil {
			r.Key = KeyByIP(nil)
		}
		m.rules[i] = r
	}
	for i := range cfg.Rules {
		for j := range i {
			a, b := cfg.Rules[j].Limiter, cfg.Rules[i].Limiter
			// Limiters of one policy name share their state: equal keys of
			// the two rules would be charged twice to one bucket, and their
			// headers could not be told apart.
			if a != nil && b != nil && a.Name() == b.Name() {
				bad("rules %d and %d both limit policy %q, so equal keys would share one state; give each rule a limiter of its own policy name (they may share the store and the limits)", j+1, i+1, a.Name())
			}
		}
	}
	errs = append(errs, m.core.init(EvaluatorConfig{
		Headers: cfg.Headers, Body: cfg.Body, Logger: cfg.Logger, Clock: cfg.Clock, LogKeys: cfg.LogKeys,
	})...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if m.onError == nil {
		m.onError = ServeOnError
	}
	return m, nil
}

// Handler returns next wrapped in the middleware. The method value m.Handler
// is a func(http.Handler) http.Handler for routers' Use methods.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return &handler{m: m, next: next}
}

type handler struct {
	m    *Middleware
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	var v Answer
	m.Evaluate(r, &v)
	serve, sw := m.respond(w, r, &v, true)
	if !serve {
		return
	}
	if sw == nil {
		h.next.ServeHTTP(w, r)
		return
	}
	sw.ResponseWriter = w
	sw.Tap = v.tap()
	// A panic counts as a failure: the verdict is settled and the panic
	// goes on.
	failed := true
	defer func() {
		if failed {
			v.settle(http.StatusInternalServerError, sw.Header())
		}
	}()
	h.next.ServeHTTP(sw, r)
	failed = false
	v.settle(sw.Status, sw.Header())
}

// Evaluate checks r against the rules of m and fills v with the decision,
// without writing anything: the first half of the middleware, for front
// ends that hold an *http.Request but write responses their own way (gin,
// echo). A request that Config.Skip exempts, or that no rule matches, gets
// an Answer that serves it without headers. v may be a zero Answer or one
// used before; its previous contents are dropped.
func (m *Middleware) Evaluate(r *http.Request, v *Answer) {
	v.begin(&m.core, r.Context())
	if m.skip != nil && m.skip(r) {
		return
	}
	var ts tallies
	for i := range m.rules {
		lim, key, cost, skip := m.plan(i, r, &ts)
		switch skip {
		case SkipNone:
		case SkipNoKey:
			m.core.logNoKey(r.Context(), lim)
			continue
		case SkipInvalidCost:
			v.refuseCost(lim, cost)
			return
		default:
			continue
		}
		ru := &m.rules[i]
		v.add(i, lim, key, cost, false, ru.Count, ru.ResponseCost)
		if ru.Tokens != nil {
			v.addTokens(ts.of(ru.Tokens, r), ru.TokenCount)
		}
	}
	m.core.decide(v)
}

// A Skip is why a rule of a Middleware leaves a request alone.
type Skip uint8

// The reasons a rule leaves a request alone.
const (
	SkipNone        Skip = iota // the rule checks the request
	SkipNoMatch                 // Rule.Match did not select it
	SkipNoLimiter               // Rule.LimiterFor exempted it (nil)
	SkipNoKey                   // its key function found no key and the rule has SkipNoKey
	SkipInvalidCost             // Rule.Cost returned a negative cost: the request is answered 500
	SkipMiddleware              // Config.Skip exempted the request from every rule
)

func (s Skip) String() string {
	switch s {
	case SkipNone:
		return ""
	case SkipNoMatch:
		return "the rule's match does not select the request"
	case SkipNoLimiter:
		return "the rule's LimiterFor exempts the request"
	case SkipNoKey:
		return "the key function found no key and the rule skips such requests"
	case SkipInvalidCost:
		return "the rule's cost is negative: the request is answered 500"
	case SkipMiddleware:
		return "the middleware's Skip exempts the request"
	}
	return "unknown"
}

// plan is what rule i does with r: the limiter, key and cost it checks, or
// why it leaves r alone. Evaluate and Explain both run it, so what Explain
// says is what Evaluate does.
func (m *Middleware) plan(i int, r *http.Request, ts *tallies) (lim floodgate.Limiter, key string, cost int64, skip Skip) {
	ru := &m.rules[i]
	if ru.Match != nil && !ru.Match(r) {
		return nil, "", 0, SkipNoMatch
	}
	lim = ru.Limiter
	if ru.LimiterFor != nil {
		if lim = ru.LimiterFor(r); lim == nil {
			return nil, "", 0, SkipNoLimiter
		}
	}
	key = ru.Key(r)
	if key == "" {
		if ru.SkipNoKey {
			return lim, "", 0, SkipNoKey
		}
		key = "nokey:" + ru.NoKey(r)
	}
	cost = 1
	if ru.Tokens != nil {
		cost = ts.of(ru.Tokens, r).Estimate(ru.TokenCount)
	} else if ru.Cost != nil {
		if cost = ru.Cost(r); cost < 0 {
			return lim, key, cost, SkipInvalidCost
		}
	}
	return lim, key, cost, SkipNone
}

// A Planned is what one rule of a Middleware would check a request
// against, found by Explain without deciding.
type Planned struct {
	Rule    int               // the rule's index in Config.Rules
	Limiter floodgate.Limiter // nil when Match, LimiterFor or Config.Skip leave the request out
	Key     string            // the key the rule checks; "" when it leaves the request alone
	Cost    int64             // the units it would charge up front
	Skip    Skip              // SkipNone when the rule checks the request
}

// Explain returns what each rule of m would check r against — limiter, key
// and cost — or why it leaves r alone, without asking any limiter: the
// same steps as Evaluate (Config.Skip, then each rule's Match, LimiterFor,
// Key, NoKey and Cost), short of deciding. Key and cost functions run, so
// one that reads the body (KeyByFormValue) reads it here too.
func (m *Middleware) Explain(r *http.Request) []Planned {
	out := make([]Planned, len(m.rules))
	if m.skip != nil && m.skip(r) {
		for i := range out {
			out[i] = Planned{Rule: i, Skip: SkipMiddleware}
		}
		return out
	}
	var ts tallies
	for i := range m.rules {
		lim, key, cost, skip := m.plan(i, r, &ts)
		out[i] = Planned{Rule: i, Limiter: lim, Key: key, Cost: cost, Skip: skip}
	}
	return out
}

// Begin is Evaluate followed by the response the verdict calls for, written
// to w as the middleware writes it: the rate-limit headers, and for a
// request that must not be served, the whole answer (Config.OnLimited, the
// 429 body, 503 when the limiter failed closed, Config.OnError's response
// when it could not decide). It reports whether the request is to be
// served; the caller then runs its handler and, when v.Counts, settles v
// with the response (Answer.Serve does both).
func (m *Middleware) Begin(w http.ResponseWriter, r *http.Request, v *Answer) (serve bool) {
	m.Evaluate(r, v)
	serve, _ = m.respond(w, r, v, false)
	return serve
}

// respond writes what v calls for to w and reports whether to serve the
// request. With withWriter, a request that a count rule admits gets a
// statuswriter.Writer, allocated together with the header values.
func (m *Middleware) respond(w http.ResponseWriter, r *http.Request, v *Answer, withWriter bool) (bool, *statuswriter.Writer) {
	switch v.out {
	case outNone:
		return true, nil
	case outError:
		tw := &trackWriter{ResponseWriter: w}
		if m.onError(tw, r, v.err) {
			return true, nil
		}
		if !tw.wrote {
			// OnError refused and left the answer to the middleware
			// (UnavailableOnError): a refusal like the others.
			v.Refuse()
			m.refuse(w, r, v)
		}
		return false, nil
	case outInvalidCost, outRefused:
		m.refuse(w, r, v)
		return false, nil
	case outFailOpen:
		v.writeSource(w)
		return true, nil
	case outFailClosed:
		m.refuse(w, r, v)
		return false, nil
	}
	withWriter = withWriter && v.counting && v.v.res.Allowed
	sw := v.writeHeaders(w, withWriter, m.onLimited == nil)
	if v.v.res.Allowed {
		if withWriter && sw == nil {
			sw = new(statuswriter.Writer)
		}
		return true, sw
	}
	if m.onLimited != nil {
		m.onLimited(w, r, v.v.res)
		return false, nil
	}
	v.writeLimited(w)
	return false, nil
}

// refuse answers a request that no limit denied but that is not served
// (a limiter that failed closed or could not decide: 503; an invalid
// cost: 500) as the middleware answers a 429: Config.OnLimited when set,
// with the Result that says why (see Status), else the body Config.Body
// selects.
func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, v *Answer) {
	h := w.Header()
	v.Headers(func(name, value string) { h[name] = []string{value} })
	if m.onLimited != nil {
		m.onLimited(w, r, v.Result())
		return
	}
	if ct := v.ContentType(); ct != "" {
		h[headerType] = []string{ct}
	}
	w.WriteHeader(v.Status())
	w.Write(v.AppendBody(nil))
}

// ServeOnError is the default Config.OnError: the request is served as if
// no limit applied, without rate-limit headers.
func ServeOnError(http.ResponseWriter, *http.Request, error) bool { return true }

// UnavailableOnError is a Config.OnError that refuses the request and
// leaves the answer to the middleware: 503 Service Unavailable (never 500:
// the request is not at fault), written by Config.OnLimited with a Result
// of Source SourceError when it is set, else with the body Config.Body
// selects.
func UnavailableOnError(http.ResponseWriter, *http.Request, error) bool { return false }

// trackWriter records whether Config.OnError wrote a response.
type trackWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *trackWriter) WriteHeader(code int) { w.wrote = true; w.ResponseWriter.WriteHeader(code) }

func (w *trackWriter) Write(b []byte) (int, error) { w.wrote = true; return w.ResponseWriter.Write(b) }

// Unwrap returns the writer underneath, for http.ResponseController.
func (w *trackWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
