//go:build !race

package clientip

import (
	"net/http"
	"testing"
)

// The race detector changes allocation counts, so these run without it.
func TestAllocs(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		remote string
		header http.Header
		key    string
		max    float64
	}{
		{name: "ipv4 peer", remote: "203.0.113.7:4711", key: "203.0.113.7", max: 0},
		{name: "ipv4 untrusted peer behind lb config", cfg: behindLB, remote: "203.0.113.7:4711",
			header: hdr("X-Forwarded-For", "6.6.6.6"), key: "203.0.113.7", max: 0},
		{name: "ipv6 peer /64", remote: "[2001:db8:1:2::1]:4711", key: "2001:db8:1:2::/64", max: 1},
		{name: "trusted xff chain", cfg: behindLB, remote: "10.0.0.1:80",
			header: hdr("X-Forwarded-For", "6.6.6.6, 203.0.113.7, 10.1.0.1, 10.2.0.1"), key: "203.0.113.7", max: 1},
		{name: "trusted forwarded chain", cfg: behindLBFwd, remote: "10.0.0.1:80",
			header: hdr("Forwarded", `for=203.0.113.7;proto=https, for="[2001:db8:ffff::2]"`), key: "203.0.113.7", max: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustNew(t, tt.cfg)
			req := &http.Request{RemoteAddr: tt.remote, Header: tt.header}
			if k := r.Key(req); k != tt.key {
				t.Fatalf("Key = %q, want %q", k, tt.key)
			}
			if n := testing.AllocsPerRun(100, func() { r.Key(req) }); n > tt.max {
				t.Errorf("Key allocates %v times, want at most %v", n, tt.max)
			}
			if n := testing.AllocsPerRun(100, func() { r.ClientIP(req) }); n > 0 {
				t.Errorf("ClientIP allocates %v times, want 0", n)
			}
		})
	}
}
