// Package echolimit runs floodgate's rate-limiting middleware in Echo (v4).
//
//	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{Limiter: api}}})
//	e.Use(echolimit.New(mw))
//
// The rules, keys, headers, 429 body and failure handling are package
// httplimit's, applied to Echo's request and response, so an Echo service
// answers exactly as a net/http one does. A request that is not to be served
// is answered by the middleware and the handler does not run.
package echolimit

import (
	"errors"
	"net/http"

	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/labstack/echo/v4"
)

// New returns Echo middleware that limits requests as m does. A handler's
// error is returned unchanged for Echo's error handler; for m's count rules
// it counts with the status that handler will answer (an *echo.HTTPError's
// code, else 500). Use it after middleware.Recover, so that a panic further
// down is recovered; a panic counts as a failed response.
func New(m *httplimit.Middleware) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			var v httplimit.Verdict
			res := c.Response()
			if !m.Begin(res, c.Request(), &v) {
				return nil
			}
			var err error
			v.Serve(func() int {
				err = next(c)
				return status(res, err)
			}, res.Header())
			return err
		}
	}
}

// status is the status of the response to a handler that returned err.
func status(res *echo.Response, err error) int {
	if err == nil || res.Committed {
		return res.Status
	}
	if he, ok := errors.AsType[*echo.HTTPError](err); ok {
		return he.Code
	}
	return http.StatusInternalServerError
}
