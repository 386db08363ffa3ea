package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/metrics"
	"github.com/floodgate-go/floodgate/testkit"
)

// faults records what a proxy reported about failed requests.
type faults struct {
	mu       sync.Mutex
	upstream []error
	client   []ClientFault
}

func (f *faults) config(cfg *Config) {
	cfg.OnUpstreamError = func(_ string, err error) {
		f.mu.Lock()
		f.upstream = append(f.upstream, err)
		f.mu.Unlock()
	}
	cfg.OnClientError = func(_ string, why ClientFault) {
		f.mu.Lock()
		f.client = append(f.client, why)
		f.mu.Unlock()
	}
}

func (f *faults) get() ([]error, []ClientFault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.upstream...), append([]ClientFault(nil), f.client...)
}

// TestProxySlowBodyIsTheClients: a client that sends its body more slowly
// than the listener allows is answered 408, reported as a client fault and
// logged below error level; the healthy upstream is not blamed (no 502, no
// upstream error, no ERROR line).
func TestProxySlowBodyIsTheClients(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	var log testkit.Buffer
	var f faults
	cfg := Config{
		Upstream: up.URL,
		Routes:   []Route{{Name: "upload", Limits: []httplimit.Rule{{Limiter: memLimiter(t, "api", floodgate.PerMinute(100))}}}},
		Logger:   slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	f.config(&cfg)
	// The listener bounds reading the request, the body with it, to 300ms,
	// as the daemon's body_timeout does.
	_, addr := startServer(t, cfg, func(s *http.Server) { s.ReadTimeout = 300 * time.Millisecond })

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
	go func() {
		// A byte every 50ms until the proxy closes the connection.
		for {
			if _, err := c.Write([]byte("x")); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a body slower than the timeout: %d %s, want 408", resp.StatusCode, body)
	}
	ups, clients := f.get()
	if len(ups) != 0 {
		t.Errorf("the upstream was blamed: %v", ups)
	}
	if len(clients) != 1 || clients[0] != ClientBodyTimeout {
		t.Errorf("client faults %v, want [%s]", clients, ClientBodyTimeout)
	}
	if s := log.String(); strings.Contains(s, "level=ERROR") || !strings.Contains(s, "reason=body_timeout") {
		t.Errorf("log:\n%s\nwant the client's fault at info level, no error", s)
	}
	// The upstream is fine: the next request passes.
	resp2, b2 := testkit.Do(t, &http.Client{}, testkit.NewRequest(t, "POST", "http://"+addr+"/upload", strings.NewReader("abc")))
	if resp2.StatusCode != 200 || b2 != "ok" {
		t.Errorf("a prompt body: %d %q", resp2.StatusCode, b2)
	}
}

// counterValue is the value of the counter name with the labels want in
// reg, 0 when there is none.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestProxyResetStreamIsNotADenial: an HTTP/2 stream the client resets
// before its request is decided is not decided: nothing is charged, no
// denial is counted (floodgate_decisions_total), and the proxy reports
// the client gone.
func TestProxyResetStreamIsNotADenial(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	certPEM, keyPEM, cert := selfSigned(t, 1)
	writeAtomically(t, certFile, certPEM)
	writeAtomically(t, keyFile, keyPEM)
	up, seen := upstream(t)

	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	api := m.Limiter(memLimiter(t, "api", floodgate.PerMinute(1)))
	entered := make(chan struct{}, 1)
	var f faults
	cfg := Config{
		Upstream: up.URL,
		TLS:      &TLSFiles{Cert: certFile, Key: keyFile},
		Routes: []Route{{Name: "api", Limits: []httplimit.Rule{{Limiter: api, Key: func(r *http.Request) string {
			if r.Header.Get("X-Hold") != "" {
				// Hold the request before its decision until the
				// client has reset its stream.
				entered <- struct{}{}
				select {
				case <-r.Context().Done():
				case <-time.After(20 * time.Second):
				}
			}
			return "k"
		}}}}},
	}
	f.config(&cfg)
	_, addr := start(t, cfg)
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}

	// The key's one request a minute.
	resp, _ := testkit.Do(t, c, testkit.NewRequest(t, "GET", "https://"+addr+"/", nil))
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("first request: %d over %s", resp.StatusCode, resp.Proto)
	}
	// A second, reset while it waits for its decision.
	ctx, cancel := context.WithCancel(context.Background())
	req := testkit.NewRequest(t, "GET", "https://"+addr+"/", nil).WithContext(ctx)
	req.Header.Set("X-Hold", "1")
	done := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the request never reached its rule")
	}
	cancel() // RST_STREAM
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the reset request: %v, want context.Canceled", err)
	}
	denied := func() float64 {
		return counterValue(t, reg, "floodgate_decisions_total", map[string]string{"policy": "api", "decision": "denied"})
	}
	testkit.Eventually(t, 20*time.Second, "the reset request to be accounted for", func() bool {
		_, clients := f.get()
		return len(clients) > 0 || denied() > 0
	})
	if n := denied(); n != 0 {
		t.Errorf("floodgate_decisions_total{decision=denied} = %v for a stream the client reset, want 0", n)
	}
	if n := counterValue(t, reg, "floodgate_decisions_total", map[string]string{"policy": "api"}); n != 1 {
		t.Errorf("%v decisions, want the first request's alone", n)
	}
	ups, clients := f.get()
	if len(ups) != 0 || len(clients) != 1 || clients[0] != ClientGone {
		t.Errorf("upstream errors %v, client faults %v; want none and [%s]", ups, clients, ClientGone)
	}
	if hits, _ := seen.snapshot(); hits != 1 {
		t.Errorf("the upstream saw %d requests, want 1", hits)
	}
}
