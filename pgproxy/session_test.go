package pgproxy_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/pgproxy"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestSessions covers what passes through the proxy: authentication, TLS,
// cancellation, client addresses and connection limits.
func TestSessions(t *testing.T) {
	pg := testkit.Postgres(t)

	t.Run("Authentication", func(t *testing.T) {
		lim, _ := memLimiter(t, floodgate.Policy{Name: "u", Limits: []floodgate.Limit{burst(1000)}})
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{PerUser: pgproxy.Scope{Limiter: lim}}})
		ctx := ctxT(t)
		for _, tc := range []struct{ user, password, method string }{
			{testkit.PostgresTrustUser, "", "trust"},
			{testkit.PostgresSCRAMUser, testkit.PostgresPassword, "scram-sha-256"},
			{testkit.PostgresMD5User, testkit.PostgresPassword, "md5"},
			{testkit.PostgresCleartextUser, testkit.PostgresPassword, "password"},
		} {
			c := tp.connect(t, tc.user, tc.password)
			if v, err := query(ctx, c, "SELECT current_user"); err != nil || v != tc.user {
				t.Errorf("%s (pgx): current_user %q, %v", tc.method, v, err)
			}
			out, err := pg.Psql(tp.dsn(tc.user, tc.password), "SELECT current_user;")
			if err != nil || out != tc.user {
				t.Errorf("%s (psql): %q, %v", tc.method, out, err)
			}
			if tc.password == "" {
				continue
			}
			// A wrong password is the server's to refuse, through the proxy.
			_, err = pgx.Connect(ctx, tp.dsn(tc.user, "wrong"))
			if pgCode(err) != "28P01" {
				t.Errorf("%s with a wrong password: %v; want 28P01 from the server", tc.method, err)
			}
		}
		// The per-user limit saw each user by its startup name.
		for _, u := range []string{testkit.PostgresSCRAMUser, testkit.PostgresMD5User} {
			res, err := lim.AllowN(ctx, u, 0)
			if err != nil || res.Remaining != 998 {
				t.Errorf("user %s: remaining %d, %v; want 998 (one pgx query, one psql query)", u, res.Remaining, err)
			}
		}
	})

	t.Run("PsqlRejection", func(t *testing.T) {
		lim, _ := memLimiter(t, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{burst(1)}})
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim}}})
		// psql stops at the first error (ON_ERROR_STOP): its stderr is what
		// a user sees.
		out, err := pg.Psql(tp.dsn(testkit.PostgresTrustUser, ""), "SELECT 1;\nSELECT 2;\n")
		if err == nil {
			t.Fatalf("second psql query passed: %q", out)
		}
		for _, want := range []string{"ERROR:  rate limit exceeded", "DETAIL:  The global query rate limit is reached", "HINT:  "} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("psql output lacks %q: %v", want, err)
			}
		}
		if out = strings.TrimSpace(out); out != "1" {
			t.Errorf("psql printed %q before the error, want 1", out)
		}
		t.Logf("psql saw:\n%s", err)
	})

	t.Run("TLS", func(t *testing.T) {
		ca, serverCert := testCerts(t)
		lim, _ := memLimiter(t, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{burst(1000)}})
		tp := startProxy(t, pg, pgproxy.Config{
			TLS:    &tls.Config{Certificates: []tls.Certificate{serverCert}},
			Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim}},
		})
		ctx := ctxT(t)
		for _, mode := range []string{"sslmode=require", "sslmode=verify-full&sslrootcert=" + ca, "sslmode=verify-full&sslrootcert=" + ca + "&sslnegotiation=direct"} {
			c := tp.connect(t, testkit.PostgresSCRAMUser, testkit.PostgresPassword, mode)
			if v, err := query(ctx, c, "SELECT 'over tls'"); err != nil || v != "over tls" {
				t.Errorf("%s: %q, %v", mode, v, err)
			}
			if !c.PgConn().Conn().(interface{ ConnectionState() tls.ConnectionState }).ConnectionState().HandshakeComplete {
				t.Errorf("%s: not over TLS", mode)
			}
		}
		// psql (libpq) with verify-full against the test CA, and SCRAM
		// without channel binding (the default "prefer" falls back to it).
		out, err := pg.Psql(tp.dsn(testkit.PostgresSCRAMUser, testkit.PostgresPassword, "sslmode=verify-full", "sslrootcert="+ca), "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid();")
		if err != nil || out != "f" {
			// The proxy terminates TLS: the server sees a plain connection.
			t.Errorf("psql verify-full: %q, %v; want f (the server's side is not TLS)", out, err)
		}
		// Channel binding cannot pass a proxy that terminates TLS.
		_, err = pg.Psql(tp.dsn(testkit.PostgresSCRAMUser, testkit.PostgresPassword, "sslmode=require", "channel_binding=require"), "SELECT 1;")
		if err == nil {
			t.Error("channel_binding=require passed through a TLS-terminating proxy")
		}
		// A certificate for another name fails verify-full.
		_, err = pgx.Connect(ctx, strings.Replace(tp.dsn(testkit.PostgresTrustUser, "", "sslmode=verify-full&sslrootcert="+ca), "127.0.0.1", "127.0.0.2", 1))
		if err == nil {
			t.Error("verify-full accepted a host the certificate does not name")
		}
		// Sessions over TLS stay on the goroutine relay; a plain one on the
		// same listener goes to an event loop (on Linux).
		if n := tp.LoopStats().Connections; n != 0 {
			t.Errorf("%d TLS sessions taken by an event loop, want none", n)
		}
		c := tp.connect(t, testkit.PostgresTrustUser, "", "sslmode=disable")
		if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		if n, want := tp.LoopStats().Connections, onLoop(); n != want {
			t.Errorf("%d plain sessions taken by an event loop, want %d", n, want)
		}
	})

	t.Run("NoTLS", func(t *testing.T) {
		tp := startProxy(t, pg, pgproxy.Config{})
		ctx := ctxT(t)
		// sslmode=prefer: the proxy answers N and the session goes on in
		// the clear.
		c := tp.connect(t, testkit.PostgresTrustUser, "", "sslmode=prefer")
		if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		if _, err := pgx.Connect(ctx, tp.dsn(testkit.PostgresTrustUser, "", "sslmode=require")); err == nil {
			t.Error("sslmode=require connected to a proxy without TLS")
		}
		// Direct TLS is refused with a log line.
		_, err := pgx.Connect(ctx, tp.dsn(testkit.PostgresTrustUser, "", "sslmode=require&sslnegotiation=direct"))
		if err == nil {
			t.Fatal("direct TLS connected to a proxy without TLS")
		}
		tp.waitLog(t, "client started TLS directly")
	})

	t.Run("UpstreamTLS", func(t *testing.T) {
		ca := enableServerTLS(t, pg)
		pool := x509.NewCertPool()
		caPEM, _ := os.ReadFile(ca)
		pool.AppendCertsFromPEM(caPEM)
		tp := startProxy(t, pg, pgproxy.Config{UpstreamTLS: &tls.Config{RootCAs: pool}, Upstream: "localhost:" + pg.Addr[strings.LastIndexByte(pg.Addr, ':')+1:]})
		c := tp.connect(t, testkit.PostgresSCRAMUser, testkit.PostgresPassword)
		if v, err := query(ctxT(t), c, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"); err != nil || v != "true" {
			t.Fatalf("the server's side is not TLS: %q, %v", v, err)
		}
		if n := tp.LoopStats().Connections; n != 0 {
			t.Errorf("%d sessions with TLS to the server taken by an event loop, want none", n)
		}
	})

	t.Run("CancelRunningQuery", func(t *testing.T) {
		ca, serverCert := testCerts(t)
		tp := startProxy(t, pg, pgproxy.Config{TLS: &tls.Config{Certificates: []tls.Certificate{serverCert}}})
		ctx := ctxT(t)
		for _, mode := range []string{"sslmode=disable", "sslmode=verify-full&sslrootcert=" + ca} {
			c := tp.connect(t, testkit.PostgresTrustUser, "", mode)
			done := make(chan error, 1)
			go func() {
				_, err := c.Exec(ctx, "SELECT pg_sleep(30)")
				done <- err
			}()
			testkit.Eventually(t, 20*time.Second, "the condition", func() bool {
				return pg.Exec("SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' AND state = 'active'") == "1"
			})
			if err := c.PgConn().CancelRequest(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; pgCode(err) != "57014" {
				t.Fatalf("%s: cancelled pg_sleep returned %v; want 57014", mode, err)
			}
			if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
				t.Fatalf("session after cancel: %v", err)
			}
		}
		if got := tp.metric(t, "floodgate_pg_cancel_requests_total", "result", "forwarded"); got != 2 {
			t.Errorf("forwarded cancels %v, want 2", got)
		}
		// A CancelRequest with a wrong key cancels nothing.
		nc, err := net.Dial("tcp", tp.Addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.Write([]byte{0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 1, 1, 2, 3, 4})
		nc.Close()
		testkit.Eventually(t, 20*time.Second, "the condition", func() bool {
			return tp.metric(t, "floodgate_pg_cancel_requests_total", "result", "unknown_key") == 1
		})
	})

	t.Run("CancelWaitingQuery", func(t *testing.T) {
		lim, _ := memLimiter(t, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{burst(1)}})
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim, MaxWait: 2 * time.Hour}}})
		ctx := ctxT(t)
		c := tp.connect(t, testkit.PostgresTrustUser, "")
		if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		// The next query waits an hour for its unit (the clock stands
		// still, so it would wait for ever): a CancelRequest ends it. By
		// the time the client has its answer, the wait is counted and
		// over; a few rounds, for the metrics are published in a race
		// with that answer if at all.
		const rounds = 20
		for i := 1; i <= rounds; i++ {
			done := make(chan error, 1)
			go func() {
				_, err := c.Exec(ctx, "SELECT 2")
				done <- err
			}()
			testkit.Eventually(t, 20*time.Second, "the condition", func() bool { return tp.metric(t, "floodgate_pg_queries_waiting") == 1 })
			if err := c.PgConn().CancelRequest(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; pgCode(err) != "57014" {
				t.Fatalf("cancelled wait returned %v; want 57014", err)
			}
			if got := tp.metric(t, "floodgate_pg_query_waits_total", "scope", "global", "outcome", "canceled"); got != float64(i) {
				t.Fatalf("round %d: cancelled waits %v, want %d", i, got, i)
			}
			if got := tp.metric(t, "floodgate_pg_queries_waiting"); got != 0 {
				t.Fatalf("round %d: %v queries waiting after the cancel, want 0", i, got)
			}
		}
		// A client that disconnects ends its wait too.
		rs := rawConnect(t, tp.Addr, testkit.PostgresTrustUser)
		rs.write(msg('Q', "SELECT 3\x00"))
		testkit.Eventually(t, 20*time.Second, "the condition", func() bool { return tp.metric(t, "floodgate_pg_queries_waiting") == 1 })
		rs.nc.Close()
		testkit.Eventually(t, 20*time.Second, "the condition", func() bool {
			return tp.metric(t, "floodgate_pg_query_waits_total", "scope", "global", "outcome", "canceled") == rounds+1
		})
	})

	t.Run("PerIPWithProxyProtocol", func(t *testing.T) {
		lim, _ := memLimiter(t, floodgate.Policy{
			Name:      "ip",
			Limits:    []floodgate.Limit{burst(2)},
			Overrides: map[string][]floodgate.Limit{"10.0.0.100": {burst(4)}},
		})
		tp := startProxy(t, pg, pgproxy.Config{
			ProxyProtocolFrom: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
			Limits:            pgproxy.Limits{PerIP: pgproxy.Scope{Limiter: lim}},
		})
		ctx := ctxT(t)
		v2 := func(ip string) []byte {
			a := netip.MustParseAddr(ip).As4()
			h := append([]byte("\r\n\r\n\x00\r\nQUIT\n"), 0x21, 0x11, 0, 12)
			return append(append(h, a[:]...), 10, 0, 0, 1, 0x30, 0x39, 0x18, 0xeb)
		}
		for _, tc := range []struct {
			header []byte
			key    string
			want   int
		}{
			{[]byte("PROXY TCP4 192.0.2.7 10.0.0.1 51000 6432\r\n"), "192.0.2.7", 2},
			{v2("10.0.0.100"), "10.0.0.100", 4},
			{[]byte("PROXY TCP6 2001:db8::1 2001:db8::2 51000 6432\r\n"), "2001:db8::/64", 2},
			// IPv4 clients written in IPv6 key as their IPv4 address, as
			// clientip keys them: two NAT64 clients are two buckets, not
			// one 64:ff9b::/64 ...
			{[]byte("PROXY TCP6 64:ff9b::203.0.113.7 2001:db8::2 51000 6432\r\n"), "203.0.113.7", 2},
			{[]byte("PROXY TCP6 64:ff9b::198.51.100.9 2001:db8::2 51000 6432\r\n"), "198.51.100.9", 2},
			// ... and an IPv4-compatible address is not ::/64.
			{[]byte("PROXY TCP6 ::192.0.2.99 2001:db8::2 51000 6432\r\n"), "192.0.2.99", 2},
			{nil, "127.0.0.1", 2}, // a trusted peer without a header is the client
		} {
			cfg, err := pgx.ParseConfig(tp.dsn(testkit.PostgresTrustUser, ""))
			if err != nil {
				t.Fatal(err)
			}
			header := tc.header
			cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
				nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err == nil && header != nil {
					_, err = nc.Write(header)
				}
				return nc, err
			}
			c, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatalf("%s: %v", tc.key, err)
			}
			n := 0
			for range 6 {
				if _, err := c.Exec(ctx, "SELECT 1"); err == nil {
					n++
				} else if pgCode(err) != "53400" {
					t.Fatal(err)
				}
			}
			c.Close(ctx)
			if n != tc.want {
				t.Errorf("client %s passed %d queries, want %d", tc.key, n, tc.want)
			}
			if res, err := lim.AllowN(ctx, tc.key, 0); err != nil || res.Remaining != 0 {
				t.Errorf("key %s: remaining %d, %v; want 0", tc.key, res.Remaining, err)
			}
		}
		// From an untrusted peer, a PROXY header is not read.
		tp2 := startProxy(t, pg, pgproxy.Config{ProxyProtocolFrom: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}})
		nc, err := net.Dial("tcp", tp2.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.Write([]byte("PROXY TCP4 192.0.2.7 10.0.0.1 51000 6432\r\n"))
		// Read as a startup packet, "PROX" is a length far too large.
		if a := readAnswer(t, nc, 10*time.Second); len(a.errors) != 1 || a.errors[0].code != "08P01" || !strings.Contains(a.errors[0].message, "invalid length of startup packet") {
			t.Errorf("a PROXY header from an untrusted peer: %s; want FATAL 08P01 invalid length of startup packet", a)
		}
		tp2.waitLog(t, "invalid length of startup packet")
	})

	t.Run("ConnectionLimits", func(t *testing.T) {
		perIP, _ := memLimiter(t, floodgate.Policy{Name: "cip", Limits: []floodgate.Limit{burst(3)}})
		perUser, _ := memLimiter(t, floodgate.Policy{Name: "cuser", Limits: []floodgate.Limit{burst(2)}})
		tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{Connections: pgproxy.ConnLimits{PerUser: perUser, PerIP: perIP}}})
		ctx := ctxT(t)
		try := func(user string) error {
			c, err := pgx.Connect(ctx, tp.dsn(user, ""))
			if err == nil {
				c.Close(ctx)
			}
			return err
		}
		var errs []string
		for _, u := range []string{testkit.PostgresTrustUser, testkit.PostgresTrustUser, testkit.PostgresTrustUser, testkit.PostgresSuperuser, testkit.PostgresSuperuser} {
			errs = append(errs, pgCode(try(u)))
		}
		// trust: 2 pass, the third is over its user limit (refunded to
		// nothing: the user scope comes first); postgres: one passes, then
		// the address has used its 3.
		want := []string{"", "", "53300", "", "53300"}
		if strings.Join(errs, ",") != strings.Join(want, ",") {
			t.Fatalf("connection results %q, want %q", errs, want)
		}
		var pe *pgconn.PgError
		if err := try(testkit.PostgresSuperuser); !errors.As(err, &pe) || pe.Severity != "FATAL" || !strings.Contains(pe.Detail, "per-client-address") {
			t.Errorf("refused connection: %v; want FATAL naming the address scope", err)
		}
		if got := tp.metric(t, "floodgate_pg_connections_denied_total", "scope", "ip"); got != 2 {
			t.Errorf("denied by ip: %v, want 2", got)
		}
	})

	t.Run("Shutdown", func(t *testing.T) {
		tp := startProxy(t, pg, pgproxy.Config{})
		c := tp.connect(t, testkit.PostgresTrustUser, "")
		ctx := ctxT(t)
		// An open session keeps Shutdown waiting until its context ends;
		// then the session is closed.
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- tp.Shutdown(sctx) }()
		testkit.Eventually(t, 20*time.Second, "the condition", func() bool {
			nc, err := net.Dial("tcp", tp.Addr)
			if err == nil {
				nc.Close()
			}
			return err != nil // no longer listening
		})
		if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatalf("the open session during Shutdown: %v", err)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Shutdown returned %v, want context.Canceled", err)
		}
		if _, err := c.Exec(ctx, "SELECT 1"); err == nil {
			t.Fatal("the session outlived Shutdown's deadline")
		}
		// With no session left, Shutdown returns at once.
		if err := tp.Shutdown(ctx); err != nil {
			t.Fatalf("second Shutdown: %v", err)
		}
	})

	t.Run("Replication", func(t *testing.T) {
		lim, _ := memLimiter(t, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{burst(1)}})
		tp := startProxy(t, pg, pgproxy.Config{Replication: pgproxy.ReplicationRefuse, Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim}}})
		ctx := ctxT(t)
		_, err := pgconn.Connect(ctx, tp.dsn(testkit.PostgresSuperuser, "", "sslmode=disable&replication=database"))
		if pgCode(err) != "28000" {
			t.Fatalf("replication connection: %v; want 28000", err)
		}
		lim2, _ := memLimiter(t, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{burst(1)}})
		tp2 := startProxy(t, pg, pgproxy.Config{Replication: pgproxy.ReplicationExempt, Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim2}}})
		rc, err := pgconn.Connect(ctx, tp2.dsn(testkit.PostgresSuperuser, "", "sslmode=disable&replication=database"))
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close(ctx)
		for range 3 {
			if _, err := rc.Exec(ctx, "IDENTIFY_SYSTEM").ReadAll(); err != nil {
				t.Fatalf("IDENTIFY_SYSTEM on an exempt replication connection: %v", err)
			}
		}
	})
}

