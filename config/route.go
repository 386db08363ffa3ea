package config

import (
	"net"
	"slices"
	"strings"

	"github.com/floodgate-go/floodgate/internal/pathnet"
)

// Route returns the first route whose match selects a request to host
// (with or without a port), with method and URL path, or nil when none
// does (the request then passes unlimited). See Match.Matches.
func (p *Proxy) Route(host, method, urlPath string) *Route {
	for i := range p.Routes {
		if p.Routes[i].Match.Matches(host, method, urlPath) {
			return &p.Routes[i]
		}
	}
	return nil
}

// Matches reports whether m selects a request to host (with or without a
// port; compared without case), with method (compared exactly) and URL
// path (decoded, as in http.Request.URL.Path).
//
// The path is cleaned first (dot segments and doubled slashes removed, a
// trailing slash kept), because the upstream usually cleans it too: a
// client must not dodge the limits of /admin/ by asking for
// /public/../admin/.
func (m *Match) Matches(host, method, urlPath string) bool {
	if len(m.Methods) > 0 && !slices.Contains(m.Methods, method) {
		return false
	}
	if m.Host != "" && !matchHost(m.Host, host) {
		return false
	}
	p := pathnet.CleanPath(urlPath)
	switch {
	case m.Path != "":
		return matchPattern(m.Path, p)
	case len(m.PathPrefix) > 0:
		for _, pf := range m.PathPrefix {
			if pathnet.UnderPrefix(p, pf) {
				return true
			}
		}
		return false
	}
	return true
}

func matchHost(want, host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if suffix, ok := strings.CutPrefix(want, "*."); ok {
		return strings.HasSuffix(host, "."+suffix) && len(host) > len(suffix)+1
	}
	return host == want
}

// matchPattern matches a cleaned path against a pattern checked by
// checkPattern: literal segments match exactly, {name} one non-empty
// segment, and a final {name...} the rest of the path.
func matchPattern(pattern, p string) bool {
	ps := strings.Split(pattern[1:], "/")
	ss := strings.Split(p[1:], "/")
	for i, seg := range ps {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "...}") {
			return true // the rest, possibly empty
		}
		if i >= len(ss) {
			return false
		}
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			if ss[i] == "" {
				return false
			}
			continue
		}
		if seg != ss[i] {
			return false
		}
	}
	return len(ss) == len(ps)
}
