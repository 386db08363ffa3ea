package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
)

// Evaluate decides as ServeHTTP does — the same route, key and charge — but
// forwards nothing: the upstream never sees a request, the limiter's state
// does. Count rules settle with the status given; an unclean path is a
// redirect; a shadow route reports what it would refuse.
func TestEvaluate(t *testing.T) {
	var upstream atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { upstream.Add(1) }))
	defer up.Close()
	api := floodgatetest.MemLimiter(t, "api", floodgate.PerMinute(2))
	login := floodgatetest.MemLimiter(t, "login", floodgate.PerMinute(1))
	shadow := floodgatetest.MemLimiter(t, "shadow", floodgate.PerMinute(1))
	p, err := New(Config{Upstream: up.URL, Logger: slog.New(slog.DiscardHandler), Routes: []Route{
		{Name: "login", Match: httpmatch.Match{Path: "/login"}, Limits: []httplimit.Rule{{Limiter: login, Count: httplimit.CountFailed}}},
		{Name: "shadow", Shadow: true, Match: httpmatch.Match{PathPrefix: []string{"/beta"}}, Limits: []httplimit.Rule{{Limiter: shadow}}},
		{Name: "api", Match: httpmatch.Match{PathPrefix: []string{"/api"}}, Limits: []httplimit.Rule{{Limiter: api, Key: httplimit.KeyConst("k")}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	req := func(path string) *http.Request {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "192.0.2.1:1234"
		return r
	}
	for i, want := range []int{0, 0, http.StatusTooManyRequests} {
		d := p.Evaluate(req("/api/x"), 200, nil)
		if d.Route != "api" || d.Status != want || len(d.Checks) != 1 || d.Checks[0].Key != "k" || d.Checks[0].Limiter.Name() != "api" {
			t.Fatalf("request %d: %+v; want route api, status %d, key k", i+1, d, want)
		}
	}
	// Successful logins are refunded: the limit of 1 never denies them.
	for range 3 {
		if d := p.Evaluate(req("/login"), 200, nil); d.Status != 0 {
			t.Fatalf("successful login denied: %+v", d)
		}
	}
	p.Evaluate(req("/login"), 401, nil)
	if d := p.Evaluate(req("/login"), 401, nil); d.Status != http.StatusTooManyRequests {
		t.Fatalf("second failed login: status %d; want 429", d.Status)
	}
	p.Evaluate(req("/beta/a"), 200, nil)
	if d := p.Evaluate(req("/beta/a"), 200, nil); !d.Shadow || d.Status != http.StatusTooManyRequests {
		t.Fatalf("shadow: %+v; want shadow, would be 429", d)
	}
	if d := p.Evaluate(req("/api/../login"), 200, nil); !d.Redirect || d.Route != "" {
		t.Fatalf("unclean path: %+v; want a redirect", d)
	}
	if d := p.Evaluate(req("/elsewhere"), 200, nil); d.Route != "" || d.Redirect || d.Checks != nil {
		t.Fatalf("unmatched: %+v", d)
	}
	if n := upstream.Load(); n != 0 {
		t.Fatalf("Evaluate forwarded %d requests", n)
	}
	// Serving sees the state Evaluate left: the api key is spent.
	res, err := api.AllowN(context.Background(), "k", 0)
	if err != nil || res.Remaining != 0 {
		t.Fatalf("api remaining %d, %v; want 0", res.Remaining, err)
	}
}
