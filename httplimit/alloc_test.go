//go:build !race

package httplimit_test

import (
	"net/http"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
)

// The race detector changes allocation counts, so this runs without it.
func TestAllocsPerRequest(t *testing.T) {
	e := newEnv(t)
	roomy := floodgate.PerMinute(1_000_000)
	tests := []struct {
		name string
		cfg  httplimit.Config
		want int
		max  float64
	}{
		{name: "allowed, all headers", want: 200, max: 1,
			cfg: httplimit.Config{Rules: []httplimit.Rule{{Limiter: e.limiter("a", roomy)}}}},
		{name: "allowed, no headers", want: 200, max: 0,
			cfg: httplimit.Config{Headers: httplimit.Headers{DisableRateLimit: true, DisableXRateLimit: true},
				Rules: []httplimit.Rule{{Limiter: e.limiter("b", roomy)}}}},
		{name: "denied, problem body", want: 429, max: 1,
			cfg: httplimit.Config{Rules: []httplimit.Rule{{Limiter: e.limiter("c", floodgate.PerHour(1))}}}},
		{name: "layered, three rules", want: 200, max: 2,
			cfg: httplimit.Config{Rules: []httplimit.Rule{
				{Limiter: e.limiter("d1", roomy), Key: httplimit.KeyConst("all")},
				{Limiter: e.limiter("d2", roomy), Match: httpmatch.PathPrefix("/api")},
				{Limiter: e.limiter("d3", roomy)},
			}}},
		{name: "count failed", want: 200, max: 1,
			cfg: httplimit.Config{Rules: []httplimit.Rule{{Limiter: e.limiter("e", roomy), Count: httplimit.CountFailed}}}},
		{name: "source and unix reset", want: 200, max: 1,
			cfg: httplimit.Config{Headers: httplimit.Headers{Source: true, UnixReset: true}, Clock: e.clock,
				Rules: []httplimit.Rule{{Limiter: e.limiter("f", roomy)}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := mustNew(t, tt.cfg).Handler(bare)
			req, _ := http.NewRequest("GET", "http://example.com/api/items", nil)
			req.RemoteAddr = "203.0.113.7:4711"
			w := &nopWriter{h: make(http.Header)}
			h.ServeHTTP(w, req)
			w.reset()
			h.ServeHTTP(w, req)
			if w.status != tt.want && !(tt.want == 200 && w.status == 0) {
				t.Fatalf("status %d, want %d", w.status, tt.want)
			}
			n := testing.AllocsPerRun(200, func() {
				w.reset()
				h.ServeHTTP(w, req)
			})
			if n > tt.max {
				t.Errorf("%v allocations per request, want at most %v", n, tt.max)
			}
		})
	}
}
