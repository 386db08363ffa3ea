package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
)

// BenchmarkProxy serves requests through the proxy to a real upstream on
// loopback, with and without a limit on the route (one that every request
// passes), so the ratio of the two is the cost of limiting.
func BenchmarkProxy(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	}))
	defer up.Close()
	for _, limit := range []bool{false, true} {
		name := "limit=off"
		cfg := ProxyConfig{Upstream: up.URL, Logger: slog.New(slog.DiscardHandler)}
		if limit {
			name = "limit=on"
			lim := memLimiter(b, "api", floodgate.PerSecond(1_000_000_000))
			cfg.Routes = []Route{{Limits: []httplimit.Rule{{Limiter: lim}}}}
		}
		p, err := NewProxy(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					rec := httptest.NewRecorder()
					req := httptest.NewRequest("GET", "/x", nil)
					p.ServeHTTP(rec, req)
					if rec.Code != 200 {
						b.Fatalf("status %d", rec.Code)
					}
				}
			})
		})
	}
}

// BenchmarkCheckAPI is the check handler over the memory engine, without
// the network: the cost of parsing, deciding and answering.
func BenchmarkCheckAPI(b *testing.B) {
	lim := memLimiter(b, "api", floodgate.PerSecond(1_000_000_000))
	c := NewCheckAPI(CheckConfig{Policies: map[string]floodgate.Limiter{"api": lim}})
	body := `{"policy":"api","key":"user:42"}`
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rec := httptest.NewRecorder()
			c.ServeHTTP(rec, httptest.NewRequest("POST", CheckPath, strings.NewReader(body)))
			if rec.Code != 200 {
				b.Fatalf("status %d", rec.Code)
			}
		}
	})
}

// BenchmarkShouldRateLimit is the Envoy service over the memory engine,
// without gRPC: the cost of mapping descriptors, deciding and building the
// response.
func BenchmarkShouldRateLimit(b *testing.B) {
	lim := memLimiter(b, "api", floodgate.PerSecond(1_000_000_000))
	s, err := NewRLS(EnvoyConfig{Descriptors: mapDescriptors{"d|k=v": {{Name: "api", Limiter: lim}}}})
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
