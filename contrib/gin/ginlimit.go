// Package ginlimit runs floodgate's rate-limiting middleware in gin.
//
//	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{Limiter: api}}})
//	router.Use(ginlimit.New(mw))
//
// The rules, keys, headers, 429 body and failure handling are package
// httplimit's, applied to gin's request and response writer, so a gin
// service answers exactly as a net/http one does. A request that is not to
// be served is answered and aborted; the handlers after the middleware do
// not run. Rules that count only failed or successful responses read the
// status gin's writer records once the rest of the chain has run.
package ginlimit

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httplimit/quick"
	"github.com/gin-gonic/gin"
)

// New returns gin middleware that limits requests as m does. Use it after
// gin.Recovery and the logger, so that 429s are logged and a panic further
// down is recovered; a panic counts as a failed response for m's count
// rules.
func New(m *httplimit.Middleware) gin.HandlerFunc {
	return func(c *gin.Context) {
		var v httplimit.Answer
		if !m.Begin(c.Writer, c.Request, &v) {
			c.Abort()
			return
		}
		v.Serve(func() int {
			c.Next()
			return c.Writer.Status()
		}, c.Writer.Header())
	}
}

// ByIP returns gin middleware that lets n requests per period through for
// each client address, as quick.LimitByIP does:
//
//	router.Use(ginlimit.ByIP(100, time.Minute))
//
// The address is the connection's peer, never gin's c.ClientIP(): name the
// proxies in front with quick.TrustProxies, and share the limit
// between instances with quick.Redis. It panics on a non-positive n or
// period or an invalid option; quick.ByIP with New returns the error.
func ByIP(n int64, per time.Duration, opts ...quick.Option) gin.HandlerFunc {
	return New(must("ByIP", n, per)(quick.ByIP(n, per, opts...)))
}

// ByHeader is ByIP keyed by a request header the server checks, such as an
// API key, and by address for requests without it (httplimit.KeyByHeader):
//
//	router.Use(ginlimit.ByHeader("X-API-Key", 1000, time.Hour, quick.Redis(client)))
func ByHeader(header string, n int64, per time.Duration, opts ...quick.Option) gin.HandlerFunc {
	return New(must("ByHeader", n, per)(quick.ByHeader(header, n, per, opts...)))
}

func must(fn string, n int64, per time.Duration) func(*httplimit.Middleware, error) *httplimit.Middleware {
	return func(m *httplimit.Middleware, err error) *httplimit.Middleware {
		if err != nil {
			panic(fmt.Sprintf("ginlimit: %s(%d, %s): %v", fn, n, per, err))
		}
		return m
	}
}
