package examples_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
	"github.com/floodgate-go/floodgate/memstore"
)

type userKey struct{}

// identify stands in for PhotoPlaces' JWT middleware: it puts the user of a
// valid token into the context and lets anonymous requests through.
func identify(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
		}
		next.ServeHTTP(w, r)
	})
}

// photoPlacesLimits is the PhotoPlaces rate-limit table as one middleware:
//
//	/auth/*                                  10/min   by IP
//	GET /places, /reviews, /tags, /services  60/min   by user, else IP
//	POST /places, /bookings, /reviews        10/min   by user, else IP
//	/admin/*                                 100/min  by user
//
// Each rule has its own policy, so their keys never meet.
func photoPlacesLimits(store floodgate.Store) (*httplimit.Middleware, error) {
	policy := func(name string, perMinute int64) floodgate.Limiter {
		l, err := floodgate.New(store, floodgate.Policy{Name: name, Limits: []floodgate.Limit{floodgate.PerMinute(perMinute)}})
		if err != nil {
			panic(err)
		}
		return l
	}
	userOrIP := httplimit.KeyByUser(httplimit.FromContext(userKey{}), nil)
	return httplimit.New(httplimit.Config{Rules: []httplimit.Rule{
		{Limiter: policy("auth", 10), Match: httpmatch.PathPrefix("/auth")},
		{Limiter: policy("api_read", 60), Key: userOrIP, Match: httpmatch.All(
			httpmatch.Methods(http.MethodGet, http.MethodHead),
			httpmatch.PathPrefix("/places", "/reviews", "/tags", "/services"))},
		{Limiter: policy("api_write", 10), Key: userOrIP, Match: httpmatch.All(
			httpmatch.Methods(http.MethodPost),
			httpmatch.PathPrefix("/places", "/bookings", "/reviews"))},
		{Limiter: policy("admin", 100), Key: userOrIP, Match: httpmatch.PathPrefix("/admin")},
	}})
}

// The PhotoPlaces rules: several limits on one handler tree, each request
// checked against the rules that match it.
func Example_photoPlaces() {
	clock := floodgatetest.NewClock(floodgatetest.Start)
	store := memstore.New(memstore.Options{Clock: clock})
	defer store.Close()
	limits, err := photoPlacesLimits(store)
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	for _, pattern := range []string{"/auth/", "GET /places", "POST /places", "GET /reviews", "POST /bookings", "/admin/", "/about"} {
		mux.HandleFunc(pattern, func(http.ResponseWriter, *http.Request) {})
	}
	h := identify(limits.Handler(mux))

	burst := func(n int, method, path, user, addr string) {
		passed := 0
		var last *httptest.ResponseRecorder
		for range n {
			req := httptest.NewRequest(method, path, nil)
			req.RemoteAddr = addr + ":1234"
			if user != "" {
				req.Header.Set("Authorization", "Bearer "+user)
			}
			last = httptest.NewRecorder()
			h.ServeHTTP(last, req)
			if last.Code == http.StatusOK {
				passed++
			}
		}
		who := user
		if who == "" {
			who = addr
		}
		policy := last.Header().Get("RateLimit-Policy")
		if policy == "" {
			policy = "no rule applies"
		}
		fmt.Printf("%3d × %-4s %-13s %-12s → %3d passed; %s\n", n, method, path, who, passed, policy)
	}
	burst(12, "POST", "/auth/login", "", "192.0.2.1")
	burst(12, "POST", "/auth/refresh", "", "192.0.2.2")
	burst(70, "GET", "/places", "maria", "192.0.2.3")
	burst(5, "GET", "/reviews", "maria", "198.51.100.4") // same user, another address
	burst(12, "POST", "/bookings", "maria", "192.0.2.3")
	burst(65, "GET", "/places", "", "192.0.2.9")
	burst(101, "GET", "/admin/users", "root", "192.0.2.10")
	burst(3, "GET", "/about", "", "192.0.2.1")
	// Output:
	//  12 × POST /auth/login   192.0.2.1    →  10 passed; "auth";q=10;w=60
	//  12 × POST /auth/refresh 192.0.2.2    →  10 passed; "auth";q=10;w=60
	//  70 × GET  /places       maria        →  60 passed; "api_read";q=60;w=60
	//   5 × GET  /reviews      maria        →   0 passed; "api_read";q=60;w=60
	//  12 × POST /bookings     maria        →  10 passed; "api_write";q=10;w=60
	//  65 × GET  /places       192.0.2.9    →  60 passed; "api_read";q=60;w=60
	// 101 × GET  /admin/users  root         → 100 passed; "admin";q=100;w=60
	//   3 × GET  /about        192.0.2.1    →   3 passed; no rule applies
}
