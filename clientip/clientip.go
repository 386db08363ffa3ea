package clientip

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
)

// UnknownKey is the key of a request whose client address cannot be
// determined: its RemoteAddr is not an IP address (a Unix socket peer is
// reported as "@" or ""), and no trusted header named a client. All such
// requests share this one key; it is a constant so that no client can choose
// its own key by sending a malformed address.
const UnknownKey = "unknown"

// MaxHops is the largest number of list elements of a header examined for
// one request, and the largest accepted Config.TrustedHops. A chain that is
// still trusted after this many elements is treated as malformed.
const MaxHops = 32

// Header names with a meaning of their own. Any other name given as
// Config.Header is read as a header holding exactly one address.
const (
	// HeaderXForwardedFor is the de-facto standard list of addresses, one
	// appended by each proxy: "client, proxy1, proxy2".
	HeaderXForwardedFor = "X-Forwarded-For"
	// HeaderForwarded is the RFC 7239 header; its for= parameters are read.
	HeaderForwarded = "Forwarded"
	// HeaderXRealIP is a single address set by the proxy (nginx's habit).
	HeaderXRealIP = "X-Real-IP"
)

// ErrInvalidConfig is wrapped by every error New returns.
var ErrInvalidConfig = errors.New("clientip: invalid config")

// Config says which peers are trusted to report the client's address, where
// they report it, and how addresses are grouped into keys.
//
// The zero Config trusts no one: the client is the direct peer
// (http.Request.RemoteAddr) and no header is ever read.
type Config struct {
	// TrustedProxies lists the proxies allowed to report the client's
	// address, as CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") or single
	// addresses ("192.0.2.1", "::1"). IPv4 addresses match IPv4 entries only,
	// including IPv4 addresses written in IPv6, which are folded to IPv4
	// first (see Resolver). So an entry of such addresses is read as the IPv4
	// prefix: "::ffff:10.0.0.0/104" and "64:ff9b::10.0.0.0/104" as
	// "10.0.0.0/8"; and a shorter IPv6 entry such as "64:ff9b::/64" matches
	// none of them. A prefix with host bits set ("10.1.2.3/8") is rejected
	// rather than widened, since it is more likely a typo than a wish. Each
	// lookup scans the list, which costs little for a few dozen entries.
	//
	// Headers are read only when the direct peer is in this list (or, when
	// the list is empty, when TrustedHops > 0). Within the header, entries in
	// this list are skipped as further proxies.
	TrustedProxies []string

	// Header names the header a trusted peer reports the client in:
	//
	//   - "X-Forwarded-For" (the default once any proxy is trusted): a list
	//     walked from the right, see Resolver.
	//   - "Forwarded": RFC 7239; the for= parameter of each element is
	//     walked from the right like X-Forwarded-For.
	//   - any other name, such as "X-Real-IP", "CF-Connecting-IP",
	//     "True-Client-IP" or "Fly-Client-IP": a header holding exactly one
	//     address, which the trusted peer must set (overwrite), not append
	//     to. Several lines, or a list, are malformed.
	//
	// Names are case-insensitive. Setting Header without trusting any proxy
	// is an error, since the header would never be read.
	Header string

	// TrustedHops is the number of proxies in front of this server that are
	// trusted by position rather than by address, counting the direct peer:
	// set it to the number of proxies every request passes through, for
	// example 2 for a CDN followed by a load balancer. 0 (the default)
	// trusts by address only.
	//
	// Number the hops from the right: hop 0 is the direct peer, hop 1 the
	// right-most (non-empty) header entry, hop 2 the one to its left, and so
	// on. Hop i is trusted when i < TrustedHops or its address is in
	// TrustedProxies; the client is the first untrusted hop, or the left-most
	// entry when all are trusted. With TrustedHops = n the client is
	// therefore the n-th entry from the right or one further left.
	//
	// When TrustedProxies is empty, TrustedHops > 0 trusts any direct peer,
	// including a Unix socket peer. Use that only when the server cannot be
	// reached except through those proxies: a client that connects directly
	// can then send any header it likes. When TrustedProxies is not empty,
	// the direct peer must be in it whatever TrustedHops says.
	//
	// For a single-address header, TrustedHops only decides whether the
	// header is read. Values from 0 to MaxHops are accepted.
	TrustedHops int

	// IPv4Prefix is the length of the prefix IPv4 clients are grouped by:
	// 32 (the default, also chosen by 0) keys each address on its own; 24
	// puts a /24 under one key.
	IPv4Prefix int

	// IPv6Prefix is the length of the prefix IPv6 clients are grouped by: 64
	// (the default, also chosen by 0) puts a /64, the smallest subnet
	// normally assigned to one host or home, under one key, so a client
	// cannot rotate through the 2^64 addresses it owns to escape its limit.
	// 128 keys each address on its own.
	IPv6Prefix int
}

