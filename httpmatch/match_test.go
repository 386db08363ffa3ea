package httpmatch_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/httpmatch"
)

// TestMatchTable is the one table of what a Match selects; the proxy's routes
// and the middleware's PathPrefix and Methods are Matches, so it is theirs
// too.
func TestMatchTable(t *testing.T) {
	cases := []struct {
		m                  httpmatch.Match
		host, method, path string
		want               bool
	}{
		{httpmatch.Match{}, "x", "GET", "/anything", true},
		{httpmatch.Match{Methods: []string{"POST"}}, "x", "GET", "/", false},
		{httpmatch.Match{Methods: []string{"GET", "HEAD"}}, "x", "HEAD", "/", true},
		{httpmatch.Match{Methods: []string{"post"}}, "x", "POST", "/", true},
		{httpmatch.Match{Host: "api.example.com"}, "API.example.com:8443", "GET", "/", true},
		{httpmatch.Match{Host: "api.example.com"}, "api.example.com.", "GET", "/", true},
		{httpmatch.Match{Host: "api.example.com"}, "www.example.com", "GET", "/", false},
		{httpmatch.Match{Host: "*.example.com"}, "a.b.example.com", "GET", "/", true},
		{httpmatch.Match{Host: "*.example.com"}, "example.com", "GET", "/", false},
		{httpmatch.Match{Host: "*.example.com"}, "badexample.com", "GET", "/", false},
		// A prefix means the same with or without its trailing slash: the
		// path itself and everything below it, never a longer name.
		{httpmatch.Match{PathPrefix: []string{"/v1/"}}, "x", "GET", "/v1/users", true},
		{httpmatch.Match{PathPrefix: []string{"/v1/"}}, "x", "GET", "/v1", true},
		{httpmatch.Match{PathPrefix: []string{"/auth/"}}, "x", "GET", "/auth", true},
		{httpmatch.Match{PathPrefix: []string{"/auth"}}, "x", "GET", "/auth/", true},
		{httpmatch.Match{PathPrefix: []string{"/auth/"}}, "x", "GET", "/authors", false},
		{httpmatch.Match{PathPrefix: []string{"/admin"}}, "x", "GET", "/admin", true},
		{httpmatch.Match{PathPrefix: []string{"/admin"}}, "x", "GET", "/admin/users", true},
		{httpmatch.Match{PathPrefix: []string{"/admin"}}, "x", "GET", "/administrator", false},
		{httpmatch.Match{PathPrefix: []string{"/admin/"}}, "x", "GET", "/public/../admin/x", true},
		{httpmatch.Match{PathPrefix: []string{"/admin/"}}, "x", "GET", "//admin//x", true},
		{httpmatch.Match{PathPrefix: []string{"/places", "/reviews"}}, "x", "GET", "/reviews/7", true},
		{httpmatch.Match{PathPrefix: []string{"/"}}, "x", "GET", "/x", true},
		// Path is a ServeMux pattern, matched as ServeMux matches it.
		{httpmatch.Match{Path: "/users/{id}"}, "x", "GET", "/users/42", true},
		{httpmatch.Match{Path: "/users/{id}"}, "x", "GET", "/users/", false},
		{httpmatch.Match{Path: "/users/{id}"}, "x", "GET", "/users/42/posts", false},
		{httpmatch.Match{Path: "/files/{rest...}"}, "x", "GET", "/files/a/b/c", true},
		{httpmatch.Match{Path: "/files/{rest...}"}, "x", "GET", "/files/", true},
		{httpmatch.Match{Path: "/static/"}, "x", "GET", "/static/app.js", true},
		{httpmatch.Match{Path: "/static/"}, "x", "GET", "/staticx", false},
		{httpmatch.Match{Path: "/{$}"}, "x", "GET", "/", true},
		{httpmatch.Match{Path: "/{$}"}, "x", "GET", "/x", false},
		{httpmatch.Match{Path: "/login"}, "x", "POST", "/login", true},
		{httpmatch.Match{Path: "/login"}, "x", "POST", "/login/", true}, // as frameworks serve it
		{httpmatch.Match{Path: "/login"}, "x", "POST", "/x/../login", true},
	}
	for _, tc := range cases {
		c, err := tc.m.Compile()
		if err != nil {
			t.Fatalf("%+v: %v", tc.m, err)
		}
		r := httptest.NewRequest(tc.method, "http://"+tc.host+"/", nil)
		r.Host = tc.host
		r.URL.Path = tc.path
		if got := c.Match(r); got != tc.want {
			t.Errorf("%+v matches %s %s%s: %v, want %v", tc.m, tc.method, tc.host, tc.path, got, tc.want)
		}
	}
}

