package clientip

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

var fuzzTrusted = []string{"10.0.0.0/8", "2001:db8:ffff::/48", "127.0.0.1"}

// fuzzConfigs are the configurations FuzzResolver picks from. header is the
// canonical name of the header the configuration reads, if any.
var fuzzConfigs = []struct {
	cfg    Config
	header string
}{
	{Config{}, ""},
	{Config{TrustedProxies: fuzzTrusted}, "X-Forwarded-For"},
	{Config{TrustedProxies: fuzzTrusted, Header: "Forwarded"}, "Forwarded"},
	{Config{TrustedProxies: fuzzTrusted, Header: "X-Real-IP"}, "X-Real-Ip"},
	{Config{TrustedHops: 2}, "X-Forwarded-For"},
	{Config{TrustedProxies: fuzzTrusted, TrustedHops: 2, Header: "Forwarded"}, "Forwarded"},
	{Config{TrustedProxies: fuzzTrusted, IPv4Prefix: 24, IPv6Prefix: 128}, "X-Forwarded-For"},
	{Config{TrustedHops: 1, Header: "X-Real-IP"}, "X-Real-Ip"},
}

// FuzzResolver feeds arbitrary peers and headers to each configuration of
// fuzzConfigs and checks that nothing panics, that the key always matches
// the address, and that the address is the peer's unless the peer is trusted,
// in which case it may also be one named in the configured header.
func FuzzResolver(f *testing.F) {
	seeds := []struct {
		remote, xff1, xff2, fwd, single string
	}{
		{"203.0.113.7:4711", "", "", "", ""},
		{"10.0.0.1:80", "6.6.6.6, 203.0.113.7, 10.0.0.2", "", "for=203.0.113.7", "203.0.113.7"},
		{"10.0.0.1:80", "6.6.6.6", "203.0.113.7", `for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.2`, "[2001:db8::1]:80"},
		{"[2001:db8:ffff::1]:80", "2001:db8:1:2::99, 2001:db8:ffff:1::1", "", `for="6.6.6.6, for=203.0.113.7`, ""},
		{"[::ffff:10.0.0.1]:80", "::ffff:203.0.113.7", "fe80::1%eth0", `for=unknown`, "garbage"},
		{"@", "203.0.113.7", "", "for=_hidden", ""},
		{"198.51.100.9:1", "203.0.113.7", "", "for=203.0.113.7", "203.0.113.7"},
		{"127.0.0.1:1", "203.0.113.7:4711, [2001:db8::1]:80, [2001:db8::2]", "", `for="\[2001:db8::1\]"`, ""},
		{"10.0.0.1:80", ", ,", "", `for="\", for=6.6.6.6", for="203.0.113.7"`, ""},
		{"[64:ff9b::10.0.0.1]:80", "64:ff9b::203.0.113.7, ::10.0.0.2", "", `for="[64:ff9b::cb00:7107]:4711"`, "::203.0.113.7"},
		{"[::10.0.0.1]:80", "::1, ::, ::0.1.2.3", "[::ffff:0.0.0.1]", `for="[::1]"`, "64:ff9b:1::203.0.113.7"},
		{"[::1]:80", "64:ff9b::", "", `for="[::203.0.113.7]"`, "[64:ff9b::1]:80"},
	}
	for _, s := range seeds {
		for mode := range len(fuzzConfigs) {
			f.Add(uint8(mode), s.remote, s.xff1, s.xff2, s.fwd, s.single)
		}
	}
	var prefixes []netip.Prefix
	for _, s := range fuzzTrusted {
		p, err := ParsePrefix(s)
		if err != nil {
			f.Fatal(err)
		}
		prefixes = append(prefixes, p)
	}

	f.Fuzz(func(t *testing.T, mode uint8, remote, xff1, xff2, fwd, single string) {
		c := fuzzConfigs[int(mode)%len(fuzzConfigs)]
		r := mustNew(t, c.cfg)
		h := http.Header{
			"X-Forwarded-For": {xff1},
			"Forwarded":       {fwd},
			"X-Real-Ip":       {single},
		}
		if xff2 != "" {
			h["X-Forwarded-For"] = append(h["X-Forwarded-For"], xff2)
		}
		req := &http.Request{RemoteAddr: remote, Header: h}

		ip, key := r.ClientIP(req), r.Key(req)
		if want := r.AddrKey(ip); key != want {
			t.Fatalf("Key = %q, but the key of ClientIP %v is %q", key, ip, want)
		}
		if ip != fold(ip) {
			t.Fatalf("ClientIP = %v, not normalised", ip)
		}

		var zero *Resolver
		peer := zero.ClientIP(req)
		peerTrusted := false
		if len(c.cfg.TrustedProxies) == 0 {
			peerTrusted = c.cfg.TrustedHops > 0
		} else {
			for _, p := range prefixes {
				peerTrusted = peerTrusted || p.Contains(peer)
			}
		}
		if !peerTrusted {
			if ip != peer || key != r.AddrKey(peer) {
				t.Fatalf("untrusted peer %q: ClientIP = %v, Key = %q; want the peer's %v, %q",
					remote, ip, key, peer, r.AddrKey(peer))
			}
			if r.Malformed() != 0 {
				t.Fatalf("untrusted peer: headers were read (Malformed = %d)", r.Malformed())
			}
			return
		}
		if ip == peer {
			return
		}
		for _, a := range candidates(h[c.header]) {
			if a == ip {
				return
			}
		}
		t.Fatalf("ClientIP = %v is neither the peer %v nor in %s: %q", ip, peer, c.header, h[c.header])
	})
}

