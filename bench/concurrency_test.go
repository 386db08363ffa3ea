package bench

import (
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/throttle"
)

// throttleImpls build concurrency-limiting middleware of n slots and a
// backlog of backlog requests waiting at most timeout (backlog 0: none).
var throttleImpls = []struct {
	name string
	wrap func(tb testing.TB, n, backlog int, timeout time.Duration, h http.Handler) http.Handler
}{
	{"floodgate", func(_ testing.TB, n, backlog int, timeout time.Duration, h http.Handler) http.Handler {
		return throttle.Backlog(n, backlog, timeout)(h)
	}},
	{"floodgate-noheaders", func(tb testing.TB, n, backlog int, timeout time.Duration, h http.Handler) http.Handler {
		l, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Limit: n, MaxWaiting: backlog, MaxWait: timeout})
		if err != nil {
			tb.Fatal(err)
		}
		t, err := throttle.New(throttle.Config{Limiter: l, NoHeaders: true})
		if err != nil {
			tb.Fatal(err)
		}
		return t.Handler(h)
	}},
	{"chi", func(_ testing.TB, n, backlog int, timeout time.Duration, h http.Handler) http.Handler {
		if backlog == 0 {
			return middleware.Throttle(n)(h)
		}
		return middleware.ThrottleBacklog(n, backlog, timeout)(h)
	}},
}

// blockHeader marks the request that holds a slot for the refused case.
const blockHeader = "X-Block"

// BenchmarkThrottle times a request through each concurrency limiter from
// every core, in three cases:
//
//   - admitted: far fewer requests in flight than slots, so each takes a
//     slot and gives it back;
//   - backlog: eight goroutines per core contend for two slots, so most
//     requests wait in the queue and are handed a slot by a release;
//   - refused: the only slot is held by a request that never ends, so every
//     request is refused at once.
//
// cpu-ns/op is the CPU the process spent per request (see cpuTime): unlike
// ns/op it does not grow when other processes take the machine's cores.
func BenchmarkThrottle(b *testing.B) {
	req, err := http.NewRequest(http.MethodGet, "http://api.test/v1/items", nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, cs := range []struct {
		name        string
		n, backlog  int
		parallelism int
		block       bool
		wantStatus  int
	}{
		{"admitted", 1 << 20, 0, 1, false, http.StatusOK},
		{"backlog", 2, 1 << 10, 8, false, http.StatusOK},
		{"refused", 1, 0, 1, true, 0},
	} {
		for _, im := range throttleImpls {
			b.Run("case="+cs.name+"/impl="+im.name, func(b *testing.B) {
				release := make(chan struct{})
				entered := make(chan struct{})
				h := im.wrap(b, cs.n, cs.backlog, 10*time.Second, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Header.Get(blockHeader) != "" {
						close(entered)
						<-release
						return
					}
					w.Write(okBody)
				}))
				blocked := make(chan struct{})
				if cs.block {
					br := req.Clone(req.Context())
					br.Header.Set(blockHeader, "1")
					go func() {
						defer close(blocked)
						h.ServeHTTP(&nopWriter{h: newHeader()}, br)
					}()
					<-entered
				} else {
					close(blocked)
				}
				// As in runParallel: b.RunParallel without testing.PB, each
				// goroutine with a writer and header map on cache lines of
				// their own (newWriters), so that no request pays a transfer
				// between cores the middleware did not cause.
				procs := cs.parallelism * runtime.GOMAXPROCS(0)
				writers := newWriters(procs)
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ReportAllocs()
				b.ResetTimer()
				cpu := cpuTime()
				for p := range procs {
					wg.Go(func() {
						w := writers[p]
						for n := claim(&next, b.N); n > 0; n = claim(&next, b.N) {
							for range n {
								h.ServeHTTP(w, req)
								ok := w.status == 0 || w.status == http.StatusOK
								if ok != (cs.wantStatus == http.StatusOK) {
									b.Errorf("status %d", w.status)
									return
								}
								w.reset()
							}
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
				b.StopTimer()
				close(release)
				<-blocked
			})
		}
	}
}
