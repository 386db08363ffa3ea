package pgproxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// fakeClock is the proxy's clock and the limiter's at once: time moves
// only when the test advances it, and timers fire then.
type fakeClock struct {
	*floodgatetest.Clock
	mu     sync.Mutex
	timers map[*fakeTimer]struct{}
}

type fakeTimer struct {
	c  *fakeClock
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{Clock: floodgatetest.NewClock(floodgatetest.Start), timers: map[*fakeTimer]struct{}{}}
}

func (c *fakeClock) NewTimer(d time.Duration) timer {
	t := &fakeTimer{c: c, at: c.Now().Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.Now()
		return t
	}
	c.mu.Lock()
	c.timers[t] = struct{}{}
	c.mu.Unlock()
	return t
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, ok := t.c.timers[t]
	delete(t.c.timers, t)
	return ok
}

// Advance moves time on and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.Clock.Advance(d)
	now := c.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for t := range c.timers {
		if !t.at.After(now) {
			delete(c.timers, t)
			t.ch <- now
		}
	}
}

// hasTimerAt reports whether a timer waits to fire at at.
func (c *fakeClock) hasTimerAt(at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t := range c.timers {
		if t.at.Equal(at) {
			return true
		}
	}
	return false
}

// session is a raw client session through the proxy.
type session struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

func openSession(t *testing.T, addr string) *session {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	s := &session{t: t, nc: nc, r: bufio.NewReader(nc)}
	p := binary.BigEndian.AppendUint32(make([]byte, 4), 3<<16)
	for _, f := range []string{"user", testkit.PostgresTrustUser, "database", "postgres"} {
		p = append(append(p, f...), 0)
	}
	p = append(p, 0)
	binary.BigEndian.PutUint32(p, uint32(len(p)))
	s.send(p)
	s.answer()
	return s
}

func (s *session) send(b []byte) {
	s.t.Helper()
	if _, err := s.nc.Write(b); err != nil {
		s.t.Fatal(err)
	}
}

func (s *session) query(sql string) {
	s.t.Helper()
	s.send(append(binary.BigEndian.AppendUint32([]byte{'Q'}, uint32(4+len(sql)+1)), append([]byte(sql), 0)...))
}

// answer reads up to a ReadyForQuery and returns the SQLSTATE of the
// error in it, "" when there was none.
func (s *session) answer() string {
	s.t.Helper()
	_ = s.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	code := ""
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
			s.t.Fatalf("reading the answer: %v", err)
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[1:])-4)
		if _, err := io.ReadFull(s.r, body); err != nil {
			s.t.Fatal(err)
		}
		switch hdr[0] {
		case 'E':
			for _, f := range strings.Split(string(body), "\x00") {
				if strings.HasPrefix(f, "C") {
					code = f[1:]
				}
			}
		case 'Z':
			return code
		}
	}
}

