package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
)

func TestGracefulShutdownDrains(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		io.WriteString(w, "slow answer")
	}))
	defer up.Close()
	api := memLimiter(t, "api", floodgate.PerMinute(10))
	s, err := New(Config{
		Proxy: &ProxyConfig{Listen: "127.0.0.1:0", Upstream: up.URL, Routes: []Route{{Limits: []httplimit.Rule{{Limiter: api}}}}},
		Admin: &AdminConfig{Listen: "127.0.0.1:0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := s.Addrs()
	type answer struct {
		status int
		body   string
		err    error
	}
	inflight := make(chan answer, 1)
	go func() {
		resp, err := http.Get("http://" + addrs.Proxy.String() + "/slow")
		if err != nil {
			inflight <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		inflight <- answer{resp.StatusCode, string(b), err}
	}()
	select {
	case <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the request did not reach the upstream")
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	admin := &http.Client{Timeout: 10 * time.Second}
	eventually(t, 20*time.Second, "readiness false while draining", func() bool {
		resp, err := admin.Get("http://" + addrs.Admin.String() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	eventually(t, 20*time.Second, "the proxy listener closed", func() bool {
		c, err := net.DialTimeout("tcp", addrs.Proxy.String(), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	close(release)
	a := <-inflight
	if a.err != nil || a.status != 200 || a.body != "slow answer" {
		t.Errorf("in-flight request: %+v, want its full answer", a)
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestShutdownDeadlineCutsOff(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	arrived := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	s, err := New(Config{Proxy: &ProxyConfig{Listen: "127.0.0.1:0", Upstream: up.URL}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	go http.Get("http://" + s.Addrs().Proxy.String() + "/")
	<-arrived
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with a request that never ends: %v, want the deadline", err)
	}
}

func TestAdmin(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	ready := errors.New("redis unreachable")
	_, addrs := start(t, Config{
		Proxy: &ProxyConfig{},
		Check: &CheckConfig{},
		Admin: &AdminConfig{
			Gatherer: reg,
			Token:    "s3cret",
			Pprof:    true,
			Config:   func() ([]byte, error) { return []byte("storage: memory\n"), nil },
			Ready:    func(context.Context) error { return ready },
		},
	})
	hc := &http.Client{}
	get := func(addr, path, token string) (int, string) {
		t.Helper()
		req := newRequest(t, "GET", "http://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, body := do(t, hc, req)
		return resp.StatusCode, body
	}
	admin := addrs.Admin.String()
	if st, body := get(admin, "/metrics", ""); st != 200 || !strings.Contains(body, "floodgate_test_total 3") {
		t.Errorf("/metrics: %d %q", st, body)
	}
	if st, _ := get(admin, "/healthz", ""); st != 200 {
		t.Errorf("/healthz: %d", st)
	}
	if st, body := get(admin, "/readyz", ""); st != 503 || !strings.Contains(body, "redis unreachable") {
		t.Errorf("/readyz while not ready: %d %q", st, body)
	}
	ready = nil
	if st, _ := get(admin, "/readyz", ""); st != 200 {
		t.Errorf("/readyz when ready: %d", st)
	}
	if st, _ := get(admin, "/v1/config", ""); st != 401 {
		t.Errorf("/v1/config without the token: %d, want 401", st)
	}
	if st, _ := get(admin, "/v1/config", "wrong"); st != 401 {
		t.Errorf("/v1/config with a wrong token: %d, want 401", st)
	}
	if st, body := get(admin, "/v1/config", "s3cret"); st != 200 || body != "storage: memory\n" {
		t.Errorf("/v1/config: %d %q", st, body)
	}
	if st, _ := get(admin, "/debug/pprof/", "s3cret"); st != 200 {
		t.Errorf("pprof: %d", st)
	}
	if st, _ := get(admin, "/debug/pprof/", ""); st != 401 {
		t.Errorf("pprof without the token: %d", st)
	}
	// The admin routes are never served on the proxy or the check API.
	for _, addr := range []string{addrs.Proxy.String(), addrs.Check.String()} {
		for _, path := range []string{"/metrics", "/healthz", "/readyz", "/v1/config", "/debug/pprof/"} {
			_, body := get(addr, path, "s3cret")
			if strings.Contains(body, "floodgate_test_total") || strings.Contains(body, "storage: memory") || body == "ok\n" || body == "ready\n" || strings.Contains(body, "goroutine") {
				t.Errorf("%s%s answered an admin route: %q", addr, path, body)
			}
		}
	}
}

func TestAdminPprofOff(t *testing.T) {
	a := NewAdmin(AdminConfig{})
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/", nil))
	if rec.Code != 404 {
		t.Errorf("pprof when disabled: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/config", nil))
	if rec.Code != 404 {
		t.Errorf("/v1/config without a renderer: %d", rec.Code)
	}
}

func TestStartFailsClean(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, err := New(Config{Check: &CheckConfig{Listen: "127.0.0.1:0"}, Admin: &AdminConfig{Listen: ln.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err == nil || !strings.Contains(err.Error(), "admin") {
		t.Errorf("Start on a taken port: %v", err)
	}
}

func TestRunStopsOnContext(t *testing.T) {
	s, err := New(Config{Check: &CheckConfig{Listen: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