// TestPathSpellings: no spelling of a limited path that an upstream may
// serve as that path escapes its route, for every way a path can be matched;
// the options that keep case and path parameters, and the raw prefix, match
// what they say.
func TestPathSpellings(t *testing.T) {
	prefix := httpmatch.Match{PathPrefix: []string{"/login"}}
	exact := httpmatch.Match{Path: "/signin"}
	type tc struct {
		m    httpmatch.Match
		path string // as sent on the wire
		want bool
	}
	var cases []tc
	for _, p := range []string{"/login", "/LOGIN", "/Login", "/login;x", "/login;jsessionid=1", "/login%3Bx", "/login.", "/login%2e", "/login%20",
		"/login.json", "/login/", "/login/x", "/login..", "/login%2E%20", "/login.;x", "/a/..;/login", `/x/..\login`, "/LOGIN;X/y", "/login%2fx",
		// Windows: NTFS streams and 8.3 short names.
		"/login::$DATA", "/LOGIN::$data", "/login:x:$DATA/y", "/login~1", "/LOGIN~12", "/login~1.asp",
		// Unicode: letters whose upper case is ASCII, fullwidth forms.
		"/log%C4%B1n", "/%C5%BFlogin/../login", "/LOG%C4%B0N", "/login%EF%BC%8E", "/%EF%BD%8C%EF%BD%8F%EF%BD%87%EF%BD%89%EF%BD%8E",
		"/login%EF%BC%8Fx", "/login%E3%80%80"} {
		cases = append(cases, tc{prefix, p, true})
	}
	for _, p := range []string{"/signin", "/signin/", "/signin%2f", "/SIGNIN", "/signin;x", "/signin.", "/signin%2e", "/signin%20", "/signin.json", "/SignIn;a=b/", "/x/../signin"} {
		cases = append(cases, tc{exact, p, true})
	}
	for _, p := range []string{"/loginx", "/logi", "/log/in", "/x/login", "/signin",
		// Not short names: a stem over six bytes, a name over eight, no digit.
		"/loginxyz~1", "/login~123", "/login~x", "/login:x", "/caf%C3%A9"} {
		cases = append(cases, tc{prefix, p, false})
	}
	for _, p := range []string{"/signinx", "/signin/x", "/sign", "/x/signin", "/.signin"} {
		cases = append(cases, tc{exact, p, false})
	}
	// Opting out: paths as written.
	sensitive := httpmatch.Match{PathPrefix: []string{"/login"}, CaseSensitive: true}
	cases = append(cases, tc{sensitive, "/LOGIN", false}, tc{sensitive, "/login;x", true}, tc{sensitive, "/Login", false},
		tc{sensitive, "/log%C4%B1n", false}, tc{sensitive, "/login%EF%BC%8E", true}, tc{sensitive, "/%EF%BC%AC%EF%BD%8F%EF%BD%87%EF%BD%89%EF%BD%8E", false})
	params := httpmatch.Match{PathPrefix: []string{"/login"}, KeepPathParams: true}
	cases = append(cases, tc{params, "/login;x", false}, tc{params, "/LOGIN", true}, tc{params, "/login.", true})
	exactSensitive := httpmatch.Match{Path: "/SignIn", CaseSensitive: true}
	cases = append(cases, tc{exactSensitive, "/SignIn", true}, tc{exactSensitive, "/signin", false}, tc{exactSensitive, "/SignIn;x", true})
	// A raw prefix is a string prefix, as nginx's location.
	raw := httpmatch.Match{PathPrefix: []string{"/login"}, RawPrefix: true}
	cases = append(cases, tc{raw, "/loginx", true}, tc{raw, "/login.json", true}, tc{raw, "/LOGINX", true}, tc{raw, "/login;x", true}, tc{raw, "/logi", false})
	rawSlash := httpmatch.Match{PathPrefix: []string{"/login/"}, RawPrefix: true}
	cases = append(cases, tc{rawSlash, "/login/x", true}, tc{rawSlash, "/login", false}, tc{rawSlash, "/loginx", false})
	// A pattern's wildcards still match per segment.
	wild := httpmatch.Match{Path: "/users/{id}/reset"}
	cases = append(cases, tc{wild, "/USERS/7/Reset", true}, tc{wild, "/users/7;x/reset.", true}, tc{wild, "/users/7/8/reset", false})

	for _, c := range cases {
		m, err := c.m.Compile()
		if err != nil {
			t.Fatalf("%+v: %v", c.m, err)
		}
		r := httptest.NewRequest("GET", "http://x"+c.path, nil)
		if got := m.Match(r); got != c.want {
			t.Errorf("%+v matches %s (path %q): %v, want %v", c.m, c.path, r.URL.Path, got, c.want)
		}
		if c.want && c.m.Path != "" && r.Pattern != c.m.Path {
			t.Errorf("%+v on %s: Pattern %q, want the path as configured", c.m, c.path, r.Pattern)
		}
	}
}

