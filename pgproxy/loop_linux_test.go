//go:build linux

package pgproxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/testkit"
)

// relayCounts is an Observer that counts waits and bytes relayed.
type relayCounts struct {
	counts
	toClient atomic.Int64
}

func (o *relayCounts) Relayed(d Direction, n int) {
	if d == ServerToClient {
		o.toClient.Add(int64(n))
	}
}

// startLoopProxy serves cfg on one event loop and returns its address.
func startLoopProxy(t *testing.T, cfg Config) (*Proxy, string) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.loops.n = 1
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() { p.Close() })
	return p, ln.Addr().String()
}

// loopConns counts the connections on p's loops. It asks each loop, so
// that the loop itself reads its map.
func loopConns(p *Proxy) int {
	p.loops.mu.Lock()
	all := p.loops.all
	p.loops.mu.Unlock()
	n := 0
	for _, lp := range all {
		got := make(chan int)
		if lp.send(loopMsg{lc: &loopConn{lp: lp, count: got}, ev: loopCount}) {
			n += <-got
		}
	}
	return n
}

// TestLoopParkedResumes: a query that must wait in line parks its
// connection, the loop goes on serving the others meanwhile, and the
// connection resumes when its turn comes.
func TestLoopParkedResumes(t *testing.T) {
	pg := testkit.Postgres(t)
	clk := newFakeClock()
	store := memstore.New(memstore.Options{Clock: clk})
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(store, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{floodgate.PerSecond(1).WithBurst(1)}})
	if err != nil {
		t.Fatal(err)
	}
	obs := &relayCounts{}
	p, addr := startLoopProxy(t, Config{Upstream: pg.Addr, Observer: obs,
		Limits: Limits{Global: Scope{Limiter: lim, MaxWait: 5 * time.Second}, Local: true}})
	p.clock = clk

	a, b, idle := openSession(t, addr), openSession(t, addr), openSession(t, addr)
	if n := loopConns(p); n != 3 {
		t.Fatalf("%d connections on the loop, want 3", n)
	}
	a.query("SELECT 1")
	if code := a.answer(); code != "" {
		t.Fatalf("first query: %s", code)
	}
	b.query("SELECT 2")
	testkit.Eventually(t, 20*time.Second, "the second query waits in line", func() bool { return obs.waiting.Load() == 1 })
	// The loop serves the other connections while b is parked: empty
	// queries are not charged, and reach the server.
	for range 3 {
		idle.query("-- ping")
		if code := idle.answer(); code != "" {
			t.Fatalf("an uncharged query while another waits: %s", code)
		}
	}
	clk.Advance(time.Second)
	if code := b.answer(); code != "" {
		t.Fatalf("the parked query: %q, want its rows", code)
	}
	// Resumed: the connection is read again.
	clk.Advance(time.Second)
	b.query("SELECT 3")
	if code := b.answer(); code != "" {
		t.Fatalf("the query after the wait: %q", code)
	}
	if got := obs.waits[scopeGlobal][WaitPassed].Load(); got != 1 {
		t.Errorf("%d waits passed, want 1", got)
	}
}

// TestLoopStartupPipelined: what a client sends right behind its startup
// (a trust login needs no answer first), read with the startup, goes to
// the loop whole: a query larger than the startup's reader, sent with the
// startup in one write, is answered on the loop.
func TestLoopStartupPipelined(t *testing.T) {
	pg := testkit.Postgres(t)
	p, addr := startLoopProxy(t, Config{Upstream: pg.Addr})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	s := &session{t: t, nc: nc, r: bufio.NewReader(nc)}
	startup := binary.BigEndian.AppendUint32(make([]byte, 4), 3<<16)
	for _, f := range []string{"user", testkit.PostgresTrustUser, "database", "postgres"} {
		startup = append(append(startup, f...), 0)
	}
	startup = append(startup, 0)
	binary.BigEndian.PutUint32(startup, uint32(len(startup)))
	sql := "SELECT '" + strings.Repeat("x", 3*bufSize/2) + "'"
	s.send(append(startup, append(binary.BigEndian.AppendUint32([]byte{'Q'}, uint32(4+len(sql)+1)), append([]byte(sql), 0)...)...))
	if code := s.answer(); code != "" {
		t.Fatalf("the startup: %s", code)
	}
	if code := s.answer(); code != "" {
		t.Fatalf("the query sent with the startup: %s", code)
	}
	if n := p.LoopStats().Connections; n != 1 {
		t.Fatalf("%d sessions on the loop, want 1", n)
	}
}

