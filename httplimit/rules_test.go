package httplimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
)

func withUser(r *http.Request, id string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), userKey{}, id))
}

// Global → per user → per IP: a request refused by a later link is refunded
// by the earlier ones, and the most restrictive result drives the headers.
func TestLayeredChain(t *testing.T) {
	e := newEnv(t)
	global := e.limiter("global", floodgate.PerMinute(100))
	perUser := e.limiter("user", floodgate.PerMinute(5))
	perIP := e.limiter("ip", floodgate.PerMinute(3))
	userID := httplimit.FromContext(userKey{})
	h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{
		{Limiter: global, Key: httplimit.KeyConst("all")},
		{Limiter: perUser, Key: httplimit.KeyByUser(userID, nil), Match: func(r *http.Request) bool { return userID(r) != "" }},
		{Limiter: perIP},
	}}).Handler(ok)
	ctx := t.Context()
	peek := func(l floodgate.Limiter, key string) int64 {
		t.Helper()
		res, err := l.AllowN(ctx, key, 0)
		if err != nil {
			t.Fatal(err)
		}
		return res.Remaining
	}
	serveAs := func(user string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = client
		if user != "" {
			req = withUser(req, user)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}

	// The per-IP limit is the tightest: it drives the X-RateLimit fields;
	// the IETF fields describe all three, each with its own numbers.
	rec := serveAs("alice")
	checkHeaders(t, rec.Header(), map[string]string{
		"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "20",
		"RateLimit":        `"global";r=99;t=1, "user";r=4;t=12, "ip";r=2;t=20`,
		"RateLimit-Policy": "\"global\";q=100;w=60\n\"user\";q=5;w=60\n\"ip\";q=3;w=60",
	})
	serveAs("alice")
	serveAs("bob")
	rec = serveAs("alice")
	if rec.Code != 429 {
		t.Fatalf("4th request from the IP: %d, want 429", rec.Code)
	}
	if got := rec.Header().Get("RateLimit"); got != `"global";r=96;t=3, "user";r=2;t=36, "ip";r=0;t=20` {
		t.Errorf("RateLimit %s", got)
	}
	// The denied request was refunded by the global and per-user links.
	if got := peek(global, "all"); got != 97 {
		t.Errorf("global remaining %d, want 97", got)
	}
	if got := peek(perUser, "user:alice"); got != 3 {
		t.Errorf("alice remaining %d, want 3", got)
	}

	// From another address, alice meets her per-user limit first.
	for range 4 {
		req := withUser(httptest.NewRequest("GET", "/", nil), "alice")
		req.RemoteAddr = "198.51.100.1:1"
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
	}
	// The per-IP check after the denial was not decided: it is not described.
	if rec.Code != 429 || rec.Header().Get("RateLimit") != `"global";r=93;t=5, "user";r=0;t=12` || rec.Header().Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("alice elsewhere: %d %s", rec.Code, rec.Header().Get("RateLimit"))
	}
	if got := peek(global, "all"); got != 94 {
		t.Errorf("global remaining %d, want 94", got)
	}
}

