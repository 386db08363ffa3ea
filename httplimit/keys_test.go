package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
)

type userKey struct{}

type account struct{ id int }

func (a account) String() string { return fmt.Sprintf("acct-%d", a.id) }

func TestKeyFuncs(t *testing.T) {
	behindLB, err := clientip.New(clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/files/", func(http.ResponseWriter, *http.Request) {})

	withUser := func(v any) func(*http.Request) *http.Request {
		return func(r *http.Request) *http.Request {
			return r.WithContext(context.WithValue(r.Context(), userKey{}, v))
		}
	}
	user := httplimit.FromContext(userKey{})
	form := func(body string) func(*http.Request) *http.Request {
		return func(r *http.Request) *http.Request {
			r = httptest.NewRequest("POST", r.URL.String(), strings.NewReader(body))
			r.RemoteAddr = client
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			return r
		}
	}
	tests := []struct {
		name   string
		key    httplimit.KeyFunc
		method string
		target string
		remote string
		header []string
		adapt  func(*http.Request) *http.Request
		want   string
	}{
		{name: "ip default", key: httplimit.KeyByIP(nil), remote: client, header: []string{"X-Forwarded-For", "192.0.2.1"}, want: "203.0.113.7"},
		{name: "ip v6 /64", key: httplimit.KeyByIP(nil), remote: "[2001:db8:1:2:3:4:5:6]:80", want: "2001:db8:1:2::/64"},
		{name: "ip behind lb", key: httplimit.KeyByIP(behindLB), remote: "10.0.0.1:80", header: []string{"X-Forwarded-For", "192.0.2.1, 203.0.113.9"}, want: "203.0.113.9"},
		{name: "ip unix socket", key: httplimit.KeyByIP(nil), remote: "@", want: "unknown"},
		{name: "const", key: httplimit.KeyConst("all"), remote: client, want: "all"},
		{name: "user string", key: httplimit.KeyByUser(user, nil), remote: client, adapt: withUser("42"), want: "user:42"},
		{name: "user int64", key: httplimit.KeyByUser(user, nil), remote: client, adapt: withUser(int64(7)), want: "user:7"},
		{name: "user stringer", key: httplimit.KeyByUser(user, nil), remote: client, adapt: withUser(account{3}), want: "user:acct-3"},
		{name: "user anonymous", key: httplimit.KeyByUser(user, nil), remote: client, want: "ip:203.0.113.7"},
		{name: "user other type", key: httplimit.KeyByUser(user, nil), remote: client, adapt: withUser(3.5), want: "ip:203.0.113.7"},
		{name: "user anonymous behind lb", key: httplimit.KeyByUser(user, httplimit.KeyByIP(behindLB)), remote: "10.0.0.1:80",
			header: []string{"X-Forwarded-For", "203.0.113.9"}, want: "ip:203.0.113.9"},
		{name: "header", key: httplimit.KeyByHeader("x-api-key", nil), remote: client, header: []string{"X-Api-Key", " k-123 "}, want: "x-api-key:k-123"},
		{name: "header first line", key: httplimit.KeyByHeader("X-API-Key", nil), remote: client, header: []string{"X-Api-Key", "a", "X-Api-Key", "b"}, want: "x-api-key:a"},
		{name: "header absent", key: httplimit.KeyByHeader("X-API-Key", nil), remote: client, want: "ip:203.0.113.7"},
		{name: "header blank", key: httplimit.KeyByHeader("X-API-Key", nil), remote: client, header: []string{"X-Api-Key", "  "}, want: "ip:203.0.113.7"},
		{name: "route from mux", key: httplimit.KeyByRoute(mux), target: "/items/17", remote: client, want: "GET /items/{id}"},
		{name: "route head", key: httplimit.KeyByRoute(mux), method: "HEAD", target: "/items/17", remote: client, want: "HEAD /items/{id}"},
		{name: "route subtree", key: httplimit.KeyByRoute(mux), method: "DELETE", target: "/files/a/b", remote: client, want: "DELETE /files/"},
		{name: "route invented method", key: httplimit.KeyByRoute(mux), method: "BREW", target: "/files/a", remote: client, want: "OTHER /files/"},
		{name: "route unmatched", key: httplimit.KeyByRoute(mux), target: "/nowhere/123", remote: client, want: "GET unmatched"},
		{name: "route no mux", key: httplimit.KeyByRoute(nil), target: "/items/1", remote: client, want: "GET unmatched"},
		{name: "form value", key: httplimit.KeyByFormValue("user"), remote: client, adapt: form("user=+Alice+&password=x"), want: "alice"},
		{name: "form value missing", key: httplimit.KeyByFormValue("user"), remote: client, adapt: form("password=x"), want: ""},
		{name: "form value from query ignored", key: httplimit.KeyByFormValue("user"), target: "/?user=bob", remote: client, want: ""},
		{name: "join", key: httplimit.JoinKeys(httplimit.KeyByIP(nil), httplimit.KeyByFormValue("user")), remote: client,
			adapt: form("user=a%7Cb%5Cc"), want: `203.0.113.7|a\|b\\c`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, target := tt.method, tt.target
			if method == "" {
				method = "GET"
			}
			if target == "" {
				target = "/"
			}
			r := httptest.NewRequest(method, target, nil)
			r.RemoteAddr = tt.remote
			for i := 0; i+1 < len(tt.header); i += 2 {
				r.Header.Add(tt.header[i], tt.header[i+1])
			}
			if tt.adapt != nil {
				r = tt.adapt(r)
			}
			if got := tt.key(r); got != tt.want {
				t.Errorf("key %q, want %q", got, tt.want)
			}
		})
	}
}

