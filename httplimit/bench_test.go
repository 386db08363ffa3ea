package httplimit_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
	"github.com/floodgate-go/floodgate/memstore"
)

// The benchmarks measure the middleware's overhead over a bare handler: run
// BenchmarkMiddlewareBare alongside and subtract. The response writer keeps
// its header map between requests, as net/http's does not: a fresh map
// costs both sides the same, and would hide the middleware's own cost.
//
//	go test -run '^$' -bench Middleware -benchmem ./httplimit

// nopWriter is a ResponseWriter that discards the response.
type nopWriter struct {
	h      http.Header
	status int
}

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(code int)        { w.status = code }

func (w *nopWriter) reset() {
	clear(w.h)
	w.status = 0
}

var okBody = []byte("ok")

// bare is the handler every benchmark wraps.
var bare = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(okBody) })

// clients returns n requests from n different IPv4 clients.
func clients(n int) []*http.Request {
	reqs := make([]*http.Request, n)
	for i := range reqs {
		r, _ := http.NewRequest("GET", "http://example.com/api/items", nil)
		r.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:4711", i>>16&255, i>>8&255, i&255)
		reqs[i] = r
	}
	return reqs
}

func benchStore(b *testing.B) *memstore.Store {
	s := memstore.New(memstore.Options{})
	b.Cleanup(func() { s.Close() })
	return s
}

func benchLimiter(b *testing.B, s *memstore.Store, name string, l floodgate.Limit) *floodgate.PolicyLimiter {
	lim, err := floodgate.New(s, floodgate.Policy{Name: name, Limits: []floodgate.Limit{l}})
	if err != nil {
		b.Fatal(err)
	}
	return lim
}

// roomy admits every request of a benchmark run.
var roomy = floodgate.PerMinute(100_000_000)

func runServe(b *testing.B, h http.Handler, reqs []*http.Request, want int) {
	w := &nopWriter{h: make(http.Header)}
	h.ServeHTTP(w, reqs[0])
	w.reset()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		h.ServeHTTP(w, reqs[i&(len(reqs)-1)])
		if w.status != want && !(want == 200 && w.status == 0) {
			b.Fatalf("status %d, want %d", w.status, want)
		}
		w.reset()
	}
}

func BenchmarkMiddlewareBare(b *testing.B) {
	runServe(b, bare, clients(1024), 200)
}

// One rule, memory engine, keyed by client IP, all header fields: the
// common case.
func BenchmarkMiddlewareAllowed(b *testing.B) {
	s := benchStore(b)
	for _, bc := range []struct {
		name    string
		headers httplimit.Headers
	}{
		{"all-headers", httplimit.Headers{}},
		{"x-ratelimit-only", httplimit.Headers{DisableRateLimit: true}},
		{"no-headers", httplimit.Headers{DisableRateLimit: true, DisableXRateLimit: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			mw, err := httplimit.New(httplimit.Config{
				Headers: bc.headers,
				Rules:   []httplimit.Rule{{Limiter: benchLimiter(b, s, "allowed-"+bc.name, roomy)}},
			})
			if err != nil {
				b.Fatal(err)
			}
			runServe(b, mw.Handler(bare), clients(1024), 200)
		})
	}
}

// Every request denied: the 429 path with the problem+json body.
func BenchmarkMiddlewareDenied(b *testing.B) {
	s := benchStore(b)
	mw, err := httplimit.New(httplimit.Config{
		Rules: []httplimit.Rule{{Limiter: benchLimiter(b, s, "denied", floodgate.PerHour(1))}},
	})
	if err != nil {
		b.Fatal(err)
	}
	runServe(b, mw.Handler(bare), clients(1), 429)
}

// Global → per-route → per-IP, three rules through floodgate.AllowAll.
func BenchmarkMiddlewareLayered(b *testing.B) {
	s := benchStore(b)
	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{
		{Limiter: benchLimiter(b, s, "global", roomy), Key: httplimit.KeyConst("all")},
		{Limiter: benchLimiter(b, s, "api", roomy), Match: httpmatch.PathPrefix("/api")},
		{Limiter: benchLimiter(b, s, "ip", roomy)},
	}})
	if err != nil {
		b.Fatal(err)
	}
	runServe(b, mw.Handler(bare), clients(1024), 200)
}

// A rule that counts only failures: charge, serve through the status
// writer, refund.
func BenchmarkMiddlewareCountFailed(b *testing.B) {
	s := benchStore(b)
	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{
		Limiter: benchLimiter(b, s, "failures", floodgate.PerMinute(10)),
		Count:   httplimit.CountFailed,
	}}})
	if err != nil {
		b.Fatal(err)
	}
	runServe(b, mw.Handler(bare), clients(1024), 200)
}

// Parallel requests from many clients.
func BenchmarkMiddlewareParallel(b *testing.B) {
	s := benchStore(b)
	mw, err := httplimit.New(httplimit.Config{
		Rules: []httplimit.Rule{{Limiter: benchLimiter(b, s, "parallel", roomy)}},
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"bare", bare}, {"middleware", mw.Handler(bare)}} {
		b.Run(bc.name, func(b *testing.B) {
			reqs := clients(4096)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				w := &nopWriter{h: make(http.Header)}
				i := int(time.Now().UnixNano())
				for pb.Next() {
					i++
					bc.h.ServeHTTP(w, reqs[i&(len(reqs)-1)])
					w.reset()
				}
			})
		})
	}
}
