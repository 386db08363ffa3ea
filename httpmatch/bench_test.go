package httpmatch_test

import (
	"net/http/httptest"
	"testing"

	"github.com/floodgate-go/floodgate/httpmatch"
)

// BenchmarkMatch is the cost of matching a route: a path prefix and a
// pattern, on a plain path and on one the matcher has to rewrite (case,
// path parameters, an extension).
func BenchmarkMatch(b *testing.B) {
	for _, m := range []struct {
		name string
		m    httpmatch.Match
	}{
		{"prefix", httpmatch.Match{PathPrefix: []string{"/api/v1"}}},
		{"pattern", httpmatch.Match{Path: "/api/v1/users/{id}"}},
	} {
		c, err := m.m.Compile()
		if err != nil {
			b.Fatal(err)
		}
		for _, path := range []string{"/api/v1/users/42", "/API/v1;x/users/42.json"} {
			r := httptest.NewRequest("GET", "http://x"+path, nil)
			b.Run(m.name+path, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					c.Match(r)
				}
			})
		}
	}
}
