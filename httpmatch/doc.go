// Package httpmatch selects HTTP requests by host, path and method: the one
// definition of which requests a limit sees. The daemon's proxy routes and
// its configuration file's match sections are Matches, and PathPrefix,
// Methods and All make the match functions of an httplimit Rule:
//
//	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{
//		{Limiter: login, Match: httpmatch.PathPrefix("/login")},
//		{Limiter: writes, Match: httpmatch.All(httpmatch.Methods("POST"), httpmatch.PathPrefix("/api"))},
//	}})
//
// Paths are compared as the upstreams behind a limit may serve them (see
// Match), so that no spelling of a path escapes its limit, and CheckPath
// names the paths that cannot be compared so, which a front end refuses
// before any route sees them.
//
// The package depends on no limiter: a program that only routes requests
// imports it without the middleware.
package httpmatch
