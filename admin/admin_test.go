package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestAdmin(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	ready := errors.New("redis unreachable")
	a, err := New(Config{
		Listen:     "127.0.0.1:9090",
		Gatherer:   reg,
		Registerer: reg,
		Token:      "s3cret",
		Pprof:      true,
		Config:     func() ([]byte, error) { return []byte("storage: memory\n"), nil },
		Ready:      func(context.Context) error { return ready },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	defer srv.Close()
	get := func(path, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := get("/metrics", ""); st != 200 || !strings.Contains(body, "floodgate_test_total 3") {
		t.Errorf("/metrics: %d %q", st, body)
	}
	if st, _ := get("/healthz", ""); st != 200 {
		t.Errorf("/healthz: %d", st)
	}
	if st, body := get("/readyz", ""); st != 503 || !strings.Contains(body, "redis unreachable") {
		t.Errorf("/readyz while not ready: %d %q", st, body)
	}
	ready = nil
	if st, _ := get("/readyz", ""); st != 200 {
		t.Errorf("/readyz when ready: %d", st)
	}
	a.SetDraining(true)
	if st, body := get("/readyz", ""); st != 503 || !strings.Contains(body, "draining") {
		t.Errorf("/readyz while draining: %d %q", st, body)
	}
	if st, _ := get("/v1/config", ""); st != 401 {
		t.Errorf("/v1/config without the token: %d, want 401", st)
	}
	if st, _ := get("/v1/config", "wrong"); st != 401 {
		t.Errorf("/v1/config with a wrong token: %d, want 401", st)
	}
	if st, body := get("/v1/config", "s3cret"); st != 200 || body != "storage: memory\n" {
		t.Errorf("/v1/config: %d %q", st, body)
	}
	if st, _ := get("/debug/pprof/", "s3cret"); st != 200 {
		t.Errorf("pprof: %d", st)
	}
	if st, _ := get("/debug/pprof/", ""); st != 401 {
		t.Errorf("pprof without the token: %d", st)
	}
}

func TestAdminPprofOff(t *testing.T) {
	a, err := New(Config{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
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
