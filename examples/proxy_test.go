package examples_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
)

// proxyAt is a RoundTripper that hands requests to a handler in this
// process as if they came from a proxy at addr: the app's network view.
type proxyAt struct {
	addr string
	app  http.Handler
}

func (p proxyAt) RoundTrip(r *http.Request) (*http.Response, error) {
	in := r.Clone(r.Context())
	in.RemoteAddr = p.addr
	in.RequestURI = r.URL.RequestURI()
	rec := httptest.NewRecorder()
	p.app.ServeHTTP(rec, in)
	return rec.Result(), nil
}

// Behind a reverse proxy, the connection comes from the proxy and the client
// is in X-Forwarded-For. The app trusts the header only from the proxy's
// network, and only the entry the proxy appended: a client that writes its
// own X-Forwarded-For changes nothing. Trusting no proxy instead would key
// every client by the proxy's address, one limit for all.
func Example_behindReverseProxy() {
	for _, trusted := range [][]string{{"10.0.0.0/8"}, nil} {
		clock := floodgatetest.NewClock(floodgatetest.Start)
		store := memstore.New(memstore.Options{Clock: clock})
		api, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerMinute(3)}})
		if err != nil {
			panic(err)
		}
		ips, err := clientip.New(clientip.Config{TrustedProxies: trusted})
		if err != nil {
			panic(err)
		}
		mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{Limiter: api, Key: httplimit.KeyByIP(ips)}}})
		if err != nil {
			panic(err)
		}
		app := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

		// The proxy at 10.0.0.5 keeps what the client sent in
		// X-Forwarded-For and appends the address it saw, as nginx's
		// $proxy_add_x_forwarded_for does.
		backend, _ := url.Parse("http://app.internal")
		proxy := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(backend)
				pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
				pr.SetXForwarded()
			},
			Transport: proxyAt{addr: "10.0.0.5:43210", app: app},
		}

		fmt.Println("trusted proxies:", trusted)
		for i, client := range []string{"203.0.113.7", "203.0.113.7", "203.0.113.7", "203.0.113.7", "198.51.100.9"} {
			req := httptest.NewRequest("GET", "/photos", nil)
			req.RemoteAddr = client + ":5555"
			req.Header.Set("X-Forwarded-For", fmt.Sprintf("192.0.2.%d", i+1)) // spoofed, new every time
			rec := httptest.NewRecorder()
			proxy.ServeHTTP(rec, req)
			fmt.Println(" ", client, rec.Code, "remaining", rec.Header().Get("X-RateLimit-Remaining"))
		}
		store.Close()
	}
	// Output:
	// trusted proxies: [10.0.0.0/8]
	//   203.0.113.7 200 remaining 2
	//   203.0.113.7 200 remaining 1
	//   203.0.113.7 200 remaining 0
	//   203.0.113.7 429 remaining 0
	//   198.51.100.9 200 remaining 2
	// trusted proxies: []
	//   203.0.113.7 200 remaining 2
	//   203.0.113.7 200 remaining 1
	//   203.0.113.7 200 remaining 0
	//   203.0.113.7 429 remaining 0
	//   198.51.100.9 429 remaining 0
}