// candidates returns every address written anywhere in lines, in any of the
// forms parseHop accepts, as a check on it that shares none of its code.
func candidates(lines []string) []netip.Addr {
	var out []netip.Addr
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, fold(a))
		}
	}
	for _, line := range lines {
		for _, tok := range strings.FieldsFunc(line, func(r rune) bool { return strings.ContainsRune(",;=\" \t", r) }) {
			for _, s := range []string{tok, strings.ReplaceAll(tok, `\`, "")} {
				add(s)
				if host, _, err := net.SplitHostPort(s); err == nil {
					add(host)
				}
				s = strings.TrimPrefix(s, "[")
				add(strings.TrimSuffix(s, "]"))
				// A zone may hold separators; the address ends at its "%".
				if before, _, ok := strings.Cut(s, "%"); ok {
					add(before)
				}
			}
		}
	}
	return out
}

// fold is the normalisation rule documented on Resolver, written with
// prefixes rather than bytes, as a check on normalize.
func fold(a netip.Addr) netip.Addr {
	a = a.WithZone("")
	for _, p := range embeddingPrefixes {
		if p.Contains(a) && !notCompatible.Contains(a) {
			return netip.AddrFrom4([4]byte(a.AsSlice()[12:]))
		}
	}
	return a
}

var (
	embeddingPrefixes = []netip.Prefix{
		netip.MustParsePrefix("::ffff:0:0/96"),
		netip.MustParsePrefix("64:ff9b::/96"),
		netip.MustParsePrefix("::/96"),
	}
	notCompatible = netip.MustParsePrefix("::/104") // ::, ::1 and the rest of ::0.0.0.0/104
)

// TestWalkMatchesModel builds random chains of well-formed entries, written
// in the many ways proxies write them, and compares the resolved client with
// a direct transcription of the rule documented on Config.TrustedHops.
func TestWalkMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7239, 1))
	trustedPrefixes := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	pool := []netip.Addr{
		netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.200.3.4"),
		netip.MustParseAddr("2001:db8:ffff::1"), netip.MustParseAddr("2001:db8:ffff:9::5"),
		netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("198.51.100.9"),
		netip.MustParseAddr("2001:db8:1:2::3"), netip.MustParseAddr("fe80::1"),
	}
	pick := func() netip.Addr { return pool[rng.IntN(len(pool))] }

	for iter := range 20000 {
		useCIDR := rng.IntN(3) != 0
		cfg := Config{TrustedHops: rng.IntN(5)}
		if useCIDR {
			cfg.TrustedProxies = []string{"10.0.0.0/8", "2001:db8:ffff::/48"}
		} else if cfg.TrustedHops == 0 {
			cfg.TrustedHops = 1
		}
		forwarded := rng.IntN(2) == 0
		if forwarded {
			cfg.Header = "Forwarded"
		}
		cfg.IPv6Prefix = 128

		trusted := func(a netip.Addr) bool {
			for _, p := range trustedPrefixes {
				if useCIDR && p.Contains(a) {
					return true
				}
			}
			return false
		}
		peer := pick()
		entries := make([]netip.Addr, 1+rng.IntN(6))
		for i := range entries {
			entries[i] = pick()
		}

		// The model.
		want := peer
		if (!useCIDR && cfg.TrustedHops > 0) || trusted(peer) {
			want = entries[0]
			for i := 1; i <= len(entries); i++ {
				if a := entries[len(entries)-i]; i >= cfg.TrustedHops && !trusted(a) {
					want = a
					break
				}
			}
		}

		var parts []string
		for _, a := range entries {
			parts = append(parts, render(rng, a, forwarded))
		}
		lines := splitLines(rng, parts)
		name := "X-Forwarded-For"
		if forwarded {
			name = "Forwarded"
		}
		req := &http.Request{RemoteAddr: netip.AddrPortFrom(peer, 4711).String(), Header: http.Header{name: lines}}
		r := mustNew(t, cfg)
		if got := r.ClientIP(req); got != want || r.Malformed() != 0 {
			t.Fatalf("iteration %d: %+v, peer %s, %s: %q\nClientIP = %v (Malformed %d), want %v",
				iter, cfg, req.RemoteAddr, name, lines, got, r.Malformed(), want)
		}
	}
}

// render writes a in one of the forms a proxy might use.
func render(rng *rand.Rand, a netip.Addr, forwarded bool) string {
	var s string
	switch form := rng.IntN(5); {
	case form == 1 && a.Is4():
		s = fmt.Sprintf("%s:%d", a, rng.IntN(65536))
	case form == 1:
		s = fmt.Sprintf("[%s]:%d", a, rng.IntN(65536))
	case form == 2 && a.Is4():
		// An IPv4 address written in IPv6: mapped, NAT64 or, where that is
		// not :: or ::1 and the like, IPv4-compatible.
		forms := []string{"::ffff:", "64:ff9b::"}
		if a.As4()[0] != 0 {
			forms = append(forms, "::")
		}
		s = forms[rng.IntN(len(forms))] + a.String()
		if rng.IntN(2) == 0 {
			s = "[" + s + "]"
		}
	case form == 2:
		s = "[" + a.String() + "]"
	case form == 3 && a.Is6() && a.IsLinkLocalUnicast():
		s = a.String() + "%eth0"
	default:
		s = a.String()
	}
	if forwarded {
		if strings.ContainsAny(s, ":[") || rng.IntN(2) == 0 {
			s = `"` + s + `"`
		}
		s = "for=" + s
		switch rng.IntN(4) {
		case 1:
			s = "proto=https;" + s
		case 2:
			s += `;host="example.com:443";by=_lb`
		case 3:
			s += `;host="a,b;c"`
		}
	}
	ows := []string{"", " ", "\t", "  "}
	return ows[rng.IntN(len(ows))] + s + ows[rng.IntN(len(ows))]
}

// splitLines joins parts with commas into one or more header lines.
func splitLines(rng *rand.Rand, parts []string) []string {
	var lines []string
	cur := []string{parts[0]}
	for _, p := range parts[1:] {
		if rng.IntN(3) == 0 {
			lines = append(lines, strings.Join(cur, ","))
			cur = nil
		}
		cur = append(cur, p)
	}
	return append(lines, strings.Join(cur, ","))
}
