package envoyrules

import "testing"

// BenchmarkMatch is the per-descriptor cost on the Envoy service's request
// path.
func BenchmarkMatch(b *testing.B) {
	r, err := Load("../examples/envoy/ratelimit-config.yaml")
	if err != nil {
		b.Fatal(err)
	}
	d := []Entry{{"api_key", "partner-acme"}, {"remote_address", "10.0.0.1"}}
	b.ReportAllocs()
	for b.Loop() {
		if r.Match("edge", d) == nil {
			b.Fatal("no match")
		}
	}
}
