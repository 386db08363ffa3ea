package daemon

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/clock"
)

// With Options.Clock the daemon decides on a memory engine at that
// clock's time, whatever the storage section says (here a Redis nobody
// listens on, never dialled), and EvaluateHTTP evaluates as the proxy's
// listener would without forwarding: a request after the period passes
// again only once the clock says so.
func TestEvaluateHTTPOnAClock(t *testing.T) {
	cfg := mustParse(t, `
storage:
  engine: redis
  redis:
    addrs: ["127.0.0.1:1"]
  failure:
    mode: fail_closed
policies:
  api:
    rate: 1/min
proxy:
  listen: 127.0.0.1:0
  upstream: http://127.0.0.1:1
  routes:
    - name: api
      limits:
        - {policy: api, key: ip}
`)
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).UnixNano())
	d, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler), NoStatus: true, Clock: clock.Func(now.Load)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	decide := func() int {
		t.Helper()
		r := httptest.NewRequest("GET", "/x", nil)
		dec, err := d.EvaluateHTTP(r, http.StatusOK, nil)
		if err != nil || dec.Route != "api" {
			t.Fatalf("decision %+v, %v", dec, err)
		}
		return dec.Status
	}
	if s := decide(); s != 0 {
		t.Fatalf("first request: %d", s)
	}
	if s := decide(); s != http.StatusTooManyRequests {
		t.Fatalf("second request at the same time: %d; want 429", s)
	}
	now.Add(int64(59 * time.Second))
	if s := decide(); s != http.StatusTooManyRequests {
		t.Fatalf("after 59s: %d; want 429", s)
	}
	now.Add(int64(time.Second))
	if s := decide(); s != 0 {
		t.Fatalf("after a minute: %d; want allowed", s)
	}

	noProxy := mustParse(t, "policies:\n  a:\n    rate: 1/s\ncheck:\n  listen: 127.0.0.1:0\n")
	d2, err := New(noProxy, Options{Logger: slog.New(slog.DiscardHandler), Clock: clock.Func(now.Load)})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if _, err := d2.EvaluateHTTP(httptest.NewRequest("GET", "/", nil), 200, nil); !errors.Is(err, ErrNoProxy) {
		t.Fatalf("without a proxy: %v; want ErrNoProxy", err)
	}
}
