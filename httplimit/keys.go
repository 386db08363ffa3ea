package httplimit

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/floodgate-go/floodgate/clientip"
)

// KeyByIP keys requests by client address as res resolves it: the
// connection's peer unless res trusts the proxy in front, with IPv6 clients
// grouped by /64 (see package clientip). A nil res is the zero
// clientip.Config: the peer address, no header ever read, which is the only
// safe choice for a server that clients reach directly.
func KeyByIP(res *clientip.Resolver) KeyFunc { return res.Key }

// KeyConst keys every request by key: one limit shared by all clients, such
// as a global limit in front of a fragile backend.
func KeyConst(key string) KeyFunc { return func(*http.Request) string { return key } }

// KeyByUser keys authenticated requests by user and anonymous ones by
// address: "user:<id>" when userID returns a non-empty id, else "ip:" and
// the key of ip (KeyByIP(nil) when ip is nil), or "" when ip finds no key
// either, so that the rule keys the request by its client (Rule.NoKey). The
// tags keep a user whose id looks like an address apart from that address.
//
// userID reads an identity the request has proven, typically one an
// authentication middleware placed in the request's context (see
// FromContext), so the rate limiter must run after that middleware. A user
// id taken from an unverified header or cookie lets every client pick its
// own key.
func KeyByUser(userID func(r *http.Request) string, ip KeyFunc) KeyFunc {
	if ip == nil {
		ip = KeyByIP(nil)
	}
	return func(r *http.Request) string {
		if id := userID(r); id != "" {
			return "user:" + id
		}
		return fallback("ip:", ip(r))
	}
}

// FromContext returns a function that reads a request's context value for
// key as a string: a string as it is, an integer in decimal, a fmt.Stringer
// through String. Other values, and no value, read as "". It is meant for
// KeyByUser, with the key an authentication middleware stores the user
// under.
func FromContext(key any) func(r *http.Request) string {
	return func(r *http.Request) string {
		switch v := r.Context().Value(key).(type) {
		case string:
			return v
		case int:
			return strconv.Itoa(v)
		case int64:
			return strconv.FormatInt(v, 10)
		case uint64:
			return strconv.FormatUint(v, 10)
		case fmt.Stringer:
			return v.String()
		}
		return ""
	}
}

// KeyByHeader keys requests by the value of a header, such as an API key:
// "<name>:<value>" with the name in lower case, or, when the header is absent
// or empty, "ip:" and the key of ip (KeyByIP(nil) when ip is nil), or ""
// when ip finds no key either (see KeyByUser). Only the first line of the
// header is read, with surrounding spaces removed.
//
// The client writes the header, so a client that invents a new value per
// request gets a new key per request. Use it for values that are checked
// before the limiter runs (an authentication middleware that rejects unknown
// API keys), or for callers you trust; otherwise key by the verified
// identity with KeyByUser, or add a per-IP rule.
func KeyByHeader(name string, ip KeyFunc) KeyFunc {
	canon := http.CanonicalHeaderKey(name)
	tag := strings.ToLower(canon) + ":"
	if ip == nil {
		ip = KeyByIP(nil)
	}
	return func(r *http.Request) string {
		if v := r.Header[canon]; len(v) > 0 {
			if s := strings.TrimSpace(v[0]); s != "" {
				return tag + s
			}
		}
		return fallback("ip:", ip(r))
	}
}

// fallback returns a composed key's fallback key, tag and key, or "" when
// the fallback found no key either: the rule then keys the request by its
// client (Rule.NoKey), where tag alone would be one key that every such
// request shares.
func fallback(tag, key string) string {
	if key == "" {
		return ""
	}
	return tag + key
}

// KeyByRoute keys requests by method and route pattern, such as
// "GET /items/{id}": every item shares one key, whatever its id. Joined with
// a client key (JoinKeys) it limits each client per endpoint; alone, it
// limits each endpoint for all clients together.
//
// The pattern is http.Request.Pattern, which a ServeMux sets when it routes
// the request, so the middleware must wrap the routed handler
// (mux.Handle("GET /items/{id}", mw.Handler(h))). A middleware in front of
// the mux sees no pattern yet; pass that mux so KeyByRoute can ask it
// (mux.Handler). A request no route matches gets the route "unmatched", and
// methods outside RFC 9110 and PATCH are keyed as "OTHER", so that clients
// cannot mint keys by inventing paths or methods.
func KeyByRoute(mux *http.ServeMux) KeyFunc {
	return func(r *http.Request) string {
		p := r.Pattern
		if p == "" && mux != nil {
			_, p = mux.Handler(r)
		}
		// A pattern is "[METHOD ][HOST]/PATH"; the method comes from the
		// request, so that a GET pattern's HEAD requests have their own key.
		if i := strings.IndexAny(p, " \t"); i >= 0 {
			p = strings.TrimLeft(p[i:], " \t")
		}
		return RouteKey(r.Method, p)
	}
}

// RouteKey is the key KeyByRoute builds from a request's method and the
// pattern of the route that matched it, for routers other than ServeMux
// (chi, gin, echo): "GET /items/{id}". An empty pattern, a request no route
// matched, becomes "unmatched", and methods outside RFC 9110 and PATCH
// become "OTHER", so that clients cannot mint keys by inventing paths or
// methods.
func RouteKey(method, pattern string) string {
	if pattern == "" {
		pattern = "unmatched"
	}
	return methodKey(method) + " " + pattern
}

func methodKey(m string) string {
	switch m {
	case "", http.MethodGet:
		return http.MethodGet
	case http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// KeyByFormValue keys requests by a field of their URL-encoded form body,
// such as the login a sign-in form submits, trimmed and in lower case so
// that "Alice " and "alice" are one account. Requests without the field
// have no key (""): the rule keys them by their client (Rule.NoKey), so a
// form sent without the field is limited as its sender.
//
// It parses the body with http.Request.ParseForm, so the handler still finds
// the field in r.PostForm or r.FormValue but cannot read the body again. The
// body of a request that is not a URL-encoded form (JSON, multipart) is not
// read; write a KeyFunc that reads and restores it. ParseForm reads at most
// 10 MB; wrap the handler in http.MaxBytesHandler to read less.
//
// Join it with an address (JoinKeys) to limit guesses per account and
// client, or use it alone to limit guesses per account from anywhere.
func KeyByFormValue(field string) KeyFunc {
	return func(r *http.Request) string {
		if r.PostForm == nil {
			r.ParseForm() // a malformed body leaves PostForm empty: key ""
		}
		return strings.ToLower(strings.TrimSpace(r.PostForm.Get(field)))
	}
}

// JoinKeys keys requests by several keys together, such as client address
// and submitted login. The parts are joined with "|", with any "|" or "\" in
// a part escaped by a backslash, so that different parts never make the same
// key. A request any part finds no key for ("") has no key: the rule keys
// it by its client (Rule.NoKey), so that requests without a login are not
// one bucket with each other under the address or constant they share.
func JoinKeys(keys ...KeyFunc) KeyFunc {
	keys = append([]KeyFunc(nil), keys...)
	return func(r *http.Request) string {
		var buf [128]byte
		b := buf[:0]
		for i, k := range keys {
			if i > 0 {
				b = append(b, '|')
			}
			s := k(r)
			if s == "" {
				return ""
			}
			for j := 0; j < len(s); j++ {
				if c := s[j]; c == '|' || c == '\\' {
					b = append(b, '\\')
				}
				b = append(b, s[j])
			}
		}
		return string(b)
	}
}
