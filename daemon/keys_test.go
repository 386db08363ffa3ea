package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/admin"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/testkit"
)

// TestRouteKeys: a route limit's key is what httplimit's key functions
// make, user and tier headers believed only from user_trusted_from.
func TestRouteKeys(t *testing.T) {
	res, err := clientip.New(clientip.Config{})
	if err != nil {
		t.Fatal(err)
	}
	trusted, err := clientip.ParsePrefixes([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	req := func(peer string) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer + ":4711"
		r.Header.Set("X-User-ID", "42")
		r.Header.Set("X-API-Key", "k|1")
		r.Header.Set("X-Plan", "pro")
		return r
	}
	for _, tc := range []struct {
		key, tier, peer, want string
	}{
		{"ip", "", "192.0.2.1", "192.0.2.1"},
		{"user:X-User-ID", "", "10.0.0.1", "user:42"},
		{"user:X-User-ID", "", "192.0.2.1", "ip:192.0.2.1"},
		{"user:X-Missing", "", "10.0.0.1", "ip:10.0.0.1"},
		{"header:X-API-Key", "", "192.0.2.1", "x-api-key:k|1"},
		{"header:X-Missing", "", "192.0.2.1", "ip:192.0.2.1"},
		{"route", "", "192.0.2.1", "route:api"},
		{"global", "", "192.0.2.1", "global"},
		{"[ip, route]", "", "192.0.2.1", "192.0.2.1|route:api"},
		{"[header:X-API-Key, ip]", "", "192.0.2.1", `x-api-key:k\|1|192.0.2.1`},
		{"ip", "X-Plan", "10.0.0.1", "tier:pro|10.0.0.1"},
		{"ip", "X-Plan", "192.0.2.1", "192.0.2.1"},
	} {
		c := mustParse(t, fmt.Sprintf("policies: {p: {rate: 1/s, tiers: {pro: {rate: 2/s}}}}\nproxy: {upstream: demo, user_trusted_from: [10.0.0.0/8], routes: [{name: api, limits: [{policy: p, key: %s, tier_header: %q}]}]}\n", tc.key, tc.tier))
		rl := c.Proxy.Routes[0].Limits[0]
		if tc.tier == "" {
			rl.TierHeader = ""
		}
		rule := routeRule(&rl, nil, "api", res, trusted)
		got := rule.Key(req(tc.peer))
		if got != tc.want {
			t.Errorf("key %s (tier %q) from %s: %q, want %q", tc.key, tc.tier, tc.peer, got, tc.want)
		}
		// The shapes /v1/keys checks keys against describe what the key
		// function makes.
		shapes := keyShapes(rl.Key, rl.TierHeader, "api")
		if !slices.ContainsFunc(shapes, func(s string) bool { return admin.ShapeMatches(s, got) }) {
			t.Errorf("key %s (tier %q): %q has none of the shapes %q", tc.key, tc.tier, got, shapes)
		}
	}
}

// TestLibraryAndDaemonShareOneBucket: a Go service limiting with
// httplimit.KeyByHeader and a daemon limiting key header:X-API-Key, on one
// redis-server with one policy, count one client as one bucket.
func TestLibraryAndDaemonShareOneBucket(t *testing.T) {
	srv := testkit.Redis(t)
	d := started(t, fmt.Sprintf(`
storage:
  engine: redis
  redis: {addrs: [%q]}
  failure: {mode: fail_closed}
policies: {api: {rate: 10/min}}
proxy:
  listen: 127.0.0.1:0
  upstream: demo
  routes: [{limits: [{policy: api, key: "header:X-API-Key"}]}]
admin: {listen: ""}
`, srv.Addr))

	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { client.Close() })
	store, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerMinute(10)}})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{Limiter: lim, Key: httplimit.KeyByHeader("X-API-Key", nil)}},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	service := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })))
	defer service.Close()

	allowed := 0
	for i := range 20 {
		url := service.URL + "/"
		if i%2 == 0 {
			url = "http://" + d.Addrs().Proxy.String() + "/"
		}
		r, _ := http.NewRequestWithContext(context.Background(), "GET", url, nil)
		r.Header.Set("X-API-Key", "acme")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case 200:
			allowed++
		case 429:
		default:
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	if allowed != 10 {
		t.Fatalf("the service and the daemon admitted %d of 20, want 10: one client, one bucket", allowed)
	}
}

// TestExampleRoutes: the routes of the PhotoPlaces example select the
// requests the file's comments say they do, with the matcher the proxy
// routes with.
func TestExampleRoutes(t *testing.T) {
	t.Setenv("REDIS_PASSWORD", "x")
	t.Setenv("ADMIN_TOKEN", "y")
	c, err := config.Load("../examples/config/photoplaces-production.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ method, path, want string }{
		{"POST", "/auth/login", "auth"},
		{"GET", "/places", "read"},
		{"GET", "/places/12", "read"},
		{"POST", "/bookings", "write"},
		{"DELETE", "/places/1", ""},
		{"GET", "/admin/users", "admin"},
		{"GET", "/healthz", ""},
	} {
		got := ""
		r := httptest.NewRequest(tc.method, "http://api.photoplaces.example"+tc.path, nil)
		for _, rt := range c.Proxy.Routes {
			m, err := rt.Match.Compile()
			if err != nil {
				t.Fatal(err)
			}
			if m.Match(r) {
				got = rt.Name
				break
			}
		}
		if got != tc.want {
			t.Errorf("%s %s → route %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}

// TestDefaultRouteHeadersAgree: on the built-in defaults (10/min, burst 5)
// every header field describes the same quantity: X-RateLimit-Limit 5, a
// RateLimit-Policy of 5 per the 30 s it takes to fill up again, and
// remaining counts out of those 5.
func TestDefaultRouteHeadersAgree(t *testing.T) {
	d, err := New(config.Default(), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	req := httptest.NewRequest("GET", "http://localhost/", nil)
	req.RemoteAddr = "192.0.2.1:4711"
	rec := httptest.NewRecorder()
	d.cur.Load().proxy.ServeHTTP(rec, req)
	h := rec.Header()
	if h.Get("X-Ratelimit-Limit") != "5" || h.Get("X-Ratelimit-Remaining") != "4" {
		t.Errorf("X-RateLimit-Limit %q, -Remaining %q", h.Get("X-Ratelimit-Limit"), h.Get("X-Ratelimit-Remaining"))
	}
	if p := h.Get("Ratelimit-Policy"); !strings.Contains(p, ";q=5;w=30") {
		t.Errorf("RateLimit-Policy %q, want q=5;w=30 beside X-RateLimit-Limit 5", p)
	}
	if r := h.Get("Ratelimit"); !strings.Contains(r, ";r=4;") {
		t.Errorf("RateLimit %q, want r=4", r)
	}
}