// TestWaitQueueOrder follows a queue step by step on a clock that moves
// only when the test says: one query per second passes, in arrival order;
// a query whose turn cannot come within MaxWait gets 53400 when the limiter
// says so, and the one behind it, which has time left, still passes; a
// cancelled and a disconnected query leave the line at once.
func TestWaitQueueOrder(t *testing.T) {
	pg := testkit.Postgres(t)
	clk := newFakeClock()
	store := memstore.New(memstore.Options{Clock: clk})
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(store, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{floodgate.PerSecond(1).WithBurst(1)}})
	if err != nil {
		t.Fatal(err)
	}
	obs := &counts{}
	p, err := New(Config{Upstream: pg.Addr, Limits: Limits{Global: Scope{Limiter: lim, MaxWait: 3500 * time.Millisecond}}, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	p.clock = clk
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() { p.Close() })
	addr := ln.Addr().String()
	allowed := func() uint64 { return obs.queries[scopeGlobal][Allowed].Load() }
	waiting := func() int64 { return obs.waiting.Load() }
	t0 := clk.Now()

	s := make([]*session, 6)
	for i := range s {
		s[i] = openSession(t, addr)
	}
	s[0].query("SELECT 0")
	if code := s[0].answer(); code != "" {
		t.Fatalf("the first query: %s", code)
	}
	// s1 is denied and heads the line, due in a second; s2 and s3 queue
	// behind it, then a pgx session that is cancelled, a session that
	// disconnects, then s4 (all at t0); s5 arrives 0.6 s later.
	enqueue := func(i int, n int64) {
		t.Helper()
		s[i].query("SELECT 1")
		testkit.Eventually(t, 20*time.Second, "the query queues", func() bool { return waiting() == n })
	}
	enqueue(1, 1)
	if !clk.hasTimerAt(t0.Add(time.Second)) {
		t.Fatal("the head does not sleep until it is due")
	}
	enqueue(2, 2)
	enqueue(3, 3)

	u := &url.URL{Scheme: "postgres", Host: addr, Path: "/postgres", RawQuery: "sslmode=disable", User: url.User(testkit.PostgresTrustUser)}
	ctx := context.Background()
	pc, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(ctx)
	canceled := make(chan error, 1)
	go func() { _, err := pc.Exec(ctx, "SELECT 'cancelled'", pgx.QueryExecModeSimpleProtocol); canceled <- err }()
	testkit.Eventually(t, 20*time.Second, "the pgx query queues", func() bool { return waiting() == 4 })
	gone := openSession(t, addr)
	gone.query("SELECT 'gone'")
	testkit.Eventually(t, 20*time.Second, "the query that will disconnect queues", func() bool { return waiting() == 5 })
	enqueue(4, 6)

	if err := pc.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	var pe *pgconn.PgError
	if err := <-canceled; !errors.As(err, &pe) || pe.Code != "57014" {
		t.Fatalf("the cancelled query: %v; want 57014", err)
	}
	testkit.Eventually(t, 20*time.Second, "the cancelled query leaves the line", func() bool { return waiting() == 5 })
	gone.nc.Close()
	testkit.Eventually(t, 20*time.Second, "the disconnected query leaves the line", func() bool { return waiting() == 4 })

	clk.Advance(600 * time.Millisecond)
	enqueue(5, 5)

	// t0+1s: s1 passes, s2 heads the line and sleeps until t0+2s.
	step := func(to time.Duration, passes int, wantAllowed uint64) {
		t.Helper()
		clk.Advance(t0.Add(to).Sub(clk.Now()))
		if code := s[passes].answer(); code != "" {
			t.Fatalf("at t0+%s: s%d answered %s; want its rows (its turn)", to, passes, code)
		}
		testkit.Eventually(t, 20*time.Second, "the next head sleeps until it is due", func() bool {
			return allowed() == wantAllowed && clk.hasTimerAt(t0.Add(to+time.Second))
		})
	}
	step(time.Second, 1, 2)
	step(2*time.Second, 2, 3)
	// t0+3s: s3 passes; s4 (deadline t0+3.5s) would pass at t0+4s, too
	// late: 53400 at once; s5 (deadline t0+4.1s) heads the line.
	clk.Advance(time.Second)
	if code := s[3].answer(); code != "" {
		t.Fatalf("s3: %s; want its rows", code)
	}
	if code := s[4].answer(); code != "53400" {
		t.Fatalf("s4: %q; want 53400 (its turn comes after its max_wait)", code)
	}
	testkit.Eventually(t, 20*time.Second, "s5 heads the line", func() bool { return clk.hasTimerAt(t0.Add(4 * time.Second)) })
	clk.Advance(time.Second)
	if code := s[5].answer(); code != "" {
		t.Fatalf("s5: %s; want its rows", code)
	}
	p.queues.mu.Lock() // the lists are the queues' (a decision may have left them on another goroutine)
	lists := len(p.queues.lists)
	p.queues.mu.Unlock()
	if waiting() != 0 || p.queues.queued.Load() != 0 || lists != 0 {
		t.Fatalf("%d waiting, %d queued, %d lists after the line emptied", waiting(), p.queues.queued.Load(), lists)
	}
	if got := allowed(); got != 5 {
		t.Errorf("%d queries charged, want 5 (s0, s1, s2, s3, s5)", got)
	}
	if got := obs.waits[scopeGlobal][WaitCanceled].Load(); got != 2 {
		t.Errorf("%d canceled waits, want 2", got)
	}
}
