// Package pathnet holds the small rules about request paths and listen
// addresses that the configuration's checks and the listeners must agree
// on, written once.
package pathnet

import (
	"net"
	"net/netip"
	"path"
	"strings"
)

// CleanPath is p without dot segments and doubled slashes, keeping a
// trailing slash: what most upstreams serve for it, so that limits decide
// on the path that will be served (a client must not dodge the limits of
// /admin/ by asking for /public/../admin/).
func CleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// UnderPrefix reports whether p is prefix or lies under it: "/api" matches
// "/api" and "/api/x" but not "/apix"; a prefix ending in "/" matches
// everything below it.
func UnderPrefix(p, prefix string) bool {
	if !strings.HasPrefix(p, prefix) {
		return false
	}
	return strings.HasSuffix(prefix, "/") || len(p) == len(prefix) || p[len(prefix)] == '/'
}

// Loopback reports whether the listen address addr is on loopback only:
// localhost or a loopback IP, not an empty host or 0.0.0.0, which are every
// interface.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
