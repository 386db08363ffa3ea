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
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/gin-gonic/gin"
)

// New returns gin middleware that limits requests as m does. Use it after
// gin.Recovery and the logger, so that 429s are logged and a panic further
// down is recovered; a panic counts as a failed response for m's count
// rules.
func New(m *httplimit.Middleware) gin.HandlerFunc {
	return func(c *gin.Context) {
		var v httplimit.Verdict
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