// TestCheckPath: the paths no Match can compare as every upstream reads
// them are named, and ordinary paths, non-ASCII ones among them, are not.
func TestCheckPath(t *testing.T) {
	for _, p := range []string{"/login%00", "/login%09", "/login%0a", "/login%0D", "/lo%7Fgin", "/login%C2%85", "/login%252e", "/login%2541",
		"/login%C0%AF", "/login%FF", "/login%3F", "/login%3fx", "/login%23", "/login%E2%80%8B", "/log%E2%80%8Ein", "/%EF%BB%BFlogin", "/login%E2%80%A8"} {
		r := httptest.NewRequest("GET", "http://x/", nil)
		u, err := url.Parse("http://x" + p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		r.URL = u
		if err := httpmatch.CheckPath(r.URL.Path); !errors.Is(err, httpmatch.ErrBadPath) {
			t.Errorf("CheckPath(%q) = %v, want ErrBadPath", r.URL.Path, err)
		}
	}
	for _, p := range []string{"/", "/login", "/caf\u00e9/x", "/100%", "/50%off", "/a%2", "/login~1", "/login::$DATA", "/log\u0131n", "*", ""} {
		if err := httpmatch.CheckPath(p); err != nil {
			t.Errorf("CheckPath(%q) = %v, want nil", p, err)
		}
	}
	if err := httpmatch.CheckPath("/login\x00"); err == nil || !strings.Contains(err.Error(), "0x00") {
		t.Errorf("CheckPath of a NUL: %v, want the byte named", err)
	}
}

// TestMatchOptionErrors: an option that says how a path is compared needs a
// path to compare.
func TestMatchOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		m     httpmatch.Match
		field string
	}{
		{httpmatch.Match{CaseSensitive: true}, "case_sensitive"},
		{httpmatch.Match{KeepPathParams: true, Host: "x"}, "keep_path_params"},
		{httpmatch.Match{RawPrefix: true, Path: "/x"}, "raw_prefix"},
	} {
		_, err := tc.m.Compile()
		var me *httpmatch.MatchError
		if !errors.As(err, &me) || me.Field != tc.field {
			t.Errorf("%+v: error %v, want one about %s", tc.m, err, tc.field)
		}
	}
}

// TestPathPrefixIsMatch: the middleware's PathPrefix means what a route's
// path_prefix means.
func TestPathPrefixIsMatch(t *testing.T) {
	for _, pf := range []string{"/auth", "/auth/"} {
		m, err := httpmatch.Match{PathPrefix: []string{pf}}.Compile()
		if err != nil {
			t.Fatal(err)
		}
		f := httpmatch.PathPrefix(pf)
		for _, p := range []string{"/auth", "/auth/", "/auth/login", "/authors", "/", "/x/auth", "/x/../auth/y"} {
			r := httptest.NewRequest("GET", "/", nil)
			r.URL.Path = p
			if f(r) != m.Match(r) {
				t.Errorf("PathPrefix(%q) and path_prefix %q disagree on %s", pf, pf, p)
			}
		}
	}
}