// TestLoopSlowReader: a client that does not read a large result holds
// the stream from the server, not the proxy's memory: the loop stops
// reading the server while the client's output is unwritten, and the
// whole result arrives once the client reads.
func TestLoopSlowReader(t *testing.T) {
	pg := testkit.Postgres(t)
	obs := &relayCounts{}
	_, addr := startLoopProxy(t, Config{Upstream: pg.Addr, Observer: obs})
	s := openSession(t, addr)
	const rows, width = 100_000, 2000 // 200 MB of result
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s.query("SELECT repeat('x', 2000) FROM generate_series(1, 100000)")
	// Nothing is read: the relayed count stops where the sockets' buffers
	// are full.
	last := int64(-1)
	testkit.Eventually(t, 20*time.Second, "the relay stalls behind the client", func() bool {
		n := obs.toClient.Load()
		stalled := n == last && n > 0
		last = n
		time.Sleep(50 * time.Millisecond)
		return stalled
	})
	var during runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&during)
	if got := obs.toClient.Load(); got > rows*width/4 {
		t.Fatalf("%d bytes relayed to a client that reads nothing; want the relay held back", got)
	}
	if grew := int64(during.HeapAlloc) - int64(before.HeapAlloc); grew > 8<<20 {
		t.Errorf("the heap grew by %d bytes behind a stalled client, want at most 8 MiB", grew)
	}
	// Now read it all.
	_ = s.nc.SetReadDeadline(time.Now().Add(60 * time.Second))
	data := 0
	var hdr [5]byte
	buf := make([]byte, 64<<10)
	for {
		if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
			t.Fatal(err)
		}
		n := int(uint32(hdr[1])<<24|uint32(hdr[2])<<16|uint32(hdr[3])<<8|uint32(hdr[4])) - 4
		for n > 0 {
			k, err := s.r.Read(buf[:min(n, len(buf))])
			if err != nil {
				t.Fatal(err)
			}
			n -= k
		}
		if hdr[0] == 'D' {
			data++
		}
		if hdr[0] == 'Z' {
			break
		}
	}
	if data != rows {
		t.Fatalf("%d rows arrived, want %d", data, rows)
	}
}

// TestLoopClose: closing the proxy closes the connections on its loops,
// idle and parked alike, and stops the loops.
func TestLoopClose(t *testing.T) {
	pg := testkit.Postgres(t)
	clk := newFakeClock()
	store := memstore.New(memstore.Options{Clock: clk})
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(store, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{floodgate.PerSecond(1).WithBurst(1)}})
	if err != nil {
		t.Fatal(err)
	}
	obs := &relayCounts{}
	p, addr := startLoopProxy(t, Config{Upstream: pg.Addr, Observer: obs,
		Limits: Limits{Global: Scope{Limiter: lim, MaxWait: time.Minute}, Local: true}})
	p.clock = clk
	idle, parked := openSession(t, addr), openSession(t, addr)
	idle.query("SELECT 1")
	if code := idle.answer(); code != "" {
		t.Fatal(code)
	}
	parked.query("SELECT 2")
	testkit.Eventually(t, 20*time.Second, "the query waits in line", func() bool { return obs.waiting.Load() == 1 })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*session{"idle": idle, "parked": parked} {
		_ = s.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		var b [1]byte
		for {
			_, err := s.r.Read(b[:])
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
				break
			}
			if err != nil {
				t.Fatalf("the %s connection after Close: %v, want EOF", name, err)
			}
		}
	}
	p.loops.mu.Lock()
	left := len(p.loops.all)
	p.loops.mu.Unlock()
	if left != 0 {
		t.Errorf("%d loops left after Close", left)
	}
}

// TestLoopStoppedFallsBack: a session handed to a loop that has stopped
// (one picked for a loop as its epoll_wait fails, before the loop leaves
// the rotation) is relayed by goroutines. The loop dropped its add: the session never got
// its answer, its duplicated sockets stayed open, and Close waited for it
// for ever.
func TestLoopStoppedFallsBack(t *testing.T) {
	pg := testkit.Postgres(t)
	p, err := New(Config{Upstream: pg.Addr})
	if err != nil {
		t.Fatal(err)
	}
	p.loops.n = 1
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	closed := false
	t.Cleanup(func() {
		if !closed {
			go p.Close() // it may wait for a session the loop dropped
		}
	})
	lp := p.loops.pick(p)
	lp.send(loopMsg{}) // it shuts down as on a failure of epoll_wait
	p.loops.wg.Wait()
	before := openFDs(t)

	s := openSession(t, ln.Addr().String())
	s.query("SELECT 1")
	if code := s.answer(); code != "" {
		t.Fatalf("a query on the session: %s", code)
	}
	if n := p.LoopStats().Connections; n != 0 {
		t.Errorf("%d connections taken by a stopped loop", n)
	}
	s.nc.Close()
	p.Close() // waits for the session to end
	closed = true
	if after := openFDs(t); after > before {
		t.Errorf("%d descriptors open after Close, %d before the session", after, before)
	}
}

