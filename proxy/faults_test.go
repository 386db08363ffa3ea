package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
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
	"github.com/floodgate-go/floodgate/floodgatetest"
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
		Routes:   []Route{{Name: "upload", Limits: []httplimit.Rule{{Limiter: floodgatetest.MemLimiter(t, "api", floodgate.PerMinute(100))}}}},
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
	api := m.Limiter(floodgatetest.MemLimiter(t, "api", floodgate.PerMinute(1)))
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

// wsServe is a WebSocket server from RFC 6455: after the handshake it
// echoes every frame on /echo, and on /push sends frames without pause
// until the connection fails.
func wsServe(w http.ResponseWriter, r *http.Request) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", wsAccept(r.Header.Get("Sec-WebSocket-Key")))
	brw.Flush()
	if r.URL.Path == "/push" {
		for writeFrame(conn, 1, []byte("pushed"), false) == nil {
		}
		return
	}
	for {
		op, p, err := readFrame(brw.Reader)
		if err != nil || writeFrame(conn, op, p, false) != nil {
			return
		}
	}
}

// wsDial opens a WebSocket to path through the proxy at addr.
func wsDial(t *testing.T, addr, path string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", path, key)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 {
		t.Fatalf("handshake: %d", resp.StatusCode)
	}
	return conn, br
}

// TestProxyTunnelIdleTimeout: a WebSocket through the proxy is closed once
// it has carried nothing either way for TunnelIdleTimeout, and stays open
// as long as either side talks.
func TestProxyTunnelIdleTimeout(t *testing.T) {
	// idle is long against a scheduler's stall on a busy machine: the busy
	// tunnels below must not look idle because the test's own goroutine
	// did not run for a while.
	const idle = time.Second
	up := httptest.NewServer(http.HandlerFunc(wsServe))
	t.Cleanup(up.Close)
	for _, shadow := range []bool{false, true} {
		t.Run(fmt.Sprintf("shadow=%v", shadow), func(t *testing.T) {
			api := floodgatetest.MemLimiter(t, "api", floodgate.PerMinute(100))
			_, addr := start(t, Config{
				Upstream:          up.URL,
				Routes:            []Route{{Shadow: shadow, Limits: []httplimit.Rule{{Limiter: api, Count: httplimit.CountFailed}}}},
				TunnelIdleTimeout: idle,
			})

			// Idle: closed after the timeout (the connection's own
			// deadline is 30s).
			conn, br := wsDial(t, addr, "/echo")
			if err := writeFrame(conn, 1, []byte("hi"), true); err != nil {
				t.Fatal(err)
			}
			if _, p, err := readFrame(br); err != nil || string(p) != "hi" {
				t.Fatalf("echo: %q %v", p, err)
			}
			_, _, err := readFrame(br)
			var ne net.Error
			if err == nil || errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("an idle tunnel: %v, want it closed by the proxy", err)
			}

			// Busy both ways: round trips for 2.5 idle timeouts.
			conn, br = wsDial(t, addr, "/echo")
			for start := time.Now(); time.Since(start) < 5*idle/2; {
				if err := writeFrame(conn, 1, []byte("ping"), true); err != nil {
					t.Fatalf("after %v: %v", time.Since(start), err)
				}
				if _, p, err := readFrame(br); err != nil || string(p) != "ping" {
					t.Fatalf("after %v: %q %v", time.Since(start), p, err)
				}
			}

			// Busy one way: the upstream talks, the client only listens.
			_, br = wsDial(t, addr, "/push")
			for start := time.Now(); time.Since(start) < 5*idle/2; {
				if _, p, err := readFrame(br); err != nil || string(p) != "pushed" {
					t.Fatalf("after %v: %q %v", time.Since(start), p, err)
				}
			}
		})
	}
}
