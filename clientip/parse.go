package clientip

import (
	"net/netip"
	"strings"
)

// maxElementLen bounds one list element (an X-Forwarded-For entry, a
// Forwarded element with all its parameters) and a single-address header.
// Together with MaxHops it bounds the work done per request, however large
// the header: elements are found by scanning back from the right, and the
// scan gives up after this many bytes.
const maxElementLen = 512

// normalize removes a's zone and folds an IPv4 address written in IPv6 to
// IPv4, so that one client has one key however its address reached us:
//
//   - IPv4-mapped, ::ffff:a.b.c.d (RFC 4291), as a dual-stack socket reports
//     an IPv4 peer;
//   - under the NAT64 well-known prefix, 64:ff9b::a.b.c.d (RFC 6052), as a
//     NAT64 or SIIT translator in front of an IPv6 listener writes each IPv4
//     client. Unfolded, every IPv4 client on the internet would share the
//     key 64:ff9b::/64;
//   - IPv4-compatible, ::a.b.c.d (deprecated by RFC 4291 but still written by
//     some proxies), when a.b.c.d is not in 0.0.0.0/8. That exception keeps
//     the unspecified address :: and the loopback ::1, which share the form,
//     and the rest of ::/104 IPv6 addresses: 0.0.0.0/8 is no host's source
//     address.
//
// Other translation prefixes (RFC 8215's 64:ff9b:1::/48, an operator's own)
// embed the address at lengths this package cannot know, and stay IPv6.
func normalize(a netip.Addr) netip.Addr {
	a = a.WithZone("")
	if !a.Is6() {
		return a
	}
	b := a.As16()
	v4 := [4]byte(b[12:])
	switch prefix := [12]byte(b[:12]); {
	case prefix == mappedPrefix, prefix == nat64Prefix:
		return netip.AddrFrom4(v4)
	case prefix == [12]byte{} && v4[0] != 0:
		return netip.AddrFrom4(v4)
	}
	return a
}

// The first 96 bits of ::ffff:0:0/96 (IPv4-mapped) and of 64:ff9b::/96
// (the NAT64 well-known prefix).
var (
	mappedPrefix = [12]byte{10: 0xff, 11: 0xff}
	nat64Prefix  = [12]byte{0x00, 0x64, 0xff, 0x9b}
)

// parsePeer reads http.Request.RemoteAddr, normally "ip:port" as written by
// net/http. It returns the normalised address, or the zero Addr when there
// is none (Unix sockets), and the host part as written, so that a caller can
// reuse it when it is already canonical.
func parsePeer(s string) (netip.Addr, string) {
	// The common case first: "192.0.2.1:54321", as net/http writes an IPv4
	// peer. Splitting by hand skips ParseAddrPort's port parsing.
	if i := strings.LastIndexByte(s, ':'); i > 0 && isPort(s[i+1:]) && strings.IndexByte(s[:i], ':') < 0 {
		if a, err := netip.ParseAddr(s[:i]); err == nil {
			return a, s[:i]
		}
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		host := s[:strings.LastIndexByte(s, ':')]
		if len(host) >= 2 && host[0] == '[' {
			host = host[1 : len(host)-1]
		}
		return normalize(ap.Addr()), host
	}
	// Not what net/http writes, but what tests and some servers do.
	if len(s) <= maxElementLen {
		if a, ok := parseHop(s); ok {
			return a, ""
		}
	}
	return netip.Addr{}, ""
}

// parseHop reads one address as proxies write it: "192.0.2.1",
// "192.0.2.1:8080", "2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:8080",
// "fe80::1%eth0", surrounded by optional spaces or tabs. The result is
// normalised.
func parseHop(s string) (netip.Addr, bool) {
	s = trimOWS(s)
	if s == "" {
		return netip.Addr{}, false
	}
	var a netip.Addr
	var err error
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !validPort(rest[1:])) {
			return netip.Addr{}, false
		}
		if a, err = netip.ParseAddr(s[1:end]); err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
	} else {
		host := s
		switch strings.Count(s, ":") {
		case 0, 1:
			// IPv4, with or without a port: an IPv6 address has at least
			// two colons and needs brackets to carry a port.
			if i := strings.IndexByte(s, ':'); i >= 0 {
				if !validPort(s[i+1:]) {
					return netip.Addr{}, false
				}
				host = s[:i]
			}
			if a, err = netip.ParseAddr(host); err != nil || !a.Is4() {
				return netip.Addr{}, false
			}
		default:
			if a, err = netip.ParseAddr(host); err != nil {
				return netip.Addr{}, false
			}
		}
	}
	return normalize(a), true
}

// validPort accepts a decimal port and, as RFC 7239 allows in Forwarded, an
// obfuscated one ("_abc").
func validPort(s string) bool {
	if s == "" {
		return false
	}
	if s[0] == '_' {
		for i := 1; i < len(s); i++ {
			c := s[i]
			if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
				return false
			}
		}
		return len(s) > 1
	}
	if len(s) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n <= 65535
}

func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

func isEmptyElement(s string) bool { return trimOWS(s) == "" }

// A listFormat knows how to split a list header into elements from the
// right and how to read the address out of one element.
type listFormat struct {
	// prev returns the start of the element of s that ends at end, or false
	// when it is longer than maxElementLen or cannot be delimited.
	prev func(s string, end int) (start int, ok bool)
	// hop returns the address of a non-empty element.
	hop func(elem string) (netip.Addr, bool)
}