func TestMatchErrors(t *testing.T) {
	for _, tc := range []struct {
		m     httpmatch.Match
		field string
		index int
	}{
		{httpmatch.Match{Path: "/items/{id"}, "path", -1},
		{httpmatch.Match{Path: "GET /x"}, "path", -1},
		{httpmatch.Match{Path: "/x/{a}/{a}"}, "path", -1},
		{httpmatch.Match{Path: "/x", PathPrefix: []string{"/y"}}, "path", -1},
		{httpmatch.Match{PathPrefix: []string{"/ok", "api"}}, "path_prefix", 1},
		{httpmatch.Match{Host: "a/b"}, "host", -1},
		{httpmatch.Match{Host: "*."}, "host", -1},
		{httpmatch.Match{Host: "example.com:80"}, "host", -1},
		{httpmatch.Match{Methods: []string{"GET", "G T"}}, "methods", 1},
	} {
		_, err := tc.m.Compile()
		var me *httpmatch.MatchError
		if !errors.As(err, &me) || me.Field != tc.field || me.Index != tc.index {
			t.Errorf("%+v: %v, want an error at %s[%d]", tc.m, err, tc.field, tc.index)
		}
	}
}

func TestMatchString(t *testing.T) {
	for m, want := range map[*httpmatch.Match]string{
		{}:                                 "*",
		{Methods: []string{"get", "POST"}}: "GET,POST /*",
		{Host: "API.example.com", PathPrefix: []string{"/v1/", "/v2"}}: "api.example.com/v1*|/v2*",
		{Path: "/users/{id}"}: "/users/{id}",
	} {
		if got := m.String(); got != want {
			t.Errorf("%+v: %q, want %q", *m, got, want)
		}
		if strings.Contains(want, "*") && m.Empty() != (want == "*") {
			t.Errorf("%+v: Empty %v", *m, m.Empty())
		}
	}
}

// TestMatcherExplain: Explain agrees with Match and names the condition
// that failed.
func TestMatcherExplain(t *testing.T) {
	for _, tc := range []struct {
		m              httpmatch.Match
		method, target string
		why            string
	}{
		{httpmatch.Match{Methods: []string{"POST", "PUT"}}, "GET", "http://a/", "method GET is not one of POST, PUT"},
		{httpmatch.Match{Host: "*.example.com"}, "GET", "http://example.com/", `host "example.com" is not *.example.com`},
		{httpmatch.Match{PathPrefix: []string{"/api/"}}, "GET", "http://a/apix", "path /apix is not under /api"},
		{httpmatch.Match{Path: "/users/{id}"}, "GET", "http://a/users/1/x", "path /users/1/x does not match the pattern /users/{id}"},
		{httpmatch.Match{Path: "/users/{id}"}, "GET", "http://a/users/1", ""},
		{httpmatch.Match{}, "GET", "http://a/", ""},
	} {
		c, err := tc.m.Compile()
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(tc.method, tc.target, nil)
		ok, why := c.Explain(r)
		if ok != c.Match(r) || why != tc.why || ok != (tc.why == "") {
			t.Errorf("%v %s %s: %v %q, want %q", tc.m, tc.method, tc.target, ok, why, tc.why)
		}
	}
}

// TestMatchFuncs: PathPrefix, Methods and All as a Rule uses them.
func TestMatchFuncs(t *testing.T) {
	tests := []struct {
		name  string
		match func(*http.Request) bool
		hits  []string
		miss  []string
	}{
		{name: "prefix", match: httpmatch.PathPrefix("/auth"), hits: []string{"GET /auth", "GET /auth/", "POST /auth/login"}, miss: []string{"GET /authors", "GET /", "GET /x/auth"}},
		{name: "prefix slash", match: httpmatch.PathPrefix("/admin/", "/ops"), hits: []string{"GET /admin", "GET /admin/users", "GET /ops/x"}, miss: []string{"GET /administer", "GET /opsx"}},
		{name: "root", match: httpmatch.PathPrefix("/"), hits: []string{"GET /", "GET /x"}},
		{name: "methods", match: httpmatch.Methods("POST", "PUT"), hits: []string{"POST /", "PUT /x"}, miss: []string{"GET /", "post /"}},
		{name: "all", match: httpmatch.All(httpmatch.Methods("GET"), httpmatch.PathPrefix("/places")), hits: []string{"GET /places/1"}, miss: []string{"POST /places", "GET /reviews"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, want := range []bool{true, false} {
				list := tt.hits
				if !want {
					list = tt.miss
				}
				for _, mp := range list {
					method, path, _ := strings.Cut(mp, " ")
					r := &http.Request{Method: method, URL: &url.URL{Path: path}}
					if got := tt.match(r); got != want {
						t.Errorf("%s: match %v, want %v", mp, got, want)
					}
				}
			}
		})
	}
}
