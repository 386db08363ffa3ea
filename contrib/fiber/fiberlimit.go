// Package fiberlimit is floodgate's rate limiter for Fiber v3: the
// configuration of Fiber's own middleware/limiter, with floodgate's engines
// (memory, Redis, hybrid, failure modes), keys and headers.
//
//	app.Use(fiberlimit.New(fiberlimit.Config{Max: 100, Expiration: time.Minute}))
//
// What Fiber users know is here: Next, Max and MaxFunc, Expiration,
// KeyGenerator, LimitReached, SkipFailedRequests and SkipSuccessfulRequests,
// DisableHeaders and DisableValueRedaction. What floodgate adds:
//
//   - Decisions are atomic in the engine. With a Redis store, every
//     instance shares one limit, decided by one script call per request:
//     no process-wide lock held across a round trip, no get-then-set race
//     between instances.
//   - The limit is GCRA by default (a smooth token bucket), or any of
//     floodgate's algorithms; Limiter takes a whole floodgate policy
//     (several limits, overrides, tiers).
//   - The response fields are package httplimit's, 429 included:
//     X-RateLimit-Limit, -Remaining and -Reset, RateLimit-Policy and
//     RateLimit, Retry-After, and an RFC 9457 problem body.
//   - The default key is the client address as package clientip resolves
//     it from the connection's peer: X-Forwarded-For or another header is
//     read only from a trusted proxy (Config.ClientIP), never because a
//     client sent it. Fiber's c.IP() reads the peer, or, with
//     ProxyHeader set, the header as the client wrote it.
//   - Keys longer than floodgate.MaxKeyLen bytes are hashed by the engines,
//     so long keys stay distinct and limited; keys are written to logs as
//     floodgate.RedactKey's stand-ins unless DisableValueRedaction is set.
package fiberlimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
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

// MaxLimiters bounds the distinct maxima MaxFunc may return: each has a
// limiter of its own, kept for the life of the middleware. A request whose
// max would be the MaxLimiters+1st is limited by Max instead.
const MaxLimiters = 1024

// ErrInvalidConfig is wrapped by the errors NewHandler returns.
var ErrInvalidConfig = errors.New("fiberlimit: invalid config")

