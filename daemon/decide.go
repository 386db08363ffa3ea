package daemon

import (
	"errors"
	"net/http"

	"github.com/floodgate-go/floodgate/proxy"
)

// ErrNoProxy is returned by EvaluateHTTP for a configuration without a proxy
// section: there are no routes to decide an HTTP request with.
var ErrNoProxy = errors.New("the configuration has no proxy section, so no routes decide HTTP requests")

// EvaluateHTTP evaluates r with the proxy of the configuration in service as
// serving it would (see proxy.Proxy.Evaluate), without forwarding it: status
// and h are the response it got, for count rules and response costs. With
// Options.Clock, the decision is taken at that clock's time.
func (d *Daemon) EvaluateHTTP(r *http.Request, status int, h http.Header) (proxy.Evaluation, error) {
	px := d.cur.Load().proxy
	if px == nil {
		return proxy.Evaluation{}, ErrNoProxy
	}
	return px.Evaluate(r, status, h), nil
}