// TestLoopFailedLeavesRotation: a loop whose epoll_wait fails leaves the
// rotation: the sessions after it go to the loop still running, and once
// none runs, to the goroutine relay. Each failure is logged once, at Error (it closes live sessions),
// and counted. The proxy went on picking the stopped loop, and every
// session picked for it stayed on goroutines, for the proxy's life.
func TestLoopFailedLeavesRotation(t *testing.T) {
	pg := testkit.Postgres(t)
	logs := &logRecords{}
	p, err := New(Config{Upstream: pg.Addr, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	p.loops.n = 2
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() { p.Close() })
	addr := ln.Addr().String()
	first := p.loops.pick(p) // starts both
	failLoop(t, first)
	if n := logs.count(slog.LevelError, "event loop stopped"); n != 1 {
		t.Fatalf("%d warnings that the loop stopped, want 1: %s", n, logs)
	}

	const n = 4
	sessions := make([]*session, 0, n)
	for range n {
		s := openSession(t, addr)
		s.query("SELECT 1")
		if code := s.answer(); code != "" {
			t.Fatalf("a query on the session: %s", code)
		}
		sessions = append(sessions, s)
	}
	if got := p.LoopStats().Connections; got != n {
		t.Errorf("%d of %d sessions on the loop still running, want all", got, n)
	}
	if got := loopConns(p); got != n {
		t.Errorf("%d sessions on the loops, want %d", got, n)
	}
	for _, s := range sessions {
		s.nc.Close()
	}

	// The last one stops: sessions stay on goroutines.
	p.loops.mu.Lock()
	left := slices.Clone(p.loops.all)
	p.loops.mu.Unlock()
	if len(left) != 1 {
		t.Fatalf("%d loops in the rotation, want 1", len(left))
	}
	failLoop(t, left[0])
	s := openSession(t, addr)
	s.query("SELECT 1")
	if code := s.answer(); code != "" {
		t.Fatalf("a query on a session after every loop stopped: %s", code)
	}
	st := p.LoopStats()
	if st.Connections != n {
		t.Errorf("%d sessions on the loops, want %d: none after every loop stopped", st.Connections, n)
	}
	if st.Stopped != 2 {
		t.Errorf("LoopStats.Stopped %d, want 2", st.Stopped)
	}
	if n := logs.count(slog.LevelError, "event loop stopped"); n != 2 {
		t.Errorf("%d errors logged that a loop stopped, want 2: %s", n, logs)
	}
	if n := logs.count(slog.LevelError, "relayed by goroutines"); n != 1 {
		t.Errorf("the last loop's error does not say sessions are relayed by goroutines: %s", logs)
	}
}

// failLoop makes lp's epoll_wait fail, as on a broken epoll descriptor
// (EINVAL): the descriptor is replaced by one of /dev/null (a wait in
// progress keeps the epoll instance), and the loop is woken, with nothing
// in its inbox, to wait again.
func failLoop(t *testing.T, lp *loop) {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Dup3(int(f.Fd()), lp.epfd, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	lp.mu.Lock()
	if !lp.stopped { // its eventfd is open
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, _ = unix.Write(lp.evfd, one[:])
	}
	lp.mu.Unlock()
	testkit.Eventually(t, 20*time.Second, "the loop stops", func() bool {
		lp.mu.Lock()
		defer lp.mu.Unlock()
		return lp.stopped
	})
}

// logRecords is a slog.Handler that keeps the records it is given.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (*logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler     { return l }
func (l *logRecords) WithGroup(string) slog.Handler          { return l }

func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

// count returns how many records at level lv have msg in their message.
func (l *logRecords) count(lv slog.Level, msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if r.Level == lv && strings.Contains(r.Message, msg) {
			n++
		}
	}
	return n
}

func (l *logRecords) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, r := range l.recs {
		fmt.Fprintf(&b, "\n%s %s", r.Level, r.Message)
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s", a)
			return true
		})
	}
	return b.String()
}

