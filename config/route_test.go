package config

import "testing"

func TestMatch(t *testing.T) {
	cases := []struct {
		m                  Match
		host, method, path string
		want               bool
	}{
		{Match{}, "x", "GET", "/anything", true},
		{Match{Methods: []string{"POST"}}, "x", "GET", "/", false},
		{Match{Methods: []string{"GET", "HEAD"}}, "x", "HEAD", "/", true},
		{Match{Host: "api.example.com"}, "API.example.com:8443", "GET", "/", true},
		{Match{Host: "api.example.com"}, "www.example.com", "GET", "/", false},
		{Match{Host: "*.example.com"}, "a.b.example.com", "GET", "/", true},
		{Match{Host: "*.example.com"}, "example.com", "GET", "/", false},
		{Match{Host: "*.example.com"}, "badexample.com", "GET", "/", false},
		{Match{PathPrefix: []string{"/v1/"}}, "x", "GET", "/v1/users", true},
		{Match{PathPrefix: []string{"/v1/"}}, "x", "GET", "/v1", false},
		{Match{PathPrefix: []string{"/admin"}}, "x", "GET", "/admin", true},
		{Match{PathPrefix: []string{"/admin"}}, "x", "GET", "/admin/users", true},
		{Match{PathPrefix: []string{"/admin"}}, "x", "GET", "/administrator", false},
		{Match{PathPrefix: []string{"/admin/"}}, "x", "GET", "/public/../admin/x", true},
		{Match{PathPrefix: []string{"/admin/"}}, "x", "GET", "//admin//x", true},
		{Match{PathPrefix: []string{"/places", "/reviews"}}, "x", "GET", "/reviews/7", true},
		{Match{Path: "/users/{id}"}, "x", "GET", "/users/42", true},
		{Match{Path: "/users/{id}"}, "x", "GET", "/users/", false},
		{Match{Path: "/users/{id}"}, "x", "GET", "/users/42/posts", false},
		{Match{Path: "/files/{rest...}"}, "x", "GET", "/files/a/b/c", true},
		{Match{Path: "/files/{rest...}"}, "x", "GET", "/files/", true},
		{Match{Path: "/login"}, "x", "POST", "/login", true},
		{Match{Path: "/login"}, "x", "POST", "/login/", false},
		{Match{Path: "/login"}, "x", "POST", "/x/../login", true},
	}
	for _, tc := range cases {
		if got := tc.m.Matches(tc.host, tc.method, tc.path); got != tc.want {
			t.Errorf("%+v.Matches(%q, %q, %q) = %v, want %v", tc.m, tc.host, tc.method, tc.path, got, tc.want)
		}
	}
}

func TestProxyRoute(t *testing.T) {
	exampleEnv(t)
	c, err := Load("../examples/config/photoplaces-production.yaml")
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
		r := c.Proxy.Route("api.photoplaces.example", tc.method, tc.path)
		got := ""
		if r != nil {
			got = r.Name
		}
		if got != tc.want {
			t.Errorf("%s %s → route %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}

func TestKeyBuild(t *testing.T) {
	headers := map[string]string{"X-User-ID": "42", "X-API-Key": "k|1", "X-Plan": "pro"}
	get := func(n string) string { return headers[n] }
	in := KeyInput{IP: "192.0.2.1", Header: get, Trusted: true, Route: "api"}
	untrusted := in
	untrusted.Trusted = false
	cases := []struct {
		key  string
		in   KeyInput
		want string
	}{
		{"ip", in, "ip:192.0.2.1"},
		{"user:X-User-ID", in, "user:42"},
		{"user:X-User-ID", untrusted, "ip:192.0.2.1"},
		{"user:X-Missing", in, "ip:192.0.2.1"},
		{"header:X-API-Key", untrusted, `header:k\|1`},
		{"header:X-Missing", in, "ip:192.0.2.1"},
		{"route", in, "route:api"},
		{"global", in, "global"},
	}
	for _, tc := range cases {
		p, err := ParseKeyPart(tc.key)
		if err != nil {
			t.Fatal(err)
		}
		if got := (Key{p}).Build(tc.in); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.key, got, tc.want)
		}
	}
	composite := Key{{Source: KeyIP}, {Source: KeyRoute}}
	if got := composite.Build(in); got != "ip:192.0.2.1|route:api" {
		t.Errorf("composite = %q", got)
	}
	l := RouteLimit{TierHeader: "X-Plan"}
	if l.Tier(get, true) != "pro" || l.Tier(get, false) != "" {
		t.Error("tier header believed from an untrusted peer, or not from a trusted one")
	}
}
