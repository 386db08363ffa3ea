package pgproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/metrics"
	"github.com/floodgate-go/floodgate/pgproxy"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// A proxy under test: its address, its log and its metrics.
type testProxy struct {
	*pgproxy.Proxy
	Addr string
	log  *syncBuffer
	reg  *prometheus.Registry
}

// startProxy starts a Proxy for cfg (Upstream defaults to pg) on a free
// loopback port.
func startProxy(t *testing.T, pg *testkit.PostgresServer, cfg pgproxy.Config) *testProxy {
	t.Helper()
	if cfg.Upstream == "" {
		cfg.Upstream = pg.Addr
	}
	lb := &syncBuffer{}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	reg := prometheus.NewPedanticRegistry()
	if cfg.Observer == nil {
		obs, err := metrics.NewPostgres(reg, metrics.PostgresOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Observer = obs
	}
	p, err := pgproxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()
	t.Cleanup(func() {
		p.Close()
		if err := <-served; !errors.Is(err, pgproxy.ErrProxyClosed) {
			t.Errorf("Serve returned %v, want ErrProxyClosed", err)
		}
		if t.Failed() {
			t.Logf("proxy log:\n%s", lb.String())
		}
	})
	return &testProxy{Proxy: p, Addr: ln.Addr().String(), log: lb, reg: reg}
}

// dsn is a URL for user through the proxy.
func (tp *testProxy) dsn(user, password string, query ...string) string {
	u := &url.URL{Scheme: "postgres", Host: tp.Addr, Path: "/postgres", RawQuery: "sslmode=disable"}
	if len(query) > 0 {
		u.RawQuery = strings.Join(query, "&")
	}
	if password != "" {
		u.User = url.UserPassword(user, password)
	} else {
		u.User = url.User(user)
	}
	return u.String()
}

// connect opens a pgx connection through the proxy.
func (tp *testProxy) connect(t *testing.T, user, password string, query ...string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, tp.dsn(user, password, query...))
	if err != nil {
		t.Fatalf("connect as %s through the proxy: %v\nproxy log:\n%s", user, err, tp.log.String())
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// metric returns the value of the sample of name with the labels given as
// name=value pairs; 0 when there is none.
func (tp *testProxy) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := tp.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if labelValue(m, labels[i]) != labels[i+1] {
					continue next
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	return 0
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitLog waits until the log holds substr.
func (tp *testProxy) waitLog(t *testing.T, substr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(tp.log.String(), substr) {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy never logged %q; log:\n%s", substr, tp.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// memLimiter builds a limiter on a memory store whose clock stands still
// unless the test moves it, so that nothing refills behind a test's back.
func memLimiter(t *testing.T, p floodgate.Policy) (*floodgate.PolicyLimiter, *floodgatetest.Clock) {
	t.Helper()
	clock := floodgatetest.NewClock(floodgatetest.Start)
	store := memstore.New(memstore.Options{Clock: clock})
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(store, p)
	if err != nil {
		t.Fatal(err)
	}
	return lim, clock
}

// burst is a limit of n queries that refills one per hour: with a still
// clock, exactly n pass.
func burst(n int64) floodgate.Limit { return floodgate.PerHour(1).WithBurst(n) }

// pgCode returns the SQLSTATE of err, or "" when it is not a server error.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// query runs sql and returns its single value as text.
func query(ctx context.Context, c *pgx.Conn, sql string, args ...any) (string, error) {
	var v any
	if err := c.QueryRow(ctx, sql, args...).Scan(&v); err != nil {
		return "", err
	}
	return fmt.Sprint(v), nil
}

// simple makes pgx use the simple query protocol for one call.
var simple = pgx.QueryExecModeSimpleProtocol

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A rawSession speaks the protocol by hand, for what no client library
// sends: malformed messages, disconnects at chosen moments.
type rawSession struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

// rawConnect opens a session as user (which must be trusted) and reads up
// to the first ReadyForQuery.
func rawConnect(t *testing.T, addr, user string) *rawSession {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	s := &rawSession{t: t, nc: nc, r: bufio.NewReader(nc)}
	s.write(startupPacket(3<<16, "user", user, "database", "postgres"))
	for {
		typ, body := s.read()
		switch typ {
		case 'E':
			t.Fatalf("startup failed: %q", body)
		case 'Z':
			return s
		}
	}
}

func startupPacket(version uint32, kv ...string) []byte {
	b := binary.BigEndian.AppendUint32(make([]byte, 4), version)
	for _, s := range kv {
		b = append(append(b, s...), 0)
	}
	b = append(b, 0)
	binary.BigEndian.PutUint32(b, uint32(len(b)))
	return b
}

// msg frames a client message.
func msg(typ byte, body string) []byte {
	b := binary.BigEndian.AppendUint32([]byte{typ}, uint32(4+len(body)))
	return append(b, body...)
}

func (s *rawSession) write(b []byte) {
	s.t.Helper()
	if _, err := s.nc.Write(b); err != nil {
		s.t.Fatal(err)
	}
}

// read returns the next message from the proxy.
func (s *rawSession) read() (byte, []byte) {
	s.t.Helper()
	typ, body, err := s.tryRead()
	if err != nil {
		s.t.Fatal(err)
	}
	return typ, body
}

func (s *rawSession) tryRead() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[1:])-4)
	_, err := io.ReadFull(s.r, body)
	return hdr[0], body, err
}

// until reads messages up to one of type typ and returns the types read.
func (s *rawSession) until(typ byte) string {
	s.t.Helper()
	var seen []byte
	for {
		tp, _ := s.read()
		seen = append(seen, tp)
		if tp == typ {
			return string(seen)
		}
	}
}
