package pgproxy

import (
	"bufio"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/clientip"
)

// peerConn is a fakeConn with a peer address of the test's choosing.
type peerConn struct {
	fakeConn
	peer net.Addr
}

func (c *peerConn) RemoteAddr() net.Addr { return c.peer }

// TestClientAddr: the PROXY header is read from exactly the peers
// clientip.Prefixes trusts, and the per-IP key is clientip's key of the
// client's address.
func TestClientAddr(t *testing.T) {
	const header = "PROXY TCP4 192.0.2.7 10.0.0.1 51000 6432\r\n"
	tcp := func(ip, zone string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Zone: zone, Port: 5432} }
	for _, tc := range []struct {
		name    string
		trusted []string
		peer    net.Addr
		key     string // the per-IP key after the header, if read
	}{
		// A zoned link-local peer is in fe80::/10: clientip removes the
		// zone before comparing.
		{"zoned link-local, trusted", []string{"fe80::/10"}, tcp("fe80::1", "eth0"), "192.0.2.7"},
		{"zoned link-local, untrusted", []string{"2001:db8::/32"}, tcp("fe80::1", "eth0"), "fe80::/64"},
		// An IPv4 balancer reached over an IPv6 socket is matched as IPv4.
		{"IPv4-mapped peer", []string{"10.0.0.0/8"}, tcp("::ffff:10.1.2.3", ""), "192.0.2.7"},
		{"NAT64 peer", []string{"10.0.0.0/8"}, tcp("64:ff9b::10.1.2.3", ""), "192.0.2.7"},
		{"untrusted IPv4 peer", []string{"10.0.0.0/8"}, tcp("192.0.2.200", ""), "192.0.2.200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trusted, err := clientip.ParsePrefixes(tc.trusted)
			if err != nil {
				t.Fatal(err)
			}
			p, err := New(Config{Upstream: "127.0.0.1:1", ProxyProtocolFrom: trusted})
			if err != nil {
				t.Fatal(err)
			}
			nc := &peerConn{fakeConn: fakeConn{r: strings.NewReader(header)}, peer: tc.peer}
			c := newConn(p, nc)
			c.cr = bufio.NewReader(nc)
			if err := c.readClientAddr(); err != nil {
				t.Fatalf("readClientAddr: %v", err)
			}
			if c.adm.ipKey != tc.key {
				t.Errorf("per-IP key %q, want %q", c.adm.ipKey, tc.key)
			}
			rest, _ := c.cr.Peek(5)
			if read := string(rest) != "PROXY"; read != (tc.key == "192.0.2.7") {
				t.Errorf("header read: %v", read)
			}
		})
	}
}

// TestIPKeyIsClientIP: the proxy's per-IP key of an address is clientip's,
// the key of the listener's connection bound.
func TestIPKeyIsClientIP(t *testing.T) {
	for addr, want := range map[string]string{
		"64:ff9b::203.0.113.7":  "203.0.113.7",  // two NAT64 clients ...
		"64:ff9b::198.51.100.9": "198.51.100.9", // ... are two buckets
		"::203.0.113.7":         "203.0.113.7",  // IPv4-compatible
		"::ffff:192.0.2.1":      "192.0.2.1",
		"2001:db8::7":           "2001:db8::/64",
		"fe80::1%eth0":          "fe80::/64",
		"::1":                   "::/64",
	} {
		a := netip.MustParseAddr(addr)
		if got := ipKey(a); got != want || got != (*clientip.Resolver)(nil).AddrKey(a) {
			t.Errorf("ipKey(%s) = %q, want %q (clientip's)", addr, got, want)
		}
	}
	if got := ipKey(netip.Addr{}); got != clientip.UnknownKey {
		t.Errorf("no address: %q", got)
	}
}

// TestProxyProtocolFromRule: Config.ProxyProtocolFrom is held to clientip's
// rule of a trusted peer, whoever builds the Config.
func TestProxyProtocolFromRule(t *testing.T) {
	for _, s := range []string{"10.1.2.3/8", "0.0.0.0/0", "::/0"} {
		if _, err := New(Config{Upstream: "127.0.0.1:1", ProxyProtocolFrom: clientip.Prefixes{netip.MustParsePrefix(s)}}); err == nil {
			t.Errorf("%s accepted", s)
		}
	}
	// IPv4 written in IPv6 is read as IPv4, so an IPv4 balancer matches.
	p, err := New(Config{Upstream: "127.0.0.1:1", ProxyProtocolFrom: clientip.Prefixes{netip.MustParsePrefix("::ffff:10.0.0.0/104")}})
	if err != nil {
		t.Fatal(err)
	}
	if !p.trusted.Contains(netip.MustParseAddr("10.9.9.9")) {
		t.Errorf("::ffff:10.0.0.0/104 does not trust 10.9.9.9")
	}
}
