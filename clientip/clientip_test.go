package clientip

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// hdr builds a header from name/value pairs; a name given twice gets two
// lines, as when a request carries the header twice.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func mustNew(t testing.TB, cfg Config) *Resolver {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return r
}

var (
	behindLB    = Config{TrustedProxies: []string{"10.0.0.0/8", "2001:db8:ffff::/48"}}
	behindLBFwd = Config{TrustedProxies: []string{"10.0.0.0/8", "2001:db8:ffff::/48"}, Header: "Forwarded"}
	behindLBXRI = Config{TrustedProxies: []string{"10.0.0.0/8"}, Header: "X-Real-IP"}
	behindCF    = Config{TrustedProxies: []string{"173.245.48.0/20"}, Header: "CF-Connecting-IP"}
)

func TestResolver(t *testing.T) {
	long := strings.Repeat("1", 600)
	var manyFake []string
	for range 1000 {
		manyFake = append(manyFake, "10.9.9.9")
	}
	trusted := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = "10.0.0.2"
		}
		return strings.Join(s, ", ")
	}

	tests := []struct {
		name      string
		cfg       Config
		remote    string
		header    http.Header
		wantIP    string // "" for the zero Addr
		wantKey   string
		malformed uint64
	}{
		// The direct peer.
		{name: "ipv4 peer", remote: "203.0.113.7:4711", wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "ipv4 peer without port", remote: "203.0.113.7", wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "ipv6 peer keyed by /64", remote: "[2001:db8:1:2:3:4:5:6]:4711", wantIP: "2001:db8:1:2:3:4:5:6", wantKey: "2001:db8:1:2::/64"},
		{name: "ipv6 peer same /64 same key", remote: "[2001:db8:1:2:ffff::1]:1", wantIP: "2001:db8:1:2:ffff::1", wantKey: "2001:db8:1:2::/64"},
		{name: "ipv6 peer full address", cfg: Config{IPv6Prefix: 128}, remote: "[2001:db8::1]:4711", wantIP: "2001:db8::1", wantKey: "2001:db8::1"},
		{name: "ipv6 peer /48", cfg: Config{IPv6Prefix: 48}, remote: "[2001:db8:1:2::1]:4711", wantIP: "2001:db8:1:2::1", wantKey: "2001:db8:1::/48"},
		{name: "ipv4 peer /24", cfg: Config{IPv4Prefix: 24}, remote: "203.0.113.7:4711", wantIP: "203.0.113.7", wantKey: "203.0.113.0/24"},
		{name: "ipv4-mapped peer folded", remote: "[::ffff:203.0.113.7]:4711", wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "nat64 peer folded", remote: "[64:ff9b::203.0.113.7]:4711", wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "nat64 peer in hex folded", remote: "[64:FF9B::CB00:7107]:4711", wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "nat64 peer keyed by /24", cfg: Config{IPv4Prefix: 24}, remote: "[64:ff9b::203.0.113.7]:4711", wantIP: "203.0.113.7", wantKey: "203.0.113.0/24"},
		{name: "nat64 peer in 0.0.0.0/8 folded", remote: "[64:ff9b::1]:4711", wantIP: "0.0.0.1", wantKey: "0.0.0.1"},
		{name: "nat64 local-use prefix stays ipv6", remote: "[64:ff9b:1::203.0.113.7]:4711", wantIP: "64:ff9b:1::cb00:7107", wantKey: "64:ff9b:1::/64"},
		{name: "ipv4-compatible peer folded", remote: "[::203.0.113.7]:4711", wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "ipv4-compatible 1.0.0.0 folded", remote: "[::1.0.0.0]:4711", wantIP: "1.0.0.0", wantKey: "1.0.0.0"},
		{name: "loopback ::1 stays ipv6", cfg: Config{IPv6Prefix: 128}, remote: "[::1]:4711", wantIP: "::1", wantKey: "::1"},
		{name: "unspecified :: stays ipv6", cfg: Config{IPv6Prefix: 128}, remote: "[::]:4711", wantIP: "::", wantKey: "::"},
		{name: "::0.255.255.255 stays ipv6", cfg: Config{IPv6Prefix: 128}, remote: "[::0.255.255.255]:4711", wantIP: "::ff:ffff", wantKey: "::ff:ffff"},
		{name: "ipv6 peer zone stripped", cfg: Config{IPv6Prefix: 128}, remote: "[fe80::1%eth0]:4711", wantIP: "fe80::1", wantKey: "fe80::1"},
		{name: "ipv6 peer non-canonical", cfg: Config{IPv6Prefix: 128}, remote: "[2001:DB8:0::1]:4711", wantIP: "2001:db8::1", wantKey: "2001:db8::1"},
		{name: "unix socket peer", remote: "@", wantKey: UnknownKey},
		{name: "empty peer", remote: "", wantKey: UnknownKey},
		{name: "garbage peer", remote: "not an address", wantKey: UnknownKey},
		{name: "peer ipv4 in brackets", remote: "[203.0.113.7]:80", wantKey: UnknownKey},
		{name: "zero config ignores headers even from private peers", remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7", "Forwarded", "for=203.0.113.7", "X-Real-IP", "203.0.113.7"),
			wantIP: "10.0.0.1", wantKey: "10.0.0.1"},

		// Spoofing by clients that are not trusted proxies.
		{name: "untrusted peer xff ignored", cfg: behindLB, remote: "198.51.100.9:1",
			header: hdr("X-Forwarded-For", "203.0.113.7"), wantIP: "198.51.100.9", wantKey: "198.51.100.9"},
		{name: "untrusted peer xff with trusted entries ignored", cfg: behindLB, remote: "198.51.100.9:1",
			header: hdr("X-Forwarded-For", "203.0.113.7, 10.0.0.1"), wantIP: "198.51.100.9", wantKey: "198.51.100.9"},
		{name: "untrusted peer forwarded ignored", cfg: behindLBFwd, remote: "198.51.100.9:1",
			header: hdr("Forwarded", "for=203.0.113.7"), wantIP: "198.51.100.9", wantKey: "198.51.100.9"},
		{name: "untrusted peer x-real-ip ignored", cfg: behindLBXRI, remote: "198.51.100.9:1",
			header: hdr("X-Real-IP", "203.0.113.7"), wantIP: "198.51.100.9", wantKey: "198.51.100.9"},
		{name: "untrusted peer cf-connecting-ip ignored", cfg: behindCF, remote: "198.51.100.9:1",
			header: hdr("CF-Connecting-IP", "203.0.113.7"), wantIP: "198.51.100.9", wantKey: "198.51.100.9"},
		{name: "untrusted peer garbage not counted", cfg: behindLB, remote: "198.51.100.9:1",
			header: hdr("X-Forwarded-For", "garbage"), wantIP: "198.51.100.9", wantKey: "198.51.100.9"},
		{name: "untrusted unix peer with hops and cidrs", cfg: Config{TrustedProxies: []string{"10.0.0.0/8"}, TrustedHops: 2}, remote: "@",
			header: hdr("X-Forwarded-For", "203.0.113.7, 198.51.100.1"), wantKey: UnknownKey},
		{name: "untrusted peer with hops and cidrs", cfg: Config{TrustedProxies: []string{"10.0.0.0/8"}, TrustedHops: 2}, remote: "198.51.100.9:1",
			header: hdr("X-Forwarded-For", "203.0.113.7, 198.51.100.1"), wantIP: "198.51.100.9", wantKey: "198.51.100.9"},

		// Spoofing through a trusted proxy: the right-most untrusted entry wins.
		{name: "xff single entry", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff prepended fakes", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "1.1.1.1, 6.6.6.6, 203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff prepended trusted-looking fakes", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "10.0.0.5, 10.0.0.6, 203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff prepended garbage never read", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "<script>, ::::, "+long+", 203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff thousands of prepended entries", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", strings.Join(manyFake, ",")+", 203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff multiple lines joined", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "203.0.113.7, 10.0.0.2"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff multiple lines walked across", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "6.6.6.6, 203.0.113.7", "X-Forwarded-For", "10.0.0.3", "X-Forwarded-For", "10.0.0.2"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff spoofed extra line from client comes first", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff trusted chain", cfg: behindLB, remote: "10.3.0.1:80",
			header: hdr("X-Forwarded-For", "6.6.6.6, 203.0.113.7, 10.1.0.1, 10.2.0.1"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff trusted ipv6 chain", cfg: behindLB, remote: "[2001:db8:ffff::1]:80",
			header: hdr("X-Forwarded-For", "2001:db8:1:2::99, 2001:db8:ffff:1::1"), wantIP: "2001:db8:1:2::99", wantKey: "2001:db8:1:2::/64"},
		{name: "xff every hop trusted takes left-most", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "10.0.0.9, 10.0.0.8"), wantIP: "10.0.0.9", wantKey: "10.0.0.9"},
		{name: "xff exactly MaxHops trusted takes left-most", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "10.0.0.9, "+trusted(MaxHops-1)), wantIP: "10.0.0.9", wantKey: "10.0.0.9"},
		{name: "xff trusted single address", cfg: Config{TrustedProxies: []string{"192.0.2.1"}}, remote: "192.0.2.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7, 192.0.2.1"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff header name case-insensitive", cfg: Config{TrustedProxies: []string{"10.0.0.0/8"}, Header: "x-forwarded-for"}, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff ipv6 client grouped by /64", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "2001:db8:1:2:aaaa::99"), wantIP: "2001:db8:1:2:aaaa::99", wantKey: "2001:db8:1:2::/64"},
		{name: "xff ipv4-mapped client folded", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "::ffff:203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff ipv4-mapped proxy is trusted", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7, ::ffff:10.0.0.2"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff nat64 client folded", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "64:ff9b::203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff ipv4-compatible client folded", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "[::203.0.113.7]:4711"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff nat64 proxy is trusted", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7, 64:ff9b::10.0.0.2"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff ipv4-compatible proxy is trusted", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7, ::10.0.0.2"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff loopback ::1 client stays ipv6", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "::1"), wantIP: "::1", wantKey: "::/64"},
		{name: "forwarded nat64 client folded", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for="[64:ff9b::203.0.113.7]:4711"`), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "single header nat64 client folded", cfg: Config{TrustedProxies: []string{"10.0.0.0/8"}, Header: "X-Real-IP"}, remote: "10.0.0.1:80",
			header: hdr("X-Real-IP", "64:ff9b::203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff zone stripped", cfg: Config{TrustedProxies: []string{"10.0.0.0/8"}, IPv6Prefix: 128}, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "fe80::1%eth0"), wantIP: "fe80::1", wantKey: "fe80::1"},
		{name: "xff zone with space stripped", cfg: Config{TrustedProxies: []string{"10.0.0.0/8"}}, remote: "[::ffff:10.0.0.0]",
			header: hdr("X-Forwarded-For", "0", "X-Forwarded-For", "::% 0"), wantIP: "::", wantKey: "::/64"},
		{name: "xff ipv4 port stripped", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7:4711"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff ipv6 brackets and port stripped", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "[2001:db8::1]:4711"), wantIP: "2001:db8::1", wantKey: "2001:db8::/64"},
		{name: "xff ipv6 brackets stripped", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "[2001:db8::1]"), wantIP: "2001:db8::1", wantKey: "2001:db8::/64"},
		{name: "xff spaces and tabs", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", " 6.6.6.6 ,\t203.0.113.7\t, 10.0.0.2 "), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff empty elements skipped", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7,, ,"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff empty line skipped", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7", "X-Forwarded-For", ""), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "xff client keyed by /24", cfg: Config{TrustedProxies: []string{"10.0.0.0/8"}, IPv4Prefix: 24}, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.0/24"},
		{name: "xff absent falls back uncounted", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Real-IP", "203.0.113.7"), wantIP: "10.0.0.1", wantKey: "10.0.0.1"},
		{name: "ipv4-mapped peer trusted by ipv4 prefix", cfg: behindLB, remote: "[::ffff:10.0.0.1]:80",
			header: hdr("X-Forwarded-For", "203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "ipv4-mapped trusted prefix", cfg: Config{TrustedProxies: []string{"::ffff:10.0.0.0/104"}}, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "nat64 peer trusted by ipv4 prefix", cfg: behindLB, remote: "[64:ff9b::10.0.0.1]:80",
			header: hdr("X-Forwarded-For", "203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "nat64 trusted prefix", cfg: Config{TrustedProxies: []string{"64:ff9b::10.0.0.0/104"}}, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "ipv4-compatible trusted prefix", cfg: Config{TrustedProxies: []string{"::10.0.0.0/104"}}, remote: "[64:ff9b::10.0.0.1]:80",
			header: hdr("X-Forwarded-For", "203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "short nat64 entry matches no folded peer", cfg: Config{TrustedProxies: []string{"64:ff9b::/64"}}, remote: "[64:ff9b::10.0.0.1]:80",
			header: hdr("X-Forwarded-For", "203.0.113.7"), wantIP: "10.0.0.1", wantKey: "10.0.0.1"},
		{name: "trusted ::1 is the ipv6 loopback", cfg: Config{TrustedProxies: []string{"::1"}}, remote: "[::1]:80",
			header: hdr("X-Forwarded-For", "203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "trusted ::1 is not 0.0.0.1", cfg: Config{TrustedProxies: []string{"::1"}}, remote: "0.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7"), wantIP: "0.0.0.1", wantKey: "0.0.0.1"},

		// Trust by position.
		{name: "hops 1 takes right-most", cfg: Config{TrustedHops: 1}, remote: "198.51.100.1:80",
			header: hdr("X-Forwarded-For", "6.6.6.6, 203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "hops 2 skips one entry whatever it is", cfg: Config{TrustedHops: 2}, remote: "198.51.100.1:80",
			header: hdr("X-Forwarded-For", "6.6.6.6, 203.0.113.7, 198.51.100.2"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "hops 2 and cidr behind cdn", cfg: Config{TrustedProxies: []string{"10.0.0.0/8"}, TrustedHops: 2}, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "6.6.6.6, 203.0.113.7, 198.51.100.2"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "hops 2 then cidr entries skipped too", cfg: Config{TrustedProxies: []string{"10.0.0.0/8"}, TrustedHops: 2}, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7, 10.0.0.3, 198.51.100.2"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "hops longer than chain takes left-most", cfg: Config{TrustedHops: 3}, remote: "198.51.100.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "hops trust unix socket peer", cfg: Config{TrustedHops: 1}, remote: "@",
			header: hdr("X-Forwarded-For", "203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "hops unix socket peer without header", cfg: Config{TrustedHops: 1}, remote: "@", wantKey: UnknownKey},
		{name: "hops unix socket peer garbage", cfg: Config{TrustedHops: 1}, remote: "@",
			header: hdr("X-Forwarded-For", "garbage"), wantKey: UnknownKey, malformed: 1},
		{name: "hops forwarded", cfg: Config{TrustedHops: 2, Header: "Forwarded"}, remote: "198.51.100.1:80",
			header: hdr("Forwarded", "for=6.6.6.6, for=203.0.113.7, for=198.51.100.2"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},

		// Malformed headers from trusted peers fall back to the peer.
		{name: "xff garbage right-most", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7, garbage"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff garbage behind trusted entry", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "garbage, 10.0.0.2"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff empty", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", ""), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff only commas", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", " , ,"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff unknown", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "unknown"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff hostname", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "example.com"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff more than MaxHops trusted", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7, "+trusted(MaxHops)), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff huge right-most element", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7, "+long), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff huge single element", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", strings.Repeat(" ", 1<<20)+"203.0.113.7"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff port out of range", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7:65536"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff empty port", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7:"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff ipv4 leading zero", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.07"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff ipv4 in brackets", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "[203.0.113.7]"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff ipv6 unclosed bracket", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "[2001:db8::1"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff ipv6 junk after bracket", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "[2001:db8::1]x"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff cidr", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.0/24"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff ipv4 with zone", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7%eth0"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "xff quoted", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", `"203.0.113.7"`), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},

		// RFC 7239 Forwarded.
		{name: "forwarded basic", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", "for=203.0.113.7;proto=https;by=10.0.0.1"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "forwarded parameter names case-insensitive", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", "Proto=https;FOR=203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "forwarded quoted ipv6 with port", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for="[2001:db8:cafe::17]:4711"`), wantIP: "2001:db8:cafe::17", wantKey: "2001:db8:cafe::/64"},
		{name: "forwarded quoted ipv4 with port", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for="203.0.113.7:4711"`), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "forwarded obfuscated port", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for="[2001:db8::1]:_p1"`), wantIP: "2001:db8::1", wantKey: "2001:db8::/64"},
		{name: "forwarded escaped quoted string", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for="\[2001:db8::1\]"`), wantIP: "2001:db8::1", wantKey: "2001:db8::/64"},
		{name: "forwarded unquoted ipv6 accepted", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for=[2001:db8::1]`), wantIP: "2001:db8::1", wantKey: "2001:db8::/64"},
		{name: "forwarded spaces around semicolons", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `proto=https ; for=203.0.113.7 ;`), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "forwarded prepended fakes", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", "for=6.6.6.6, for=10.0.0.5, for=203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "forwarded trusted chain", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for=203.0.113.7;proto=https, for="[2001:db8:ffff::2]";host="a,b;c"`), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "forwarded multiple lines", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", "for=6.6.6.6", "Forwarded", "for=203.0.113.7", "Forwarded", "for=10.0.0.2"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "forwarded unterminated quote prepended", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for="6.6.6.6, for=203.0.113.7`), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "forwarded unterminated quote prepended before quoted", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for="6.6.6.6, for="203.0.113.7"`), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "forwarded escaped quote prepended", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for="\", for=6.6.6.6", for="203.0.113.7"`), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "forwarded every hop trusted", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", "for=10.0.0.9, for=10.0.0.8"), wantIP: "10.0.0.9", wantKey: "10.0.0.9"},
		{name: "forwarded unknown", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", "for=unknown"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "forwarded obfuscated identifier", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", "for=_hidden"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "forwarded unknown behind trusted", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", "for=unknown, for=10.0.0.2"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "forwarded without for", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", "proto=https;by=10.0.0.1"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "forwarded duplicate for", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", "for=6.6.6.6;for=203.0.113.7"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "forwarded unterminated quote right-most", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for="203.0.113.7`), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "forwarded stray quote right-most", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for=203.0.113.7"`), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "forwarded empty value", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for=`), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "forwarded empty quoted value", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for=""`), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "forwarded missing equals", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for 203.0.113.7`), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "forwarded junk after quoted value", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for="203.0.113.7"x`), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "forwarded empty", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", ""), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "forwarded huge element", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for=203.0.113.7;host="`+long+`"`), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "forwarded huge quoted run", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `"`+strings.Repeat(`\\`, 1<<16)+`"`), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},

		// Single-address headers.
		{name: "x-real-ip", cfg: behindLBXRI, remote: "10.0.0.1:80",
			header: hdr("X-Real-IP", "203.0.113.7"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
		{name: "x-real-ip ipv6 with port", cfg: behindLBXRI, remote: "10.0.0.1:80",
			header: hdr("X-Real-IP", "[2001:db8::1]:4711"), wantIP: "2001:db8::1", wantKey: "2001:db8::/64"},
		{name: "x-real-ip taken even when trusted", cfg: behindLBXRI, remote: "10.0.0.1:80",
			header: hdr("X-Real-IP", "10.0.0.7"), wantIP: "10.0.0.7", wantKey: "10.0.0.7"},
		{name: "x-real-ip absent", cfg: behindLBXRI, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "203.0.113.7"), wantIP: "10.0.0.1", wantKey: "10.0.0.1"},
		{name: "x-real-ip empty", cfg: behindLBXRI, remote: "10.0.0.1:80",
			header: hdr("X-Real-IP", ""), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "x-real-ip list", cfg: behindLBXRI, remote: "10.0.0.1:80",
			header: hdr("X-Real-IP", "6.6.6.6, 203.0.113.7"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "x-real-ip two lines", cfg: behindLBXRI, remote: "10.0.0.1:80",
			header: hdr("X-Real-IP", "6.6.6.6", "X-Real-IP", "203.0.113.7"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "x-real-ip garbage", cfg: behindLBXRI, remote: "10.0.0.1:80",
			header: hdr("X-Real-IP", "garbage"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "x-real-ip huge", cfg: behindLBXRI, remote: "10.0.0.1:80",
			header: hdr("X-Real-IP", strings.Repeat(" ", 1<<20)+"203.0.113.7"), wantIP: "10.0.0.1", wantKey: "10.0.0.1", malformed: 1},
		{name: "cf-connecting-ip", cfg: behindCF, remote: "173.245.48.1:80",
			header: hdr("CF-Connecting-IP", "203.0.113.7", "X-Forwarded-For", "6.6.6.6"), wantIP: "203.0.113.7", wantKey: "203.0.113.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustNew(t, tt.cfg)
			req := &http.Request{RemoteAddr: tt.remote, Header: tt.header}
			if req.Header == nil {
				req.Header = http.Header{}
			}
			var want netip.Addr
			if tt.wantIP != "" {
				want = netip.MustParseAddr(tt.wantIP)
			}
			if got := r.ClientIP(req); got != want {
				t.Errorf("ClientIP = %v, want %v", got, want)
			}
			if got := r.Key(req); got != tt.wantKey {
				t.Errorf("Key = %q, want %q", got, tt.wantKey)
			}
			// ClientIP and Key each resolved once.
			if got := r.Malformed(); got != 2*tt.malformed {
				t.Errorf("Malformed = %d, want %d", got, 2*tt.malformed)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error
	}{
		{name: "garbage proxy", cfg: Config{TrustedProxies: []string{"10.0.0.0/8", "proxy.internal"}},
			want: []string{`trusted proxy "proxy.internal"`, "use a form such as"}},
		{name: "bad prefix", cfg: Config{TrustedProxies: []string{"10.0.0.0/33"}},
			want: []string{`trusted proxy "10.0.0.0/33"`, "not a CIDR prefix"}},
		{name: "host bits set", cfg: Config{TrustedProxies: []string{"10.1.2.3/8"}},
			want: []string{`trusted proxy "10.1.2.3/8"`, "use 10.0.0.0/8"}},
		{name: "zone", cfg: Config{TrustedProxies: []string{"fe80::1%eth0"}},
			want: []string{`trusted proxy "fe80::1%eth0"`, `remove "%eth0"`}},
		{name: "empty proxy", cfg: Config{TrustedProxies: []string{""}},
			want: []string{`trusted proxy ""`}},
		{name: "negative hops", cfg: Config{TrustedHops: -1},
			want: []string{"TrustedHops is -1; use a value from 0 to 32"}},
		{name: "too many hops", cfg: Config{TrustedHops: MaxHops + 1},
			want: []string{"TrustedHops is 33"}},
		{name: "ipv4 prefix", cfg: Config{IPv4Prefix: 33},
			want: []string{"IPv4Prefix is 33; use a length from 1 to 32"}},
		{name: "negative ipv6 prefix", cfg: Config{IPv6Prefix: -1},
			want: []string{"IPv6Prefix is -1; use a length from 1 to 128"}},
		{name: "ipv6 prefix", cfg: Config{IPv6Prefix: 129},
			want: []string{"IPv6Prefix is 129"}},
		{name: "bad header name", cfg: Config{TrustedHops: 1, Header: "X Forwarded For"},
			want: []string{`header "X Forwarded For" is not a valid header field name`}},
		{name: "header never read", cfg: Config{Header: "X-Real-IP"},
			want: []string{`header "X-Real-IP" would never be read; set TrustedProxies or TrustedHops`}},
		{name: "ipv6 and ipv4-compatible mixed", cfg: Config{TrustedProxies: []string{"::/96"}},
			want: []string{`trusted proxy "::/96"`, "holds both IPv6 addresses (::/104) and IPv4-compatible ones", "list ::/104"}},
		{name: "ipv6 and ipv4-compatible mixed /103", cfg: Config{TrustedProxies: []string{"::/103"}},
			want: []string{`trusted proxy "::/103"`, "holds both"}},
		{name: "all problems reported", cfg: Config{TrustedProxies: []string{"a", "b"}, TrustedHops: -1, IPv6Prefix: 200},
			want: []string{`"a"`, `"b"`, "TrustedHops", "IPv6Prefix"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.cfg)
			if err == nil {
				t.Fatalf("New = %v, nil; want an error", r)
			}
			if r != nil {
				t.Errorf("New returned a Resolver with its error")
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %q does not wrap ErrInvalidConfig", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "clientip: invalid config: ") {
					t.Errorf("error line %q does not start with the package prefix", line)
				}
			}
		})
	}
}

func TestNewAccepts(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{IPv4Prefix: 32, IPv6Prefix: 128},
		{IPv4Prefix: 1, IPv6Prefix: 1},
		{TrustedProxies: []string{"10.0.0.0/8", " 192.0.2.1 ", "2001:db8::/32", "::1", "::ffff:10.0.0.0/104"}},
		{TrustedProxies: []string{"64:ff9b::10.0.0.0/104", "64:ff9b::/64", "::/104", "::", "::10.0.0.0/104", "::128.0.0.0/97"}},
		{TrustedHops: MaxHops},
		{TrustedHops: 1, Header: "forwarded"},
		{TrustedProxies: []string{"10.0.0.0/8"}, Header: "Fly-Client-IP"},
	} {
		if _, err := New(cfg); err != nil {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
}

func TestNilResolver(t *testing.T) {
	var r *Resolver
	req := &http.Request{RemoteAddr: "[2001:db8::1]:80", Header: hdr("X-Forwarded-For", "203.0.113.7")}
	if got, want := r.Key(req), "2001:db8::/64"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	if got, want := r.ClientIP(req), netip.MustParseAddr("2001:db8::1"); got != want {
		t.Errorf("ClientIP = %v, want %v", got, want)
	}
	if got, want := r.AddrKey(netip.MustParseAddr("::ffff:192.0.2.1")), "192.0.2.1"; got != want {
		t.Errorf("AddrKey = %q, want %q", got, want)
	}
	if got := r.Malformed(); got != 0 {
		t.Errorf("Malformed = %d, want 0", got)
	}
}

func TestAddrKey(t *testing.T) {
	r := mustNew(t, Config{IPv4Prefix: 24})
	tests := []struct {
		name string
		addr netip.Addr
		want string
	}{
		{"ipv4", netip.MustParseAddr("192.0.2.77"), "192.0.2.0/24"},
		{"ipv4-mapped", netip.MustParseAddr("::ffff:192.0.2.77"), "192.0.2.0/24"},
		{"nat64", netip.MustParseAddr("64:ff9b::192.0.2.77"), "192.0.2.0/24"},
		{"nat64 with zone", netip.MustParseAddr("64:ff9b::192.0.2.77%eth0"), "192.0.2.0/24"},
		{"ipv4-compatible", netip.MustParseAddr("::192.0.2.77"), "192.0.2.0/24"},
		{"loopback", netip.MustParseAddr("::1"), "::/64"},
		{"unspecified", netip.MustParseAddr("::"), "::/64"},
		{"ipv6", netip.MustParseAddr("2001:db8:1:2:3::4"), "2001:db8:1:2::/64"},
		{"zone", netip.MustParseAddr("fe80::1%eth0"), "fe80::/64"},
		{"invalid", netip.Addr{}, UnknownKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.AddrKey(tt.addr); got != tt.want {
				t.Errorf("AddrKey(%v) = %q, want %q", tt.addr, got, tt.want)
			}
		})
	}
}

// TestTrustedPrefixFolding: a trusted entry of IPv4 addresses written in
// IPv6 is read as the IPv4 prefix those addresses fold to, since a folded
// address could never match the IPv6 form.
func TestTrustedPrefixFolding(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
		{"64:ff9b::10.0.0.0/104", "10.0.0.0/8"},
		{"64:ff9b::192.0.2.1", "192.0.2.1/32"},
		{"64:ff9b::/64", "64:ff9b::/64"},
		{"64:ff9b:1::/48", "64:ff9b:1::/48"},
		{"::10.0.0.0/104", "10.0.0.0/8"},
		{"::192.0.2.1", "192.0.2.1/32"},
		{"::128.0.0.0/97", "128.0.0.0/1"},
		{"::1", "::1/128"},
		{"::", "::/128"},
		{"::/104", "::/104"},
		{"::/64", "::/64"},
		{"2001:db8::/32", "2001:db8::/32"},
	} {
		p, err := ParsePrefix(tt.in)
		if err != nil || p.String() != tt.want {
			t.Errorf("ParsePrefix(%q) = %v, %v; want %s", tt.in, p, err, tt.want)
		}
	}
}

// TestKeysDoNotAlias checks that a key never holds on to the request's
// memory beyond RemoteAddr: keys are kept by limiters for as long as the
// client is active, and a header can be a megabyte.
func TestKeysDoNotAlias(t *testing.T) {
	r := mustNew(t, Config{TrustedProxies: []string{"10.0.0.0/8"}})
	line := strings.Repeat("x", 1000) + ", 203.0.113.7"
	req := &http.Request{RemoteAddr: "10.0.0.1:80", Header: hdr("X-Forwarded-For", line)}
	key := r.Key(req)
	if key != "203.0.113.7" {
		t.Fatalf("Key = %q", key)
	}
	start := uintptr(unsafe.Pointer(unsafe.StringData(line)))
	p := uintptr(unsafe.Pointer(unsafe.StringData(key)))
	if p >= start && p < start+uintptr(len(line)) {
		t.Errorf("key %q points into the header", key)
	}
}

func TestConcurrentMalformedCount(t *testing.T) {
	r := mustNew(t, behindLB)
	const workers, per = 8, 500
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			good := &http.Request{RemoteAddr: "10.0.0.1:80", Header: hdr("X-Forwarded-For", "203.0.113.7")}
			bad := &http.Request{RemoteAddr: "10.0.0.1:80", Header: hdr("X-Forwarded-For", "garbage")}
			for range per {
				if k := r.Key(good); k != "203.0.113.7" {
					t.Errorf("Key = %q", k)
					return
				}
				if k := r.Key(bad); k != "10.0.0.1" {
					t.Errorf("Key = %q", k)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := r.Malformed(); got != workers*per {
		t.Errorf("Malformed = %d, want %d", got, workers*per)
	}
}

// TestEmbeddedIPv4DistinctKeys: IPv4 clients that reach an IPv6 listener
// through a NAT64/SIIT translator, or are written IPv4-compatible, are as
// many clients as their IPv4 addresses, not one /64.
func TestEmbeddedIPv4DistinctKeys(t *testing.T) {
	for _, pair := range [][2]string{
		{"64:ff9b::192.0.2.1", "64:ff9b::198.51.100.2"},
		{"::192.0.2.1", "::198.51.100.2"},
	} {
		var zero *Resolver
		k0 := zero.Key(&http.Request{RemoteAddr: "[" + pair[0] + "]:4711"})
		k1 := zero.Key(&http.Request{RemoteAddr: "[" + pair[1] + "]:4711"})
		if k0 == k1 {
			t.Errorf("clients %s and %s share the key %q", pair[0], pair[1], k0)
		}
	}
}

// TestParsePrefixRefusesEverything: a trusted-peer entry that holds every
// address (written plainly or as IPv4 in IPv6, which folds to IPv4) would
// let any client choose its key; it is refused, naming the way to say it
// on purpose.
func TestParsePrefixRefusesEverything(t *testing.T) {
	for _, s := range []string{"0.0.0.0/0", "::/0", "::ffff:0:0/96", "64:ff9b::/96"} {
		if _, err := ParsePrefix(s); err == nil || !strings.Contains(err.Error(), "TrustedHops") {
			t.Errorf("%s: %v, want it refused", s, err)
		}
		if _, err := New(Config{TrustedProxies: []string{s}}); err == nil {
			t.Errorf("clientip.New with %s: accepted", s)
		}
	}
	for _, s := range []string{"10.0.0.0/8", "::ffff:10.0.0.0/104", "64:ff9b::10.0.0.0/104", "2001:db8::/32", "192.0.2.1"} {
		if _, err := ParsePrefix(s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
}
