package httplimit_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
)

// env is a memory store on a pinned clock.
type env struct {
	t     *testing.T
	clock *floodgatetest.Clock
	store *memstore.Store
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c := floodgatetest.NewClock(floodgatetest.Start)
	s := memstore.New(memstore.Options{Clock: c, SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return &env{t: t, clock: c, store: s}
}

func (e *env) limiter(name string, limits ...floodgate.Limit) *floodgate.PolicyLimiter {
	e.t.Helper()
	l, err := floodgate.New(e.store, floodgate.Policy{Name: name, Limits: limits})
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

func mustNew(t *testing.T, cfg httplimit.Config) *httplimit.Middleware {
	t.Helper()
	m, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// ok answers 200 "ok".
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.WriteString(w, "ok")
})

// get serves one request from remote through h and returns the recorder.
func get(h http.Handler, target, remote string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", target, nil)
	req.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// rateHeaders are the fields the middleware may set.
var rateHeaders = []string{
	"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-Source",
	"Retry-After", "RateLimit", "RateLimit-Policy",
}

// checkHeaders compares the rate-limit fields of h with want exactly: every
// field in want with its values, and no other rate-limit field.
func checkHeaders(t *testing.T, h http.Header, want map[string]string) {
	t.Helper()
	for _, name := range rateHeaders {
		got := strings.Join(h.Values(name), "\n")
		w, listed := want[name]
		switch {
		case !listed && len(h.Values(name)) > 0:
			t.Errorf("%s = %q, want none", name, got)
		case listed && got != w:
			t.Errorf("%s = %q, want %q", name, got, w)
		}
	}
	for name := range want {
		if !contains(rateHeaders, name) && h.Get(name) != want[name] {
			t.Errorf("%s = %q, want %q", name, h.Get(name), want[name])
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// serve starts a real server on loopback and returns its base URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ErrorLog: discardLog(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return "http://" + ln.Addr().String()
}

// failing is a Limiter whose engine is down.
type failing struct{}

var errDown = errors.New("engine down")

func (failing) Name() string { return "failing" }

func (failing) AllowN(ctx context.Context, key string, cost int64) (floodgate.Result, error) {
	return floodgate.Result{}, errDown
}
func (failing) RefundN(ctx context.Context, key string, cost int64) error { return errDown }
func (failing) Reset(ctx context.Context, key string) error               { return errDown }
func (failing) ReserveN(context.Context, string, int64) (*floodgate.Reservation, error) {
	return nil, errDown
}

func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }
