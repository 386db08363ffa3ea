// Package quick builds rate-limiting net/http middleware in one line: a
// limit per client address, API key or user, kept in memory or, with the
// option Redis, shared by every instance of the service.
//
//	http.Handle("/", quick.LimitByIP(100, time.Minute)(handler))
//
// Each one-liner is a package httplimit Middleware with a single rule; for
// several rules, costs, or responses that count, use httplimit.New. Package
// httplimit takes any floodgate.Limiter and links no engine; this package
// chooses the engines (memstore, and redisstore behind failover for Redis),
// so a program that imports it links them and go-redis.
package quick

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/isnil"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/redis/go-redis/v9"
)

// LimitByIP returns middleware that lets n requests per period through for
// each client address, on a memory store of its own: the one line most
// services start with.
//
//	mux.Handle("/", quick.LimitByIP(100, time.Minute)(handler))
//
// The address is the connection's peer, never a header: behind a proxy or
// load balancer every client would share the proxy's address, so name the
// proxies with the option TrustProxies. The limit is GCRA with a burst of
// n; responses carry httplimit's default headers and 429 body. Options
// keep the limit in Redis for every instance (Redis), on another store
// (OnStore), or under another policy name (Named).
//
// LimitByIP panics if n or per is not positive or an option is invalid,
// like time.NewTicker does for a bad interval: the arguments are constants
// of the program, not input. ByIP returns the error instead.
func LimitByIP(n int64, per time.Duration, opts ...Option) func(http.Handler) http.Handler {
	return must("LimitByIP", n, per)(ByIP(n, per, opts...)).Handler
}

// LimitByHeader is LimitByIP keyed by the value of a request header such as
// an API key (see httplimit.KeyByHeader); requests without the header are
// keyed by address. The header must be one that the server checks (an API
// key it validates): a free-form header lets each client pick a fresh key
// per request. With the option Redis, every instance shares each key's limit:
//
//	quick.LimitByHeader("X-API-Key", 1000, time.Hour, quick.Redis(client))
func LimitByHeader(header string, n int64, per time.Duration, opts ...Option) func(http.Handler) http.Handler {
	return must("LimitByHeader", n, per)(ByHeader(header, n, per, opts...)).Handler
}

// LimitByUser is LimitByIP keyed by the user userID returns ("user:" and
// the id), or by address when it returns "" (see httplimit.KeyByUser).
// userID must read an identity the request has proven, e.g. with
// httplimit.FromContext after the authentication middleware.
func LimitByUser(userID func(r *http.Request) string, n int64, per time.Duration, opts ...Option) func(http.Handler) http.Handler {
	return must("LimitByUser", n, per)(ByUser(userID, n, per, opts...)).Handler
}

// ByIP returns the Middleware of LimitByIP, or the error LimitByIP panics
// with: floodgate.ErrInvalidLimit for n or per, httplimit.ErrInvalidConfig
// for an option. The framework adapters' one-liners are built on it.
func ByIP(n int64, per time.Duration, opts ...Option) (*httplimit.Middleware, error) {
	return oneLiner("ip", n, per, opts, func(ip httplimit.KeyFunc) httplimit.KeyFunc { return ip })
}

// ByHeader returns the Middleware of LimitByHeader, or its error.
func ByHeader(header string, n int64, per time.Duration, opts ...Option) (*httplimit.Middleware, error) {
	return oneLiner("header", n, per, opts, func(ip httplimit.KeyFunc) httplimit.KeyFunc { return httplimit.KeyByHeader(header, ip) })
}

// ByUser returns the Middleware of LimitByUser, or its error.
func ByUser(userID func(r *http.Request) string, n int64, per time.Duration, opts ...Option) (*httplimit.Middleware, error) {
	if userID == nil {
		return nil, fmt.Errorf("%w: userID is nil; pass the function that reads the authenticated user", httplimit.ErrInvalidConfig)
	}
	return oneLiner("user", n, per, opts, func(ip httplimit.KeyFunc) httplimit.KeyFunc { return httplimit.KeyByUser(userID, ip) })
}

// An Option changes what a one-liner builds. The zero set of options keeps
// the limit in a memory store of the middleware's own, keys clients by
// the connection's peer and names the policy after the key ("ip",
// "header", "user").
type Option func(*oneLinerConfig)

type oneLinerConfig struct {
	name    string
	store   floodgate.Store
	redis   redis.UniversalClient
	proxies []string
	errs    []error
}

// Named names the one-liner's policy (the RateLimit-Policy name, the
// metrics label, the key space in a shared store). Two one-liners on one
// shared store need names of their own, or equal keys share one limit.
func Named(name string) Option {
	return func(c *oneLinerConfig) { c.name = name }
}

// OnStore keeps the limit in store (a redisstore, hybrid or failover
// store, or a memstore the program closes itself) instead of a memory
// store of the middleware's own.
func OnStore(store floodgate.Store) Option {
	return func(c *oneLinerConfig) {
		if isnil.Value(store) {
			c.errs = append(c.errs, fmt.Errorf("OnStore(nil %T); pass a store", store))
		}
		c.store = store
	}
}