// The parts of a joined key can never be arranged into another key.
func TestJoinKeysUnambiguous(t *testing.T) {
	part := func(s string) httplimit.KeyFunc { return httplimit.KeyConst(s) }
	pairs := [][2]string{{"a|b", "c"}, {"a", "b|c"}, {`a\`, "|c"}, {`a\|`, "c"}, {"a", `\|c`}, {`a\\`, "c"}}
	seen := map[string][2]string{}
	r := httptest.NewRequest("GET", "/", nil)
	for _, p := range pairs {
		k := httplimit.JoinKeys(part(p[0]), part(p[1]))(r)
		if q, dup := seen[k]; dup {
			t.Errorf("%q and %q both join to %q", p, q, k)
		}
		seen[k] = p
	}
}

// A client that sends a fresh X-Forwarded-For on every request is still one
// client, whether the server trusts no proxy or trusts proxies the client
// is not.
func TestSpoofedForwardedForIsOneClient(t *testing.T) {
	behindLB, err := clientip.New(clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range []*clientip.Resolver{nil, behindLB} {
		name := "direct"
		if res != nil {
			name = "behind lb"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{
				Limiter: e.limiter("api", floodgate.PerMinute(10)),
				Key:     httplimit.KeyByIP(res),
			}}}).Handler(ok)
			passed := 0
			for i := range 100 {
				xff := fmt.Sprintf("198.18.%d.%d", i/250, i%250+1)
				if rec := get(h, "/", "198.51.100.7:5000", "X-Forwarded-For", xff, "X-Real-IP", xff); rec.Code == 200 {
					passed++
				}
			}
			if passed != 10 {
				t.Fatalf("%d of 100 spoofed requests passed, want 10", passed)
			}
		})
	}
}

// Behind trusted proxies, each real client has its own limit, whatever it
// prepends to X-Forwarded-For.
func TestTrustedProxyChain(t *testing.T) {
	res, err := clientip.New(clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{
		Limiter: e.limiter("api", floodgate.PerMinute(3)),
		Key:     httplimit.KeyByIP(res),
	}}}).Handler(ok)
	send := func(clientAddr string, i int) int {
		// The client's own header, then what the edge and inner proxies
		// appended.
		xff := fmt.Sprintf("192.0.2.%d, %s, 10.1.2.3", i+1, clientAddr)
		return get(h, "/", "10.0.0.1:40000", "X-Forwarded-For", xff).Code
	}
	for i := range 3 {
		if code := send("203.0.113.7", i); code != 200 {
			t.Fatalf("client A request %d: %d", i+1, code)
		}
	}
	if code := send("203.0.113.7", 9); code != 429 {
		t.Fatalf("client A request 4: %d, want 429", code)
	}
	for i := range 3 {
		if code := send("203.0.113.8", i); code != 200 {
			t.Fatalf("client B request %d: %d: it shares A's limit", i+1, code)
		}
	}
}

// TestNoKey: a key function that finds no key never puts such requests in
// one shared bucket: they are keyed by their client, or skipped when the
// rule says so.
func TestNoKey(t *testing.T) {
	st := memstore.New(memstore.Options{})
	defer st.Close()
	lim, err := floodgate.New(st, floodgate.Policy{Name: "login", Limits: []floodgate.Limit{floodgate.PerMinute(1)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, skip := range []bool{false, true} {
		mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{Limiter: lim, Key: httplimit.KeyByFormValue("username"), SkipNoKey: skip}}})
		if err != nil {
			t.Fatal(err)
		}
		h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		send := func(peer string) int {
			req := httptest.NewRequest("POST", "/login", strings.NewReader("password=x"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.RemoteAddr = peer + ":1"
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec.Code
		}
		a1, a2, b := send(fmt.Sprintf("192.0.2.%d", 10+btoi(skip))), send(fmt.Sprintf("192.0.2.%d", 10+btoi(skip))), send(fmt.Sprintf("198.51.100.%d", 10+btoi(skip)))
		switch {
		case !skip && (a1 != 200 || a2 != 429 || b != 200):
			t.Errorf("no field, keyed by client: %d %d %d, want 200 429 200", a1, a2, b)
		case skip && (a1 != 200 || a2 != 200 || b != 200):
			t.Errorf("no field, skipped: %d %d %d, want all 200", a1, a2, b)
		}
	}
	if res, _ := lim.AllowN(context.Background(), "", 0); res.Remaining != 1 {
		t.Error("a request without a key was charged to the empty key")
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A composed key whose fallback finds no key has none itself, so the rule
// keys the request by its client (Rule.NoKey): two clients without an API
// key, whose own fallback reads an absent header, or without the form
// field a joined key needs, are limited apart, never in one shared bucket
// ("ip:", "login|").
func TestComposedKeysFallThrough(t *testing.T) {
	e := newEnv(t)
	none := func(r *http.Request) string { return r.Header.Get("X-Real-Ip") } // absent here
	for _, tt := range []struct {
		name string
		key  httplimit.KeyFunc
	}{
		{"header", httplimit.KeyByHeader("X-API-Key", none)},
		{"user", httplimit.KeyByUser(func(*http.Request) string { return "" }, none)},
		{"join", httplimit.JoinKeys(httplimit.KeyConst("login"), httplimit.KeyByFormValue("user"))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := mustNew(t, httplimit.Config{Rules: []httplimit.Rule{{
				Limiter: e.limiter("fall-"+tt.name, floodgate.PerMinute(1)), Key: tt.key,
			}}}).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			var got []int
			for _, remote := range []string{"203.0.113.7:1", "203.0.113.7:2", "198.51.100.9:1"} {
				got = append(got, get(h, "/", remote).Code)
			}
			if fmt.Sprint(got) != "[200 429 200]" {
				t.Errorf("client a, a, b: %v, want [200 429 200]", got)
			}
		})
	}
}