// Config configures the middleware. The zero value limits each client
// address to DefaultMax requests per DefaultExpiration in memory.
type Config struct {
	// Next skips the middleware for requests it returns true for.
	Next func(c fiber.Ctx) bool

	// Max is the number of requests per Expiration a key may make. 0 means
	// DefaultMax.
	Max int

	// MaxFunc returns the max of a request, such as its plan's; nil means
	// Max. A request it returns 0 (or less) for is not limited. Each
	// distinct max has a limiter of its own, whose policy is named
	// Name + "/" + max (Name alone for Max), so a key's state under one max
	// is not read under another. At most MaxLimiters distinct values are
	// kept apart; a max beyond them, or one the Store cannot keep, is
	// limited by Max.
	MaxFunc func(c fiber.Ctx) int

	// Expiration is the period of Max. 0 means DefaultExpiration.
	Expiration time.Duration

	// Algorithm is the algorithm of the limits made from Max and
	// Expiration; the zero value is floodgate.GCRA, which refills evenly.
	// floodgate.FixedWindow counts as Fiber's FixedWindow does,
	// floodgate.SlidingWindow as its SlidingWindow.
	Algorithm floodgate.Algorithm

	// Store keeps the state of the limits made from Max and Expiration:
	// a memstore, redisstore, hybrid or failover store. Nil means a memory
	// store of the middleware's own.
	Store floodgate.Store

	// Name is the policy name of the limits made from Max; "" means
	// DefaultName. Headers and metrics show it.
	Name string

	// Limiter, when set, decides every request instead of the limits made
	// from Max, MaxFunc, Expiration, Algorithm, Store and Name: a floodgate
	// policy of several limits, with overrides or tiers.
	Limiter floodgate.Limiter

	// KeyGenerator returns the key of a request; nil means its client
	// address as ClientIP resolves it.
	KeyGenerator func(c fiber.Ctx) string

	// ClientIP says which peers are trusted proxies and which header they
	// report the client in (see clientip.Config). The zero value trusts no
	// one: the key is the connection's peer address.
	ClientIP clientip.Config

	// LimitReached answers a denied request; the rate-limit fields,
	// Retry-After included, are set when it runs. Nil means 429 with the
	// body that Body selects.
	LimitReached fiber.Handler

	// SkipFailedRequests refunds requests whose response has a status of
	// 400 or more; SkipSuccessfulRequests those below 400 (login
	// protection: only failures count). Each request is charged before the
	// handler runs, so concurrent requests cannot pass the limit while
	// their answers are pending. At most one of them may be set.
	SkipFailedRequests     bool
	SkipSuccessfulRequests bool

	// DisableHeaders leaves out every rate-limit field; Headers selects
	// them one family at a time.
	DisableHeaders bool
	Headers        httplimit.Headers

	// Body selects the body of the default 429 response.
	Body httplimit.Body

	// DisableValueRedaction writes keys to the log as they are.
	DisableValueRedaction bool

	// OnError decides about a request whose limiter could not decide (see
	// httplimit.Config.OnError): it returns true to serve the request, or
	// answers it and returns false. Nil serves it. Errors are logged to
	// Logger (nil: slog.Default()) at most once a second.
	OnError func(c fiber.Ctx, err error) (serve bool)
	Logger  *slog.Logger
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

// NewHandler is New with the error returned.
func NewHandler(cfg Config) (fiber.Handler, error) {
	if cfg.SkipFailedRequests && cfg.SkipSuccessfulRequests {
		return nil, fmt.Errorf("%w: SkipFailedRequests and SkipSuccessfulRequests together count nothing; set one", ErrInvalidConfig)
	}
	if cfg.Max < 0 || cfg.Expiration < 0 {
		return nil, fmt.Errorf("%w: Max %d and Expiration %s must not be negative", ErrInvalidConfig, cfg.Max, cfg.Expiration)
	}
	hdr := cfg.Headers
	if cfg.DisableHeaders {
		hdr = httplimit.Headers{DisableXRateLimit: true, DisableRateLimit: true, DisableRetryAfter: true}
	}
	d, err := httplimit.NewDecider(httplimit.DeciderConfig{
		Headers: hdr, Body: cfg.Body, Logger: cfg.Logger, LogKeys: cfg.DisableValueRedaction,
	})
	if err != nil {
		return nil, err
	}
	m := &middleware{d: d, next: cfg.Next, maxFunc: cfg.MaxFunc, key: cfg.KeyGenerator,
		limitReached: cfg.LimitReached, onError: cfg.OnError}
	switch {
	case cfg.SkipFailedRequests:
		m.count = httplimit.CountSuccessful
	case cfg.SkipSuccessfulRequests:
		m.count = httplimit.CountFailed
	}
	if m.key == nil {
		pk, err := httplimit.NewPeerKeyer(cfg.ClientIP)
		if err != nil {
			return nil, fmt.Errorf("%w: ClientIP: %w", ErrInvalidConfig, err)
		}
		m.key = func(c fiber.Ctx) string { return peerKey(pk, c) }
	}
	if cfg.Limiter != nil {
		m.fixed = cfg.Limiter
		return m.handle, nil
	}
	m.store = cfg.Store
	if m.store == nil {
		s := memstore.New(memstore.Options{})
		// The store's goroutines do not reference the middleware, so once
		// no handler holds it, it is collected and the store closed.
		runtime.AddCleanup(m, func(s *memstore.Store) { s.Close() }, s)
		m.store = s
	}
	m.name, m.max, m.per, m.algo = orDefault(cfg.Name, DefaultName), orDefault(cfg.Max, DefaultMax), orDefault(cfg.Expiration, DefaultExpiration), cfg.Algorithm
	lim, err := m.newLimiter(m.max)
	if err != nil {
		return nil, err
	}
	m.fixed = lim
	if m.maxFunc != nil {
		m.byMax.Store(m.max, lim)
		m.nmax.Store(1)
	}
	return m.handle, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

type middleware struct {
	d            *httplimit.Decider
	next         func(fiber.Ctx) bool
	maxFunc      func(fiber.Ctx) int
	key          func(fiber.Ctx) string
	limitReached fiber.Handler
	onError      func(fiber.Ctx, error) bool
	count        httplimit.Count

	fixed floodgate.Limiter // the limiter of Max, or Config.Limiter

	// For limits made from Max: the limiter of each max MaxFunc returned.
	store floodgate.Store
	name  string
	max   int
	per   time.Duration
	algo  floodgate.Algorithm
	byMax sync.Map // int → floodgate.Limiter
	nmax  atomic.Int64
	mu    sync.Mutex // serialises the making of limiters
}

func (m *middleware) newLimiter(max int) (floodgate.Limiter, error) {
	name := m.name
	if max != m.max {
		name += "/" + strconv.Itoa(max)
	}
	lim, err := floodgate.New(m.store, floodgate.Policy{Name: name, Limits: []floodgate.Limit{
		{Rate: int64(max), Period: m.per, Algorithm: m.algo},
	}})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return lim, nil
}

// limiter returns the limiter of a request: nil when it is not limited.
// A max beyond MaxLimiters, or one the store cannot keep, is limited by Max.
func (m *middleware) limiter(c fiber.Ctx) floodgate.Limiter {
	if m.maxFunc == nil {
		return m.fixed
	}
	max := m.maxFunc(c)
	if max <= 0 {
		return nil
	}
	if lim, ok := m.byMax.Load(max); ok {
		return lim.(floodgate.Limiter)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if lim, ok := m.byMax.Load(max); ok {
		return lim.(floodgate.Limiter)
	}
	if m.nmax.Load() >= MaxLimiters {
		return m.fixed
	}
	lim, err := m.newLimiter(max)
	if err != nil {
		return m.fixed
	}
	m.byMax.Store(max, lim)
	m.nmax.Add(1)
	return lim
}

func (m *middleware) handle(c fiber.Ctx) error {
	if m.next != nil && m.next(c) {
		return c.Next()
	}
	lim := m.limiter(c)
	if lim == nil {
		return c.Next()
	}
	var v httplimit.Verdict
	m.d.Decide(c.Context(), &v, httplimit.Charge{Limiter: lim, Key: m.key(c), Cost: 1, Count: m.count})
	if err := v.Err(); err != nil {
		if m.onError == nil || m.onError(c, err) {
			return c.Next()
		}
		return nil
	}
	h := &c.Response().Header
	v.Headers(h.Add)
	if status := v.Status(); status != 0 {
		if status == fiber.StatusTooManyRequests && m.limitReached != nil {
			return m.limitReached(c)
		}
		return send(c, &v, status)
	}
	var err error
	v.Serve(func() int {
		err = c.Next()
		return status(c, err)
	}, nil)
	return err
}

// send answers with the verdict's status and body.
func send(c fiber.Ctx, v *httplimit.Verdict, status int) error {
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

// peerKey is the client-address key of a request: its TCP peer, and the
// trusted header's lines when a proxy is trusted.
func peerKey(pk *httplimit.PeerKeyer, c fiber.Ctx) string {
	var peer netip.AddrPort
	if a, ok := c.RequestCtx().RemoteAddr().(*net.TCPAddr); ok {
		peer = a.AddrPort()
	}
	var lines []string
	if name := pk.Header(); name != "" {
		for _, l := range c.Request().Header.PeekAll(name) {
			lines = append(lines, string(l))
		}
	}
	return pk.Key(peer, lines)
}
