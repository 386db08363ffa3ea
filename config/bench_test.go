package config

import "testing"

// BenchmarkEnvoyMatch is the per-descriptor cost on the Envoy service's
// request path.
func BenchmarkEnvoyMatch(b *testing.B) {
	r, err := LoadEnvoy("../examples/envoy/ratelimit-config.yaml")
	if err != nil {
		b.Fatal(err)
	}
	d := []DescriptorEntry{{"api_key", "partner-acme"}, {"remote_address", "10.0.0.1"}}
	b.ReportAllocs()
	for b.Loop() {
		if r.Match("edge", d) == nil {
			b.Fatal("no match")
		}
	}
}

func BenchmarkParseExample(b *testing.B) {
	b.Setenv("REDIS_PASSWORD", "x")
	b.Setenv("ADMIN_TOKEN", "y")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load("../examples/config/redis-hybrid.yaml"); err != nil {
			b.Fatal(err)
		}
	}
}
