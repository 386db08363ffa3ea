package clientip_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"

	"github.com/floodgate-go/floodgate/clientip"
)

// Directly on the internet, the zero Config keys clients by the address of
// the connection and ignores every header.
func Example() {
	r, err := clientip.New(clientip.Config{})
	if err != nil {
		panic(err)
	}

	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "203.0.113.7:51234"
	req.Header.Set("X-Forwarded-For", "192.0.2.1") // anyone can send this
	fmt.Println(r.Key(req))

	req.RemoteAddr = "[2001:db8:1:2:a:b:c:d]:51234"
	fmt.Println(r.Key(req), r.ClientIP(req))
	// Output:
	// 203.0.113.7
	// 2001:db8:1:2::/64 2001:db8:1:2:a:b:c:d
}

// Behind a load balancer in 10.0.0.0/8 that appends to X-Forwarded-For, the
// client is the right-most address that is not one of our proxies; what the
// client wrote to the left of it is ignored.
func ExampleNew_behindLoadBalancer() {
	r, err := clientip.New(clientip.Config{
		TrustedProxies: []string{"10.0.0.0/8"},
	})
	if err != nil {
		panic(err)
	}

	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.3.4:40000"
	// The client sent "X-Forwarded-For: 192.0.2.1"; the edge proxy appended
	// the client's address, an inner proxy appended the edge proxy's.
	req.Header.Set("X-Forwarded-For", "192.0.2.1, 203.0.113.7, 10.0.1.2")
	fmt.Println(r.Key(req))

	// The same header from a peer that is not a trusted proxy is ignored.
	req.RemoteAddr = "198.51.100.9:40000"
	fmt.Println(r.Key(req))
	// Output:
	// 203.0.113.7
	// 198.51.100.9
}

// Behind a CDN that overwrites a header of its own on every request, read
// that header from the CDN's address ranges only.
func ExampleNew_cdnHeader() {
	r, err := clientip.New(clientip.Config{
		TrustedProxies: []string{"173.245.48.0/20", "2400:cb00::/32"}, // a CDN's published ranges
		Header:         "CF-Connecting-IP",
	})
	if err != nil {
		panic(err)
	}

	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "173.245.48.10:443"
	req.Header.Set("CF-Connecting-IP", "2001:db8:1:2::77")
	fmt.Println(r.Key(req))
	// Output:
	// 2001:db8:1:2::/64
}

// On a platform whose router addresses are unknown, with a CDN in front of
// the router, trust two hops by position. The server must not be reachable
// except through them.
func ExampleNew_trustedHops() {
	r, err := clientip.New(clientip.Config{TrustedHops: 2})
	if err != nil {
		panic(err)
	}

	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "100.64.0.9:1234"                                         // the platform's router
	req.Header.Set("X-Forwarded-For", "192.0.2.1, 203.0.113.7, 198.51.100.20") // spoof, client, CDN node
	fmt.Println(r.Key(req))
	// Output:
	// 203.0.113.7
}

// RFC 7239 Forwarded is walked like X-Forwarded-For, using the for= parameter
// of each element.
func ExampleNew_forwarded() {
	r, err := clientip.New(clientip.Config{
		TrustedProxies: []string{"10.0.0.0/8"},
		Header:         "Forwarded",
		IPv6Prefix:     128,
	})
	if err != nil {
		panic(err)
	}

	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.0.1:8080"
	req.Header.Set("Forwarded", `for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.2`)
	fmt.Println(r.Key(req))
	// Output:
	// 2001:db8:cafe::17
}

// New reports every problem in the Config at once.
func ExampleNew_error() {
	_, err := clientip.New(clientip.Config{
		TrustedProxies: []string{"10.1.2.3/8", "lb.internal"},
	})
	fmt.Println(err)
	// Output:
	// clientip: invalid config: trusted proxy "10.1.2.3/8": host bits are set; use 10.0.0.0/8, or a single address without a length
	// clientip: invalid config: trusted proxy "lb.internal": not an IP address or CIDR prefix; use a form such as 192.0.2.1 or 10.0.0.0/8
}

// The method value Key is a key function for rate-limiting middleware.
func ExampleResolver_Key() {
	r, err := clientip.New(clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		panic(err)
	}
	var keyOf func(*http.Request) string = r.Key

	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.0.1:80"
	req.Header.Set("X-Forwarded-For", "not-an-address")
	fmt.Println(keyOf(req), r.Malformed())

	req.RemoteAddr = "@" // a Unix socket
	fmt.Println(keyOf(req))
	// Output:
	// 10.0.0.1 1
	// unknown
}

// AddrKey keys a client known only by address, such as the peer of a TCP
// connection.
func ExampleResolver_AddrKey() {
	r, err := clientip.New(clientip.Config{IPv4Prefix: 24})
	if err != nil {
		panic(err)
	}
	fmt.Println(r.AddrKey(netip.MustParseAddr("::ffff:192.0.2.77")))     // IPv4-mapped
	fmt.Println(r.AddrKey(netip.MustParseAddr("64:ff9b::198.51.100.9"))) // through a NAT64 translator
	fmt.Println(r.AddrKey(netip.MustParseAddr("::1")))                   // the IPv6 loopback
	// Output:
	// 192.0.2.0/24
	// 198.51.100.0/24
	// ::/64
}
