// Package echolimit runs floodgate's rate-limiting middleware in Echo v5.
//
//	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{Limiter: api}}})
//	e.Use(echolimit.New(mw))
//
// It is package contrib/echo for Echo's current major version, where a
// handler takes a *echo.Context: the same one-liners and options. The
// rules, keys, headers, 429 body and failure handling are package
// httplimit's, applied to Echo's request and response, so an Echo service
// answers exactly as a net/http one does. A request that is not to be
// served is answered by the middleware and the handler does not run.
package echolimit

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httplimit/quick"
	"github.com/labstack/echo/v5"
)

// New returns Echo middleware that limits requests as m does. A handler's
// error is returned unchanged for Echo's error handler; for m's count rules
// it counts with the status that handler will answer, as
// echo.ResolveResponseStatus gives it (the error's status code, else 500;
// the status sent when the response is committed). Use it after
// middleware.Recover, so that a panic further down is recovered; a panic
// counts as a failed response.
func New(m *httplimit.Middleware) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			var v httplimit.Answer
			res := c.Response()
			if !m.Begin(res, c.Request(), &v) {
				return nil
			}
			var err error
			v.Serve(func() int {
				err = next(c)
				_, code := echo.ResolveResponseStatus(c.Response(), err)
				return code
			}, res.Header())
			return err
		}
	}
}

// ByIP returns Echo middleware that lets n requests per period through for
// each client address, as quick.LimitByIP does:
//
//	e.Use(echolimit.ByIP(100, time.Minute))
//
// The address is the connection's peer, never c.RealIP(): name the proxies
// in front with quick.TrustProxies, and share the limit between
// instances with quick.Redis. It panics on a non-positive n or period
// or an invalid option; quick.ByIP with New returns the error.
func ByIP(n int64, per time.Duration, opts ...quick.Option) echo.MiddlewareFunc {
	return New(must("ByIP", n, per)(quick.ByIP(n, per, opts...)))
}

// ByHeader is ByIP keyed by a request header the server checks, such as an
// API key, and by address for requests without it (httplimit.KeyByHeader):
//
//	e.Use(echolimit.ByHeader("X-API-Key", 1000, time.Hour, quick.Redis(client)))
func ByHeader(header string, n int64, per time.Duration, opts ...quick.Option) echo.MiddlewareFunc {
	return New(must("ByHeader", n, per)(quick.ByHeader(header, n, per, opts...)))
}

func must(fn string, n int64, per time.Duration) func(*httplimit.Middleware, error) *httplimit.Middleware {
	return func(m *httplimit.Middleware, err error) *httplimit.Middleware {
		if err != nil {
			panic(fmt.Sprintf("echolimit: %s(%d, %s): %v", fn, n, per, err))
		}
		return m
	}
}