var (
	xffFormat       = listFormat{prev: prevXFF, hop: parseHop}
	forwardedFormat = listFormat{prev: prevForwarded, hop: forwardedHop}
)

// listIter yields the elements of the lines of one header from the right,
// as if the lines had been joined with commas.
type listIter struct {
	lines []string
	line  int // current line; -1 when done
	end   int // end of the next element in lines[line]
	prev  func(s string, end int) (int, bool)
}

// next returns the next element to the left. more is false once every
// element has been returned; ok is false when the next element cannot be
// delimited.
func (it *listIter) next() (elem string, more, ok bool) {
	if it.line < 0 {
		return "", false, true
	}
	s := it.lines[it.line]
	start, ok := it.prev(s, it.end)
	if !ok {
		return "", false, false
	}
	elem = s[start:it.end]
	if start > 0 {
		it.end = start - 1 // the comma before the element
	} else if it.line--; it.line >= 0 {
		it.end = len(it.lines[it.line])
	}
	return elem, true, true
}

// prevXFF delimits X-Forwarded-For entries, which are separated by commas
// and contain no quoting.
func prevXFF(s string, end int) (int, bool) {
	for i := end - 1; i >= 0; i-- {
		if s[i] == ',' {
			return i + 1, true
		}
		if end-i > maxElementLen {
			return 0, false
		}
	}
	return 0, true
}

// prevForwarded delimits RFC 7239 elements, which are separated by commas
// outside quoted strings.
//
// Scanning from the right matters: everything left of the entries written by
// trusted proxies is the client's to write, an unterminated quote included,
// and must not change how the trusted entries are read. A well-formed element
// is delimited exactly whatever precedes it, because a closing quote is
// matched with the nearest quote to its left that is not escaped, that is,
// not preceded by an odd number of backslashes.
func prevForwarded(s string, end int) (int, bool) {
	lo := max(end-maxElementLen, 0)
	for i := end - 1; i >= lo; i-- {
		switch s[i] {
		case ',':
			return i + 1, true
		case '"':
			j := i - 1
			for ; j >= lo; j-- {
				if s[j] != '"' {
					continue
				}
				k := j - 1
				for k >= lo && s[k] == '\\' {
					k--
				}
				if (j-1-k)%2 == 0 {
					break
				}
			}
			if j < lo {
				return 0, false
			}
			i = j
		}
	}
	if lo > 0 {
		return 0, false
	}
	return 0, true
}

// forwardedHop returns the address in the for= parameter of one RFC 7239
// element, such as `for=192.0.2.60;proto=http;by=203.0.113.43` or
// `for="[2001:db8:cafe::17]:4711"`. An element must have exactly one for=
// parameter naming an IP address; "unknown" and obfuscated identifiers
// ("_hidden") do not, so they are rejected like any other garbage.
//
// The syntax accepted is a little wider than the RFC's: spaces around ";",
// and unquoted values that are not tokens (for=[2001:db8::1]). Only values
// written by trusted proxies are ever used, so leniency cannot help a client,
// while strictness would put every client of a sloppy proxy under the proxy's
// key.
func forwardedHop(elem string) (netip.Addr, bool) {
	var val string
	found := false
	i := 0
	for {
		for i < len(elem) && (elem[i] == ' ' || elem[i] == '\t') {
			i++
		}
		if i == len(elem) {
			break
		}
		if elem[i] == ';' {
			i++
			continue
		}
		start := i
		for i < len(elem) && isTchar(elem[i]) {
			i++
		}
		name := elem[start:i]
		if name == "" || i == len(elem) || elem[i] != '=' {
			return netip.Addr{}, false
		}
		i++
		var v string
		if i < len(elem) && elem[i] == '"' {
			j, escaped := i+1, false
			for ; j < len(elem) && elem[j] != '"'; j++ {
				if elem[j] == '\\' {
					escaped = true
					j++
				}
			}
			if j >= len(elem) {
				return netip.Addr{}, false
			}
			v = elem[i+1 : j]
			if escaped {
				v = unquote(v)
			}
			i = j + 1
		} else {
			start := i
			for i < len(elem) && elem[i] != ';' && elem[i] != ' ' && elem[i] != '\t' && elem[i] != '"' {
				i++
			}
			v = elem[start:i]
			if v == "" {
				return netip.Addr{}, false
			}
		}
		if strings.EqualFold(name, "for") {
			if found {
				return netip.Addr{}, false
			}
			found, val = true, v
		}
		for i < len(elem) && (elem[i] == ' ' || elem[i] == '\t') {
			i++
		}
		if i < len(elem) {
			if elem[i] != ';' {
				return netip.Addr{}, false
			}
			i++
		}
	}
	if !found {
		return netip.Addr{}, false
	}
	return parseHop(val)
}

// unquote removes the backslashes of quoted-pairs from the inside of a
// well-formed quoted string.
func unquote(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// isTchar reports whether c may appear in an RFC 9110 token.
func isTchar(c byte) bool {
	return isAlnum(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}

// isPort reports whether s is a decimal port number from 0 to 65535, as
// netip.ParseAddrPort accepts it.
func isPort(s string) bool {
	if len(s) == 0 || len(s) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}
