package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestExplainCommand: floodgate explain names the route a request meets
// and why the one before it does not, its key and state; key show takes
// the same description, refuses a key of a shape no route makes (naming
// the shapes) unless -any-shape, and lists the last decisions of a top
// limited key.
func TestExplainCommand(t *testing.T) {
	up := upstream(t)
	d := startDaemon(t, fmt.Sprintf(`
policies:
  api: {rate: 2/min}
  login: {rate: 10/min}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  routes:
    - name: login
      match: {path: /login, methods: [POST]}
      limits: [{policy: login, key: ip}]
    - name: api
      limits: [{policy: api, key: "header:X-Api-Key"}]
admin: {listen: 127.0.0.1:0}
`, up), "proxy", "admin")
	admin := "http://" + d.addr("admin")
	cli := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := run(args, &out, &errOut)
		return code, out.String(), errOut.String()
	}

	code, out, errOut := cli("explain", "-addr", admin, "-http", "GET /items", "-H", "X-Api-Key: k1", "-peer", "203.0.113.7")
	if code != 0 {
		t.Fatalf("explain: exit %d %s", code, errOut)
	}
	for _, want := range []string{"no match  login [POST /login]: method GET is not one of POST", "MATCH     api", `key:        "x-api-key:k1"`,
		"state:      not limited", "remaining:  2 under 2/min"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain: no %q in\n%s", want, out)
		}
	}
	// Explaining charged nothing: two requests pass, the third is refused.
	for i := range 3 {
		if got := get(t, "http://"+d.addr("proxy")+"/items", "X-Api-Key", "k1").StatusCode; got != map[bool]int{true: 200, false: 429}[i < 2] {
			t.Fatalf("request %d: %d", i+1, got)
		}
	}
	code, out, errOut = cli("key", "show", "-addr", admin, "-http", "/items", "-H", "X-Api-Key: k1")
	if code != 0 || !strings.Contains(out, "policy:     api") || !strings.Contains(out, "key:        x-api-key:k1") || !strings.Contains(out, "LIMITED") {
		t.Errorf("key show of a request: exit %d\n%s%s", code, out, errOut)
	}

	// A key of the wrong shape is an error naming the shapes.
	code, _, errOut = cli("key", "show", "-addr", admin, "-policy", "api", "-key", "203.0.113.7")
	if code != 1 || !strings.Contains(errOut, "x-api-key:{value}, ip:{address}") {
		t.Errorf("a key of the wrong shape: exit %d %s", code, errOut)
	}
	if code, out, errOut = cli("key", "show", "-addr", admin, "-any-shape", "-policy", "api", "-key", "203.0.113.7"); code != 0 || !strings.Contains(out, "not limited") {
		t.Errorf("-any-shape: exit %d %s%s", code, out, errOut)
	}

	// Once the status page's clock has found the key among the top
	// limited, its decisions are kept and shown.
	deadline := time.Now().Add(20 * time.Second)
	for {
		get(t, "http://"+d.addr("proxy")+"/items", "X-Api-Key", "k1")
		_, out, _ = cli("key", "show", "-addr", admin, "-policy", "api", "-key", "x-api-key:k1")
		if strings.Contains(out, "last decisions") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recent decisions shown:\n%s", out)
		}
	}
	if !strings.Contains(out, "DENIED  route api cost 1, 0 left under 2/min, by memory") {
		t.Errorf("recent decisions:\n%s", out)
	}

	for _, args := range [][]string{
		{"explain", "-addr", admin},
		{"explain", "-addr", admin, "-http", "/", "-pg-user", "u"},
		{"explain", "-addr", admin, "-envoy-domain", "edge"},
		{"key", "show", "-addr", admin, "-http", "/", "-policy", "api"},
	} {
		if code, _, _ := cli(args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	if code, _, errOut := cli("explain", "-addr", admin, "-pg-user", "u"); code != 1 || !strings.Contains(errOut, "no postgres section") {
		t.Errorf("postgres without a postgres proxy: exit %d %s", code, errOut)
	}
}

// FuzzDescription: any flags describing a request give a request or a
// usage error, never a panic.
func FuzzDescription(f *testing.F) {
	f.Add("GET /a?b=1", "X-K: v", "", "", "k=v,k2")
	f.Add("", "", "u", "", "")
	f.Add("", "", "", "edge", "a=b=c,,=")
	f.Add("POST", ":", "", "", "")
	f.Fuzz(func(t *testing.T, http, header, user, domain, desc string) {
		d := description{http: http, pgUser: user, domain: domain, headers: multiFlag{header}, descriptors: multiFlag{desc}}
		req, err := d.request()
		if (req == nil) == (err == nil) {
			t.Fatalf("request %+v, error %v", req, err)
		}
	})
}
