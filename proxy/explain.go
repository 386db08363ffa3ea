package proxy

import (
	"net/http"

	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
	"github.com/floodgate-go/floodgate/internal/pathnet"
)

// An Explanation is what the proxy would do with a request, found without
// deciding or forwarding anything (Proxy.Explain).
type Explanation struct {
	// BadPath is why the proxy answers the request's path 400 before any
	// route sees it (httpmatch.CheckPath); no route is then matched.
	BadPath error

	// Redirect is the clean path a request whose path has dot segments or
	// doubled slashes is sent to (308) before any route sees it; the routes
	// below are matched against it.
	Redirect string

	// Routes are the routes in order, up to and including the one that
	// matched: each says whether it matched and, when not, why.
	Routes []RouteMatch

	// Route is the index in Routes of the route that limits the request,
	// -1 when none matched: the request is forwarded unlimited.
	Route int

	// Checks are what the matched route's limits would check, one per
	// limit in the route's order (httplimit.Middleware.Explain).
	Checks []httplimit.Planned
}

// A RouteMatch is one route's verdict on a request.
type RouteMatch struct {
	Name    string
	Match   string // the route's match, as httpmatch.Match.String names it
	Shadow  bool
	Matched bool
	Why     string // why it did not match; "" when it did
	Limited bool   // the route has limits
}

// Explain reports which route the proxy would give r to, why each route
// before it did not match, and the key and cost each of its limits would
// check, using the very matcher and middleware ServeHTTP uses. Nothing is
// charged or forwarded; r.Pattern may be set, as routing sets it.
func (p *Proxy) Explain(r *http.Request) Explanation {
	ex := Explanation{Route: -1}
	if err := httpmatch.CheckPath(r.URL.Path); err != nil {
		ex.BadPath = err
		return ex
	}
	if clean := pathnet.CleanPath(r.URL.Path); clean != r.URL.Path && r.URL.Path != "*" {
		ex.Redirect = clean
		u := *r.URL
		u.Path, u.RawPath = clean, ""
		r = r.Clone(r.Context())
		r.URL = &u
	}
	for _, rt := range *p.routes.Load() {
		ok, why := rt.match.Explain(r)
		ex.Routes = append(ex.Routes, RouteMatch{Name: rt.name, Match: rt.desc, Shadow: rt.shadow, Matched: ok, Why: why, Limited: rt.mw != nil})
		if !ok {
			continue
		}
		ex.Route = len(ex.Routes) - 1
		if rt.mw != nil {
			ex.Checks = rt.mw.Explain(r)
			for i := range ex.Checks {
				// Name the route's own limiter, not the proxy's logging
				// wrapper around it.
				if l, ok := ex.Checks[i].Limiter.(*loggedLimiter); ok {
					ex.Checks[i].Limiter = l.Limiter
				}
			}
		}
		break
	}
	return ex
}
