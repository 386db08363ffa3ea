package proxy

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/httpmatch"
	"github.com/floodgate-go/floodgate/internal/pathnet"
	"github.com/floodgate-go/floodgate/testkit"
)

// seen records what an upstream received.
type seen struct {
	mu   sync.Mutex
	hits int
	xff  []string
	host []string
	prot []string
}

func (s *seen) snapshot() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits, append([]string(nil), s.xff...)
}

// upstream starts a real HTTP server that answers "hello" and records the
// forwarding headers.
func upstream(t *testing.T) (*httptest.Server, *seen) {
	t.Helper()
	s := &seen{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hits++
		s.xff = append(s.xff, strings.Join(r.Header.Values("X-Forwarded-For"), ","))
		s.host = append(s.host, r.Header.Get("X-Forwarded-Host"))
		s.prot = append(s.prot, r.Header.Get("X-Forwarded-Proto"))
		s.mu.Unlock()
		io.WriteString(w, "hello")
	}))
	t.Cleanup(srv.Close)
	return srv, s
}

func TestProxyHeadersAnd429(t *testing.T) {
	up, seen := upstream(t)
	api := memLimiter(t, "api", floodgate.PerMinute(3))
	_, addr := start(t, Config{
		Upstream: up.URL,
		Routes:   []Route{{Limits: []httplimit.Rule{{Limiter: api}}}},
	})
	base := "http://" + addr
	c := &http.Client{}
	for i := range 3 {
		resp, body := testkit.Do(t, c, testkit.NewRequest(t, "GET", base+"/x", nil))
		if resp.StatusCode != 200 || body != "hello" {
			t.Fatalf("request %d: %d %q", i+1, resp.StatusCode, body)
		}
		if got, want := resp.Header.Get("X-Ratelimit-Remaining"), fmt.Sprint(2-i); got != want {
			t.Errorf("request %d: X-RateLimit-Remaining %q, want %q", i+1, got, want)
		}
		if got := resp.Header.Get("Ratelimit-Policy"); got != `"api";q=3;w=60` {
			t.Errorf("RateLimit-Policy %q", got)
		}
	}
	resp, body := testkit.Do(t, c, testkit.NewRequest(t, "GET", base+"/x", nil))
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("4th request: %d %q, want 429", resp.StatusCode, body)
	}
	if resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "quota-exceeded") {
		t.Errorf("429 without Retry-After or problem body: %v %q", resp.Header, body)
	}
	hits, xff := seen.snapshot()
	if hits != 3 {
		t.Errorf("upstream saw %d requests, want 3", hits)
	}
	for _, v := range xff {
		if v != "127.0.0.1" {
			t.Errorf("upstream saw X-Forwarded-For %q, want 127.0.0.1", v)
		}
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if seen.host[0] != addr || seen.prot[0] != "http" {
		t.Errorf("X-Forwarded-Host %q Proto %q", seen.host[0], seen.prot[0])
	}
}

// A client that sends its own X-Forwarded-For directly (an untrusted peer)
// is one client: the header changes neither its key nor what the upstream
// is told.
func TestProxySpoofedXFFIsOneClient(t *testing.T) {
	up, seen := upstream(t)
	res, err := clientip.New(clientip.Config{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		t.Fatal(err)
	}
	api := memLimiter(t, "api", floodgate.PerMinute(5))
	_, addr := start(t, Config{
		Upstream:       up.URL,
		TrustedProxies: []string{"10.0.0.0/8"},
		Routes:         []Route{{Limits: []httplimit.Rule{{Limiter: api, Key: httplimit.KeyByIP(res)}}}},
	})
	c := &http.Client{}
	codes := map[int]int{}
	for i := range 20 {
		req := testkit.NewRequest(t, "GET", "http://"+addr+"/", nil)
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))
		req.Header.Set("X-Real-IP", fmt.Sprintf("198.51.100.%d", i+1))
		resp, _ := testkit.Do(t, c, req)
		codes[resp.StatusCode]++
	}
	if codes[200] != 5 || codes[429] != 15 {
		t.Errorf("statuses %v, want 5×200 and 15×429", codes)
	}
	_, xff := seen.snapshot()
	for _, v := range xff {
		if v != "127.0.0.1" {
			t.Errorf("upstream saw X-Forwarded-For %q from an untrusted peer, want 127.0.0.1", v)
		}
	}
}

