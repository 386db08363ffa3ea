package pgproxy_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/pgproxy"
)

// TestExplain: Explain lists the limits a client meets in the order the
// proxy checks them, with the keys it charges: the connection limits, then
// global, per user and per address (IPv6 by /64).
func TestExplain(t *testing.T) {
	lim := func(name string) floodgate.Limiter {
		l, _ := memLimiter(t, floodgate.Policy{Name: name, Limits: []floodgate.Limit{floodgate.PerSecond(1)}})
		return l
	}
	p, err := pgproxy.New(pgproxy.Config{Upstream: "127.0.0.1:1", Limits: pgproxy.Limits{
		Global:      pgproxy.Scope{Limiter: lim("g")},
		PerIP:       pgproxy.Scope{Limiter: lim("ip"), MaxWait: time.Second},
		Connections: pgproxy.ConnLimits{PerUser: lim("cu")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := p.Explain("app", netip.MustParseAddr("2001:db8::7"))
	want := []pgproxy.Planned{
		{Connection: true, Scope: "user", Key: "app"},
		{Scope: "global", Key: pgproxy.GlobalKey},
		{Scope: "ip", Key: "2001:db8::/64", MaxWait: true},
	}
	names := []string{"cu", "g", "ip"}
	if len(got) != len(want) {
		t.Fatalf("%+v", got)
	}
	for i := range want {
		g := got[i]
		if g.Limiter == nil || g.Limiter.Name() != names[i] {
			t.Errorf("%d: limiter %v, want %s", i, g.Limiter, names[i])
		}
		g.Limiter = nil
		if g != want[i] {
			t.Errorf("%d: %+v, want %+v", i, g, want[i])
		}
	}
	if got := p.Explain("app", netip.MustParseAddr("::ffff:192.0.2.1")); got[2].Key != "192.0.2.1" {
		t.Errorf("an IPv4-mapped client: %q", got[2].Key)
	}
}
