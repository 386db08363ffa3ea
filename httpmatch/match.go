package httpmatch

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/floodgate-go/floodgate/internal/pathnet"
)

// A Match selects requests by host, path and method. It is the one
// definition of which requests a limit sees: the daemon's proxy routes are
// Matches, and PathPrefix and Methods are its parts for an httplimit Rule's
// Match. Every condition given must hold; the zero Match selects every
// request.
//
// Paths are compared as the upstreams behind a limit may serve them, so that
// no spelling of a path escapes its limit. By default a path is compared
//
//   - clean: dot segments and doubled slashes removed, a trailing slash
//     kept, a backslash read as a slash (IIS), so /public/../admin/ is
//     /admin/;
//   - without path parameters: everything from a ";" to the end of its
//     segment dropped, as Tomcat, Jetty and Spring serve /login;jsessionid=1
//     (and /login%3Bx, which is decoded first) as /login;
//   - without the dots and spaces that end a segment, as Windows and IIS
//     serve /login. and /login%20 as /login;
//   - without case, as IIS and case-insensitive file systems serve /LOGIN
//     as /login, a letter folded as its upper case's lower case, as .NET's
//     case-insensitive comparison sees it: /logın (dotless ı) and /ſignin
//     (long s) are /login and /signin;
//   - with the fullwidth forms of ASCII characters (U+FF01 to U+FF5E, and
//     the ideographic space U+3000) read as those characters, as upstreams
//     that normalise Unicode (NFKC) or map it to a code page by best fit
//     (Windows) serve them: /login． (a fullwidth full stop) is /login. and
//     so /login, /ｌｏｇｉｎ is /login, and ／ is a slash;
//   - without an NTFS stream suffix, as Windows serves /login::$DATA (and
//     /login:x:$DATA) as the file /login: a segment holding ":$" ends at its
//     first ":";
//   - without an 8.3 short name's "~N", as Windows serves /LOGINP~1 as the
//     first name beginning with loginp: a segment of at most eight bytes
//     whose stem of one to six bytes is followed by "~" and digits, up to an
//     optional extension, is compared as the stem, so /login~1 is /login
//     and /login~1.asp is /login.asp;
//   - with a name's extension as a boundary: path_prefix /login matches
//     /login.json and path /signin matches /signin.json (Spring's suffix
//     patterns, Rails' formats), and path /signin matches /signin/ too.
//
// This errs towards limiting: a request another upstream would serve
// apart (/login.json as a file of its own) is limited as its route's path.
// CaseSensitive and KeepPathParams turn two of these off for an upstream
// known to serve paths as written; RawPrefix compares path prefixes as
// plain strings, as nginx's location does.
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
	// httplimit.KeyByRoute reads. Exclusive with PathPrefix.
	Path string `yaml:"path,omitempty"`

	// PathPrefix matches paths that are one of these prefixes or lie
	// below one: "/auth" and "/auth/" both match /auth, /auth/ and
	// /auth/login, never /authors. "/" matches every path.
	PathPrefix []string `yaml:"path_prefix,omitempty"`

	// Methods are the methods matched, exactly (GET does not imply HEAD:
	// list both when both should count); empty means all.
	Methods []string `yaml:"methods,omitempty"`

	// CaseSensitive compares Path and PathPrefix with the request's path
	// as written but for fullwidth forms. Default false: without
	// case, so /LOGIN is /login. Only for an upstream that serves /LOGIN
	// apart from /login.
	CaseSensitive bool `yaml:"case_sensitive,omitempty"`

	// KeepPathParams compares the request's path with its path parameters
	// (";name=value" in a segment). Default false: they are dropped, so
	// /login;x is /login. Only for an upstream that serves ";" as part of
	// a name.
	KeepPathParams bool `yaml:"keep_path_params,omitempty"`

	// RawPrefix makes each PathPrefix match every path that starts with it
	// as a string, as nginx's location /login matches /login, /login/x,
	// /loginx and /login.json; a prefix with a trailing slash then matches
	// only below it. The path is still compared clean, without case and
	// without path parameters unless CaseSensitive or KeepPathParams say
	// otherwise. Default false: segment by segment, so /login does not
	// match /loginx.
	RawPrefix bool `yaml:"raw_prefix,omitempty"`
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
	pattern  string // Path as given: the request's Pattern, and what Explain names
	prefixes []string
	methods  []string

	caseSensitive, keepParams, rawPrefix bool
}

