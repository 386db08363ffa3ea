// Package clientip finds the client of an HTTP request in a way that a
// spoofed header cannot fool, and turns it into a rate-limiting key.
//
// # The threat
//
// A rate limit keyed by client address is only as good as the address. The
// TCP peer of a request (http.Request.RemoteAddr) cannot be forged, but
// behind a load balancer or CDN it is the proxy, shared by every client. The
// proxies report the real client in a header, X-Forwarded-For being the
// usual one, and each proxy appends the address it saw connect:
//
//	X-Forwarded-For: <whatever the client sent>, <client>, <proxy 1>
//
// Nothing stops a client from sending the header itself. Its entries come
// first, so the left-most entry, which many libraries take as "the client",
// is whatever the attacker wrote: a new value per request escapes any
// per-client limit, and a victim's address locks the victim out. Reading the
// header at all when the peer is not one of our proxies is just as bad, since
// then the client writes the whole header.
//
// The only entries worth believing are those written by proxies we trust.
// A Resolver therefore reads a header only when the direct peer is a trusted
// proxy, walks the entries from the right, skips those that are trusted
// proxies themselves, and takes the first one that is not: that address was
// written by a trusted proxy that saw it connect. Whatever the client
// prepended lies further left and is never read. The same walk applies to
// the for= parameters of the RFC 7239 Forwarded header; a header that holds
// one address (X-Real-IP, CF-Connecting-IP) is taken as it is, again only
// from a trusted peer.
//
// Garbage in a header from a trusted peer is never trusted and never
// panics: the request falls back to the peer's address and Malformed counts
// it. A request whose peer has no IP address, such as one over a Unix
// socket, gets UnknownKey unless a trusted header names its client.
//
// IPv6 clients are keyed by their /64 by default, since one host or home
// usually holds a whole /64 and could otherwise use a fresh address per
// request. IPv4 addresses written in IPv6 are folded to IPv4, so one client
// has one key however it reached us: IPv4-mapped addresses
// (::ffff:192.0.2.1) from a dual-stack listener, NAT64 well-known-prefix
// addresses (64:ff9b::192.0.2.1) from a translator in front of an IPv6-only
// listener, which would otherwise put every IPv4 client under one /64, and
// IPv4-compatible ones (::192.0.2.1), but not :: or the loopback ::1 (see
// Resolver for the exact rule).
//
// # Configuration
//
// Directly on the internet, use the zero Config: the key is the peer address.
//
// Behind a load balancer or reverse proxy that appends to X-Forwarded-For,
// trust the addresses it connects from, and nothing else:
//
//	clientip.New(clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}})
//
// Behind several proxies, list all of them (by subnet) so the walk skips
// each one's entry. Behind a CDN, either list the CDN's published address
// ranges together with the load balancer's, or, when the CDN sets a header
// of its own that it overwrites on every request, read that header:
//
//	clientip.New(clientip.Config{
//		TrustedProxies: cloudflareRanges, // from https://www.cloudflare.com/ips/
//		Header:         "CF-Connecting-IP",
//	})
//
// When the proxies' addresses are unknown or change (a managed platform's
// router), Config.TrustedHops trusts a fixed number of hops instead. That is
// safe only when every request passes through all the counted proxies: a
// client that can connect to this server, or to any proxy but the outermost,
// directly can choose its own key.
//
// A trusted entry that holds every address (0.0.0.0/0, ::/0, ::ffff:0:0/96,
// 64:ff9b::/96) is refused: every client would be a trusted proxy and choose
// its own key. TrustedHops trusts the peer whoever it is, explicitly. Watch
// Malformed: a count that keeps rising means a proxy does not write what the
// Config says, and its clients are sharing the proxy's key.
package clientip