// Redis keeps the limit in Redis through client, so that every instance
// of the service shares it, with the failure mode
// failover.LocalFallback: while Redis cannot be reached, every instance
// limits alone, in memory, on the same numbers — neither an outage of
// Redis turned into an outage of the service (failover.FailClosed) nor a
// service left unlimited (failover.FailOpen). Responses then say
// X-RateLimit-Source: local-fallback when the headers include the source.
// The store's failover.Guard has the default options: a call is slow
// after 100 ms and cut off at 500 ms, and a circuit breaker stops calling
// Redis after failover.UnreachableInRow calls in a row that could not
// connect (a refused connection), or when half of 20 or more calls failed
// within 10 s; it then probes Redis from time to time. The opening is
// logged once per outage on slog.Default, at Warn ("circuit breaker open",
// detail "limiting per instance until Redis is back"), the closing at Info.
//
// Build client with ContextTimeoutEnabled, so that a deadline cuts short a
// round trip to a stalled Redis, and with DialerRetries 1, so that a
// refused connection costs one dial: go-redis's default dials five times,
// 100 ms apart, and a request waits for all of them.
//
//	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialerRetries: 1})
//
// The store's goroutines live as long as the program: build the one-liner
// once.
func Redis(client redis.UniversalClient) Option {
	return func(c *oneLinerConfig) {
		if isnil.Value(client) {
			c.errs = append(c.errs, fmt.Errorf("Redis(nil %T); pass a client", client))
		}
		c.redis = client
	}
}

// TrustProxies keys clients through the proxies or load balancers in
// front of the service: the address X-Forwarded-For reports, walked from
// the right, when the connection comes from one of proxies (addresses or
// CIDR prefixes, as clientip.Config.TrustedProxies). A request from any
// other peer is keyed by that peer, whatever it writes in the header.
func TrustProxies(proxies ...string) Option {
	return func(c *oneLinerConfig) { c.proxies = append(c.proxies, proxies...) }
}

func oneLiner(policy string, n int64, per time.Duration, opts []Option, key func(ip httplimit.KeyFunc) httplimit.KeyFunc) (*httplimit.Middleware, error) {
	c := oneLinerConfig{name: policy}
	for _, o := range opts {
		o(&c)
	}
	if c.store != nil && c.redis != nil {
		c.errs = append(c.errs, errors.New("both OnStore and Redis; keep one"))
	}
	res, err := clientip.New(clientip.Config{TrustedProxies: c.proxies})
	if err != nil {
		c.errs = append(c.errs, err)
	}
	if len(c.errs) > 0 {
		return nil, fmt.Errorf("%w: %w", httplimit.ErrInvalidConfig, errors.Join(c.errs...))
	}
	var closers []func() error
	store := c.store
	switch {
	case c.redis != nil:
		ss, err := RedisStore(c.redis)
		if err != nil {
			return nil, err
		}
		store, closers = ss, []func() error{ss.Close}
	case store == nil:
		ms := memstore.New(memstore.Options{})
		store, closers = ms, []func() error{ms.Close}
	}
	closeAll := func() {
		for _, f := range closers {
			f()
		}
	}
	lim, err := floodgate.New(store, floodgate.Policy{Name: c.name, Limits: []floodgate.Limit{{Rate: n, Period: per}}})
	if err != nil {
		closeAll()
		return nil, err
	}
	m, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{Limiter: lim, Key: key(httplimit.KeyByIP(res))}}})
	if err != nil {
		closeAll()
		return nil, err
	}
	if len(closers) > 0 {
		// The memory store's goroutines do not reference the middleware,
		// so once nothing else does it is collected, and its own stores
		// closed with it.
		runtime.AddCleanup(m, func(fs []func() error) {
			for _, f := range fs {
				f()
			}
		}, closers)
	}
	return m, nil
}

// must returns a function that panics with the error of a one-liner named
// fn, or returns its Middleware.
func must(fn string, n int64, per time.Duration) func(*httplimit.Middleware, error) *httplimit.Middleware {
	return func(m *httplimit.Middleware, err error) *httplimit.Middleware {
		if err != nil {
			panic(fmt.Sprintf("quick: %s(%d, %s): %v", fn, n, per, err))
		}
		return m
	}
}

// RedisStore returns the store of the option Redis: the limits kept in
// Redis through client, shared by every instance, with the failure mode
// failover.LocalFallback (see Redis). Front ends that take a store rather
// than options (fiberlimit's Config.Store and ByHeader, a Rule's limiter)
// share limits through Redis the same way with it. Its Close closes the
// stores it made, not client.
func RedisStore(client redis.UniversalClient) (*SharedStore, error) {
	if isnil.Value(client) {
		return nil, fmt.Errorf("%w: RedisStore(nil %T); pass a client", httplimit.ErrInvalidConfig, client)
	}
	rs, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", httplimit.ErrInvalidConfig, err)
	}
	local := memstore.New(memstore.Options{})
	fs, err := failover.New(rs, failover.Options{
		Mode: failover.LocalFallback, Local: local,
		Guard: failover.GuardOptions{ContextBound: true, OnTransition: logOutage},
	})
	if err != nil {
		rs.Close()
		local.Close()
		return nil, fmt.Errorf("%w: %w", httplimit.ErrInvalidConfig, err)
	}
	return &SharedStore{Store: fs, remote: rs, local: local}, nil
}

// logOutage logs the transitions of a SharedStore's breaker on the
// slog.Default of the time: the outage once, when it opens.
func logOutage(t failover.Transition) {
	failover.LogTransitions(slog.Default(), "Redis", failover.LocalFallback, "component", "floodgate")(t)
}

// A SharedStore is the store RedisStore returns: a failover.Store over a
// redisstore.Store, falling back to a memstore.Store of its own.
type SharedStore struct {
	*failover.Store
	remote *redisstore.Store
	local  *memstore.Store
}

// Close closes the Redis and memory stores underneath (not the client).
func (s *SharedStore) Close() error {
	return errors.Join(s.remote.Close(), s.local.Close())
}