// Compile checks m and returns its Matcher. Every problem is reported, each
// a *MatchError, joined.
func (m Match) Compile() (*Matcher, error) {
	var errs []error
	bad := func(field string, i int, format string, args ...any) {
		errs = append(errs, &MatchError{Field: field, Index: i, Msg: fmt.Sprintf(format, args...)})
	}
	c := &Matcher{caseSensitive: m.CaseSensitive, keepParams: m.KeepPathParams, rawPrefix: m.RawPrefix}
	if (m.CaseSensitive || m.KeepPathParams) && m.Path == "" && len(m.PathPrefix) == 0 {
		field := "case_sensitive"
		if !m.CaseSensitive {
			field = "keep_path_params"
		}
		bad(field, -1, "says how path or path_prefix is compared, and neither is set")
	}
	if m.RawPrefix && len(m.PathPrefix) == 0 {
		bad("raw_prefix", -1, "says how path_prefix is compared, and it is not set")
	}
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
		// The request's path is compared with fullwidth forms read as
		// ASCII and folded, so the pattern is too (its wildcards' names with it,
		// which only the pattern itself shows).
		pattern := foldPath(m.Path, !m.CaseSensitive)
		mux, err := muxOf(pattern)
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
		if m.RawPrefix {
			c.prefixes = append(c.prefixes, c.normPath(pf))
		} else {
			c.prefixes = append(c.prefixes, prefixOf(c.normPath(pf)))
		}
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
		return false, fmt.Sprintf("path %s is not under %s", c.normPath(r.URL.Path), strings.Join(c.prefixes, ", "))
	}
	return false, fmt.Sprintf("path %s does not match the pattern %s", c.normPath(r.URL.Path), c.pattern)
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
		p := c.normPath(r.URL.Path)
		for _, pf := range c.prefixes {
			if c.rawPrefix && strings.HasPrefix(p, pf) || !c.rawPrefix && (underPrefix(p, pf) || extensionOf(p, pf)) {
				return missNone
			}
		}
		return missPrefix
	}
	if c.mux != nil {
		if !c.muxMatches(r) {
			return missPath
		}
		r.Pattern = c.pattern
	}
	return missNone
}

// muxMatches reports whether the pattern matches r's path as compared (see
// Match), or that path without its trailing slash, or without the
// extension of its last name.
func (c *Matcher) muxMatches(r *http.Request) bool {
	p := c.normPath(r.URL.Path)
	try := func(p string) bool {
		// ServeMux matches the path as given (it redirects others), so
		// it is given the path as compared.
		req := r
		if p != r.URL.Path || r.URL.RawPath != "" {
			// A shallow copy: ServeMux reads the method, host and path,
			// and the request itself is left as it is.
			u := *r.URL
			u.Path, u.RawPath = p, ""
			cp := *r
			cp.URL = &u
			req = &cp
		}
		_, pattern := c.mux.Handler(req)
		return pattern != ""
	}
	if try(p) {
		return true
	}
	if len(p) > 1 && strings.HasSuffix(p, "/") {
		p = p[:len(p)-1]
		if try(p) {
			return true
		}
	}
	last := strings.LastIndexByte(p, '/') + 1
	if dot := strings.IndexByte(p[last:], '.'); dot > 0 {
		return try(p[:last+dot])
	}
	return false
}

// normPath is the request path p as the Matcher compares it (see Match):
// with fullwidth forms read as ASCII, clean, a backslash read as a slash, each segment
// without its path parameters, NTFS stream, short name's "~N" and trailing
// dots and spaces, and folded, but for what CaseSensitive and
// KeepPathParams keep.
func (c *Matcher) normPath(p string) string {
	if c.asCompared(p) {
		return p
	}
	return c.rewrite(p)
}

// rewrite is normPath for a path that asCompared does not vouch for.
func (c *Matcher) rewrite(p string) string {
	p = foldPath(p, !c.caseSensitive)
	if strings.ContainsAny(p, "\\; .:~") {
		p = c.normSegments(p)
	}
	return pathnet.CleanPath(p)
}

// asCompared reports whether p is already the path normPath makes of it,
// in one pass over its bytes: the common request path, which then costs
// no rewriting. It is false for anything normPath could change: a path not
// rooted, a backslash, a path parameter, a space, an empty segment (//), a
// segment ending in a dot (".", "..", "x."), an NTFS stream (":$"), a short
// name's "~" and digit, a non-ASCII byte, and, unless CaseSensitive, an
// upper case letter. FuzzAsCompared holds it to normPath.
func (c *Matcher) asCompared(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		switch b := p[i]; {
		case b == '/':
			if i+1 < len(p) && p[i+1] == '/' {
				return false
			}
		case b == '.':
			if i+1 == len(p) || p[i+1] == '/' {
				return false
			}
		case b == ':':
			if i+1 < len(p) && p[i+1] == '$' {
				return false
			}
		case b == '~':
			if i+1 < len(p) && p[i+1] >= '0' && p[i+1] <= '9' {
				return false
			}
		case b == '\\' || b == ';' || b == ' ' || b >= utf8.RuneSelf:
			return false
		case !c.caseSensitive && b >= 'A' && b <= 'Z':
			return false
		}
	}
	return true
}

