package envoyrules

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: no envoyproxy/ratelimit file panics the parser, and matching
// what it accepts never panics either.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../examples/envoy/*.yaml")
	if len(files) == 0 {
		f.Fatal("no seeds in ../examples/envoy")
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("domain: d\ndescriptors: &a [{key: x, descriptors: *a}, {key: y, descriptors: *a}]\n"))
	f.Add([]byte("domain: d\ndescriptors: [{key: a, value: 'b*', descriptors: [{key: c, rate_limit: {unit: day, requests_per_unit: 3}}]}]\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: a, value: 'x*y*z', share_threshold: true, value_to_metric: true, quota_mode: true, metadata: {m: [1, {n: two}]}, descriptors: [{key: c, rate_limit: {unit: day, requests_per_unit: 3}}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		for _, d := range r.Domains() {
			r.MatchRequest(d, [][]Entry{
				{{"remote_address", "10.0.0.1"}},
				{{"a", "bc"}, {"c", "x"}},
				{{"a", "x-y-z"}, {"c", "x"}},
				{{"header_match", "write"}, {"remote_address", ""}},
			})
		}
		r.Policies()
	})
}
