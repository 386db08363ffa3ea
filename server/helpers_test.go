package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// memLimiter returns a limiter of one policy over a fresh memory store.
func memLimiter(t testing.TB, name string, limits ...floodgate.Limit) floodgate.Limiter {
	t.Helper()
	st := memstore.New(memstore.Options{})
	t.Cleanup(func() { st.Close() })
	l, err := floodgate.New(st, floodgate.Policy{Name: name, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// start starts a Server of cfg with every listener on a free loopback port
// and shuts it down when t ends.
func start(t testing.TB, cfg Config) (*Server, Addrs) {
	t.Helper()
	if cfg.Proxy != nil && cfg.Proxy.Listen == "" {
		cfg.Proxy.Listen = "127.0.0.1:0"
	}
	if cfg.Check != nil && cfg.Check.Listen == "" {
		cfg.Check.Listen = "127.0.0.1:0"
	}
	if cfg.Envoy != nil && cfg.Envoy.Listen == "" {
		cfg.Envoy.Listen = "127.0.0.1:0"
	}
	if cfg.Admin != nil && cfg.Admin.Listen == "" {
		cfg.Admin.Listen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s, s.Addrs()
}

// get sends a request and returns the response with its body read.
func do(t testing.TB, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func newRequest(t testing.TB, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