type headerKind uint8

const (
	headerNone headerKind = iota
	headerXFF
	headerForwarded
	headerSingle
)

// Resolver finds the client of an HTTP request as Config describes. A
// Resolver is safe for concurrent use. A nil *Resolver behaves like one made
// from the zero Config.
//
// For X-Forwarded-For and Forwarded, when the direct peer is trusted, the
// entries of every line of the header, taken in order as if joined by commas,
// are walked from the right. An entry written by a trusted proxy is skipped
// and the first untrusted entry is the client: it was written by the last
// trusted proxy, which saw that address connect. Entries further left were
// written by the client or by proxies nobody vouches for and are never looked
// at, so nothing a client prepends can change its key. If every entry is
// trusted, the left-most one is the client.
//
// Only the entries up to the client are examined, so what lies further left
// is never parsed and cannot make the header malformed. The work per request
// is bounded: at most MaxHops list elements are examined, and no element may
// be longer than 512 bytes.
//
// A header that cannot be used falls back to the direct peer and adds one to
// Malformed: an examined entry that is not an IP address (including
// "unknown" and obfuscated identifiers in Forwarded), a header that is
// present but holds no entry, an examined element longer than 512 bytes, a
// chain that is still trusted after MaxHops list elements (empty ones
// included), a Forwarded element without exactly one for= parameter, or a
// single-address header with several lines, a list, or more than 512 bytes.
// A header that is absent falls back to the direct peer without being
// counted. Empty list elements ("a,,b") are skipped.
//
// Addresses are normalised before they are compared or keyed: ports,
// brackets and IPv6 zones are removed, and an IPv4 address written in IPv6
// becomes IPv4, so that each IPv4 client has its own key rather than sharing
// an IPv6 prefix. That covers IPv4-mapped addresses (::ffff:192.0.2.1),
// addresses under the NAT64 well-known prefix (64:ff9b::192.0.2.1, RFC
// 6052), as a NAT64 or SIIT translator in front of an IPv6 listener writes
// IPv4 clients, and IPv4-compatible addresses (::192.0.2.1, deprecated)
// whose IPv4 address is outside 0.0.0.0/8: the unspecified address :: and
// the loopback ::1 have that form too, and stay IPv6, as does the rest of
// ::/104. Other translation prefixes, such as 64:ff9b:1::/48, stay IPv6.
type Resolver struct {
	trusted Prefixes
	hops    int
	header  string // canonical form, for direct map access
	kind    headerKind
	v4, v6  int

	malformed atomic.Uint64
}

var zeroResolver = &Resolver{v4: 32, v6: 64}

// New validates cfg and returns a Resolver for it. Every problem found is
// reported, each in an error wrapping ErrInvalidConfig.
func New(cfg Config) (*Resolver, error) {
	r := &Resolver{hops: cfg.TrustedHops, v4: 32, v6: 64}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}

	for _, s := range cfg.TrustedProxies {
		p, err := ParsePrefix(s)
		if err != nil {
			bad("trusted proxy %q: %v", s, err)
			continue
		}
		r.trusted = append(r.trusted, p)
	}

	if cfg.TrustedHops < 0 || cfg.TrustedHops > MaxHops {
		bad("TrustedHops is %d; use a value from 0 to %d", cfg.TrustedHops, MaxHops)
	}
	switch {
	case cfg.IPv4Prefix == 0:
	case cfg.IPv4Prefix < 0 || cfg.IPv4Prefix > 32:
		bad("IPv4Prefix is %d; use a length from 1 to 32, or 0 for the default 32", cfg.IPv4Prefix)
	default:
		r.v4 = cfg.IPv4Prefix
	}
	switch {
	case cfg.IPv6Prefix == 0:
	case cfg.IPv6Prefix < 0 || cfg.IPv6Prefix > 128:
		bad("IPv6Prefix is %d; use a length from 1 to 128, or 0 for the default 64", cfg.IPv6Prefix)
	default:
		r.v6 = cfg.IPv6Prefix
	}

	trusting := len(cfg.TrustedProxies) > 0 || cfg.TrustedHops > 0
	switch name := cfg.Header; {
	case name != "" && !validHeaderName(name):
		bad("header %q is not a valid header field name; use a name such as %q", name, HeaderXForwardedFor)
	case name != "" && !trusting:
		bad("header %q would never be read; set TrustedProxies or TrustedHops, or leave Header empty", name)
	case !trusting:
		r.kind = headerNone
	default:
		if name == "" {
			name = HeaderXForwardedFor
		}
		r.header = http.CanonicalHeaderKey(name)
		switch r.header {
		case http.CanonicalHeaderKey(HeaderXForwardedFor):
			r.kind = headerXFF
		case http.CanonicalHeaderKey(HeaderForwarded):
			r.kind = headerForwarded
		default:
			r.kind = headerSingle
		}
	}

	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return r, nil
}

