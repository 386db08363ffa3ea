package bench

import (
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/go-chi/httprate"
	ulule "github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
)

// httpImpls wrap a handler in each middleware, keyed by client IP (the TCP
// peer: no proxy header is trusted) with the same quota. bare is the handler
// alone; the report subtracts it.
var httpImpls = []struct {
	name string
	wrap func(tb testing.TB, q quota, h http.Handler) (http.Handler, func())
}{
	{"bare", func(_ testing.TB, _ quota, h http.Handler) (http.Handler, func()) { return h, func() {} }},
	{"floodgate", wrapFloodgate},
	{"httprate", wrapHTTPRate},
	{"httprate-chi", wrapHTTPRateChi},
	{"ulule", wrapUlule},
}

// wrapFloodgate is httplimit over the memory engine with its defaults: the
// key is the client IP (httplimit.KeyByIP(nil)) and every header family is
// sent.
func wrapFloodgate(tb testing.TB, q quota, h http.Handler) (http.Handler, func()) {
	tb.Helper()
	store := memstore.New(memstore.Options{})
	lim, err := floodgate.New(store, floodgate.Policy{
		Name:   "api",
		Limits: []floodgate.Limit{{Rate: q.rate, Period: q.period}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	mw, err := httplimit.New(httplimit.Config{Rules: []httplimit.Rule{{Limiter: lim}}})
	if err != nil {
		tb.Fatal(err)
	}
	return mw.Handler(h), func() { store.Close() }
}

// wrapHTTPRate keys by the TCP peer inside httprate's KeyFunc, as its
// deprecated KeyByIP did: the cheapest way to key httprate by IP.
func wrapHTTPRate(_ testing.TB, q quota, h http.Handler) (http.Handler, func()) {
	key := func(r *http.Request) (string, error) {
		ip, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			ip = r.RemoteAddr
		}
		return httprate.CanonicalizeIP(ip), nil
	}
	return httprate.LimitBy(int(q.rate), q.period, key)(h), func() {}
}

// wrapHTTPRateChi is httprate keyed by IP exactly as its README shows for a
// server that clients reach directly: chi's ClientIPFromRemoteAddr resolves
// the address into the request context, and LimitBy reads it back.
func wrapHTTPRateChi(_ testing.TB, q quota, h http.Handler) (http.Handler, func()) {
	key := func(r *http.Request) (string, error) {
		return httprate.CanonicalizeIP(middleware.GetClientIP(r.Context())), nil
	}
	return middleware.ClientIPFromRemoteAddr(httprate.LimitBy(int(q.rate), q.period, key)(h)), func() {}
}

// wrapUlule is ulule's stdlib middleware over its memory store; its default
// key is the peer's IP (TrustForwardHeader is off by default).
func wrapUlule(_ testing.TB, q quota, h http.Handler) (http.Handler, func()) {
	lim := ulule.New(ululemem.NewStore(), ulule.Rate{Period: q.period, Limit: q.rate})
	return stdlib.NewMiddleware(lim).Handler(h), func() {}
}

// nopWriter discards the response. By default it keeps its header map
// between requests (cleared, not reallocated), which isolates the
// middleware's own allocations; with fresh set it makes a new map for every
// request, as net/http does, so that the cost of filling an empty map with
// a middleware's fields counts too.
type nopWriter struct {
	h      http.Header
	status int
	fresh  bool
	guard  [2]http.Header // see newWriters
	_      [88]byte       // 128 bytes: a writer has its cache lines to itself
}

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(code int)        { w.status = code }

func (w *nopWriter) reset() {
	if w.fresh {
		w.h = make(http.Header)
	} else {
		clear(w.h)
	}
	w.status = 0
}

// newWriters returns n writers, one per goroutine, that share no cache
// line. Every request writes to its writer and its header map, and two
// goroutines writing to one line would pay a transfer between cores on
// every request (see runParallel). The writer is padded; each map is
// allocated between two guard maps, so that the next goroutine's map of the
// same size class lies at least two objects away.
func newWriters(n int) []*nopWriter {
	ws := make([]*nopWriter, n)
	for i := range ws {
		w := &nopWriter{}
		w.guard[0] = newHeader()
		w.h = newHeader()
		w.guard[1] = newHeader()
		ws[i] = w
	}
	return ws
}

// newHeader returns an empty header map that has already held a field, so
// that its table is allocated now and not in the timed loop.
func newHeader() http.Header {
	h := make(http.Header)
	h.Set("X-Warm", "1")
	clear(h)
	return h
}

var okBody = []byte("ok")

// okHandler is the handler every implementation wraps.
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(okBody) })