// From a trusted proxy the chain is passed on with the peer appended, and
// each client behind it has its own key.
func TestProxyTrustedXFF(t *testing.T) {
	up, seen := upstream(t)
	res, err := clientip.New(clientip.Config{TrustedProxies: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	api := memLimiter(t, "api", floodgate.PerMinute(1))
	_, addr := start(t, Config{
		Upstream:       up.URL,
		TrustedProxies: []string{"127.0.0.1"},
		Routes:         []Route{{Limits: []httplimit.Rule{{Limiter: api, Key: httplimit.KeyByIP(res)}}}},
	})
	c := &http.Client{}
	for i := range 3 {
		req := testkit.NewRequest(t, "GET", "http://"+addr+"/", nil)
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i+1))
		if resp, _ := testkit.Do(t, c, req); resp.StatusCode != 200 {
			t.Errorf("client %d: %d, want 200 (own key)", i+1, resp.StatusCode)
		}
	}
	_, xff := seen.snapshot()
	if len(xff) != 3 || xff[0] != "203.0.113.1, 127.0.0.1" {
		t.Errorf("upstream saw X-Forwarded-For %q, want the chain with the peer appended", xff)
	}
}

func TestProxyRoutes(t *testing.T) {
	up, _ := upstream(t)
	lim := func(name string) []httplimit.Rule {
		return []httplimit.Rule{{Limiter: memLimiter(t, name, floodgate.PerMinute(100))}}
	}
	_, addr := start(t, Config{
		Upstream: up.URL,
		Routes: []Route{
			{Name: "admin-host", Match: httpmatch.Match{Host: "admin.example.com"}, Limits: lim("host")},
			{Name: "wild", Match: httpmatch.Match{Host: "*.example.org"}, Limits: lim("wild")},
			{Name: "items", Match: httpmatch.Match{Path: "/items/{id}", Methods: []string{"GET"}}, Limits: lim("items")},
			{Name: "api-post", Match: httpmatch.Match{PathPrefix: []string{"/api/"}, Methods: []string{"post"}}, Limits: lim("api-post")},
			{Name: "api", Match: httpmatch.Match{PathPrefix: []string{"/api/"}}, Limits: lim("api")},
			{Name: "open", Match: httpmatch.Match{PathPrefix: []string{"/open/"}}},
		},
	})
	base := "http://" + addr
	cases := []struct {
		method, path, host, policy string
	}{
		{"GET", "/api/x", "admin.example.com", `"host"`},
		{"GET", "/api/x", "admin.example.com:8080", `"host"`},
		{"GET", "/", "a.b.example.org", `"wild"`},
		{"GET", "/", "example.org", ""},
		{"GET", "/items/42", "", `"items"`},
		{"POST", "/items/42", "", ""},
		{"GET", "/items/42/more", "", ""},
		{"POST", "/api/x", "", `"api-post"`},
		{"GET", "/api/x", "", `"api"`},
		{"GET", "/open/x", "", ""},
		{"GET", "/elsewhere", "", ""},
	}
	c := &http.Client{}
	for _, tc := range cases {
		req := testkit.NewRequest(t, tc.method, base+tc.path, nil)
		if tc.host != "" {
			req.Host = tc.host
		}
		resp, _ := testkit.Do(t, c, req)
		got := resp.Header.Get("Ratelimit-Policy")
		if tc.policy == "" && got != "" || tc.policy != "" && !strings.HasPrefix(got, tc.policy+";") {
			t.Errorf("%s %s host %q: RateLimit-Policy %q, want policy %s", tc.method, tc.path, tc.host, got, tc.policy)
		}
	}
}

