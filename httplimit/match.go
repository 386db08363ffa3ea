package httplimit

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/floodgate-go/floodgate/internal/pathnet"
)

// A Match selects requests by host, path and method. It is the one
// definition of which requests a limit sees: the daemon's proxy routes are
// Matches, and PathPrefix and Methods are its parts for a Rule's Match. Every
// condition given must hold; the zero Match selects every request.
//
// Paths are compared clean (dot segments and doubled slashes removed, a
// trailing slash kept), because the upstream serves them so: a client must
// not dodge the limits of /admin/ by asking for /public/../admin/.
type Match struct {
	// Host is the request's host without port, exact ("api.example.com")
	// or a wildcard for one or more labels ("*.example.com", which does
	// not match example.com itself). Compared without case, with any port
	// and trailing dot of the request's Host removed.
	Host string `yaml:"host,omitempty"`

	// Path is a net/http.ServeMux path pattern, matched as ServeMux
	// matches it: "/users/{id}" (one segment per wildcard), "/files/{p...}"
	// (the rest), "/static/" (the subtree below /static/), "/{$}" (the root
	// only). The pattern that matched becomes the request's Pattern, which
	// KeyByRoute reads. Exclusive with PathPrefix.
	Path string `yaml:"path,omitempty"`

	// PathPrefix matches paths that are one of these prefixes or lie
	// below one: "/auth" and "/auth/" both match /auth, /auth/ and
	// /auth/login, never /authors. "/" matches every path.
	PathPrefix []string `yaml:"path_prefix,omitempty"`

	// Methods are the methods matched, exactly (GET does not imply HEAD:
	// list both when both should count); empty means all.
	Methods []string `yaml:"methods,omitempty"`
}

// A MatchError is a Match that cannot be compiled. Field names the
// offending field as its YAML name ("host", "path", "path_prefix",
// "methods") and Index the element of a list field, so that a
// configuration file can point at the line to fix.
type MatchError struct {
	Field string
	Index int // for path_prefix and methods; -1 otherwise
	Msg   string
}

func (e *MatchError) Error() string {
	if e.Index >= 0 {
		return fmt.Sprintf("%s[%d]: %s", e.Field, e.Index, e.Msg)
	}
	return e.Field + ": " + e.Msg
}

// A Matcher is a compiled Match. It is immutable and safe for concurrent
// use.
type Matcher struct {
	host     string // lower case; "*.x" kept as ".x"
	mux      *http.ServeMux
	pattern  string // the mux's one pattern, for Explain
	prefixes []string
	methods  []string
}

