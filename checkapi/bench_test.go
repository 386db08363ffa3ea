package checkapi

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// BenchmarkCheckAPI is the check handler over the memory engine, without
// the network: the cost of parsing, deciding and answering.
func BenchmarkCheckAPI(b *testing.B) {
	lim := floodgatetest.MemLimiter(b, "api", floodgate.PerSecond(1_000_000_000))
	c := New(Config{Policies: map[string]floodgate.Limiter{"api": lim}})
	body := `{"policy":"api","key":"user:42"}`
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("POST", "http://127.0.0.1"+Path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			c.ServeHTTP(rec, req)
			if rec.Code != 200 {
				b.Fatalf("status %d", rec.Code)
			}
		}
	})
}