func TestProxyRouteErrors(t *testing.T) {
	for _, rt := range []Route{
		{Match: httpmatch.Match{Path: "/items/{id"}},
		{Match: httpmatch.Match{Path: "GET /x"}},
		{Match: httpmatch.Match{PathPrefix: []string{"api"}}},
		{Match: httpmatch.Match{Host: "a/b"}},
		{Match: httpmatch.Match{Methods: []string{"G T"}}},
		{Limits: []httplimit.Rule{{}}},
	} {
		if _, err := New(Config{Upstream: "http://127.0.0.1:1", Routes: []Route{rt}}); err == nil {
			t.Errorf("route %+v accepted", rt)
		}
	}
	for _, u := range []string{"127.0.0.1:80", "ftp://x", "http://", "::"} {
		if _, err := New(Config{Upstream: u}); err == nil {
			t.Errorf("upstream %q accepted", u)
		}
	}
	if _, err := New(Config{TrustedProxies: []string{"10.1.2.3/8"}}); err == nil {
		t.Error("a trusted prefix with host bits accepted")
	}
}

func TestProxyShadowNeverDenies(t *testing.T) {
	up, seen := upstream(t)
	var shadowed atomic.Int64
	api := memLimiter(t, "api", floodgate.PerMinute(2))
	_, addr := start(t, Config{
		Upstream: up.URL,
		Routes:   []Route{{Name: "new-limit", Shadow: true, Limits: []httplimit.Rule{{Limiter: api}}}},
		OnShadow: func(route string, res floodgate.Result) {
			if route == "new-limit" && !res.Allowed && res.Policy == "api" {
				shadowed.Add(1)
			}
		},
	})
	c := &http.Client{}
	for i := range 5 {
		resp, body := testkit.Do(t, c, testkit.NewRequest(t, "GET", "http://"+addr+"/", nil))
		if resp.StatusCode != 200 || body != "hello" {
			t.Fatalf("request %d: %d %q, want the upstream's answer", i+1, resp.StatusCode, body)
		}
		for _, h := range []string{"X-Ratelimit-Remaining", "Ratelimit", "Retry-After"} {
			if v := resp.Header.Get(h); v != "" {
				t.Errorf("shadow route sent %s: %q", h, v)
			}
		}
	}
	if n := shadowed.Load(); n != 3 {
		t.Errorf("OnShadow counted %d would-be denials, want 3", n)
	}
	if hits, _ := seen.snapshot(); hits != 5 {
		t.Errorf("upstream saw %d requests, want 5", hits)
	}
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// An unreachable upstream is answered 502, which a count-failed rule counts.
func TestProxyBadGatewayCountsAsFailure(t *testing.T) {
	var upErrs atomic.Int64
	fails := memLimiter(t, "fails", floodgate.PerMinute(2))
	_, addr := start(t, Config{
		Upstream:        "http://" + deadAddr(t),
		Routes:          []Route{{Name: "r", Limits: []httplimit.Rule{{Limiter: fails, Count: httplimit.CountFailed}}}},
		OnUpstreamError: func(route string, err error) { upErrs.Add(1) },
	})
	c := &http.Client{}
	want := []int{502, 502, 429, 429}
	for i, w := range want {
		resp, body := testkit.Do(t, c, testkit.NewRequest(t, "GET", "http://"+addr+"/", nil))
		if resp.StatusCode != w {
			t.Fatalf("request %d: %d %q, want %d", i+1, resp.StatusCode, body, w)
		}
	}
	if n := upErrs.Load(); n != 2 {
		t.Errorf("OnUpstreamError called %d times, want 2", n)
	}
}

// Each event reaches the client while the upstream is still answering.
func TestProxyStreams(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Not text/event-stream, which ReverseProxy flushes anyway, and of
		// unknown length (chunked).
		w.Header().Set("Content-Type", "application/x-ndjson")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
		io.WriteString(w, "data: two\n\n")
	}))
	defer up.Close()
	defer close(release)
	api := memLimiter(t, "api", floodgate.PerMinute(10))
	_, addr := start(t, Config{
		Upstream: up.URL,
		Routes:   []Route{{Limits: []httplimit.Rule{{Limiter: api, Count: httplimit.CountSuccessful}}}},
	})
	resp, err := http.Get("http://" + addr + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line := make(chan string, 1)
	go func() {
		br := bufio.NewReader(resp.Body)
		s, _ := br.ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if s != "data: one\n" {
			t.Errorf("first line %q", s)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the first event did not arrive while the upstream held the response open: the proxy buffers")
	}
}

// An answer of known length that trickles reaches the client before it
// ends: the proxy does not hold it until the upstream finishes.
func TestProxyFlushesKnownLength(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("Content-Length", "22")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
		io.WriteString(w, "data: two\n\n")
	}))
	defer up.Close()
	defer close(release)
	_, addr := start(t, Config{Upstream: up.URL})
	// The header and the first line must both arrive while the upstream
	// holds the response open.
	line := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/download")
		if err != nil {
			line <- err.Error()
			return
		}
		defer resp.Body.Close()
		if resp.ContentLength != 22 {
			line <- fmt.Sprintf("Content-Length %d, want the upstream's 22", resp.ContentLength)
			return
		}
		s, _ := bufio.NewReader(resp.Body).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if s != "data: one\n" {
			t.Errorf("first line %q", s)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the first line did not arrive while the upstream held the response open: the proxy buffers")
	}
}

