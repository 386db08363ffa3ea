// Package fiberlimit is floodgate's rate limiter for Fiber v3, configured
// as Fiber's own middleware/limiter is, option for option, with
// floodgate's engines (memory, Redis, hybrid, failure modes), keys and
// headers.
//
//	app.Use(fiberlimit.New(fiberlimit.Config{Max: 100, Expiration: time.Minute}))
//	app.Use(fiberlimit.ByIP(100, time.Minute)) // the same, in the words of the other adapters
//
// Fiber's options are all here, meaning what they mean there: Next, Max
// and MaxFunc, Expiration and ExpirationFunc, KeyGenerator, LimitReached,
// SkipFailedRequests and SkipSuccessfulRequests, DisableHeaders,
// DisableValueRedaction, LimiterMiddleware (FixedWindow, SlidingWindow)
// and, in place of Storage, Store. Where they count differently it is on
// purpose, and said where it happens (see FixedWindow and Store). What
// floodgate adds:
//
//   - Decisions are atomic in the engine. With a Redis store every instance
//     shares one limit, decided by one script call per request: no
//     process-wide lock held across a round trip, no get-then-set race
//     between instances.
//   - Several limits in one middleware (Rules), and nested middlewares (a
//     group's limit and a route's) that send one set of rate-limit fields
//     between them, describing the most restrictive.
//   - The response fields are package httplimit's, 429 included:
//     X-RateLimit-Limit, -Remaining and -Reset, RateLimit-Policy and
//     RateLimit, Retry-After; and an RFC 9457 problem body, for the 429
//     and for the 503 of a limiter that failed closed alike.
//   - The default key is the client address resolved through the trusted
//     proxies of the app's own configuration (fiber.Config.TrustProxy,
//     TrustProxyConfig and ProxyHeader), by package clientip: a proxy
//     header is read only from a trusted peer, and X-Forwarded-For is
//     walked from the right, so a client cannot pick its own key by
//     writing the header.
//   - Keys longer than floodgate.MaxKeyLen bytes are hashed by the engines,
//     so long keys stay distinct and limited; keys are written to logs as
//     floodgate.RedactKey's stand-ins unless DisableValueRedaction is set.
package fiberlimit

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/gofiber/fiber/v3"
)

// Defaults of Config, those of Fiber's middleware/limiter.
const (
	DefaultMax        = 5
	DefaultExpiration = time.Minute
	DefaultName       = "limiter"
)

// MaxLimiters bounds the distinct limits MaxFunc and ExpirationFunc may
// ask for: each (max, expiration) pair has a limiter of its own, kept for
// the life of the middleware. A request whose pair would be the
// MaxLimiters+1st is limited by Max and Expiration instead.
const MaxLimiters = 1024

// ErrInvalidConfig is wrapped by the errors NewHandler returns.
var ErrInvalidConfig = errors.New("fiberlimit: invalid config")