// TestLoopFlushOnceReleases: flushOnce, the last write of a connection
// that ends at once, writes each output as pump does, through writeOut,
// and gives what it has written back to its pool. It wrote on its own and
// left the written outputs to the collector.
func TestLoopFlushOnceReleases(t *testing.T) {
	pair := func() (int, int) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
		return fds[0], fds[1]
	}
	cfd, client := pair()
	ufd, server := pair()
	lc := &loopConn{c: &conn{}, cfd: int32(cfd), ufd: int32(ufd)}
	lc.uout = append(clientOut(nil), "to the server"...)
	lc.cout = append(serverOut(nil), "to the client"...)
	lc.flushOnce()
	if lc.uout != nil || lc.uw != 0 {
		t.Errorf("the server's output, written, is kept: %d bytes, %d written", len(lc.uout), lc.uw)
	}
	if lc.cout != nil || lc.cwo != 0 {
		t.Errorf("the client's output, written, is kept: %d bytes, %d written", len(lc.cout), lc.cwo)
	}
	for fd, want := range map[int]string{server: "to the server", client: "to the client"} {
		b := make([]byte, 64)
		n, err := unix.Read(fd, b)
		if err != nil || string(b[:max(n, 0)]) != want {
			t.Errorf("read %q, %v; want %q", b[:max(n, 0)], err, want)
		}
	}
}

// openFDs counts the process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// TestLoopTakesSlotsInline: with Local limits and a concurrent-query limit
// over a Local store, a session's queries take their slot and are decided
// where the loop reads them: nothing parks (every query parked to take its
// slot before TryAcquire). The same session with limits not Local parks
// each query, which LoopStats counts.
func TestLoopTakesSlotsInline(t *testing.T) {
	pg := testkit.Postgres(t)
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(store, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{floodgate.PerSecond(1_000_000).WithBurst(1_000_000)}})
	if err != nil {
		t.Fatal(err)
	}
	conc, err := concurrency.New(concurrency.NewLocal(), concurrency.Options{Limit: 4, MaxWaiting: 4})
	if err != nil {
		t.Fatal(err)
	}
	const queries = 20
	for _, local := range []bool{true, false} {
		p, addr := startLoopProxy(t, Config{Upstream: pg.Addr,
			Limits: Limits{Global: Scope{Limiter: lim}, PerUser: Scope{Limiter: lim}, ConcurrentQueries: conc, Local: local}})
		s := openSession(t, addr)
		for range queries {
			s.query("SELECT 1")
			if code := s.answer(); code != "" {
				t.Fatal(code)
			}
		}
		st := p.LoopStats()
		got := st.Parked
		if st.Connections != 1 {
			t.Fatalf("%d connections on the loop, want 1", st.Connections)
		}
		if local && got != 0 {
			t.Errorf("Local limits, a free slot: %d of %d queries parked, want 0", got, queries)
		}
		if !local && got != queries {
			t.Errorf("limits not Local: %d of %d queries parked", got, queries)
		}
		if n := conc.Waiting(); n != 0 {
			t.Errorf("%d waiting for a slot", n)
		}
	}
}

// TestLoopIdleMemory: a session idle on the event loop, between queries,
// holds no relay buffer: the loop's buffers are taken while bytes are in
// flight and given back when they are passed on. It held 48 KiB of loop
// buffers and the 32 KiB of the startup's reader and writer.
func TestLoopIdleMemory(t *testing.T) {
	pg := testkit.Postgres(t)
	store := memstore.New(memstore.Options{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(store, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{floodgate.PerSecond(1_000_000).WithBurst(1_000_000)}})
	if err != nil {
		t.Fatal(err)
	}
	p, addr := startLoopProxy(t, Config{Upstream: pg.Addr, Limits: Limits{Global: Scope{Limiter: lim}, PerUser: Scope{Limiter: lim}, Local: true}})
	open := func() net.Conn {
		s := openSession(t, addr)
		s.query("SELECT 1")
		if code := s.answer(); code != "" {
			t.Fatal(code)
		}
		return s.nc // the session's reader is dropped: only the socket is kept
	}
	open() // the loop, the keys, the pools
	const n = 40
	conns := make([]net.Conn, 0, n)
	before := liveHeap()
	for range n {
		conns = append(conns, open())
	}
	if got := loopConns(p); got != n+1 {
		t.Fatalf("%d connections on the loop, want %d", got, n+1)
	}
	after := liveHeap()
	per := (int64(after) - int64(before)) / n
	t.Logf("%d bytes of heap per idle connection (client socket included)", per)
	// The connection's state (conn, loopConn, admission, two sockets on
	// each side of this process) is a few KiB; one relay buffer is 16.
	if per > 12<<10 {
		t.Errorf("%d bytes per idle connection, want at most 12 KiB", per)
	}
	runtime.KeepAlive(conns)
}

func liveHeap() uint64 {
	var m runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