// The upstream sees the client's Accept-Encoding, not one the proxy added,
// and the client gets the upstream's encoding untouched.
func TestProxyKeepsEncoding(t *testing.T) {
	var got atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Values("Accept-Encoding"))
		w.Header().Set("Content-Encoding", "identity")
		io.WriteString(w, "plain")
	}))
	defer up.Close()
	_, addr := start(t, Config{Upstream: up.URL})
	// A transport that asks for no encoding itself.
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if v, _ := got.Load().([]string); len(v) != 0 {
		t.Errorf("upstream saw Accept-Encoding %q from a client that sent none", v)
	}
	if string(body) != "plain" || resp.Header.Get("Content-Encoding") != "identity" {
		t.Errorf("client got %q with Content-Encoding %q", body, resp.Header.Get("Content-Encoding"))
	}
}

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// wsEcho is a WebSocket echo server written from RFC 6455: handshake, then
// one frame read and sent back.
func wsEcho(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		http.Error(w, "not a websocket request", 400)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", wsAccept(r.Header.Get("Sec-WebSocket-Key")))
	brw.Flush()
	op, payload, err := readFrame(brw.Reader)
	if err != nil {
		return
	}
	writeFrame(conn, op, payload, false)
}

func readFrame(r *bufio.Reader) (byte, []byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	var mask [4]byte
	masked := h[1]&0x80 != 0
	if masked {
		if _, err := io.ReadFull(r, mask[:]); err != nil {
			return 0, nil, err
		}
	}
	if n > 1<<20 {
		return 0, nil, fmt.Errorf("frame of %d bytes", n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, err
	}
	if masked {
		for i := range p {
			p[i] ^= mask[i%4]
		}
	}
	return h[0] & 0x0f, p, nil
}

func writeFrame(w io.Writer, op byte, p []byte, mask bool) error {
	b := []byte{0x80 | op}
	m := byte(0)
	if mask {
		m = 0x80
	}
	if len(p) >= 126 {
		panic("test frames are short")
	}
	b = append(b, m|byte(len(p)))
	key := [4]byte{1, 2, 3, 4}
	if mask {
		b = append(b, key[:]...)
		for i, c := range p {
			b = append(b, c^key[i%4])
		}
	} else {
		b = append(b, p...)
	}
	_, err := w.Write(b)
	return err
}

func TestProxyWebSocket(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(wsEcho))
	defer up.Close()
	for _, shadow := range []bool{false, true} {
		t.Run(fmt.Sprintf("shadow=%v", shadow), func(t *testing.T) {
			api := memLimiter(t, "api", floodgate.PerMinute(10))
			_, addr := start(t, Config{
				Upstream: up.URL,
				Routes:   []Route{{Shadow: shadow, Limits: []httplimit.Rule{{Limiter: api, Count: httplimit.CountFailed}}}},
			})
			conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(20 * time.Second))
			key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
			fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", key)
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 101 || resp.Header.Get("Sec-Websocket-Accept") != wsAccept(key) {
				t.Fatalf("handshake: %d %v", resp.StatusCode, resp.Header)
			}
			if err := writeFrame(conn, 1, []byte("ping through floodgate"), true); err != nil {
				t.Fatal(err)
			}
			op, p, err := readFrame(br)
			if err != nil || op != 1 || string(p) != "ping through floodgate" {
				t.Fatalf("echo: op %d %q %v", op, p, err)
			}
		})
	}
}

