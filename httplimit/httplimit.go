package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
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
// A KeyFunc cannot fail: a request it cannot identify must still get a key,
// typically a shared one, so that it stays limited. An empty key is a valid
// key, shared by every request that gets it.
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
	// Limiter and LimiterFor must be set.
	Limiter floodgate.Limiter

	// LimiterFor picks the limiter per request: a plan or tier known from
	// the request (for example from its authenticated account) rather than
	// from its key. Returning nil exempts the request from the rule. It must
	// be cheap and safe for concurrent use. A tier that follows from the key
	// alone is better expressed in the policy (floodgate.Policy.TierOf).
	LimiterFor func(r *http.Request) floodgate.Limiter

	// Key returns the key of a request. Nil means the client's address as
	// clientip's zero Config sees it: the connection's peer, never a header.
	// Behind a proxy use KeyByIP with a configured clientip.Resolver.
	Key KeyFunc

	// Match selects the requests the rule applies to; nil means all. It runs
	// on the request as the middleware sees it, before any routing of the
	// handlers it wraps (see PathPrefix and Methods).
	Match func(r *http.Request) bool

	// Cost returns the units a request costs; nil means 1. A cost of 0 lets
	// the request pass without charging it; a cost larger than a limit's
	// capacity can never pass and is answered 429 without Retry-After. A
	// negative cost is a bug in the Cost function, not a reason to stop
	// limiting: the request is answered 500 and the error logged, whatever
	// Config.OnError says.
	Cost func(r *http.Request) int64

	// Count selects the responses that count; the zero value counts all.
	Count Count

	// ResponseCost, when set, returns what a request really cost once its
	// response is known: the tokens an LLM API reports in a response header
	// or trailer, say. The request is charged Cost (1 when nil) before the
	// handler runs, so it passes while budget remains; when the handler
	// returns, the difference to ResponseCost's answer is charged or
	// refunded. A charge that no longer fits empties the key's budget
	// instead (there is no debt below zero), so a request can overrun the
	// budget by its own overage once; the next ones wait for the refill.
	// It runs after the handler, with the status and the final header map
	// (trailers included), and only for responses the rule counts.
	ResponseCost func(status int, h http.Header) int64
}

// Headers selects the rate-limit header fields of responses. The zero value
// sends X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset (in
// seconds), RateLimit-Policy and RateLimit on every decided response, and
// Retry-After on 429 responses. See the package documentation for the
// formats.
type Headers struct {
	// DisableXRateLimit leaves out X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset.
	DisableXRateLimit bool

	// DisableRateLimit leaves out the RateLimit-Policy and RateLimit fields
	// of draft-ietf-httpapi-ratelimit-headers.
	DisableRateLimit bool

	// DisableRetryAfter leaves out Retry-After on 429 responses.
	DisableRetryAfter bool

	// Source adds X-RateLimit-Source, naming what decided (memory, redis,
	// hybrid:local-fallback, …). It tells operators more than clients, so it
	// is off by default.
	Source bool

	// UnixReset sends X-RateLimit-Reset as the Unix time (in seconds, rounded
	// up) at which the limit is full again, instead of the seconds until
	// then. Relative seconds need no clock agreement with the client, so
	// they are the default.
	UnixReset bool
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
	// Rules are the limits a request must pass. Every rule that matches a
	// request is checked, in order; when one denies, the units charged by
	// the rules before it are refunded (floodgate.AllowAll), so a denied
	// request consumes nothing anywhere. Order them from the widest to the
	// narrowest (global, per user, per IP).
	Rules []Rule

	// Skip exempts requests from every rule: they pass without a decision
	// and without rate-limit headers (health checks, internal callers).
	Skip func(r *http.Request) bool

	// Headers selects the rate-limit header fields sent.
	Headers Headers

	// Body selects the body of the default 429 response.
	Body Body

	// OnLimited writes the response to a denied request. The rate-limit
	// headers, Retry-After included, are already set when it runs. Nil means
	// status 429 with the body Body selects.
	OnLimited func(w http.ResponseWriter, r *http.Request, res floodgate.Result)

	// OnError decides what happens to a request whose limiter could not
	// decide (an engine failure its failure policy did not absorb, a closed
	// store, one key's corrupt state). It either returns true to serve the
	// request anyway, or writes a response and returns false. Nil means
	// ServeOnError. Every such error is also logged to Logger, at most once
	// a second.
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
	// floodgate.SystemClock.
	Clock floodgate.Clock
}

// Middleware is rate-limiting net/http middleware. It is safe for concurrent
// use.
type Middleware struct {
	rules     []rule
	skip      func(*http.Request) bool
	hdr       Headers
	body      Body
	onLimited func(http.ResponseWriter, *http.Request, floodgate.Result)
	onError   func(http.ResponseWriter, *http.Request, error) bool
	log       *slog.Logger
	clock     floodgate.Clock

	descs  sync.Map // *floodgate.LimitSet → *desc
	ndescs atomic.Int64

	lastLog    atomic.Int64
	suppressed atomic.Uint64
}