// onLoop is how many plain sessions an event loop takes of one: on Linux
// it does.
func onLoop() uint64 {
	if runtime.GOOS == "linux" {
		return 1
	}
	return 0
}

// testCerts makes a CA and a server certificate for 127.0.0.1 and
// localhost, and returns the CA's PEM file and the server's key pair. It
// also writes server.crt and server.key next to the CA, for a server.
func testCerts(t testing.TB) (caFile string, server tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "floodgate test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile = filepath.Join(dir, "ca.crt")
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	for name, b := range map[string][]byte{
		"ca.crt":     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"server.crt": certPEM,
		"server.key": keyPEM,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	server, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return caFile, server
}

// enableServerTLS turns on ssl in the test server, with a certificate from
// testCerts copied into its data directory, and returns the CA's file.
func enableServerTLS(t *testing.T, pg *testkit.PostgresServer) (caFile string) {
	t.Helper()
	ca, _ := testCerts(t)
	data := filepath.Join(pg.Dir, "data")
	st, err := os.Stat(data)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	for _, name := range []string{"server.crt", "server.key"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(ca), name))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(data, "floodgate-"+name)
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dst, int(sys.Uid), int(sys.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	pg.Exec("ALTER SYSTEM SET ssl_cert_file = 'floodgate-server.crt'")
	pg.Exec("ALTER SYSTEM SET ssl_key_file = 'floodgate-server.key'")
	pg.Exec("ALTER SYSTEM SET ssl = on")
	pg.Exec("SELECT pg_reload_conf()")
	testkit.Eventually(t, 20*time.Second, "the condition", func() bool { return pg.Exec("SHOW ssl") == "on" })
	return ca
}
