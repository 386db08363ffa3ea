//go:build !race

package throttle_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/throttle"
)

// TestThrottleAllocsPerRequest: an in-process Throttle admits and refuses
// without allocating, headers included, whatever its limit. (Every admitted
// request allocated a token, a Permit and its hold, and under a limit of
// 1024 or more its two header values: two more each.) The race detector
// changes allocation counts, so this runs without it.
func TestThrottleAllocsPerRequest(t *testing.T) {
	held, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, p := held.Acquire(context.Background(), "")
	defer p.Release()
	refusing, err := throttle.New(throttle.Config{Limiter: held})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		mw   func(http.Handler) http.Handler
		want int
	}{
		{"admitted, limit 100", throttle.Limit(100), 0},
		{"admitted, limit 2^20", throttle.Limit(1 << 20), 0},
		{"admitted, backlog", throttle.Backlog(1<<20, 16, 0), 0},
		{"refused", refusing.Handler, http.StatusServiceUnavailable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.mw(bare)
			req, _ := http.NewRequest("GET", "http://example.com/api/items", nil)
			w := &nopWriter{h: make(http.Header)}
			h.ServeHTTP(w, req)
			if w.status != tt.want {
				t.Fatalf("status %d, want %d", w.status, tt.want)
			}
			if w.h.Get(throttle.HeaderLimit) == "" {
				t.Fatalf("no %s", throttle.HeaderLimit)
			}
			n := testing.AllocsPerRun(200, func() {
				w.reset()
				h.ServeHTTP(w, req)
			})
			if n != 0 {
				t.Errorf("%v allocations per request, want 0", n)
			}
		})
	}
}

// nopWriter is a ResponseWriter that discards the response and keeps its
// status.
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

// bare is the handler the middleware wraps.
var bare = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(okBody) })
