// Package chilimit keys floodgate's net/http middleware by chi route
// pattern. Everything else is package httplimit as it is: a Middleware's
// Handler is chi middleware.
//
//	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{
//		Limiter: perRoute,
//		Key:     httplimit.JoinKeys(httplimit.KeyByIP(resolver), chilimit.KeyByRoute(r)),
//	}}})
//	r.Use(mw.Handler)
//
// httplimit.KeyByRoute reads the pattern a ServeMux records; chi records
// its own in the request's chi.Context, so under chi every request would
// share httplimit's key "unmatched". KeyByRoute reads chi's.
package chilimit

import (
	"net/http"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httplimit/quick"
	"github.com/go-chi/chi/v5"
)

// KeyByRoute keys requests by method and chi route pattern, such as
// "GET /items/{id}": every item shares one key, whatever its id (see
// httplimit.RouteKey for requests no route matches and unknown methods).
//
// chi knows the pattern only once it has routed the request: a middleware
// added with r.Use runs before that. Pass the router (the root one, which
// the middleware is used on) so KeyByRoute can look the route up itself;
// pass nil when the middleware runs after routing (r.With, or inside
// r.Route and r.Group), where the request's chi.Context holds the pattern.
func KeyByRoute(routes chi.Routes) httplimit.KeyFunc {
	return func(r *http.Request) string {
		if routes == nil {
			return httplimit.RouteKey(r.Method, chi.RouteContext(r.Context()).RoutePattern())
		}
		path := r.URL.RawPath
		if path == "" {
			path = r.URL.Path
		}
		rctx := routeContexts.Get().(*chi.Context)
		rctx.Reset()
		p := routes.Find(rctx, r.Method, path)
		routeContexts.Put(rctx)
		return httplimit.RouteKey(r.Method, p)
	}
}

// routeContexts are the scratch contexts of route look-ups: chi's Find
// records the URL parameters it meets in one.
var routeContexts = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// ByIP returns chi middleware that lets n requests per period through for
// each client address: quick.LimitByIP, under the name chi users look
// for (httprate.LimitByIP):
//
//	r.Use(chilimit.ByIP(100, time.Minute))
//
// The address is the connection's peer, never a header (chi's
// middleware.RealIP rewrites RemoteAddr from headers any client can send;
// do not put it in front): name the proxies in front with
// quick.TrustProxies, and share the limit between instances with
// quick.Redis. It panics on a non-positive n or period or an invalid
// option.
func ByIP(n int64, per time.Duration, opts ...quick.Option) func(http.Handler) http.Handler {
	return quick.LimitByIP(n, per, opts...)
}

// ByHeader is ByIP keyed by a request header the server checks, such as an
// API key, and by address for requests without it:
//
//	r.Use(chilimit.ByHeader("X-API-Key", 1000, time.Hour, quick.Redis(client)))
func ByHeader(header string, n int64, per time.Duration, opts ...quick.Option) func(http.Handler) http.Handler {
	return quick.LimitByHeader(header, n, per, opts...)
}