// ParsePrefix reads one entry of a list of trusted peers, as
// Config.TrustedProxies describes them: a CIDR prefix with no host bits
// set, or a single address without a zone; a prefix of IPv4 addresses
// written in IPv6 is read as the IPv4 prefix. It is the one parser of every
// such list in floodgate (trusted proxies, the daemon's user_trusted_from
// and proxy_protocol_from), so that a list means the same wherever it is
// written and `floodgate validate` refuses what serve would.
func ParsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return p, fmt.Errorf("not a CIDR prefix; use a form such as 10.0.0.0/8 or 2001:db8::/32")
		}
		if m := p.Masked(); m != p {
			return p, fmt.Errorf("host bits are set; use %s, or a single address without a length", m)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return p, fmt.Errorf("not an IP address or CIDR prefix; use a form such as 192.0.2.1 or 10.0.0.0/8")
		}
		if a.Zone() != "" {
			return p, fmt.Errorf("addresses are compared without zones; remove %q", "%"+a.Zone())
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	p, err := foldPrefix(p)
	if err == nil && p.Bits() == 0 {
		// 0.0.0.0/0, ::/0, and ::ffff:0:0/96 or 64:ff9b::/96, which
		// hold every IPv4 address: every client could pick its key.
		return p, fmt.Errorf("trusts every %s address, so any client could choose its own key with a header; list your proxies' ranges, or set TrustedHops (trusted_hops) to trust the peer whoever it is", familyOf(p))
	}
	return p, err
}

