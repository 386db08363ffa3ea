package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/testkit"
)

// started runs a daemon of the YAML until t ends.
func started(t testing.TB, yaml string) *Daemon {
	t.Helper()
	d, err := New(mustParse(t, yaml), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d.Shutdown(ctx)
	})
	return d
}

func get(t testing.TB, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestGracefulShutdownDrains: readiness turns false and the proxy stops
// accepting while a request in flight still gets its whole answer.
func TestGracefulShutdownDrains(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		io.WriteString(w, "slow answer")
	}))
	defer up.Close()
	d, err := New(mustParse(t, fmt.Sprintf(`
policies: {api: {rate: 10/min}}
proxy:
  listen: 127.0.0.1:0
  upstream: %s
  routes: [{limits: [{policy: api}]}]
admin: {listen: 127.0.0.1:0}
`, up.URL)), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := d.Addrs()
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
		done <- d.Shutdown(ctx)
	}()
	admin := &http.Client{Timeout: 10 * time.Second}
	testkit.Eventually(t, 20*time.Second, "readiness false while draining", func() bool {
		resp, err := admin.Get("http://" + addrs.Admin.String() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	testkit.Eventually(t, 20*time.Second, "the proxy listener closed", func() bool {
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

// TestShutdownDeadlineCutsOff: a request that never ends is cut off when
// the shutdown's deadline passes, and Shutdown says so.
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
	d, err := New(mustParse(t, fmt.Sprintf("proxy: {listen: 127.0.0.1:0, upstream: %s}\nadmin: {listen: \"\"}\n", up.URL)), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	go http.Get("http://" + d.Addrs().Proxy.String() + "/")
	<-arrived
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := d.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with a request that never ends: %v, want the deadline", err)
	}
}

// TestStartFailsClean: a listener that cannot bind fails Start, naming it,
// and leaves no other listener open.
func TestStartFailsClean(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	checkAddr := free.Addr().String()
	free.Close()
	d, err := New(mustParse(t, fmt.Sprintf("policies: {api: {rate: 1/s}}\ncheck: {listen: %q}\nadmin: {listen: %q}\n", checkAddr, ln.Addr())), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Start(); err == nil || !strings.Contains(err.Error(), "admin") {
		t.Fatalf("Start on a taken port: %v", err)
	}
	// The check listener was bound first and closed again.
	again, err := net.Listen("tcp", checkAddr)
	if err != nil {
		t.Errorf("the check listener's port is still held: %v", err)
	} else {
		again.Close()
	}
}

// TestAdminRoutesOnlyOnAdmin: the proxy and the check API never answer the
// admin listener's routes.
func TestAdminRoutesOnlyOnAdmin(t *testing.T) {
	d := started(t, `
policies: {api: {rate: 100/s}}
proxy: {listen: 127.0.0.1:0, upstream: demo}
check: {listen: 127.0.0.1:0}
admin: {listen: 127.0.0.1:0, token: s3cret, pprof: true}
`)
	a := d.Addrs()
	if st, body := get(t, "http://"+a.Admin.String()+"/metrics", ""); st != 200 || !strings.Contains(body, "floodgate_config_reloads_total") || !strings.Contains(body, "floodgate_build_info{") {
		t.Fatalf("admin /metrics: %d, no reload counters or build_info", st)
	}
	for _, addr := range []string{a.Proxy.String(), a.Check.String()} {
		for _, path := range []string{"/metrics", "/healthz", "/readyz", "/v1/config", "/v1/keys?policy=api&key=k", "/v1/status", "/debug/pprof/"} {
			_, body := get(t, "http://"+addr+path, "s3cret")
			if strings.Contains(body, "floodgate_config_reloads_total") || strings.Contains(body, "storage:") || body == "ok\n" || body == "ready\n" || strings.Contains(body, "goroutine") || strings.Contains(body, `"policy":"api"`) {
				t.Errorf("%s%s answered an admin route: %q", addr, path, body)
			}
		}
	}
}