// Config configures the middleware. The zero value is Fiber's default:
// each client address may make DefaultMax requests per DefaultExpiration,
// counted in a window that starts at its first request (FixedWindow), in
// memory.
type Config struct {
	// Next skips the middleware for requests it returns true for: they
	// pass without a decision and without rate-limit fields. Nil skips
	// none.
	Next func(c fiber.Ctx) bool

	// Max is the number of requests per Expiration a key may make. 0 (or
	// less, as in Fiber) means DefaultMax.
	Max int

	// MaxFunc returns the max of a request, such as its plan's. Nil means
	// Max for every request. A request it returns 0 or less for is not
	// limited, as in Fiber. Each distinct (max, expiration) pair has a
	// limiter of its own, whose policy is named Name + "/" + max (and "/" +
	// expiration when ExpirationFunc changed it), so a key's state under
	// one limit is never read under another; at most MaxLimiters pairs are
	// kept apart, and a pair beyond them, or one the Store cannot keep, is
	// limited by Max and Expiration.
	MaxFunc func(c fiber.Ctx) int

	// Expiration is the period of Max. 0 (or less, as in Fiber) means
	// DefaultExpiration.
	Expiration time.Duration

	// ExpirationFunc returns the period of a request's max, such as a
	// longer lockout on a login route. Nil means Expiration for every
	// request; a request it returns 0 or less for gets Expiration.
	ExpirationFunc func(c fiber.Ctx) time.Duration

	// LimiterMiddleware is how the limits made from Max and Expiration
	// count, as Fiber's field of that name: FixedWindow{} (the zero
	// value, nil, is FixedWindow{}, Fiber's default), SlidingWindow{} or
	// TokenBucket{}. See each for where it counts as Fiber's does and where
	// it differs.
	LimiterMiddleware Window

	// Store keeps the state of the limits made from Max and Expiration:
	// a memstore, redisstore, hybrid or failover store; RedisStore of
	// package httplimit/quick makes the one that shares limits through
	// Redis with a safe failure mode. Nil means a memory store of the
	// middleware's own, for this process only.
	//
	// It replaces Fiber's Storage, a get-and-set key-value store: with
	// such a store two instances (or two requests of one) can both read
	// "one left" and both admit, so a shared Storage limits to about Max
	// per instance under load, and a slow one holds a process-wide lock
	// across each round trip. A floodgate store decides each request in
	// one atomic step.
	Store floodgate.Store

	// Name is the policy name of the limits made from Max; "" means
	// DefaultName. Headers, metrics and a shared store's key space show
	// it: two middlewares on one shared store need names of their own.
	Name string

	// Limiter, when set, decides every request instead of the limits made
	// from Max, MaxFunc, Expiration, ExpirationFunc, LimiterMiddleware,
	// Store and Name (which must then be left zero): a floodgate policy of
	// several limits, with overrides or tiers. Nil means the limits made
	// from Max.
	Limiter floodgate.Limiter

	// Rules, when set, are the limits of the middleware instead of Max or
	// Limiter (which must then be left zero): each request is checked
	// against every rule that matches it, all or nothing (a rule that
	// denies refunds the ones before it). At most httplimit.MaxRules.
	// Empty means the one limit of Max or Limiter.
	Rules []Rule

	// KeyGenerator returns the key of a request, for the limits of Max and
	// Limiter and for Rules without a Key of their own. Nil means the
	// client address, as ClientIP resolves it. A request it returns "" for
	// is keyed by that client address (tagged "nokey:"), so a generator
	// that falls back to the client returns "" rather than c.IP(): with
	// TrustProxy and ProxyHeader set, c.IP() is the header as the client
	// wrote it, a new key for every spoofed request. Where the client's
	// address is part of a key, use ClientKey.
	KeyGenerator func(c fiber.Ctx) string

	// ClientIP says which peers are trusted proxies and which header they
	// report the client in (see clientip.Config). The zero value takes
	// them from the app's configuration: none unless fiber.Config
	// TrustProxy is set, and then TrustProxyConfig's proxies and ranges and
	// ProxyHeader, so that proxies are configured once. A non-zero value
	// replaces the app's.
	ClientIP clientip.Config

	// LimitReached answers a request that is refused: a limit's 429, and
	// the 503 of a limiter that failed closed or could not decide. The
	// rate-limit fields, Retry-After included, are set when it runs;
	// ResultOf(c) says why (httplimit.Status(ResultOf(c)) is the status
	// the middleware would answer). Nil means the status with the body
	// Body selects.
	LimitReached fiber.Handler

	// SkipFailedRequests refunds requests whose response has a status of
	// 400 or more; SkipSuccessfulRequests those below 400 (login
	// protection: only failures count). Each request is charged before the
	// handler runs, so concurrent requests cannot pass the limit while
	// their answers are pending; a handler's *fiber.Error counts with its
	// code, any other error as 500. At most one of them may be set; false
	// for both counts every request.
	SkipFailedRequests     bool
	SkipSuccessfulRequests bool

	// DisableHeaders leaves out every rate-limit field, Retry-After
	// included; false sends those Headers selects.
	DisableHeaders bool

	// Headers selects the rate-limit fields one family at a time; the zero
	// value sends them all (see httplimit.Headers).
	Headers httplimit.Headers

	// Body selects the body of the default refusals; the zero value is an
	// RFC 9457 problem detail (see httplimit.Body).
	Body httplimit.Body

	// DisableValueRedaction writes keys to the log as they are; false
	// writes floodgate.RedactKey's stand-ins.
	DisableValueRedaction bool

	// OnError decides about a request whose limiter could not decide (see
	// httplimit.Config.OnError): it returns true to serve the request, or
	// false to refuse it, answering it itself or, when it leaves the
	// response untouched (status 200, no body), letting the middleware
	// answer 503 as it answers every refusal (LimitReached or Body). Nil
	// serves the request.
	OnError func(c fiber.Ctx, err error) (serve bool)

	// Logger receives limiter errors, at most one line a second. Nil
	// means slog.Default().
	Logger *slog.Logger
}

