package envoyrls

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// BenchmarkShouldRateLimit is the Envoy service over the memory engine,
// without gRPC: the cost of mapping descriptors, deciding and building the
// response.
func BenchmarkShouldRateLimit(b *testing.B) {
	rules, lims := rulesOf(b, "domain: d\ndescriptors: [{key: k, value: v, rate_limit: {unit: second, requests_per_unit: 1000000000}}]\n", nil)
	s, err := New(Config{Rules: rules, Limiters: lims, DeadlineBound: true})
	if err != nil {
		b.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(nil, "k", "v")}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := s.ShouldRateLimit(context.Background(), req)
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				b.Fatal(resp, err)
			}
		}
	})
}

// BenchmarkShouldRateLimitTwo is BenchmarkShouldRateLimit with two
// descriptors of two rules per call, decided together.
func BenchmarkShouldRateLimitTwo(b *testing.B) {
	rules, lims := rulesOf(b, "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1000000000}}, {key: t, rate_limit: {unit: second, requests_per_unit: 1000000000}}]\n", nil)
	s, err := New(Config{Rules: rules, Limiters: lims, DeadlineBound: true})
	if err != nil {
		b.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(nil, "k", "v"), desc(nil, "t", "w")}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := s.ShouldRateLimit(context.Background(), req)
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				b.Fatal(resp, err)
			}
		}
	})
}
