// Package webguard holds the checks that keep the daemon's own HTTP APIs
// (the admin listener, the check API) from being used by someone else's
// web page: a bearer token compared in constant time, a Host allow-list
// against DNS rebinding, and a same-origin rule against cross-site requests
// a browser sends without asking (a form POST, an img tag).
package webguard

import (
	"crypto/subtle"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
)

// Bearer reports whether r carries "Authorization: Bearer token". An empty
// token is never matched: callers decide what no token means.
func Bearer(r *http.Request, token string) bool {
	return BearerValue(r.Header.Get("Authorization"), token)
}

// BearerValue reports whether the value of an Authorization field (an HTTP
// header, gRPC metadata) is "Bearer token", comparing in constant time. An
// empty token is never matched.
func BearerValue(authorization, token string) bool {
	got, ok := strings.CutPrefix(authorization, "Bearer ")
	return ok && token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// HostAllowed reports whether r's Host names this server: an IP address,
// localhost, or one of allowed (names compared without case, ports
// ignored). A page on attacker.example whose name the attacker points at
// 127.0.0.1 (DNS rebinding) sends Host: attacker.example and is refused.
func HostAllowed(r *http.Request, allowed []string) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if host == "" {
		return false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	return slices.ContainsFunc(allowed, func(a string) bool { return strings.EqualFold(a, host) })
}

// SameOrigin reports whether r is not a cross-site request: it has no
// Origin header (a command-line client, a server), or its Origin's host is
// the request's Host (the status page calling its own listener).
func SameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// WriteJSON answers status with v as JSON, never cached: the operator APIs'
// answers describe the moment they were asked. A value that cannot be
// encoded is a 500 with an error member.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
