package proxy

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/throttle"
	"github.com/floodgate-go/floodgate/floodgatetest"
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
	for _, mode := range []string{"mode=off", "mode=limit", "mode=limit+concurrency"} {
		name := mode
		cfg := Config{Upstream: up.URL, Logger: slog.New(slog.DiscardHandler)}
		if mode != "mode=off" {
			lim := floodgatetest.MemLimiter(b, "api", floodgate.PerSecond(1_000_000_000))
			cfg.Routes = []Route{{Limits: []httplimit.Rule{{Limiter: lim}}}}
		}
		if mode == "mode=limit+concurrency" {
			// Slots every request finds free: the cost of taking and
			// giving back one, inside the rate limit.
			cl, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Limit: 1 << 20})
			if err != nil {
				b.Fatal(err)
			}
			if cfg.Routes[0].Concurrency, err = throttle.New(throttle.Config{Limiter: cl}); err != nil {
				b.Fatal(err)
			}
		}
		p, err := New(cfg)
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
