package pgproxy

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestAdmission runs the decision part of the limits on its own, without
// a connection: all or nothing across the scopes, the refusing scope
// blamed and worded, the keys spelled as Explain spells them, and only
// the scopes with a limiter counted.
func TestAdmission(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	lim := func(name string, burst int64) floodgate.Limiter {
		l, err := floodgate.New(store, floodgate.Policy{Name: name, Limits: []floodgate.Limit{floodgate.PerHour(1).WithBurst(burst)}})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	global, user, ip := lim("g", 10), lim("u", 10), lim("i", 2)
	obs := &counts{}
	a := &admission{obs: obs, user: "alice", ipKey: ipKey(mustAddr("64:ff9b::203.0.113.7"))}
	if a.forQueries(&Limits{}) {
		t.Fatal("no limiter, yet forQueries says the queries are limited")
	}
	if !a.forQueries(&Limits{Global: Scope{Limiter: global}, PerUser: Scope{Limiter: user}, PerIP: Scope{Limiter: ip}}) {
		t.Fatal("forQueries with three limiters says nothing limits")
	}
	ctx := context.Background()
	for range 2 {
		if _, denied, err := a.allow(ctx); err != nil || denied != scopeNone {
			t.Fatalf("allow: %v, %v", denied, err)
		}
		a.countAllowed()
	}
	res, denied, err := a.allow(ctx)
	if err != nil || denied != scopeIP || res.Allowed {
		t.Fatalf("third query: %+v denied by %v, %v; want the ip scope", res, denied, err)
	}
	// All or nothing: the global and user scopes were refunded.
	for _, c := range []struct {
		l   floodgate.Limiter
		key string
	}{{global, GlobalKey}, {user, "alice"}, {ip, "203.0.113.7"}} {
		r, err := c.l.AllowN(ctx, c.key, 0)
		if err != nil || (c.l != ip && r.Remaining != 8) || (c.l == ip && r.Remaining != 0) {
			t.Errorf("%s: remaining %d, %v", c.l.Name(), r.Remaining, err)
		}
	}
	if e := a.rejection(scopeIP, res, false); !strings.Contains(e.Detail, "per-client-address") || e.Code != "53400" {
		t.Errorf("rejection: %+v", e)
	}
	if e := a.rejection(scopeUser, res, true); !strings.Contains(e.Detail, `for user "alice"`) || !strings.Contains(e.Detail, "could not be checked") {
		t.Errorf("rejection of a failed check: %+v", e)
	}
	for s := range numScopes {
		if got := obs.queries[s][Allowed].Load(); got != 2 {
			t.Errorf("%s: %d allowed counted, want 2", s, got)
		}
	}
	// A connection's decision has no global scope.
	if !a.forConnection(ConnLimits{PerUser: user}) || a.lims[scopeGlobal] != nil || a.lims[scopeIP] != nil {
		t.Errorf("forConnection: %v", a.lims)
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