// normSegments rewrites each segment of p: path parameters dropped (unless
// kept), an NTFS stream suffix and a short name's "~N" dropped, and
// trailing dots and spaces trimmed, but for segments of dots only, which
// CleanPath resolves ("..;x" is "..", as Tomcat reads it).
func (c *Matcher) normSegments(p string) string {
	p = strings.ReplaceAll(p, "\\", "/")
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if !c.keepParams {
			if semi := strings.IndexByte(s, ';'); semi >= 0 {
				s = s[:semi]
			}
		}
		if strings.Contains(s, ":$") {
			s = s[:strings.IndexByte(s, ':')]
		}
		s = shortNameStem(s)
		if strings.Trim(s, ".") != "" {
			s = strings.TrimRight(s, ". ")
		}
		segs[i] = s
	}
	return strings.Join(segs, "/")
}

// shortNameStem is the segment s without the "~N" of an 8.3 short name
// (LOGINP~1, LOGIN~1.ASP): at most eight bytes before the extension, a
// stem of one to six bytes, "~" and digits. Any other s is returned as it
// is.
func shortNameStem(s string) string {
	tilde := strings.IndexByte(s, '~')
	if tilde < 1 || tilde > 6 {
		return s
	}
	end := len(s)
	if dot := strings.IndexByte(s[tilde:], '.'); dot >= 0 {
		end = tilde + dot
	}
	if end > 8 || end == tilde+1 {
		return s
	}
	for _, b := range []byte(s[tilde+1 : end]) {
		if b < '0' || b > '9' {
			return s
		}
	}
	return s[:tilde] + s[end:]
}

// foldPath is p with the fullwidth forms of ASCII characters read as those
// characters (what NFKC makes of them), and when fold is set without case:
// ASCII letters lower-cased, and every other letter folded as its upper
// case's lower case (ı, whose upper case is I, is i; ſ is s; the Kelvin
// sign is k), as case-insensitive comparisons that go through upper case
// see them. An ASCII path without upper case letters is returned as it
// is, without allocating.
func foldPath(p string, fold bool) string {
	ascii := true
	upper := false
	for i := 0; i < len(p); i++ {
		if b := p[i]; b >= utf8.RuneSelf {
			ascii = false
			break
		} else if b >= 'A' && b <= 'Z' {
			upper = true
		}
	}
	switch {
	case ascii && (!fold || !upper):
		return p
	case ascii:
		return strings.ToLower(p)
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 0xFF01 && r <= 0xFF5E:
			r -= 0xFF01 - '!'
		case r == 0x3000:
			r = ' '
		}
		switch {
		case !fold:
			return r
		case r < utf8.RuneSelf:
			return unicode.ToLower(r)
		}
		return unicode.ToLower(unicode.ToUpper(r))
	}, p)
}

// ErrBadPath is wrapped by the errors of CheckPath.
var ErrBadPath = errors.New("httpmatch: request path")

// CheckPath reports why the request path p, decoded (a URL's Path), cannot
// be compared as its upstream will read it (see Match), or nil when it can:
// it holds a control character (C0, DEL or C1: NUL, tab, CR, LF, ...),
// invalid UTF-8 (an overlong encoding, %C0%AF), an invisible format or
// separator character (Unicode categories Cf, Zl, Zp: zero-width space,
// direction marks, byte order mark), a "?" or "#" (which a decoded path
// holds only when they were sent encoded), or a "%" followed by two hex
// digits (an escape sent escaped again, %252e). A path without such
// characters costs one pass over its bytes and allocates nothing. The
// proxy answers such a request 400 before any route sees it; a Go service
// may do the same in front of its middleware.
func CheckPath(p string) error {
	for i := 0; i < len(p); {
		b := p[i]
		if b < utf8.RuneSelf {
			switch {
			case b < 0x20 || b == 0x7f:
				return fmt.Errorf("%w holds the control character %#02x", ErrBadPath, b)
			case b == '?' || b == '#':
				return fmt.Errorf("%w holds an encoded %q", ErrBadPath, b)
			case b == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]):
				return fmt.Errorf("%w holds an escape escaped twice (%%25%s)", ErrBadPath, p[i+1:i+3])
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(p[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return fmt.Errorf("%w is not valid UTF-8", ErrBadPath)
		case unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp):
			return fmt.Errorf("%w holds the invisible character %U", ErrBadPath, r)
		}
		i += size
	}
	return nil
}

func isHex(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F'
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

// extensionOf reports whether the clean path p is prefix with an extension
// added to its last name (/login.json for /login), or lies below such a
// path.
func extensionOf(p, prefix string) bool {
	return !strings.HasSuffix(prefix, "/") && len(p) > len(prefix) && p[len(prefix)] == '.' && strings.HasPrefix(p, prefix)
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
