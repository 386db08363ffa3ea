package httplimit

import (
	"strings"
	"testing"
)

// FuzzHostMatch feeds route host matching arbitrary Host headers: it never
// panics, and an exact route host matches only that host, whatever its
// case, port or trailing dot.
func FuzzHostMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"example.com", "example.com"}, {"example.com", "EXAMPLE.com:8080"}, {".example.com", "a.example.com"},
		{".example.com", "example.com"}, {"example.com", "[::1]:80"}, {"example.com", "example.com."}, {"a", ""}, {"a", "["},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, want, host string) {
		want = strings.ToLower(want)
		ok := hostMatches(want, host)
		if ok && want != "" && !strings.HasPrefix(want, ".") && !strings.Contains(strings.ToLower(host), want) {
			t.Fatalf("route host %q matched Host %q", want, host)
		}
	})
}
