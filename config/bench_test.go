package config

import "testing"

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
