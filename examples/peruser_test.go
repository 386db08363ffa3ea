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
	"github.com/floodgate-go/floodgate/memstore"
)

// account is what the authentication middleware knows about a caller.
type account struct {
	id   string
	plan string // "free" or "pro"
}

type accountKey struct{}

// accounts stands in for the API-key database.
var accounts = map[string]account{
	"key-ann": {id: "ann", plan: "free"},
	"key-bob": {id: "bob", plan: "pro"},
}

// authenticate puts the account of a valid bearer token into the request
// context, and turns invalid tokens away before they reach the limiter, so
// that an invented key cannot buy a fresh limit.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !found {
			next.ServeHTTP(w, r) // anonymous
			return
		}
		acct, ok := accounts[token]
		if !ok {
			http.Error(w, "unknown API key", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), accountKey{}, acct)))
	})
}

func accountOf(r *http.Request) (account, bool) {
	a, ok := r.Context().Value(accountKey{}).(account)
	return a, ok
}

// Per-user API limits: each account gets its plan's limit, keyed by account
// whatever address it calls from; anonymous callers share a small limit per
// address.
func Example_perUserAPI() {
	clock := floodgatetest.NewClock(floodgatetest.Start) // pinned for the example; leave Clock nil in a server
	store := memstore.New(memstore.Options{Clock: clock})
	defer store.Close()
	policy := func(name string, perMinute int64) floodgate.Limiter {
		l, err := floodgate.New(store, floodgate.Policy{Name: name, Limits: []floodgate.Limit{floodgate.PerMinute(perMinute)}})
		if err != nil {
			panic(err)
		}
		return l
	}
	free, pro, anonymous := policy("free", 3), policy("pro", 600), policy("anonymous", 2)

	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{
		// The plan comes from the account, not from the key.
		LimiterFor: func(r *http.Request) floodgate.Limiter {
			a, ok := accountOf(r)
			switch {
			case !ok:
				return anonymous
			case a.plan == "pro":
				return pro
			}
			return free
		},
		Key: httplimit.KeyByUser(func(r *http.Request) string {
			a, _ := accountOf(r)
			return a.id
		}, nil),
	}}})
	if err != nil {
		panic(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	// The limiter runs after authentication, which it needs.
	h := authenticate(mw.Handler(api))

	call := func(token, addr string) {
		req := httptest.NewRequest("GET", "/v1/photos", nil)
		req.RemoteAddr = addr
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if token == "" {
			token = "-"
		}
		fmt.Printf("%-8s %-15s %d %s\n", token, strings.Split(addr, ":")[0], rec.Code, rec.Header().Get("RateLimit"))
	}
	call("key-ann", "192.0.2.10:1000")
	call("key-ann", "198.51.100.4:2000") // another address, same account
	call("key-ann", "192.0.2.10:1000")
	call("key-ann", "192.0.2.10:1000")
	call("key-bob", "192.0.2.10:1000")
	call("", "192.0.2.10:1000")
	call("", "192.0.2.10:1000")
	call("", "192.0.2.10:1000")
	call("key-eve", "192.0.2.10:1000")
	// Output:
	// key-ann  192.0.2.10      200 "free";r=2;t=20
	// key-ann  198.51.100.4    200 "free";r=1;t=40
	// key-ann  192.0.2.10      200 "free";r=0;t=60
	// key-ann  192.0.2.10      429 "free";r=0;t=20
	// key-bob  192.0.2.10      200 "pro";r=599;t=1
	// -        192.0.2.10      200 "anonymous";r=1;t=30
	// -        192.0.2.10      200 "anonymous";r=0;t=60
	// -        192.0.2.10      429 "anonymous";r=0;t=30
	// key-eve  192.0.2.10      401
}