// A Rule is one limit of a middleware with Config.Rules.
type Rule struct {
	// Limiter decides every request the rule matches. It must be set.
	Limiter floodgate.Limiter

	// Key returns the key of a request; nil means Config.KeyGenerator, or
	// the client address when that is nil too. A request it returns "" for
	// is keyed by its client address, as for KeyGenerator.
	Key func(c fiber.Ctx) string

	// Match selects the requests the rule applies to; nil means all.
	Match func(c fiber.Ctx) bool

	// Cost returns the units a request costs; nil means 1, 0 lets it pass
	// without charging it, and a negative cost is a bug of the server,
	// answered 500.
	Cost func(c fiber.Ctx) int64

	// Count selects the responses that count (see httplimit.Count). The
	// zero value, CountAll, follows SkipFailedRequests and
	// SkipSuccessfulRequests of the Config.
	Count httplimit.Count
}

// New returns the middleware for cfg. It panics on an invalid cfg, as
// Fiber's own middleware constructors do; NewHandler returns the error.
func New(cfg ...Config) fiber.Handler {
	var c Config
	if len(cfg) > 0 {
		c = cfg[0]
	}
	h, err := NewHandler(c)
	if err != nil {
		panic(err)
	}
	return h
}

// ByIP returns middleware that lets n requests per period through for each
// client address: New(Config{Max: n, Expiration: per}).
func ByIP(n int, per time.Duration) fiber.Handler {
	return mustPositive("ByIP", n, per, Config{Max: n, Expiration: per})
}

// ByHeader is ByIP keyed by a request header the server checks, such as an
// API key, and by client address for requests without it (as
// httplimit.KeyByHeader keys). With a shared store, every instance shares
// each key's limit:
//
//	store, err := quick.RedisStore(client)
//	app.Use(fiberlimit.ByHeader("X-API-Key", 1000, time.Hour, store))
func ByHeader(header string, n int, per time.Duration, store ...floodgate.Store) fiber.Handler {
	cfg := Config{Max: n, Expiration: per, Name: "header"}
	if len(store) > 0 {
		cfg.Store = store[0]
	}
	cfg.KeyGenerator = keyByHeader(header, headerTag(header), fiber.Ctx.Get)
	return mustPositive("ByHeader", n, per, cfg)
}

func mustPositive(fn string, n int, per time.Duration, cfg Config) fiber.Handler {
	if n <= 0 || per <= 0 {
		panic(fmt.Sprintf("fiberlimit: %s(%d, %s): n and per must be positive", fn, n, per))
	}
	return New(cfg)
}