// Compile checks m and returns its Matcher. Every problem is reported, each
// a *MatchError, joined.
func (m Match) Compile() (*Matcher, error) {
	var errs []error
	bad := func(field string, i int, format string, args ...any) {
		errs = append(errs, &MatchError{Field: field, Index: i, Msg: fmt.Sprintf(format, args...)})
	}
	c := &Matcher{}
	if m.Host != "" {
		h := strings.ToLower(m.Host)
		name, wild := strings.CutPrefix(h, "*.")
		if name == "" || strings.ContainsAny(name, "*/: \t[]") {
			bad("host", -1, "%q: give a host name without port, or *.domain for its subdomains", m.Host)
		}
		if wild {
			c.host = "." + name
		} else {
			c.host = name
		}
	}
	if m.Path != "" && len(m.PathPrefix) > 0 {
		bad("path", -1, "set path or path_prefix, not both")
	}
	if m.Path != "" {
		mux, err := muxOf(m.Path)
		if err != nil {
			bad("path", -1, "%v", err)
		}
		c.mux, c.pattern = mux, m.Path
	}
	for i, pf := range m.PathPrefix {
		if !strings.HasPrefix(pf, "/") {
			bad("path_prefix", i, "%q must start with /", pf)
			continue
		}
		c.prefixes = append(c.prefixes, prefixOf(pf))
	}
	for i, meth := range m.Methods {
		up := strings.ToUpper(strings.TrimSpace(meth))
		if !validMethod(up) {
			bad("methods", i, "%q is not an HTTP method", meth)
			continue
		}
		c.methods = append(c.methods, up)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// Match reports whether r is selected. A Path pattern that matches becomes
// r.Pattern.
func (c *Matcher) Match(r *http.Request) bool { return c.miss(r) == missNone }

// Explain reports whether r is selected, as Match does, and when it is not,
// which condition failed, e.g. `method GET is not one of POST`: what an
// operator needs to see why a route or rule left a request alone. It
// changes nothing but r.Pattern, as Match does.
func (c *Matcher) Explain(r *http.Request) (ok bool, why string) {
	switch c.miss(r) {
	case missNone:
		return true, ""
	case missMethod:
		return false, fmt.Sprintf("method %s is not one of %s", r.Method, strings.Join(c.methods, ", "))
	case missHost:
		want := c.host
		if strings.HasPrefix(want, ".") {
			want = "*" + want
		}
		return false, fmt.Sprintf("host %q is not %s", r.Host, want)
	case missPrefix:
		return false, fmt.Sprintf("path %s is not under %s", pathnet.CleanPath(r.URL.Path), strings.Join(c.prefixes, ", "))
	}
	return false, fmt.Sprintf("path %s does not match the pattern %s", pathnet.CleanPath(r.URL.Path), c.pattern)
}

// The conditions of a Matcher, in the order miss checks them.
const (
	missNone = iota
	missMethod
	missHost
	missPrefix
	missPath
)

// miss is the first condition of c that r fails, missNone when r is
// selected: the one rule both Match and Explain read.
func (c *Matcher) miss(r *http.Request) int {
	if c.methods != nil && !slices.Contains(c.methods, r.Method) {
		return missMethod
	}
	if c.host != "" && !hostMatches(c.host, r.Host) {
		return missHost
	}
	if c.prefixes != nil {
		p := pathnet.CleanPath(r.URL.Path)
		for _, pf := range c.prefixes {
			if underPrefix(p, pf) {
				return missNone
			}
		}
		return missPrefix
	}
	if c.mux != nil {
		// ServeMux matches the cleaned path (it redirects to it), so a
		// request with dot segments matches as the path it stands for.
		req := r
		if p := pathnet.CleanPath(r.URL.Path); p != r.URL.Path {
			u := *r.URL
			u.Path, u.RawPath = p, ""
			req = r.Clone(r.Context())
			req.URL = &u
		}
		_, pattern := c.mux.Handler(req)
		if pattern == "" {
			return missPath
		}
		r.Pattern = pattern
	}
	return missNone
}

// Empty reports whether m has no condition: it matches every request.
func (m Match) Empty() bool {
	return m.Host == "" && m.Path == "" && len(m.PathPrefix) == 0 && len(m.Methods) == 0
}

// String names m by its conditions, e.g. "GET,POST api.example.com/v1/*"
// or "*" for the empty Match: what a route is called when it has no name.
func (m Match) String() string {
	if m.Empty() {
		return "*"
	}
	var b strings.Builder
	if len(m.Methods) > 0 {
		b.WriteString(strings.ToUpper(strings.Join(m.Methods, ",")))
		b.WriteByte(' ')
	}
	b.WriteString(strings.ToLower(m.Host))
	switch {
	case m.Path != "":
		b.WriteString(m.Path)
	case len(m.PathPrefix) > 0:
		for i, p := range m.PathPrefix {
			if i > 0 {
				b.WriteByte('|')
			}
			b.WriteString(prefixOf(p) + "*")
		}
	default:
		b.WriteString("/*")
	}
	return b.String()
}

// prefixOf is a path prefix as it is compared: without a trailing slash,
// but for the root, so that "/auth" and "/auth/" mean the same.
func prefixOf(p string) string {
	if p != "/" {
		p = strings.TrimRight(p, "/")
		if p == "" {
			p = "/"
		}
	}
	return p
}

// underPrefix reports whether the clean path p is prefix (as prefixOf
// leaves it) or lies below it.
func underPrefix(p, prefix string) bool {
	if prefix == "/" {
		return true
	}
	return pathnet.UnderPrefix(p, prefix)
}

// muxOf returns a ServeMux with the one pattern, turning ServeMux's panic on
// a bad pattern into an error. A pattern is a path only: the host and the
// methods have fields of their own.
func muxOf(pattern string) (mux *http.ServeMux, err error) {
	if !strings.HasPrefix(pattern, "/") || strings.ContainsAny(pattern, " \t") {
		return nil, fmt.Errorf("%q: give a path pattern such as /items/{id}; the host and methods have fields of their own", pattern)
	}
	defer func() {
		if v := recover(); v != nil {
			mux, err = nil, fmt.Errorf("%q: %v", pattern, v)
		}
	}()
	mux = http.NewServeMux()
	mux.Handle(pattern, http.NotFoundHandler())
	return mux, nil
}

// validMethod reports whether m is a method token of upper-case letters
// and dashes (RFC 9110 allows more, but no server routes on them).
func validMethod(m string) bool {
	if m == "" || m[0] < 'A' || m[0] > 'Z' {
		return false
	}
	for i := 1; i < len(m); i++ {
		if c := m[i]; !(c >= 'A' && c <= 'Z' || c == '-') {
			return false
		}
	}
	return true
}

// hostMatches compares a request's Host (with an optional port) to a
// compiled host, lower case, where ".example.com" stands for
// *.example.com.
func hostMatches(want, host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	host = strings.TrimSuffix(host, ".")
	if strings.HasPrefix(want, ".") {
		return len(host) > len(want) && strings.EqualFold(host[len(host)-len(want):], want)
	}
	return strings.EqualFold(host, want)
}