// ipRequests returns one GET request from each of n clients, 10.0.0.0:4711
// upwards.
func ipRequests(n int) []*http.Request {
	reqs := make([]*http.Request, n)
	for i := range reqs {
		r, err := http.NewRequest(http.MethodGet, "http://api.test/v1/items", nil)
		if err != nil {
			panic(err)
		}
		r.RemoteAddr = ipKey(i) + ":4711"
		reqs[i] = r
	}
	return reqs
}

// BenchmarkHTTP times a request through each middleware from all cores,
// 65,536 clients, the 64k workload's quota (every request allowed). The
// overhead of a middleware is its ns/op minus bare's. As in runParallel,
// requests are walked in order and every client first came in a shuffled
// order. headers=reused keeps each writer's header map (the middleware's
// own work alone); headers=fresh gives every request a new one, as
// net/http does.
func BenchmarkHTTP(b *testing.B) {
	reqs := ipRequests(1 << 16)
	for _, headers := range []string{"reused", "fresh"} {
		for _, im := range httpImpls {
			b.Run("impl="+im.name+"/clients=64k/headers="+headers, func(b *testing.B) {
				benchHTTP(b, reqs, im.wrap, headers == "fresh")
			})
		}
	}
}

func benchHTTP(b *testing.B, reqs []*http.Request, wrap func(testing.TB, quota, http.Handler) (http.Handler, func()), fresh bool) {
	h, done := wrap(b, throughputQuota, okHandler)
	defer done()
	w := &nopWriter{h: make(http.Header)}
	for _, i := range shuffled(len(reqs)) {
		h.ServeHTTP(w, reqs[i])
		w.reset()
	}
	mask := len(reqs) - 1
	var next, allowed atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	// As in runParallel: b.RunParallel without testing.PB.
	procs := runtime.GOMAXPROCS(0)
	writers := newWriters(procs)
	for p := range procs {
		wg.Go(func() {
			w := writers[p]
			w.fresh = fresh
			i := int(splitmix(uint64(p))) & mask
			var a int64
			for n := claim(&next, b.N); n > 0; n = claim(&next, b.N) {
				for range n {
					h.ServeHTTP(w, reqs[i])
					if w.status == 0 || w.status == http.StatusOK {
						a++
					}
					w.reset()
					i = (i + 1) & mask
				}
			}
			allowed.Add(a)
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
}

// TestMiddlewaresLimit checks that every middleware limits by client IP: one
// client gets its burst and then 429, another client is not affected, and
// the first client's X-Forwarded-For does not give it a new key.
func TestMiddlewaresLimit(t *testing.T) {
	for _, im := range httpImpls[1:] {
		t.Run(im.name, func(t *testing.T) {
			h, done := im.wrap(t, quota{rate: 5, period: time.Hour}, okHandler)
			defer done()
			serve := func(i int, xff string) int {
				r := ipRequests(i + 1)[i]
				if xff != "" {
					r.Header.Set("X-Forwarded-For", xff)
				}
				w := &nopWriter{h: make(http.Header)}
				h.ServeHTTP(w, r)
				if w.status == 0 {
					return http.StatusOK
				}
				return w.status
			}
			for i := range 5 {
				if got := serve(1, strconv.Itoa(i)+".1.1.1"); got != http.StatusOK {
					t.Fatalf("request %d: status %d, want 200", i+1, got)
				}
			}
			if got := serve(1, "9.9.9.9"); got != http.StatusTooManyRequests {
				t.Fatalf("request 6: status %d, want 429", got)
			}
			if got := serve(2, ""); got != http.StatusOK {
				t.Fatalf("other client: status %d, want 200", got)
			}
		})
	}
}
