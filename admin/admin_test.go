package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
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
	a.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/debug/pprof/", nil))
	if rec.Code != 404 {
		t.Errorf("pprof when disabled: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/v1/config", nil))
	if rec.Code != 404 {
		t.Errorf("/v1/config without a renderer: %d", rec.Code)
	}
}

// TestAdminRefusesOtherSites: a web page cannot use a browser to read or
// reset through the admin listener: a Host that is not this listener's
// name (DNS rebinding) is refused, and so is a cross-site request that
// would change state; the key stays as it was.
func TestAdminRefusesOtherSites(t *testing.T) {
	st := memstore.New(memstore.Options{})
	defer st.Close()
	lim, err := floodgate.New(st, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerMinute(1)}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Listen: "127.0.0.1:9090", Registerer: prometheus.NewRegistry(), AllowedHosts: []string{"floodgate.internal"},
		Keys: func() map[string]floodgate.Limiter { return map[string]floodgate.Limiter{"api": lim} }})
	if err != nil {
		t.Fatal(err)
	}
	floodgate.Allow(context.Background(), lim, "k") // spent
	for _, tc := range []struct {
		host, origin string
		want         int
	}{
		{"attacker.example", "", 403},
		{"attacker.example:9090", "http://attacker.example:9090", 403},
		{"127.0.0.1:9090", "http://attacker.example", 403},
		{"floodgate.internal:9090", "http://evil.example", 403},
	} {
		req := httptest.NewRequest("DELETE", "http://127.0.0.1:9090/v1/keys?policy=api&key=k", nil)
		req.Host = tc.host
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("DELETE with Host %q, Origin %q: %d, want %d", tc.host, tc.origin, rec.Code, tc.want)
		}
	}
	if res, _ := lim.AllowN(context.Background(), "k", 0); res.Remaining != 0 {
		t.Fatal("a refused request reset the key")
	}
	for _, host := range []string{"127.0.0.1:9090", "localhost:9090", "[::1]:9090", "floodgate.internal:9090"} {
		req := httptest.NewRequest("GET", "http://127.0.0.1:9090/v1/keys?policy=api&key=k", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Errorf("GET with Host %q: %d", host, rec.Code)
		}
	}
	// The status page resetting a key on its own listener sends its own
	// origin.
	req := httptest.NewRequest("DELETE", "http://127.0.0.1:9090/v1/keys?policy=api&key=k", nil)
	req.Header.Set("Origin", "http://127.0.0.1:9090")
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Errorf("a same-origin reset: %d %s", rec.Code, rec.Body)
	}
	// Probes answer whatever name they use.
	req = httptest.NewRequest("GET", "http://metrics.example/healthz", nil)
	rec = httptest.NewRecorder()
	a.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Errorf("/healthz by another name: %d", rec.Code)
	}
}

// TestAdminNeedsATokenOffLoopback: reachable from the network, the admin
// listener needs a token, or it is not built at all.
func TestAdminNeedsATokenOffLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9090", ":9090", "192.0.2.1:9090", "[::]:9090"} {
		if _, err := New(Config{Listen: addr, Registerer: prometheus.NewRegistry()}); !errors.Is(err, ErrNoToken) {
			t.Errorf("%s without a token: %v, want ErrNoToken", addr, err)
		}
		if _, err := New(Config{Listen: addr, Token: "t", Registerer: prometheus.NewRegistry()}); err != nil {
			t.Errorf("%s with a token: %v", addr, err)
		}
	}
}
