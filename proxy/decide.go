package proxy

import (
	"net/http"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
	"github.com/floodgate-go/floodgate/internal/pathnet"
)

// An Evaluation is what the proxy decided about one request without serving
// it (see Evaluate).
type Evaluation struct {
	// Route is the name of the route that matched, "" when none did (the
	// request is forwarded unlimited).
	Route string

	// Shadow reports that Route is a shadow route: a refusal it decides
	// is counted, but the request is forwarded all the same.
	Shadow bool

	// Redirect reports a path that is not clean: ServeHTTP answers it with
	// a redirect to the clean path, and no route decides it.
	Redirect bool

	// BadPath is why ServeHTTP answers the request's path 400 before any
	// route decides it (httpmatch.CheckPath); Status is then 400.
	BadPath error

	// Status is what the route's limits answer instead of forwarding the
	// request: 429 when a limit denied it, 503 when the engine failed
	// closed, 500 for an invalid cost; 0 when they let it through (400 for
	// a BadPath, which no route decides). For a
	// shadow route it is what the route would have answered.
	Status int

	// Result is the Result that drove the decision (the zero Result when
	// no limit applied).
	Result floodgate.Result

	// Checks are the limits the request was checked against, in order,
	// each with its key, cost and own Result; checks after a denial were
	// not decided and keep the zero Result.
	Checks []floodgate.Check
}

// Evaluate routes r as ServeHTTP does and decides it with the matched route's
// limits, charging them as serving it would, but forwards nothing, writes
// nothing and logs no denial: a decision at the time of the limiters'
// engine, for tools that run recorded traffic through a configuration
// (floodgate replay). status and h are the response the request got, which
// settle the route's count rules and response costs as the upstream's
// answer would; h may be nil. Evaluate is safe for concurrent use, but a
// replay decides requests in order.
func (p *Proxy) Evaluate(r *http.Request, status int, h http.Header) Evaluation {
	if err := httpmatch.CheckPath(r.URL.Path); err != nil {
		return Evaluation{BadPath: err, Status: http.StatusBadRequest}
	}
	if clean := pathnet.CleanPath(r.URL.Path); clean != r.URL.Path && r.URL.Path != "*" {
		return Evaluation{Redirect: true}
	}
	for _, rt := range *p.routes.Load() {
		if !rt.match.Match(r) {
			continue
		}
		d := Evaluation{Route: rt.name, Shadow: rt.shadow}
		if rt.mw == nil {
			return d // an unlimited route
		}
		var v httplimit.Answer
		rt.mw.Evaluate(r, &v)
		d.Status, d.Result = v.Status(), v.Result()
		if n := v.Checked(); n > 0 {
			d.Checks = make([]floodgate.Check, n)
			for i := range n {
				c := v.CheckOf(i)
				if l, ok := c.Limiter.(*loggedLimiter); ok {
					c.Limiter = l.Limiter // the policy's limiter, not the proxy's logging
				}
				d.Checks[i] = c
			}
		}
		if d.Status == 0 && v.Err() == nil {
			v.Settle(status, h)
		}
		return d
	}
	return Evaluation{}
}
