package httpmatch

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzHostMatch feeds route host matching arbitrary Host headers: it never
// panics, and an exact route host matches only that host, whatever its
// case, port or trailing dot.
func FuzzHostMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"example.com", "example.com"}, {"example.com", "EXAMPLE.com:8080"}, {".example.com", "a.example.com"},
		{".example.com", "example.com"}, {"example.com", "[::1]:80"}, {"example.com", "example.com."}, {"a", ""}, {"a", "["},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, want, host string) {
		want = strings.ToLower(want)
		ok := hostMatches(want, host)
		if ok && want != "" && !strings.HasPrefix(want, ".") && !strings.Contains(strings.ToLower(host), want) {
			t.Fatalf("route host %q matched Host %q", want, host)
		}
	})
}

// FuzzPathSpellings feeds path matching arbitrary prefixes, patterns and
// paths: it never panics, and a path that a prefix matches is matched in
// every other spelling an upstream may serve as the same path (upper case,
// a path parameter, a trailing dot or space, an extension), so no spelling
// escapes a limit.
func FuzzPathSpellings(f *testing.F) {
	for _, s := range [][2]string{
		{"/login", "/login"}, {"/login", "/LOGIN;x"}, {"/api/", "/api/v1"}, {"/", "/x"}, {"/a;b", "/a"}, {"/x.", "/x"},
		{"/users/{id}", "/users/7"}, {"/files/{p...}", "/files/a/b.c"}, {"/{$}", "/"}, {"/ſ", "/S"}, {"/a", `/b/..\a`},
	} {
		f.Add(s[0], s[1], uint8(0))
	}
	f.Fuzz(func(t *testing.T, pattern, path string, opts uint8) {
		if !strings.HasPrefix(pattern, "/") {
			return
		}
		m := Match{PathPrefix: []string{pattern}, CaseSensitive: opts&1 != 0, KeepPathParams: opts&2 != 0, RawPrefix: opts&4 != 0}
		matches := func(m Match, p string) bool {
			c, err := m.Compile()
			if err != nil {
				return false
			}
			r := httptest.NewRequest("GET", "http://x/", nil)
			r.URL.Path = p
			return c.Match(r)
		}
		// Patterns: whatever ServeMux makes of them, no panic.
		matches(Match{Path: pattern, CaseSensitive: m.CaseSensitive, KeepPathParams: m.KeepPathParams}, path)
		if !matches(m, path) {
			return
		}
		variants := []string{path + ".", path + " "}
		if n := len(path); n > 0 && (path[n-1] >= 'a' && path[n-1] <= 'z' || path[n-1] >= '0' && path[n-1] <= '9') {
			variants = append(variants, path+".json") // an extension on a name
		}
		if !m.CaseSensitive {
			variants = append(variants, asciiUpper(path))
		}
		if !m.KeepPathParams {
			variants = append(variants, path+";x")
		}
		for _, v := range variants {
			if !matches(m, v) {
				t.Fatalf("%+v matches %q but not %q", m, path, v)
			}
		}
	})
}

func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// FuzzAsCompared holds the fast path of path matching to the full rewrite:
// a path asCompared vouches for is one normPath's rewrite leaves as it is,
// under every combination of the options that change the rewrite.
func FuzzAsCompared(f *testing.F) {
	for _, p := range []string{"/", "/api/v1/users/42", "/a/b/", "/x.json", "/a.", "/a/./b", "/a/../b", "//a", "/A", "/a;b",
		"/a b", `/a\b`, "a", "", "/é", "/.well-known/x", "/..x", "/x..y"} {
		f.Add(p, uint8(0))
		f.Add(p, uint8(3))
	}
	f.Fuzz(func(t *testing.T, p string, opts uint8) {
		for _, m := range []Match{
			{PathPrefix: []string{"/"}, CaseSensitive: opts&1 != 0, KeepPathParams: opts&2 != 0},
			{Path: "/{p...}", CaseSensitive: opts&1 != 0, KeepPathParams: opts&2 != 0},
		} {
			c, err := m.Compile()
			if err != nil {
				t.Fatal(err)
			}
			if c.asCompared(p) {
				if got := c.rewrite(p); got != p {
					t.Fatalf("%+v: asCompared(%q), but the rewrite makes it %q", m, p, got)
				}
			}
		}
	})
}
