package pgproxy

import (
	"net/netip"

	"github.com/floodgate-go/floodgate"
)

// A Planned is one limit the proxy checks a client against: when
// (Connection: on connecting, else per query), under which scope, by which
// limiter and key.
type Planned struct {
	Connection bool
	Scope      string // global, user or ip
	Limiter    floodgate.Limiter
	Key        string
	MaxWait    bool // a query this scope denies may wait (Scope.MaxWait)
}

// Explain returns the limits in service that a client connecting as user
// from addr (the client's address, after any PROXY header) meets, in the
// order the proxy checks them: the connection limits, then the query
// scopes. It uses the keys the proxy uses and charges nothing.
func (p *Proxy) Explain(user string, addr netip.Addr) []Planned {
	l := p.limits.Load()
	ip := ipKey(addr)
	var out []Planned
	add := func(conn bool, s scopeID, lim floodgate.Limiter, wait bool) {
		if lim != nil {
			out = append(out, Planned{Connection: conn, Scope: s.String(), Limiter: lim, Key: scopeKey(s, user, ip), MaxWait: wait})
		}
	}
	add(true, scopeUser, l.Connections.PerUser, false)
	add(true, scopeIP, l.Connections.PerIP, false)
	add(false, scopeGlobal, l.Global.Limiter, l.Global.MaxWait > 0)
	add(false, scopeUser, l.PerUser.Limiter, l.PerUser.MaxWait > 0)
	add(false, scopeIP, l.PerIP.Limiter, l.PerIP.MaxWait > 0)
	return out
}
