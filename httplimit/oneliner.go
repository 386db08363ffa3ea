package httplimit

import (
	"fmt"
	"net/http"
	"runtime"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// LimitByIP returns middleware that lets n requests per period through for
// each client address, on a memory store of its own: the one line most
// services start with.
//
//	mux.Handle("/", httplimit.LimitByIP(100, time.Minute)(handler))
//
// The address is the connection's peer, never a header: behind a proxy or
// load balancer every client would share the proxy's address, so build the
// middleware with New and KeyByIP over a clientip.Resolver that trusts the
// proxy. The limit is GCRA with a burst of n; responses carry the default
// headers and 429 body. The store lives as long as the middleware: it is
// closed once no handler holds the middleware any more.
//
// LimitByIP panics if n or per is not positive, like time.NewTicker does for
// a bad interval: the arguments are constants of the program, not input.
func LimitByIP(n int64, per time.Duration) func(http.Handler) http.Handler {
	return oneLiner("LimitByIP", "ip", n, per, KeyByIP(nil))
}

// LimitByHeader is LimitByIP keyed by the value of a request header such as
// an API key (see KeyByHeader); requests without the header are keyed by
// address. The header must be one that the
// server checks (an API key it validates): a free-form header lets each
// client pick a fresh key per request.
func LimitByHeader(header string, n int64, per time.Duration) func(http.Handler) http.Handler {
	return oneLiner("LimitByHeader", "header", n, per, KeyByHeader(header, nil))
}

// LimitByUser is LimitByIP keyed by the user userID returns ("user:" and
// the id), or by address when it returns "" (see KeyByUser). userID must
// read an identity the request has proven, e.g. with FromContext after the
// authentication middleware.
func LimitByUser(userID func(r *http.Request) string, n int64, per time.Duration) func(http.Handler) http.Handler {
	return oneLiner("LimitByUser", "user", n, per, KeyByUser(userID, nil))
}

func oneLiner(fn, policy string, n int64, per time.Duration, key KeyFunc) func(http.Handler) http.Handler {
	store := memstore.New(memstore.Options{})
	lim, err := floodgate.New(store, floodgate.Policy{Name: policy, Limits: []floodgate.Limit{{Rate: n, Period: per}}})
	if err == nil {
		var m *Middleware
		if m, err = New(Config{Rules: []Rule{{Limiter: lim, Key: key}}}); err == nil {
			// The store's goroutines do not reference the middleware, so
			// once nothing else does it is collected, and the store closed
			// with it.
			runtime.AddCleanup(m, func(s *memstore.Store) { s.Close() }, store)
			return m.Handler
		}
	}
	store.Close()
	panic(fmt.Sprintf("httplimit: %s(%d, %s): %v", fn, n, per, err))
}
