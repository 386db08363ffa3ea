package httpmatch

import (
	"net/http"
	"strings"
)

// PathPrefix matches requests whose URL path is one of prefixes or lies
// below one: "/auth" (or "/auth/") matches "/auth" and "/auth/login", not
// "/authors". Paths are compared as Match says, so that no spelling an
// upstream serves as the same path dodges the prefix: clean ("//", ".."),
// without case (/AUTH), path parameters (/auth;x) or trailing dots and
// spaces (/auth.), and with an extension as a boundary (/auth.json). A
// prefix without a leading slash gets one. It is Match{PathPrefix: prefixes}.
func PathPrefix(prefixes ...string) func(r *http.Request) bool {
	ps := make([]string, len(prefixes))
	for i, p := range prefixes {
		if !strings.HasPrefix(p, "/") {
			p = "/" + p
		}
		ps[i] = p
	}
	return mustMatch(Match{PathPrefix: ps})
}

// Methods matches requests whose method is one of methods (upper case; a
// method given in lower case is upper-cased). It is Match{Methods: methods}:
// a name that is not a method token matches nothing.
func Methods(methods ...string) func(r *http.Request) bool {
	return mustMatch(Match{Methods: methods})
}

// mustMatch is the match function of m, or one that matches nothing when m
// does not compile (a method name that is no token).
func mustMatch(m Match) func(r *http.Request) bool {
	c, err := m.Compile()
	if err != nil {
		return func(*http.Request) bool { return false }
	}
	return c.Match
}

// All matches requests that every one of matches matches.
func All(matches ...func(r *http.Request) bool) func(r *http.Request) bool {
	ms := append([]func(*http.Request) bool(nil), matches...)
	return func(r *http.Request) bool {
		for _, m := range ms {
			if !m(r) {
				return false
			}
		}
		return true
	}
}
