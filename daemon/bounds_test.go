package daemon

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-go/floodgate/checkapi"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestListenerBounds: every listener the daemon opens applies its bounds.
// The HTTP listeners (proxy, check, admin) answer a header over
// max_header_bytes with 431 and close a connection whose body outlasts
// body_timeout; the Envoy listener refuses a call whose header list is
// over max_header_bytes (its message is bounded by envoyrls.MaxRequestBytes,
// and decided); the PostgreSQL listener closes a client that does not
// start within header_timeout.
func TestListenerBounds(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	dir := t.TempDir()
	rl := filepath.Join(dir, "rl.yaml")
	os.WriteFile(rl, []byte("domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1000}}]\n"), 0o644)
	const http1 = "{max_header_bytes: 1024, body_timeout: 300ms}"
	d, err := New(mustParse(t, fmt.Sprintf(`
policies: {api: {rate: 1000/s}}
proxy: {listen: 127.0.0.1:0, upstream: %s, routes: [{limits: [{policy: api}]}], bounds: %s}
check: {listen: 127.0.0.1:0, bounds: %s}
admin: {listen: 127.0.0.1:0, bounds: %s}
envoy: {listen: 127.0.0.1:0, ratelimit_config: [%s], bounds: {max_header_bytes: 1024}}
postgres: {listen: 127.0.0.1:0, upstream: 127.0.0.1:1, bounds: {header_timeout: 300ms}}
`, up, http1, http1, http1, rl)), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	a := d.Addrs()

	// dial connects and sends head; it returns the status of the answer
	// (0 for none) once the daemon has closed the connection.
	exchange := func(addr, head string, trickle bool) int {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		io.WriteString(c, head)
		if trickle {
			go func() {
				for {
					time.Sleep(50 * time.Millisecond)
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
				}
			}()
		}
		br := bufio.NewReader(c)
		st := 0
		if line, err := br.ReadString('\n'); err == nil {
			fmt.Sscanf(line, "HTTP/1.1 %d", &st)
		}
		if _, err := io.Copy(io.Discard, br); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("%s: the connection was held for 30s", addr)
			}
		}
		return st
	}
	big := "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 8<<10) + "\r\n\r\n"
	slow := "POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
	for name, addr := range map[string]string{"proxy": a.Proxy.String(), "check": a.Check.String(), "admin": a.Admin.String()} {
		if st := exchange(addr, big, false); st != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%s: an 8 KiB header over max_header_bytes 1024 answered %d, want 431", name, st)
		}
		// A body sent a byte at a time is cut off at body_timeout: the
		// connection closes (the test's own deadline is 30s). The proxy
		// says it was the client's fault, not the upstream's.
		if st := exchange(addr, slow, true); name == "proxy" && st != http.StatusRequestTimeout {
			t.Errorf("proxy: a body slower than body_timeout answered %d, want 408", st)
		}
	}

	conn, err := grpc.NewClient(a.Envoy.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc := rlsv3.NewRateLimitServiceClient(conn)
	call := func(value, header string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if header != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-big", header)
		}
		_, err := rc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: value}}}}})
		return err
	}
	if err := call("v", ""); err != nil {
		t.Fatalf("an ordinary Envoy call: %v", err)
	}
	// max_header_bytes bounds the call's header list, not its message: a
	// descriptor value is whatever a client sent Envoy, and is decided.
	if err := call(strings.Repeat("v", 4<<10), ""); err != nil {
		t.Errorf("an Envoy request with a 4 KiB descriptor value, max_header_bytes 1024: %v, want a decision", err)
	}
	if err := call("v", strings.Repeat("v", 4<<10)); err == nil {
		t.Errorf("an Envoy call with 4 KiB of metadata over max_header_bytes 1024 passed")
	}

	// A PostgreSQL client that never sends its startup is closed.
	exchange(a.Postgres.String(), "", false)
}