type rule struct {
	Rule
	last atomic.Pointer[desc] // the description of the set last decided
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
	if cfg.Body > BodyNone {
		bad("unknown Body %d", cfg.Body)
	}
	m := &Middleware{
		rules:     make([]rule, len(cfg.Rules)),
		skip:      cfg.Skip,
		hdr:       cfg.Headers,
		body:      cfg.Body,
		onLimited: cfg.OnLimited,
		onError:   cfg.OnError,
		log:       cfg.Logger,
		clock:     cfg.Clock,
	}
	for i, r := range cfg.Rules {
		switch {
		case r.Limiter == nil && r.LimiterFor == nil:
			bad("rule %d has no Limiter; set Limiter or LimiterFor", i+1)
		case r.Limiter != nil && r.LimiterFor != nil:
			bad("rule %d sets both Limiter and LimiterFor; keep one", i+1)
		}
		if r.Count > CountSuccessful {
			bad("rule %d: unknown Count %d", i+1, r.Count)
		}
		if r.Key == nil {
			r.Key = KeyByIP(nil)
		}
		m.rules[i].Rule = r
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
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if m.onError == nil {
		m.onError = ServeOnError
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.clock == nil {
		m.clock = floodgate.SystemClock
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

// checks is what one request is checked against: the floodgate checks and
// the index of the rule of each.
type checks struct {
	c    [MaxRules]floodgate.Check
	rule [MaxRules]uint8
	n    int
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	if m.skip != nil && m.skip(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	// The context is read before it is needed: loading it overlaps with
	// the work of the key functions rather than stalling the decision.
	ctx := r.Context()
	var cs checks
	counting := false
	for i := range m.rules {
		ru := &m.rules[i]
		if ru.Match != nil && !ru.Match(r) {
			continue
		}
		lim := ru.Limiter
		if ru.LimiterFor != nil {
			if lim = ru.LimiterFor(r); lim == nil {
				continue
			}
		}
		key := ru.Key(r)
		cost := int64(1)
		if ru.Cost != nil {
			if cost = ru.Cost(r); cost < 0 {
				m.refuseCost(w, r, lim, cost)
				return
			}
		}
		cs.c[cs.n] = floodgate.Check{Limiter: lim, Key: key, Cost: cost}
		cs.rule[cs.n] = uint8(i)
		cs.n++
		counting = counting || ru.Count != CountAll || ru.ResponseCost != nil
	}
	if cs.n == 0 {
		h.next.ServeHTTP(w, r)
		return
	}

	var v verdict
	var err error
	if cs.n == 1 {
		v.res, err = cs.c[0].Limiter.AllowN(ctx, cs.c[0].Key, cs.c[0].Cost)
		cs.c[0].Result = v.res
	} else {
		v.res, v.drive, err = floodgate.AllowAll(ctx, cs.c[:cs.n]...)
	}
	if err != nil {
		m.logError(ctx, err)
		if m.onError(w, r, err) {
			h.next.ServeHTTP(w, r)
		}
		return
	}

	switch v.res.Source {
	case floodgate.SourceFailOpen:
		// The engine failed and its failure policy let the request through.
		// No state was read, so there is no quota to advertise, and nothing
		// was charged that a count rule could refund.
		m.writeSource(w, v.res.Source)
		h.next.ServeHTTP(w, r)
		return
	case floodgate.SourceFailClosed:
		if !v.res.Allowed {
			// The limiter, not the client, failed: 503, not 429.
			m.writeSource(w, v.res.Source)
			writeUnavailable(w, v.res.RetryAfter)
			return
		}
	}

	allowed := v.res.Allowed
	v.d = m.describe(&m.rules[cs.rule[v.drive]], v.res.Set)
	sw := m.writeHeaders(w, &cs, &v, counting && allowed)
	if !allowed {
		if m.onLimited != nil {
			m.onLimited(w, r, v.res)
			return
		}
		m.writeLimited(w, &v)
		return
	}
	if !counting {
		h.next.ServeHTTP(w, r)
		return
	}
	if sw == nil {
		sw = new(statusWriter)
	}
	sw.ResponseWriter = w
	h.serveCounting(sw, r, &cs)
}

// serveCounting runs the handler behind a writer that records its status,
// then refunds the rules the response does not count for. A panic counts as
// a failure: the refunds are made and the panic goes on.
func (h *handler) serveCounting(sw *statusWriter, r *http.Request, cs *checks) {
	failed := true
	defer func() { h.m.settle(r, sw, cs, failed) }()
	h.next.ServeHTTP(sw, r)
	failed = sw.status >= 400
}

// settle refunds the rules the response does not count for, and charges
// the rules with a ResponseCost what the response says it cost.
func (m *Middleware) settle(r *http.Request, sw *statusWriter, cs *checks, failed bool) {
	var ctx context.Context
	owed := func() context.Context {
		if ctx == nil {
			ctx = r.Context()
			if ctx.Err() != nil {
				// The client is gone; the refund or charge is still owed.
				ctx = context.WithoutCancel(ctx)
			}
		}
		return ctx
	}
	for i := range cs.n {
		ru := &m.rules[cs.rule[i]]
		c := &cs.c[i]
		counts := ru.Count == CountAll || (ru.Count == CountFailed) == failed
		switch {
		case !counts:
			if c.Cost > 0 {
				if err := c.Limiter.RefundN(owed(), c.Key, c.Cost); err != nil {
					m.logError(ctx, err)
				}
			}
		case ru.ResponseCost != nil:
			if err := chargeActual(owed(), c, ru.ResponseCost(sw.status, sw.Header())); err != nil {
				m.logError(ctx, err)
			}
		}
	}
}

// chargeActual settles a check that was charged c.Cost up front at the
// cost the response reported: the difference is refunded or charged. A
// charge that no longer fits drains the key to zero instead: the limiter
// has no debt below zero to carry the rest, so the request's overage
// beyond the remaining budget is lost, and the next request waits for a
// refill. A negative reported cost counts as zero.
func chargeActual(ctx context.Context, c *floodgate.Check, actual int64) error {
	extra := max(actual, 0) - c.Cost
	switch {
	case extra < 0:
		return c.Limiter.RefundN(ctx, c.Key, -extra)
	case extra == 0:
		return nil
	}
	res, err := c.Limiter.AllowN(ctx, c.Key, extra)
	if err != nil || res.Allowed || res.Remaining <= 0 {
		return err
	}
	_, err = c.Limiter.AllowN(ctx, c.Key, res.Remaining)
	return err
}

// ServeOnError is the default Config.OnError: the request is served as if
// no limit applied, without rate-limit headers.
func ServeOnError(http.ResponseWriter, *http.Request, error) bool { return true }

// UnavailableOnError is a Config.OnError that answers 503 Service
// Unavailable with an RFC 9457 problem detail, never 500: the request is not
// at fault.
func UnavailableOnError(w http.ResponseWriter, _ *http.Request, _ error) bool {
	writeUnavailable(w, 0)
	return false
}

// writeSource sets X-RateLimit-Source on a response that carries no other
// rate-limit field, when Headers.Source asks for it: an operator looking at
// a fail-open or fail-closed answer should see why.
func (m *Middleware) writeSource(w http.ResponseWriter, src floodgate.Source) {
	if m.hdr.Source {
		w.Header()[headerSource] = []string{string(src)}
	}
}

// refuseCost answers a request whose Cost function returned a negative
// cost: 500, because the server's own code is wrong, and never served
// unlimited, because a bug must not switch limiting off.
func (m *Middleware) refuseCost(w http.ResponseWriter, r *http.Request, lim floodgate.Limiter, cost int64) {
	m.logError(r.Context(), fmt.Errorf("%w: policy %s: the rule's Cost returned %d; costs are 0 (peek) or more", floodgate.ErrInvalidCost, lim.Name(), cost))
	h := w.Header()
	h[headerType] = []string{"application/problem+json"}
	w.WriteHeader(http.StatusInternalServerError)
	w.Write([]byte(invalidCostBody))
}

const invalidCostBody = `{"type":"about:blank","title":"Internal Server Error","status":500,` +
	`"detail":"The rate limiter was given an invalid request cost."}`

// writeUnavailable answers 503 with a problem detail, and Retry-After when
// the engine's failure policy said when it will try again (a circuit
// breaker's next probe). The middleware answers so for a denial whose Source
// is fail-closed: a limiter that cannot decide is the service's failure.
func writeUnavailable(w http.ResponseWriter, retry time.Duration) {
	h := w.Header()
	h[headerType] = []string{"application/problem+json"}
	if retry > 0 && retry != floodgate.RetryNever {
		h[headerRetryAfter] = []string{strconv.FormatInt(max(ceilSeconds(retry), 1), 10)}
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write([]byte(failClosedBody))
}

const failClosedBody = `{"type":"about:blank","title":"Service Unavailable","status":503,` +
	`"detail":"The rate limiter is unavailable; retry shortly."}`

// logError logs a limiter error, at most once per second.
func (m *Middleware) logError(ctx context.Context, err error) {
	now := time.Now().UnixNano()
	last := m.lastLog.Load()
	if now-last < int64(time.Second) || !m.lastLog.CompareAndSwap(last, now) {
		m.suppressed.Add(1)
		return
	}
	m.log.LogAttrs(ctx, slog.LevelError, "httplimit: rate limiter failed",
		slog.Any("error", err),
		slog.Uint64("suppressed", m.suppressed.Swap(0)))
}