func TestDemoUpstream(t *testing.T) {
	api := memLimiter(t, "demo", floodgate.PerMinute(2))
	_, addr := start(t, Config{Routes: []Route{{Limits: []httplimit.Rule{{Limiter: api}}}}})
	c := &http.Client{}
	req := testkit.NewRequest(t, "GET", "http://"+addr+"/", nil)
	req.Header.Set("Accept", "application/json")
	resp, body := testkit.Do(t, c, req)
	if resp.StatusCode != 200 || !strings.Contains(body, "demo upstream") || resp.Header.Get("X-Ratelimit-Limit") != "2" {
		t.Fatalf("%d %q %v", resp.StatusCode, body, resp.Header)
	}
	testkit.Do(t, c, testkit.NewRequest(t, "GET", "http://"+addr+"/", nil))
	if resp, _ := testkit.Do(t, c, testkit.NewRequest(t, "GET", "http://"+addr+"/", nil)); resp.StatusCode != 429 {
		t.Errorf("3rd request: %d, want 429", resp.StatusCode)
	}
}

// failClosed is a Limiter whose engine is down under a fail-closed policy:
// every decision is the refusal failover.FailClosed makes.
type failClosed struct{ floodgate.Limiter }

func (f failClosed) AllowN(ctx context.Context, key string, cost int64) (floodgate.Result, error) {
	return floodgate.Result{Source: floodgate.SourceFailClosed, Policy: f.Name(), RetryAfter: time.Second}, nil
}

// With the engine failed closed, an enforcing route answers 503 and a
// shadow route forwards, counting the would-be refusal.
func TestProxyFailClosed(t *testing.T) {
	up, seen := upstream(t)
	lim := failClosed{memLimiter(t, "api", floodgate.PerMinute(10))}
	var shadowed atomic.Int64
	_, addr := start(t, Config{
		Upstream: up.URL,
		Headers:  httplimit.Headers{Source: true},
		Routes: []Route{
			{Match: httpmatch.Match{PathPrefix: []string{"/shadow/"}}, Shadow: true, Limits: []httplimit.Rule{{Limiter: lim}}},
			{Limits: []httplimit.Rule{{Limiter: lim}}},
		},
		OnShadow: func(_ string, res floodgate.Result) {
			if res.Source == floodgate.SourceFailClosed {
				shadowed.Add(1)
			}
		},
	})
	c := &http.Client{}
	resp, _ := testkit.Do(t, c, testkit.NewRequest(t, "GET", "http://"+addr+"/x", nil))
	if resp.StatusCode != 503 || resp.Header.Get("X-Ratelimit-Source") != "fail-closed" {
		t.Errorf("enforcing route: %d %v, want 503 naming fail-closed", resp.StatusCode, resp.Header)
	}
	resp, body := testkit.Do(t, c, testkit.NewRequest(t, "GET", "http://"+addr+"/shadow/x", nil))
	if resp.StatusCode != 200 || body != "hello" || resp.Header.Get("X-Ratelimit-Source") != "" {
		t.Errorf("shadow route: %d %q %v, want the upstream's answer", resp.StatusCode, body, resp.Header)
	}
	if shadowed.Load() != 1 {
		t.Errorf("OnShadow counted %d, want 1", shadowed.Load())
	}
	if hits, _ := seen.snapshot(); hits != 1 {
		t.Errorf("upstream saw %d requests, want 1", hits)
	}
}