// TestHTTP2MaxConcurrentStreams: the proxy over TLS advertises its
// max_concurrent_streams in its HTTP/2 SETTINGS, which bounds what a client
// may run on one connection.
func TestHTTP2MaxConcurrentStreams(t *testing.T) {
	dir := t.TempDir()
	cert := testkit.WriteCert(t, dir, "proxy", 1)
	d, err := New(mustParse(t, fmt.Sprintf("proxy: {listen: 127.0.0.1:0, upstream: demo, tls: {cert: %s, key: %s}, bounds: {max_concurrent_streams: 7}}\nadmin: {listen: \"\"}\n",
		cert.CertFile, cert.KeyFile)), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	roots := x509.NewCertPool()
	roots.AddCert(cert.Cert)
	c, err := tls.Dial("tcp", d.Addrs().Proxy.String(), &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
	// The client preface and an empty SETTINGS frame; the server's first
	// frame is its SETTINGS: 9 bytes of header (length, type 4, flags,
	// stream 0), then 6 bytes per setting (identifier, value).
	io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	c.Write([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0})
	var hdr [9]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		t.Fatal(err)
	}
	n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
	if hdr[3] != 4 || n%6 != 0 {
		t.Fatalf("the server's first frame is type %d of %d bytes, want SETTINGS", hdr[3], n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	for i := 0; i+6 <= n; i += 6 {
		if id := binary.BigEndian.Uint16(body[i:]); id == 3 { // SETTINGS_MAX_CONCURRENT_STREAMS
			if v := binary.BigEndian.Uint32(body[i+2:]); v != 7 {
				t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d, want 7", v)
			}
			return
		}
	}
	t.Fatal("the server's SETTINGS have no SETTINGS_MAX_CONCURRENT_STREAMS")
}

// TestTrustedProxiesNotBoundPerClient: behind a load balancer every
// connection comes from the balancer, so the proxy's trusted proxies are
// not bounded per client; anyone else is.
func TestTrustedProxiesNotBoundPerClient(t *testing.T) {
	d, err := New(mustParse(t, `
proxy:
  listen: 127.0.0.1:0
  upstream: demo
  client_ip: {trusted_proxies: [127.0.0.2]}
  bounds: {max_connections_per_client: 1, header_timeout: 1h}
admin: {listen: ""}
`), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	dial := func(from string) {
		dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := dl.Dial("tcp", d.Addrs().Proxy.String())
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
	}
	for range 3 {
		dial("127.0.0.2")
	}
	testkit.Eventually(t, 10*time.Second, "three connections of the trusted proxy admitted", func() bool { return d.run.open("proxy") == 3 })
	dial("127.0.0.3")
	dial("127.0.0.3")
	testkit.Eventually(t, 10*time.Second, "another client's second connection refused", func() bool {
		return testutil.ToFloat64(d.connsRefused.WithLabelValues("proxy", "per_client")) == 1
	})
	if n := d.run.open("proxy"); n != 4 {
		t.Errorf("%d connections open, want 4", n)
	}
}

// TestCheckTooLarge: a check API request whose body is over the API's
// bound is refused 413 with a JSON error, never an answer a client could
// read as allowed (200, or "allowed": true); so is a lease request.
func TestCheckTooLarge(t *testing.T) {
	d := started(t, `
policies: {api: {rate: 1000/s}}
check:
  listen: 127.0.0.1:0
  concurrency: {reports: {limit: 2, lease: 1m}}
admin: {listen: ""}
`)
	big := strings.Repeat("k", checkapi.DefaultMaxBody)
	for path, body := range map[string]string{
		"/v1/check":               `{"policy":"api","key":"` + big + `"}`,
		"/v1/concurrency/acquire": `{"name":"reports","key":"` + big + `"}`,
	} {
		resp, err := http.Post("http://"+d.Addrs().Check.String()+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Errorf("%s: a %d-byte body answered %d with a body that is not JSON: %q", path, len(body), resp.StatusCode, b)
		}
		if resp.StatusCode != http.StatusRequestEntityTooLarge || v["error"] == nil || v["allowed"] != nil {
			t.Errorf("%s: a %d-byte body answered %d %s, want 413 with an error and no \"allowed\"", path, len(body), resp.StatusCode, b)
		}
	}
}