// NewHandler is New with the error returned.
func NewHandler(cfg Config) (fiber.Handler, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if cfg.SkipFailedRequests && cfg.SkipSuccessfulRequests {
		bad("SkipFailedRequests and SkipSuccessfulRequests together count nothing; set one")
	}
	fromMax := cfg.Max != 0 || cfg.MaxFunc != nil || cfg.Expiration != 0 || cfg.ExpirationFunc != nil ||
		cfg.LimiterMiddleware != nil || cfg.Store != nil || cfg.Name != ""
	switch {
	case cfg.Limiter != nil && fromMax:
		bad("Limiter decides instead of Max, MaxFunc, Expiration, ExpirationFunc, LimiterMiddleware, Store and Name; leave those zero, or the Limiter out")
	case len(cfg.Rules) > 0 && (fromMax || cfg.Limiter != nil):
		bad("Rules replace Max and Limiter; leave Max, MaxFunc, Expiration, ExpirationFunc, LimiterMiddleware, Store, Name and Limiter zero, or the Rules out")
	case len(cfg.Rules) > httplimit.MaxRules:
		bad("%d rules, more than the %d one middleware checks", len(cfg.Rules), httplimit.MaxRules)
	}
	hdr := cfg.Headers
	if cfg.DisableHeaders {
		hdr = httplimit.Headers{DisableXRateLimit: true, DisableRateLimit: true, DisableRetryAfter: true}
	}
	d, err := httplimit.NewEvaluator(httplimit.EvaluatorConfig{
		Headers: hdr, Body: cfg.Body, Logger: cfg.Logger, LogKeys: cfg.DisableValueRedaction,
	})
	if err != nil {
		errs = append(errs, err)
	}
	m := &middleware{d: d, next: cfg.Next, limitReached: cfg.LimitReached, onError: cfg.OnError}
	count := httplimit.CountAll
	switch {
	case cfg.SkipFailedRequests:
		count = httplimit.CountSuccessful
	case cfg.SkipSuccessfulRequests:
		count = httplimit.CountFailed
	}
	peer, err := newPeerKey(cfg.ClientIP)
	if err != nil {
		bad("ClientIP: %v", err)
	}
	key := cfg.KeyGenerator
	if key == nil {
		key = peer.key
	}
	for i, r := range cfg.Rules {
		if r.Limiter == nil {
			bad("rule %d has no Limiter", i+1)
			continue
		}
		if r.Count > httplimit.CountSuccessful {
			bad("rule %d: unknown Count %d", i+1, r.Count)
		}
		ru := rule{limiter: fixedLimiter(r.Limiter), key: r.Key, peer: peer, match: r.Match, cost: r.Cost, count: r.Count}
		if ru.key == nil {
			ru.key = key
		}
		if ru.count == httplimit.CountAll {
			ru.count = count
		}
		m.rules = append(m.rules, ru)
	}
	switch {
	case len(cfg.Rules) > 0:
	case cfg.Limiter != nil:
		m.rules = []rule{{limiter: fixedLimiter(cfg.Limiter), key: key, peer: peer, count: count}}
	default:
		lims, err := newLimits(m, cfg)
		if err != nil {
			errs = append(errs, err)
		} else {
			m.rules = []rule{{limiter: lims.limiter, key: key, peer: peer, count: count}}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return m.handle, nil
}

func fixedLimiter(l floodgate.Limiter) func(fiber.Ctx) floodgate.Limiter {
	return func(fiber.Ctx) floodgate.Limiter { return l }
}

type middleware struct {
	d            *httplimit.Evaluator
	next         func(fiber.Ctx) bool
	rules        []rule
	limitReached fiber.Handler
	onError      func(fiber.Ctx, error) bool
}

// rule is a Rule, or the limit of Max or Limiter, with its defaults
// resolved.
type rule struct {
	limiter func(fiber.Ctx) floodgate.Limiter // nil result: not limited
	key     func(fiber.Ctx) string
	peer    *peerKey // keys a request key gave no key ("nokey:" and its client)
	match   func(fiber.Ctx) bool
	cost    func(fiber.Ctx) int64
	count   httplimit.Count
}

// keyOf returns the key of c: the rule's, or, when that is "", "nokey:"
// and the client's address, as httplimit's Rule.NoKey keys. A key
// function that finds no key (an absent API key) thereby means "the
// client", never one bucket that every such request shares.
func (r *rule) keyOf(c fiber.Ctx) string {
	if k := r.key(c); k != "" {
		return k
	}
	return "nokey:" + r.peer.key(c)
}

// limits are the limiters made from Max and Expiration, one per
// (max, expiration) pair that MaxFunc and ExpirationFunc asked for.
type limits struct {
	store   floodgate.Store
	name    string
	max     int
	per     time.Duration
	window  Window
	maxFunc func(fiber.Ctx) int
	expFunc func(fiber.Ctx) time.Duration
	fixed   floodgate.Limiter // the limiter of Max and Expiration
	byPair  sync.Map          // pair → floodgate.Limiter
	mu      sync.Mutex        // serialises the making of limiters
	n       int               // limiters in byPair, under mu
}

type pair struct {
	max int
	per time.Duration
}

func newLimits(m *middleware, cfg Config) (*limits, error) {
	l := &limits{store: cfg.Store, name: orDefault(cfg.Name, DefaultName), max: cfg.Max, per: cfg.Expiration,
		window: cfg.LimiterMiddleware, maxFunc: cfg.MaxFunc, expFunc: cfg.ExpirationFunc}
	if l.max <= 0 {
		l.max = DefaultMax
	}
	if l.per <= 0 {
		l.per = DefaultExpiration
	}
	if l.window == nil {
		l.window = FixedWindow{}
	}
	if l.store == nil {
		s := memstore.New(memstore.Options{})
		// The store's goroutines do not reference the middleware, so once
		// no handler holds it, it is collected and the store closed.
		runtime.AddCleanup(m, func(s *memstore.Store) { s.Close() }, s)
		l.store = s
	}
	lim, err := l.newLimiter(pair{l.max, l.per})
	if err != nil {
		return nil, err
	}
	l.fixed = lim
	return l, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func (l *limits) newLimiter(p pair) (floodgate.Limiter, error) {
	name := l.name
	if p.max != l.max || p.per != l.per {
		name = fmt.Sprintf("%s/%d", name, p.max)
	}
	if p.per != l.per {
		name += "/" + p.per.String()
	}
	lim, err := floodgate.New(l.store, floodgate.Policy{Name: name, Limits: []floodgate.Limit{l.window.limit(int64(p.max), p.per)}})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return lim, nil
}

// limiter returns the limiter of a request: nil when it is not limited.
func (l *limits) limiter(c fiber.Ctx) floodgate.Limiter {
	if l.maxFunc == nil && l.expFunc == nil {
		return l.fixed
	}
	p := pair{l.max, l.per}
	if l.maxFunc != nil {
		if p.max = l.maxFunc(c); p.max <= 0 {
			return nil
		}
	}
	if l.expFunc != nil {
		if e := l.expFunc(c); e > 0 {
			p.per = e
		}
	}
	if p.max == l.max && p.per == l.per {
		return l.fixed
	}
	if lim, ok := l.byPair.Load(p); ok {
		return lim.(floodgate.Limiter)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if lim, ok := l.byPair.Load(p); ok {
		return lim.(floodgate.Limiter)
	}
	if l.n >= MaxLimiters {
		return l.fixed
	}
	lim, err := l.newLimiter(p)
	if err != nil {
		return l.fixed
	}
	l.byPair.Store(p, lim)
	l.n++
	return lim
}

// resultKey is the Locals key of the Result ResultOf returns.
type resultKey struct{}

// ResultOf returns the Result that drove the decision about c's request,
// for LimitReached: a limit's denial, or a Result whose Source says the
// limiter failed closed (floodgate.SourceFailClosed), could not decide
// (httplimit.SourceError) or was given an invalid cost
// (httplimit.SourceInvalidCost); httplimit.Status maps it to the status.
// It is the zero Result for a request no middleware decided.
func ResultOf(c fiber.Ctx) floodgate.Result {
	res, _ := c.Locals(resultKey{}).(floodgate.Result)
	return res
}

func (m *middleware) handle(c fiber.Ctx) error {
	if m.next != nil && m.next(c) {
		return c.Next()
	}
	var charges [httplimit.MaxRules]httplimit.Charge
	n := 0
	for i := range m.rules {
		r := &m.rules[i]
		if r.match != nil && !r.match(c) {
			continue
		}
		lim := r.limiter(c)
		if lim == nil {
			continue
		}
		cost := int64(1)
		if r.cost != nil {
			cost = r.cost(c)
		}
		charges[n] = httplimit.Charge{Limiter: lim, Key: r.keyOf(c), Cost: cost, Count: r.count}
		n++
	}
	if n == 0 {
		return c.Next()
	}
	var v httplimit.Answer
	m.d.Evaluate(c.Context(), &v, charges[:n]...)
	if err := v.Err(); err != nil {
		if m.onError == nil || m.onError(c, err) {
			return c.Next()
		}
		if resp := c.Response(); resp.StatusCode() != fiber.StatusOK || len(resp.Body()) > 0 {
			return nil // OnError answered
		}
		v.Refuse()
	}
	if status := v.Status(); status != 0 {
		mergeHeaders(&c.Response().Header, &v)
		c.Locals(resultKey{}, v.Result())
		if m.limitReached != nil {
			return m.limitReached(c)
		}
		return send(c, &v, status)
	}
	var err error
	v.Serve(func() int {
		err = c.Next()
		return status(c, err)
	}, nil)
	// After the handlers, as Fiber's limiter sets them: a nested limiter
	// has set its fields by now, and the two merge.
	mergeHeaders(&c.Response().Header, &v)
	return err
}

// send answers with the verdict's status and body.
func send(c fiber.Ctx, v *httplimit.Answer, status int) error {
	c.Status(status)
	if ct := v.ContentType(); ct != "" {
		c.Set(fiber.HeaderContentType, ct)
	}
	bp := bodies.Get().(*[]byte)
	b := v.AppendBody((*bp)[:0])
	c.Response().SetBody(b) // copies b
	*bp = b
	bodies.Put(bp)
	return nil
}

var bodies = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// status is the status of the response to a handler that returned err: a
// *fiber.Error's code, 500 for another error (what Fiber's default error
// handler answers), else the response's.
func status(c fiber.Ctx, err error) int {
	if err == nil {
		return c.Response().StatusCode()
	}
	if fe, ok := errors.AsType[*fiber.Error](err); ok {
		return fe.Code
	}
	return fiber.StatusInternalServerError
}