// Routes replaced while requests flow: no request fails, and a client's
// state survives because the limiter does.
func TestProxySetRoutesUnderLoad(t *testing.T) {
	up, _ := upstream(t)
	api := memLimiter(t, "api", floodgate.PerSecond(1_000_000))
	routes := func(prefix string) []Route {
		return []Route{{Name: prefix, Match: httpmatch.Match{PathPrefix: []string{"/" + prefix}}, Limits: []httplimit.Rule{{Limiter: api}}}, {Limits: []httplimit.Rule{{Limiter: api}}}}
	}
	s, addr := start(t, Config{Upstream: up.URL, Routes: routes("a")})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Int64
	var total atomic.Int64
	for range 4 {
		wg.Go(func() {
			c := &http.Client{}
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Get("http://" + addr + "/a/x")
				if err != nil {
					bad.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				total.Add(1)
				if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Limit") == "" {
					bad.Add(1)
				}
			}
		})
	}
	for i := range 200 {
		if err := s.SetRoutes(routes([]string{"a", "b"}[i%2])); err != nil {
			t.Fatal(err)
		}
		if i%20 == 0 {
			testkit.Eventually(t, 20*time.Second, "requests flowing", func() bool { return total.Load() > int64(i/20) })
		}
	}
	close(stop)
	wg.Wait()
	if bad.Load() != 0 || total.Load() == 0 {
		t.Errorf("%d of %d requests failed during reloads", bad.Load(), total.Load())
	}
	if err := s.SetRoutes([]Route{{Match: httpmatch.Match{Path: "/{"}}}); err == nil {
		t.Error("a bad route list accepted")
	}
}

