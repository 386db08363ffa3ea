package clientip

import (
	"net/http"
	"testing"
)

func benchKey(b *testing.B, cfg Config, req *http.Request, want string) {
	r := mustNew(b, cfg)
	if k := r.Key(req); k != want {
		b.Fatalf("Key = %q, want %q", k, want)
	}
	b.ReportAllocs()
	for b.Loop() {
		r.Key(req)
	}
}

func BenchmarkKeyRemoteAddr(b *testing.B) {
	benchKey(b, Config{}, &http.Request{RemoteAddr: "203.0.113.7:4711"}, "203.0.113.7")
}

func BenchmarkKeyRemoteAddrIPv6(b *testing.B) {
	benchKey(b, Config{}, &http.Request{RemoteAddr: "[2001:db8:1:2::1]:4711"}, "2001:db8:1:2::/64")
}

// An untrusted client sending a spoofed header costs no more than one
// sending none.
func BenchmarkKeyUntrustedPeerWithXFF(b *testing.B) {
	req := &http.Request{RemoteAddr: "203.0.113.7:4711", Header: hdr("X-Forwarded-For", "6.6.6.6, 7.7.7.7")}
	benchKey(b, behindLB, req, "203.0.113.7")
}

func BenchmarkKeyTrustedXFF(b *testing.B) {
	req := &http.Request{RemoteAddr: "10.0.0.1:80", Header: hdr("X-Forwarded-For", "6.6.6.6, 203.0.113.7, 10.1.0.1, 10.2.0.1")}
	benchKey(b, behindLB, req, "203.0.113.7")
}

func BenchmarkKeyTrustedXFFIPv6(b *testing.B) {
	req := &http.Request{RemoteAddr: "10.0.0.1:80", Header: hdr("X-Forwarded-For", "2001:db8:1:2::99, 10.1.0.1")}
	benchKey(b, behindLB, req, "2001:db8:1:2::/64")
}

func BenchmarkKeyTrustedForwarded(b *testing.B) {
	req := &http.Request{RemoteAddr: "10.0.0.1:80", Header: hdr("Forwarded", `for=203.0.113.7;proto=https, for="[2001:db8:ffff::2]";by=_lb`)}
	benchKey(b, behindLBFwd, req, "203.0.113.7")
}

func BenchmarkKeyTrustedXRealIP(b *testing.B) {
	req := &http.Request{RemoteAddr: "10.0.0.1:80", Header: hdr("X-Real-IP", "203.0.113.7")}
	benchKey(b, behindLBXRI, req, "203.0.113.7")
}

func BenchmarkClientIPTrustedXFF(b *testing.B) {
	r := mustNew(b, behindLB)
	req := &http.Request{RemoteAddr: "10.0.0.1:80", Header: hdr("X-Forwarded-For", "6.6.6.6, 203.0.113.7, 10.1.0.1, 10.2.0.1")}
	b.ReportAllocs()
	for b.Loop() {
		r.ClientIP(req)
	}
}