func familyOf(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// foldPrefix reads a trusted prefix of IPv4 addresses written in IPv6
// ("::ffff:10.0.0.0/104", "64:ff9b::10.0.0.0/104") as the IPv4 prefix
// ("10.0.0.0/8"): addresses are normalised before they are compared, so the
// IPv6 form would never match. A prefix that would hold both addresses that
// fold and addresses that do not ("::/96" holds ::1 and ::192.0.2.1) is
// rejected, as no single prefix can say what it means.
func foldPrefix(p netip.Prefix) (netip.Prefix, error) {
	a := p.Addr()
	if !a.Is6() || p.Bits() < 96 {
		return p, nil
	}
	last := a.As16()
	for i := p.Bits(); i < 128; i++ {
		last[i/8] |= 0x80 >> (i % 8)
	}
	first, end := normalize(a), normalize(netip.AddrFrom16(last))
	switch {
	case first.Is4() && end.Is4():
		return netip.PrefixFrom(first, p.Bits()-96), nil
	case first.Is4() || end.Is4():
		return p, errors.New("holds both IPv6 addresses (::/104) and IPv4-compatible ones (::a.b.c.d, read as IPv4); list ::/104 for the former and IPv4 prefixes for the latter")
	}
	return p, nil
}

// ClientIP returns the client's full address, normalised as described on
// Resolver (without port or zone, IPv4 written in IPv6 folded to IPv4). It
// is meant for logs; use Key to limit. It returns the zero netip.Addr
// (IsValid reports false) when the address cannot be determined, that is,
// when Key would return UnknownKey.
func (r *Resolver) ClientIP(req *http.Request) netip.Addr {
	a, _ := r.resolve(req)
	return a
}

// Key returns the rate-limiting key of the request's client: the client's
// address grouped by the configured prefix length. A full-length prefix is
// written as the bare address ("203.0.113.7", "2001:db8::1"), a shorter one in
// CIDR notation with host bits cleared ("2001:db8:1:2::/64",
// "198.51.100.0/24"). When the address cannot be determined Key returns
// UnknownKey.
//
// The method value r.Key is a key function for rate-limiting middleware.
func (r *Resolver) Key(req *http.Request) string {
	a, text := r.resolve(req)
	return r.key(a, text)
}

// AddrKey returns the key of a client at addr, as Key would for a request
// resolved to addr. It is meant for front ends that have an address but no
// HTTP request, such as a TCP proxy. addr is normalised first as described
// on Resolver: its zone removed, an IPv4 address written in IPv6 folded to
// IPv4. An invalid addr yields UnknownKey.
func (r *Resolver) AddrKey(addr netip.Addr) string {
	return r.key(normalize(addr), "")
}

// Malformed returns how many times a header from a trusted peer has been
// rejected since the Resolver was made (see Resolver for what counts); every
// call of ClientIP or Key that rejects a header counts once. A
// rising count means a proxy is misconfigured or the trust list is wrong, and
// the affected requests are being keyed by the proxy's address.
func (r *Resolver) Malformed() uint64 {
	if r == nil {
		return 0
	}
	return r.malformed.Load()
}

// resolve returns the client's normalised address, or the zero Addr, and when
// the address came from RemoteAddr, its text there (possibly not canonical).
func (r *Resolver) resolve(req *http.Request) (netip.Addr, string) {
	if r == nil {
		r = zeroResolver
	}
	peer, text := parsePeer(req.RemoteAddr)
	if r.kind == headerNone || !r.trustsPeer(peer) {
		return peer, text
	}
	if a, ok := r.fromHeader(req.Header); ok {
		return a, ""
	}
	return peer, text
}

func (r *Resolver) trustsPeer(peer netip.Addr) bool {
	if len(r.trusted) == 0 {
		return r.hops > 0
	}
	return r.isTrusted(peer)
}

func (r *Resolver) isTrusted(a netip.Addr) bool { return r.trusted.Contains(a) }

// Prefixes is a list of trusted peers, parsed by ParsePrefixes.
type Prefixes []netip.Prefix

// ParsePrefixes parses every entry with ParsePrefix. The error names each
// entry that does not parse.
func ParsePrefixes(list []string) (Prefixes, error) {
	out := make(Prefixes, 0, len(list))
	var errs []error
	for _, s := range list {
		p, err := ParsePrefix(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%q: %v", s, err))
			continue
		}
		out = append(out, p)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// Contains reports whether a, normalised as Resolver describes (zone
// removed, IPv4 written in IPv6 folded to IPv4), is in one of the
// prefixes. Each call scans the list.
func (ps Prefixes) Contains(a netip.Addr) bool {
	if len(ps) == 0 {
		return false
	}
	a = normalize(a)
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ContainsPeer reports whether the peer of an http.Request.RemoteAddr
// ("ip:port") is in one of the prefixes; a peer that is not an IP address
// (a Unix socket) never is.
func (ps Prefixes) ContainsPeer(remoteAddr string) bool {
	if len(ps) == 0 {
		return false
	}
	a, _ := parsePeer(remoteAddr)
	return a.IsValid() && ps.Contains(a)
}

// fromHeader reads the configured header of a request from a trusted peer.
// It reports false when the header is absent or malformed; only the latter is
// counted.
func (r *Resolver) fromHeader(h http.Header) (netip.Addr, bool) {
	lines := h[r.header]
	if len(lines) == 0 {
		return netip.Addr{}, false
	}
	var a netip.Addr
	var ok bool
	switch r.kind {
	case headerSingle:
		if len(lines) == 1 && len(lines[0]) <= maxElementLen {
			a, ok = parseHop(lines[0])
		}
	case headerXFF:
		a, ok = r.walk(lines, &xffFormat)
	case headerForwarded:
		a, ok = r.walk(lines, &forwardedFormat)
	}
	if !ok {
		r.malformed.Add(1)
	}
	return a, ok
}

// walk goes through the entries of a list header from the right, as
// described on Resolver. The peer, hop 0, has been trusted already.
func (r *Resolver) walk(lines []string, f *listFormat) (netip.Addr, bool) {
	it := listIter{lines: lines, line: len(lines) - 1, end: len(lines[len(lines)-1]), prev: f.prev}
	var last netip.Addr
	hop := 0
	for n := 1; ; n++ {
		elem, more, ok := it.next()
		if !ok {
			return netip.Addr{}, false
		}
		if !more {
			// Every entry was trusted: the left-most one is the client. No
			// entry at all means the header was present but empty.
			return last, last.IsValid()
		}
		if n > MaxHops {
			return netip.Addr{}, false
		}
		if isEmptyElement(elem) {
			continue
		}
		a, ok := f.hop(elem)
		if !ok {
			return netip.Addr{}, false
		}
		hop++
		if hop >= r.hops && !r.isTrusted(a) {
			return a, true
		}
		last = a
	}
}

// key formats the key of a normalised address. When text is the address as
// written in RemoteAddr and is already canonical, text itself is returned,
// which saves the only allocation of the common case.
func (r *Resolver) key(a netip.Addr, text string) string {
	if r == nil {
		r = zeroResolver
	}
	if !a.IsValid() {
		return UnknownKey
	}
	bits := r.v4
	if a.Is6() {
		bits = r.v6
	}
	if bits == 32 && a.Is4() && text != "" && strings.IndexByte(text, ':') < 0 {
		// netip parses IPv4 only in canonical dotted decimal, so IPv4 text
		// that parsed (not a mapped IPv6 address) is the key as it stands.
		return text
	}
	var buf [64]byte
	var b []byte
	if bits == a.BitLen() {
		b = a.AppendTo(buf[:0])
		if string(b) == text {
			return text
		}
	} else {
		b = netip.PrefixFrom(a, bits).Masked().AppendTo(buf[:0])
	}
	return string(b)
}