// TestDotSegmentsCannotDodgeRoutes: /public/../admin/ is the admin page to
// most upstreams, so it must meet the admin route's limits: the proxy sends
// the client to the clean path. Prefixes end at a path segment.
func TestDotSegmentsCannotDodgeRoutes(t *testing.T) {
	if got := pathnet.CleanPath("/public/../admin/"); got != "/admin/" {
		t.Fatalf("CleanPath = %q", got)
	}
	for _, tc := range []struct {
		path, prefix string
		want         bool
	}{
		{"/api", "/api", true}, {"/api/x", "/api", true}, {"/apix", "/api", false},
		{"/api/", "/api/", true}, {"/api/x", "/api/", true}, {"/api", "/api/", false},
	} {
		if got := pathnet.UnderPrefix(tc.path, tc.prefix); got != tc.want {
			t.Errorf("underPrefix(%q, %q) = %v", tc.path, tc.prefix, got)
		}
	}
	p, err := New(Config{Upstream: "", Routes: []Route{{Name: "admin", Match: httpmatch.Match{PathPrefix: []string{"/admin/"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", "http://example.com/public/../admin/users?x=1", nil)
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, req)
	if rec.Code != http.StatusPermanentRedirect || rec.Header().Get("Location") != "/admin/users?x=1" {
		t.Fatalf("dot segments: %d Location %q, want 308 to /admin/users?x=1", rec.Code, rec.Header().Get("Location"))
	}
}

// TestProxyPathSpellingsAtLimit: with a route's limit spent, no spelling of
// its path that an upstream may serve as that path (case, path parameters,
// encoded separators, trailing dots and spaces, an extension, a trailing
// slash) reaches the upstream; each is answered 429.
func TestProxyPathSpellingsAtLimit(t *testing.T) {
	up, seen := upstream(t)
	one := func(name string) []httplimit.Rule {
		return []httplimit.Rule{{Limiter: memLimiter(t, name, floodgate.PerMinute(1))}}
	}
	_, addr := start(t, Config{
		Upstream: up.URL,
		Routes: []Route{
			{Name: "login", Match: httpmatch.Match{PathPrefix: []string{"/login"}}, Limits: one("login")},
			{Name: "signin", Match: httpmatch.Match{Path: "/signin"}, Limits: one("signin")},
			{Name: "rest", Match: httpmatch.Match{PathPrefix: []string{"/"}}},
		},
	})
	// raw sends the request line as given, byte for byte, and returns the
	// status.
	raw := func(path string) int {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := raw("/login"); s != 200 {
		t.Fatalf("first /login: %d", s)
	}
	if s := raw("/signin"); s != 200 {
		t.Fatalf("first /signin: %d", s)
	}
	for _, p := range []string{"/login", "/LOGIN", "/Login", "/login;x", "/login;jsessionid=1", "/login%3Bx", "/login.", "/login%2e", "/login%20", "/login.json", "/login/x", "/login%2fx",
		"/signin", "/signin/", "/signin%2f", "/SIGNIN", "/signin;x", "/signin.", "/signin%2E", "/signin.json"} {
		if s := raw(p); s != http.StatusTooManyRequests {
			t.Errorf("GET %s at the limit: %d, want 429", p, s)
		}
	}
	if hits, _ := seen.snapshot(); hits != 2 {
		t.Errorf("the upstream saw %d requests, want the 2 within the limits", hits)
	}
	// Other paths are not the limited routes'.
	for _, p := range []string{"/loginx", "/signinx", "/signin/x"} {
		if s := raw(p); s != 200 {
			t.Errorf("GET %s: %d, want 200 (not a limited route)", p, s)
		}
	}
}

// TestProxyPathSpellingsRefusedOrLimited: with /login's limit spent, each
// spelling of /login that some upstream reads as /login is either refused
// 400 before any route sees it (a path no rule can compare as every
// upstream reads it: control characters, invalid UTF-8, an invisible
// character, an encoded "?" or "#", an escape escaped twice) or limited as
// /login (429); none reaches the upstream.
func TestProxyPathSpellingsRefusedOrLimited(t *testing.T) {
	var mu sync.Mutex
	var got []string // the paths the upstream was sent, as sent
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.RequestURI)
		mu.Unlock()
		io.WriteString(w, "hello")
	}))
	t.Cleanup(up.Close)
	_, addr := start(t, Config{
		Upstream: up.URL,
		Routes: []Route{
			{Name: "login", Match: httpmatch.Match{PathPrefix: []string{"/login"}}, Limits: []httplimit.Rule{{Limiter: memLimiter(t, "login", floodgate.PerMinute(1))}}},
		},
	})
	raw := func(path string) int {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := raw("/login"); s != 200 {
		t.Fatalf("first /login: %d", s)
	}
	for _, c := range []struct {
		path string
		want int
	}{
		{"/login%00", 400}, {"/login%00.json", 400}, {"/login%09", 400}, {"/login%0a", 400}, {"/login%0d", 400},
		{"/login%252e", 400}, {"/login%C0%AF", 400}, {"/login%3F", 400}, {"/login%3Fx=1", 400}, {"/login%23", 400},
		{"/login%E2%80%8B", 400}, {"/log%E2%80%8Bin", 400},
		{"/login::$DATA", 429}, {"/login~1", 429}, {"/log%C4%B1n", 429}, {"/login%EF%BC%8E", 429},
	} {
		if s := raw(c.path); s != c.want {
			t.Errorf("GET %s with /login at its limit: %d, want %d", c.path, s, c.want)
		}
	}
	mu.Lock()
	if len(got) != 1 {
		t.Errorf("the upstream was sent %q, want only the first /login", got)
	}
	mu.Unlock()
	// Paths of other resources still pass, non-ASCII and "%" among them.
	for _, p := range []string{"/caf%C3%A9", "/100%25", "/login~123"} {
		if s := raw(p); s != 200 {
			t.Errorf("GET %s: %d, want 200", p, s)
		}
	}
}
