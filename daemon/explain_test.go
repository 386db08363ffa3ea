package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/admin"
	"github.com/floodgate-go/floodgate/testkit"
)

const explainConf = `
policies:
  api:
    rate: 3/min
    overrides:
      "x-api-key:vip": {rate: 100/min}
  login: {rate: 10/min, burst: 2}
proxy:
  listen: 127.0.0.1:0
  upstream: demo
  routes:
    - name: login
      match: {path: /login, methods: [POST]}
      limits: [{policy: login, key: ip}]
    - name: api
      match: {path_prefix: [/api]}
      limits: [{policy: api, key: "header:X-Api-Key"}]
envoy: {listen: 127.0.0.1:0, ratelimit_config: [%q]}
postgres:
  listen: 127.0.0.1:0
  upstream: 127.0.0.1:1
  rate_limit:
    global: {rate: 100/min}
    per_ip: {rate: 5/min}
admin: {listen: 127.0.0.1:0}
`

const explainEnvoyRules = `
domain: edge
descriptors:
  - key: one_per_minute
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /login
    descriptors:
      - key: remote_address
        rate_limit: {unit: second, requests_per_unit: 5}
`

func explainDaemon(t *testing.T) *Daemon {
	t.Helper()
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(explainEnvoyRules), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := New(mustParse(t, fmt.Sprintf(explainConf, rules)), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// TestExplainHTTP: explain names the route that matches and why the ones
// before it do not, the key the proxy's own key function makes, the
// limits and override that apply and the key's state, and charges
// nothing: the proxy then still admits the full limit, after which
// explain reports the key limited.
func TestExplainHTTP(t *testing.T) {
	d := explainDaemon(t)
	ctx := context.Background()
	req := &admin.ExplainRequest{HTTP: &admin.HTTPRequest{URL: "/api/items", Headers: map[string][]string{"X-Api-Key": {"k1"}}, Peer: "203.0.113.7"}}
	var ex *admin.Explanation
	for range 5 {
		var err error
		if ex, err = d.Explain(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if len(ex.Routes) != 2 || ex.Routes[0].Matched || ex.Routes[0].Why != "method GET is not one of POST" || !ex.Routes[1].Matched {
		t.Fatalf("routes %+v", ex.Routes)
	}
	if len(ex.Checks) != 1 {
		t.Fatalf("checks %+v", ex.Checks)
	}
	c := ex.Checks[0]
	if c.Policy != "api" || c.Key != "x-api-key:k1" || c.Cost != 1 || c.State == nil || c.State.Limited || c.State.Remaining != 3 || c.State.Limit != "3/min" {
		t.Fatalf("check %+v state %+v", c, c.State)
	}
	// Explaining charged nothing: the proxy admits 3, then refuses.
	px := d.cur.Load().proxy
	for i := range 4 {
		r := httptest.NewRequest("GET", "/api/items", nil)
		r.Header.Set("X-Api-Key", "k1")
		w := httptest.NewRecorder()
		px.ServeHTTP(w, r)
		if want := map[bool]int{true: 200, false: 429}[i < 3]; w.Code != want {
			t.Fatalf("request %d: %d, want %d", i+1, w.Code, want)
		}
	}
	ex, _ = d.Explain(ctx, req)
	if st := ex.Checks[0].State; !st.Limited || st.Remaining != 0 {
		t.Errorf("after the limit: %+v", st)
	}

	// The status page lists the policy's override.
	for _, p := range d.status.st.Snapshot().Policies {
		if p.Name == "api" && (len(p.Overrides) != 1 || p.Overrides[0].Key != "x-api-key:vip" || p.Overrides[0].Limits[0] != "100/min") {
			t.Errorf("the page's overrides of api: %+v", p.Overrides)
		}
	}
	// The override applies to its key, and says so.
	req.HTTP.Headers["X-Api-Key"] = []string{"vip"}
	ex, _ = d.Explain(ctx, req)
	if st := ex.Checks[0].State; st.LimitSet != "override:x-api-key:vip" || st.Limit != "100/min" {
		t.Errorf("the override's state %+v", st)
	}

	// A path with dot segments is redirected first; the routes see the
	// clean path, and a request no route takes is unlimited.
	ex, err := d.Explain(ctx, &admin.ExplainRequest{HTTP: &admin.HTTPRequest{Method: "GET", URL: "/api/../other"}})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Redirect != "/other" || len(ex.Checks) != 0 || ex.Routes[1].Why != "path /other is not under /api" || !strings.Contains(strings.Join(ex.Notes, "\n"), "forwarded unlimited") {
		t.Errorf("explanation %+v", ex)
	}
	// The login route keys by the peer given.
	ex, _ = d.Explain(ctx, &admin.ExplainRequest{HTTP: &admin.HTTPRequest{Method: "POST", URL: "/login", Peer: "[2001:db8::1]:443"}})
	if len(ex.Checks) != 1 || ex.Checks[0].Key != "2001:db8::/64" || ex.Checks[0].State.Limit != "10/min burst 2" {
		t.Errorf("login: %+v", ex.Checks)
	}
	// A whole URL gives the Host.
	ex, err = d.Explain(ctx, &admin.ExplainRequest{HTTP: &admin.HTTPRequest{URL: "http://api.example.com:8080/api/x?y=1"}})
	if err != nil || len(ex.Checks) != 1 || ex.Checks[0].Key != "ip:127.0.0.1" {
		t.Errorf("a whole URL: %+v %v", ex, err)
	}
	if _, err := d.Explain(ctx, &admin.ExplainRequest{HTTP: &admin.HTTPRequest{URL: "api/x"}}); err == nil {
		t.Error("a relative path was explained")
	}
	if _, err := d.Explain(ctx, &admin.ExplainRequest{HTTP: &admin.HTTPRequest{URL: "/", Peer: "nowhere"}}); err == nil {
		t.Error("a peer that is no address was explained")
	}
}

// TestExplainEnvoyAndPostgres: the Envoy rules' match, with why a
// descriptor has no rule, and the PostgreSQL proxy's scopes and keys.
func TestExplainEnvoyAndPostgres(t *testing.T) {
	d := explainDaemon(t)
	ctx := context.Background()
	ex, err := d.Explain(ctx, &admin.ExplainRequest{Envoy: &admin.EnvoyDescriptor{Domain: "edge", Descriptors: [][]admin.EnvoyEntry{
		{{Key: "one_per_minute", Value: "a"}},
		{{Key: "path", Value: "/login"}, {Key: "remote_address", Value: "10.0.0.1"}},
		{{Key: "path", Value: "/other"}},
		{{Key: "path", Value: "/login"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ex.Routes) != 4 || !ex.Routes[0].Matched || !ex.Routes[1].Matched || ex.Routes[2].Matched || ex.Routes[3].Matched {
		t.Fatalf("descriptors %+v", ex.Routes)
	}
	if !strings.Contains(ex.Routes[2].Why, "no rule at depth 1 matches the entry path=/other") || !strings.Contains(ex.Routes[3].Why, "no rate_limit of its own") {
		t.Errorf("why not: %q, %q", ex.Routes[2].Why, ex.Routes[3].Why)
	}
	if len(ex.Checks) != 2 || ex.Checks[0].Key != "one_per_minute=a" || ex.Checks[1].Key != "path=/login|remote_address=10.0.0.1" ||
		ex.Checks[0].State == nil || ex.Checks[0].State.Limit != "1/min fixed_window" {
		t.Errorf("checks %+v", ex.Checks)
	}
	if _, err := d.Explain(ctx, &admin.ExplainRequest{Envoy: &admin.EnvoyDescriptor{Domain: "nope", Descriptors: [][]admin.EnvoyEntry{{{Key: "a", Value: "b"}}}}}); err != nil {
		t.Fatal(err)
	}

	ex, err = d.Explain(ctx, &admin.ExplainRequest{Postgres: &admin.PostgresClient{User: "app", Peer: "192.0.2.9"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ex.Checks) != 2 || ex.Checks[0].Key != "global" || ex.Checks[1].Key != "192.0.2.9" || ex.Checks[1].State.Limit != "5/min" {
		t.Errorf("postgres checks %+v", ex.Checks)
	}
}

// TestKeysRefuseUnknownShapes: /v1/keys answers a key no front end makes
// for the policy with the shapes it does make, for routes and Envoy
// rules alike, and looks it up anyway when asked with any_shape.
func TestKeysRefuseUnknownShapes(t *testing.T) {
	d := explainDaemon(t)
	get := func(q string) (int, string) {
		w := httptest.NewRecorder()
		d.admin.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1/v1/keys?"+q, nil))
		return w.Code, w.Body.String()
	}
	for _, tc := range []struct {
		q      string
		status int
		want   string
	}{
		{"policy=api&key=203.0.113.7", 400, `x-api-key:{value}, ip:{address}`},
		{"policy=api&key=ip:203.0.113.7", 200, `"remaining":3`},
		{"policy=api&key=x-api-key:k1", 200, `"remaining":3`},
		{"policy=api&key=203.0.113.7&any_shape=1", 200, `"remaining":3`},
		{"policy=login&key=ip:203.0.113.7", 400, `{address}`},
		{"policy=edge.one_per_minute&key=a", 400, `one_per_minute={value}`},
		{"policy=edge.one_per_minute&key=one_per_minute=a", 200, `"limit":"1/min fixed_window"`},
		{"policy=postgres.global&key=global", 200, `"limit":"100/min"`},
		{"policy=postgres.per_ip&key=app", 400, `{address}`},
	} {
		status, body := get(tc.q)
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d with %s", tc.q, status, body, tc.status, tc.want)
		}
	}
	// /v1/explain over HTTP.
	w := httptest.NewRecorder()
	body, _ := json.Marshal(admin.ExplainRequest{HTTP: &admin.HTTPRequest{URL: "/api/x"}})
	r := httptest.NewRequest("POST", "http://127.0.0.1/v1/explain", strings.NewReader(string(body)))
	d.admin.ServeHTTP(w, r)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"key":"ip:`) {
		t.Errorf("POST /v1/explain: %d %s", w.Code, w.Body)
	}
	w = httptest.NewRecorder()
	d.admin.ServeHTTP(w, httptest.NewRequest("POST", "http://127.0.0.1/v1/explain", strings.NewReader(`{"http":{"url":"/"},"postgres":{"user":"a"}}`)))
	if w.Code != http.StatusBadRequest {
		t.Errorf("two descriptions: %d %s", w.Code, w.Body)
	}
}

// TestRawKeysInDenialLines: admin.raw_keys shows keys as they are in the
// proxy's denial log lines too, as on the status page.
func TestRawKeysInDenialLines(t *testing.T) {
	for _, raw := range []bool{false, true} {
		var buf testkit.Buffer
		d, err := New(mustParse(t, fmt.Sprintf(`
policies: {api: {rate: 1/min}}
proxy: {listen: 127.0.0.1:0, upstream: demo, routes: [{limits: [{policy: api, key: ip}]}]}
admin: {listen: 127.0.0.1:0, raw_keys: %v}
`, raw)), Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		if err != nil {
			t.Fatal(err)
		}
		px := d.cur.Load().proxy
		for range 2 {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			px.ServeHTTP(httptest.NewRecorder(), r)
		}
		d.Close()
		shown := "key=192.0.2.1 "
		if got := strings.Contains(buf.String(), shown); got != raw {
			t.Errorf("raw_keys %v: the denial line %q", raw, buf.String())
		}
	}
}

// FuzzPeerAddr: a peer is an address, with or without a port, or an error
// naming what to give; never a panic.
func FuzzPeerAddr(f *testing.F) {
	for _, s := range []string{"", "203.0.113.7", "203.0.113.7:80", "[2001:db8::1]:443", "2001:db8::1", "[::1]", "x", ":"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, peer string) {
		addr, err := peerAddr(peer)
		if err != nil {
			return
		}
		if _, perr := netip.ParseAddrPort(addr); perr != nil {
			t.Fatalf("peerAddr(%q) = %q, not ADDRESS:PORT", peer, addr)
		}
	})
}