// The PhotoPlaces rules: /auth/* 10/min by IP; reads 60/min and writes
// 10/min by user or IP; /admin/* 100/min by user.
func TestPhotoPlacesRules(t *testing.T) {
	e := newEnv(t)
	user := httplimit.KeyByUser(httplimit.FromContext(userKey{}), nil)
	reads := httpmatch.All(httpmatch.Methods("GET", "HEAD"), httpmatch.PathPrefix("/places", "/reviews", "/tags", "/services"))
	writes := httpmatch.All(httpmatch.Methods("POST"), httpmatch.PathPrefix("/places", "/bookings", "/reviews"))
	h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{
		{Limiter: e.limiter("auth", floodgate.PerMinute(10)), Match: httpmatch.PathPrefix("/auth")},
		{Limiter: e.limiter("api_read", floodgate.PerMinute(60)), Match: reads, Key: user},
		{Limiter: e.limiter("api_write", floodgate.PerMinute(10)), Match: writes, Key: user},
		{Limiter: e.limiter("admin", floodgate.PerMinute(100)), Match: httpmatch.PathPrefix("/admin"), Key: user},
	}}).Handler(ok)

	do := func(method, path, remote, uid string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = remote
		if uid != "" {
			req = withUser(req, uid)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	count := func(n int, method, path, remote, uid string) (passed int, last *httptest.ResponseRecorder) {
		for range n {
			last = do(method, path, remote, uid)
			if last.Code == 200 {
				passed++
			}
		}
		return passed, last
	}

	tests := []struct {
		name, method, path, remote, user string
		n, want                          int
		policy                           string
	}{
		{"auth by ip", "POST", "/auth/login", "192.0.2.1:1", "", 15, 10, `"auth";q=10;w=60`},
		{"auth other ip", "POST", "/auth/register", "192.0.2.2:1", "", 12, 10, `"auth";q=10;w=60`},
		{"reads by user", "GET", "/places/7", "192.0.2.3:1", "u1", 70, 60, `"api_read";q=60;w=60`},
		{"reads same user other ip", "GET", "/reviews", "192.0.2.4:1", "u1", 5, 0, `"api_read";q=60;w=60`},
		{"reads anonymous by ip", "GET", "/tags", "192.0.2.3:1", "", 61, 60, `"api_read";q=60;w=60`},
		{"writes by user", "POST", "/bookings", "192.0.2.5:1", "u2", 12, 10, `"api_write";q=10;w=60`},
		{"writes leave reads alone", "GET", "/places", "192.0.2.5:1", "u2", 3, 3, `"api_read";q=60;w=60`},
		{"admin by user", "GET", "/admin/users", "192.0.2.6:1", "root", 101, 100, `"admin";q=100;w=60`},
		{"other paths unlimited", "GET", "/about", "192.0.2.1:1", "", 50, 50, ""},
	}
	for _, tt := range tests {
		passed, last := count(tt.n, tt.method, tt.path, tt.remote, tt.user)
		if passed != tt.want {
			t.Errorf("%s: %d of %d passed, want %d", tt.name, passed, tt.n, tt.want)
		}
		if got := last.Header().Get("RateLimit-Policy"); got != tt.policy {
			t.Errorf("%s: RateLimit-Policy %q, want %q", tt.name, got, tt.policy)
		}
	}
}

// On a real server on loopback, the headers and body reach the client as
// set, and a handler that panics does not stop the next request.
func TestRealServer(t *testing.T) {
	e := newEnv(t)
	mw := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{Limiter: e.limiter("api", floodgate.PerMinute(2))}}})
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
	base := serve(t, mw.Handler(mux))

	fetch := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(body)
	}

	resp, body := fetch("/")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	checkHeaders(t, resp.Header, map[string]string{
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "30",
		"RateLimit": `"api";r=1;t=30`, "RateLimit-Policy": `"api";q=2;w=60`,
	})

	// net/http recovers the panic and drops the connection. (A client on a
	// kept-alive connection would retry the GET and be charged again.)
	once := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := once.Get(base + "/panic"); err == nil {
		resp.Body.Close()
		t.Fatalf("panicking handler answered %d", resp.StatusCode)
	}
	e.clock.Advance(30 * 1e9)
	resp, body = fetch("/")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("after the panic: %d %q", resp.StatusCode, body)
	}

	resp, body = fetch("/")
	if resp.StatusCode != 429 {
		t.Fatalf("status %d, want 429", resp.StatusCode)
	}
	checkHeaders(t, resp.Header, map[string]string{
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60",
		"RateLimit": `"api";r=0;t=30`, "RateLimit-Policy": `"api";q=2;w=60`, "Retry-After": "30",
		"Content-Type": "application/problem+json",
	})
	want := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
		`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,` +
		`"detail":"Too many requests; retry in 30 seconds.","retry-after":30,"violated-policies":["api"]}` + "\n"
	if body != want {
		t.Errorf("body\n got %s\nwant %s", body, want)
	}
	if cl := resp.Header.Get("Content-Length"); cl != strconv.Itoa(len(want)) {
		t.Errorf("Content-Length %q", cl)
	}
	if !strings.Contains(resp.Proto, "HTTP/1.1") {
		t.Errorf("proto %s", resp.Proto)
	}
}
