package httplimit_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/httplimit"
)

// Whatever a client sends, the middleware answers 200 or 429 with
// well-formed fields and body, and never panics.
func FuzzMiddleware(f *testing.F) {
	f.Add("GET", "/api/items", "203.0.113.7:4711", "192.0.2.1, 10.0.0.2", "key-1", "user=alice&password=x", "api", int64(1))
	f.Add("POST", "/login", "10.0.0.1:80", "garbage,,, [::1]:80", "", "user=%zz", `we"ird\name`, int64(0))
	f.Add("BREW", "//a/../b", "@", "", " ", "", "", int64(-3))
	f.Add("GET", "/", "[2001:db8::1%eth0]:1", "for=unknown", "\x00", "user="+strings.Repeat("x", 300), "é", int64(1<<40))
	res, err := clientip.New(clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, path, remote, xff, apiKey, form, policy string, cost int64) {
		e := newEnv(t)
		var lims [4]floodgate.Limiter
		for i := range lims {
			lim, err := floodgate.New(e.store, floodgate.Policy{Name: policy + strconv.Itoa(i), Limits: []floodgate.Limit{floodgate.PerMinute(2), floodgate.PerHour(5)}})
			if err != nil {
				return
			}
			lims[i] = lim
		}
		mux := http.NewServeMux()
		mux.Handle("GET /api/{x}", ok)
		mw := mustNew(t, httplimit.Config{
			Logger: slog.New(slog.DiscardHandler),
			Rules: []httplimit.Rule{
				{Limiter: lims[0], Key: httplimit.KeyByIP(res)},
				{Limiter: lims[1], Key: httplimit.KeyByHeader("X-API-Key", httplimit.KeyByIP(res))},
				{Limiter: lims[2], Key: httplimit.JoinKeys(httplimit.KeyByRoute(mux), httplimit.KeyByIP(res))},
				{Limiter: lims[3], Key: httplimit.JoinKeys(httplimit.KeyByIP(res), httplimit.KeyByFormValue("user")),
					Count: httplimit.CountFailed, Cost: func(*http.Request) int64 { return cost }},
			},
		})
		h := mw.Handler(ok)
		for range 3 {
			req := &http.Request{
				Method:     method,
				URL:        &url.URL{Path: path},
				RemoteAddr: remote,
				Header:     http.Header{"X-Forwarded-For": {xff}, "X-Api-Key": {apiKey}, "Content-Type": {"application/x-www-form-urlencoded"}},
				Body:       io.NopCloser(strings.NewReader(form)),
			}
			rec := newRecorder()
			h.ServeHTTP(rec, req)
			if cost < 0 {
				// A negative cost is the server's bug: 500, never served.
				if rec.code != 500 {
					t.Fatalf("cost %d: status %d, want 500", cost, rec.code)
				}
				continue
			}
			checkResponse(t, rec)
		}
	})
}

func checkResponse(t *testing.T, rec *recorder) {
	t.Helper()
	hd := rec.h
	switch rec.code {
	case 200:
		if hd.Get("Retry-After") != "" {
			t.Fatalf("Retry-After on a 200")
		}
		if hd.Get("RateLimit") == "" {
			return // failed open: no decision, no fields
		}
	case 429:
		var body map[string]any
		if err := json.Unmarshal(rec.bytes(), &body); err != nil {
			t.Fatalf("429 body %q: %v", rec.body.String(), err)
		}
		if body["status"] != float64(429) || body["type"] == nil {
			t.Fatalf("429 body %q", rec.body.String())
		}
		if ra := hd.Get("Retry-After"); ra != "" {
			if n, err := strconv.ParseInt(ra, 10, 64); err != nil || n < 1 || body["retry-after"] != float64(n) {
				t.Fatalf("Retry-After %q, body %q", ra, rec.body.String())
			}
		}
	default:
		t.Fatalf("status %d", rec.code)
	}
	for _, name := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		if _, err := strconv.ParseUint(hd.Get(name), 10, 64); err != nil {
			t.Fatalf("%s %q", name, hd.Get(name))
		}
	}
	for _, name := range []string{"RateLimit", "RateLimit-Policy"} {
		for _, v := range hd.Values(name) {
			if err := parseSFList(v); err != nil {
				t.Fatalf("%s %q: %v", name, v, err)
			}
		}
	}
}

// recorder is a minimal ResponseWriter; httptest.ResponseRecorder rejects
// some status codes with a panic of its own.
type recorder struct {
	h    http.Header
	code int
	body strings.Builder
}

func newRecorder() *recorder { return &recorder{h: make(http.Header)} }

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = 200
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *recorder) bytes() []byte { return []byte(r.body.String()) }
