package pgproxy_test

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/pgproxy"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// TestBadClients: a bad connection is answered FATAL 08P01 and closed
// (TestProtocolViolations has every kind), and a good session on the same
// proxy goes on.
func TestBadClients(t *testing.T) {
	pg := testkit.Postgres(t)
	tp := startProxy(t, pg, pgproxy.Config{MaxMessageSize: 64 << 10})
	ctx := ctxT(t)
	good := tp.connect(t, testkit.PostgresTrustUser, "")

	fatal := func(t *testing.T, nc net.Conn, want string) {
		t.Helper()
		a := readAnswer(t, nc, 20*time.Second)
		if len(a.errors) != 1 || !a.closed || a.errors[0].severity != "FATAL" || a.errors[0].code != "08P01" || !strings.Contains(a.errors[0].message, want) {
			t.Fatalf("the proxy answered %s; want FATAL 08P01 %q, then the end of the connection", a, want)
		}
	}
	t.Run("AboveMaxMessageSize", func(t *testing.T) {
		s := rawConnect(t, tp.Addr, testkit.PostgresTrustUser)
		s.write(binary.BigEndian.AppendUint32([]byte{'Q'}, 1<<20))
		fatal(t, &bufferedConn{Conn: s.nc, r: s.r}, "more than the proxy's limit of 65536")
		tp.waitLog(t, "more than the proxy's limit of 65536")
		if v, err := query(ctx, good, "SELECT 'fine'"); err != nil || v != "fine" {
			t.Fatalf("the good session after a bad one: %q, %v", v, err)
		}
	})
	t.Run("MidResponse", func(t *testing.T) {
		// Garbage right behind a query whose answer is 20 MB: wherever the
		// server's stream stands when it is read, the FATAL lands between
		// two of its messages, never inside one (readAnswer would misread
		// the frames).
		s := rawConnect(t, tp.Addr, testkit.PostgresTrustUser)
		s.write(append(msg('Q', "SELECT repeat('x', 1<<20) FROM generate_series(1, 20)\x00"), 0xff, 0, 0, 0, 4))
		a := readAnswer(t, &bufferedConn{Conn: s.nc, r: s.r}, 20*time.Second)
		if len(a.errors) != 1 || !a.closed || a.errors[0].code != "08P01" {
			t.Fatalf("the proxy answered %s; want the server's rows (whole messages), then FATAL 08P01", a)
		}
	})

	t.Run("ServerEndsSession", func(t *testing.T) {
		// The server ends the session: the client gets its FATAL and then
		// the end of the connection, not a connection that looks alive.
		s := rawConnect(t, tp.Addr, testkit.PostgresTrustUser)
		s.write(msg('Q', "SELECT pg_backend_pid()\x00"))
		s.read()           // RowDescription
		_, row := s.read() // DataRow: count, length, value
		pid := string(row[6:])
		s.until('Z')
		if out := pg.Exec("SELECT pg_terminate_backend(" + pid + ")"); out != "t" {
			t.Fatalf("pg_terminate_backend(%s): %q", pid, out)
		}
		if typ, body := s.read(); typ != 'E' || !strings.Contains(string(body), "57P01") {
			t.Fatalf("got %q %q, want the server's FATAL 57P01", typ, body)
		}
		if _, _, err := s.tryRead(); err == nil || strings.Contains(err.Error(), "timeout") {
			t.Fatalf("after the server's FATAL: %v; want the connection closed", err)
		}
	})

	t.Run("GreaseVersion", func(t *testing.T) {
		// A 3.x minor version the server does not know is negotiated down
		// by the server itself (NegotiateProtocolVersion), through the proxy.
		nc, err := net.Dial("tcp", tp.Addr)
		if err != nil {
			t.Fatal(err)
		}
		s := &rawSession{t: t, nc: nc, r: bufio.NewReader(nc)}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
		s.write(startupPacket(3<<16|9999, "user", testkit.PostgresTrustUser, "database", "postgres", "_pq_.grease", "1"))
		seen := s.until('Z')
		if !strings.HasPrefix(seen, "v") || !strings.Contains(seen, "R") || !strings.Contains(seen, "K") {
			t.Fatalf("messages %q; want NegotiateProtocolVersion, then authentication and a key", seen)
		}
		s.write(msg('Q', "SELECT 1\x00"))
		if got := s.until('Z'); got != "TDCZ" {
			t.Fatalf("query answered %q, want TDCZ", got)
		}
	})

	t.Run("SSLRequestThenData", func(t *testing.T) {
		// Bytes after an SSLRequest, before the handshake, are refused
		// rather than read as if they had come over TLS.
		_, cert := testCerts(t)
		tls := startProxy(t, pg, pgproxy.Config{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
		nc, err := net.Dial("tcp", tls.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.Write(append([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}, startupPacket(3<<16, "user", "x")...))
		fatal(t, nc, "received unencrypted data after SSL request")
		tls.waitLog(t, "received unencrypted data after SSL request")
	})
}

// TestSharedRedis: two proxies over one redis-server hold one global limit.
func TestSharedRedis(t *testing.T) {
	pg := testkit.Postgres(t)
	rs := testkit.Redis(t)
	ctx := ctxT(t)
	var proxies []*testProxy
	for range 2 {
		client := redis.NewClient(&redis.Options{Addr: rs.Addr})
		t.Cleanup(func() { client.Close() })
		store, err := redisstore.New(client, redisstore.Options{Prefix: "pgproxy-test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		lim, err := floodgate.New(store, floodgate.Policy{Name: "pg-global", Limits: []floodgate.Limit{burst(10)}})
		if err != nil {
			t.Fatal(err)
		}
		proxies = append(proxies, startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim}}}))
	}
	// Alternating, one at a time: the shared limit lets 10 through in all,
	// 5 through each proxy.
	conns := []*pgx.Conn{proxies[0].connect(t, testkit.PostgresTrustUser, ""), proxies[1].connect(t, testkit.PostgresTrustUser, "")}
	var perProxy [2]int
	for i := range 20 {
		_, err := conns[i%2].Exec(ctx, "SELECT 1")
		switch {
		case err == nil:
			perProxy[i%2]++
		case pgCode(err) != "53400":
			t.Fatal(err)
		}
	}
	if perProxy != [2]int{5, 5} {
		t.Fatalf("passed per proxy %v; want [5 5] under one shared limit of 10", perProxy)
	}
	// Then all at once from both: the limit is spent, nothing passes.
	var passed, denied atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		c := proxies[i%2].connect(t, testkit.PostgresTrustUser, "")
		wg.Go(func() {
			for range 10 {
				_, err := c.Exec(ctx, "SELECT 1")
				switch {
				case err == nil:
					passed.Add(1)
				case pgCode(err) == "53400":
					denied.Add(1)
				default:
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if passed.Load() != 0 || denied.Load() != 40 {
		t.Fatalf("%d passed and %d denied once the shared limit was spent; want 0 and 40", passed.Load(), denied.Load())
	}
	for i, tp := range proxies {
		if got := tp.metric(t, "floodgate_pg_queries_total", "scope", "global", "decision", "allowed"); got != 5 {
			t.Errorf("proxy %d allowed metric %v, want 5", i, got)
		}
	}
}

// TestRedisKilled kills Redis under load: the failure policy decides, and
// no client sees anything but a result or a 53400.
func TestRedisKilled(t *testing.T) {
	pg := testkit.Postgres(t)
	for _, policy := range []failover.Mode{failover.FailOpen, failover.FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			rs := testkit.Redis(t)
			client := redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
			t.Cleanup(func() { client.Close() })
			rstore, err := redisstore.New(client, redisstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rstore.Close() })
			store, err := failover.New(rstore, failover.Options{Mode: policy})
			if err != nil {
				t.Fatal(err)
			}
			lim, err := floodgate.New(store, floodgate.Policy{Name: "pg", Limits: []floodgate.Limit{floodgate.PerSecond(100000)}})
			if err != nil {
				t.Fatal(err)
			}
			tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim}}})
			ctx := ctxT(t)
			var before, afterOK, afterDenied, other atomic.Int64
			var killed atomic.Bool
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 4 {
				c := tp.connect(t, testkit.PostgresTrustUser, "")
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						after := killed.Load()
						_, err := c.Exec(ctx, "SELECT 1")
						switch {
						case !after && err == nil:
							before.Add(1)
						case !after:
							// racing the kill: only a 53400 is acceptable
							if pgCode(err) != "53400" {
								other.Add(1)
								t.Errorf("around the kill: %v", err)
							}
						case err == nil:
							afterOK.Add(1)
						case pgCode(err) == "53400":
							afterDenied.Add(1)
						default:
							other.Add(1)
							t.Errorf("after the kill: %v", err)
						}
					}
				})
			}
			testkit.Eventually(t, 20*time.Second, "the condition", func() bool { return before.Load() >= 50 })
			rs.Kill()
			killed.Store(true)
			testkit.Eventually(t, 20*time.Second, "the condition", func() bool { return afterOK.Load()+afterDenied.Load() >= 50 })
			close(stop)
			wg.Wait()
			switch policy {
			case failover.FailOpen:
				if afterDenied.Load() != 0 {
					t.Errorf("fail-open denied %d queries after Redis died", afterDenied.Load())
				}
			case failover.FailClosed:
				if afterOK.Load() != 0 {
					t.Errorf("fail-closed passed %d queries after Redis died", afterOK.Load())
				}
				if !strings.Contains(tp.log.String(), "rate limit exceeded") && !strings.Contains(tp.log.String(), "check failed") {
					t.Errorf("no rejection logged:\n%s", tp.log.String())
				}
			}
			t.Logf("%s: %d passed before the kill; after: %d passed, %d denied", policy, before.Load(), afterOK.Load(), afterDenied.Load())
		})
	}
}
