package netguard

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/clientip"
)

// guarded serves a Listener on loopback whose accepted connections are
// held open until the test closes them through the returned channel.
type guarded struct {
	t       *testing.T
	g       *Listener
	mu      sync.Mutex
	refused []Reason
	conns   chan net.Conn
}

func listen(t *testing.T, l Limits) *guarded {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &guarded{t: t, conns: make(chan net.Conn, 100)}
	s.g = Wrap(ln, l, func(_ netip.Addr, why Reason) {
		s.mu.Lock()
		s.refused = append(s.refused, why)
		s.mu.Unlock()
	})
	t.Cleanup(func() { s.g.Close() })
	go func() {
		for {
			c, err := s.g.Accept()
			if err != nil {
				return
			}
			c.Write([]byte{1}) // admitted
			s.conns <- c
		}
	}()
	return s
}

// dial connects from the loopback address from and reports whether the
// connection was admitted (it reads the byte an admitted one gets, or the
// reset a refused one gets).
func (s *guarded) dial(from string) (net.Conn, bool) {
	s.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", s.g.Addr().String())
	if errors.Is(err, syscall.ECONNRESET) {
		return nil, false // refused before the dial returned
	}
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	_, err = io.ReadFull(c, b[:])
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		s.t.Fatal("neither admitted nor refused")
	}
	return c, err == nil
}

// server returns the server side of the next admitted connection.
func (s *guarded) server() net.Conn {
	select {
	case c := <-s.conns:
		return c
	case <-time.After(10 * time.Second):
		s.t.Fatal("no admitted connection")
		return nil
	}
}

func TestMaxConns(t *testing.T) {
	s := listen(t, Limits{MaxConns: 2})
	for i := range 2 {
		if _, ok := s.dial("127.0.0.1"); !ok {
			t.Fatalf("connection %d refused under the bound", i)
		}
	}
	first := s.server()
	s.server()
	if _, ok := s.dial("127.0.0.2"); ok {
		t.Fatal("a third connection was admitted over max 2")
	}
	// Closing one frees its place, once however often it is closed.
	first.Close()
	first.Close()
	if _, ok := s.dial("127.0.0.1"); !ok {
		t.Fatal("a connection was refused after one closed")
	}
	s.server()
	if _, ok := s.dial("127.0.0.1"); ok {
		t.Fatal("a double close freed two places")
	}
	if got := s.g.Open(); got != 2 {
		t.Errorf("Open() = %d, want 2", got)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.refused) != 2 || s.refused[0] != ReasonListener {
		t.Errorf("refusals reported: %v", s.refused)
	}
}

func TestMaxConnsPerClient(t *testing.T) {
	exempt, _ := clientip.ParsePrefixes([]string{"127.0.0.3"})
	s := listen(t, Limits{MaxConnsPerClient: 2, Exempt: exempt})
	for range 2 {
		if _, ok := s.dial("127.0.0.1"); !ok {
			t.Fatal("refused under the per-client bound")
		}
		s.server()
	}
	if _, ok := s.dial("127.0.0.1"); ok {
		t.Fatal("a client's third connection was admitted over 2 per client")
	}
	// Another client has places of its own; an exempt peer (a load
	// balancer) is not bound per client.
	if _, ok := s.dial("127.0.0.2"); !ok {
		t.Fatal("another client was refused")
	}
	s.server()
	for i := range 4 {
		if _, ok := s.dial("127.0.0.3"); !ok {
			t.Fatalf("the exempt peer's connection %d was refused", i)
		}
		s.server()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.refused) != 1 || s.refused[0] != ReasonClient {
		t.Errorf("refusals reported: %v", s.refused)
	}
}

func TestSetLimits(t *testing.T) {
	s := listen(t, Limits{})
	for range 3 {
		if _, ok := s.dial("127.0.0.1"); !ok {
			t.Fatal("refused without limits")
		}
		s.server()
	}
	// A lower bound keeps what is open and refuses what comes next.
	s.g.SetLimits(Limits{MaxConns: 3})
	if _, ok := s.dial("127.0.0.1"); ok {
		t.Fatal("admitted over the lowered bound")
	}
	s.g.SetLimits(Limits{MaxConns: 4})
	if _, ok := s.dial("127.0.0.1"); !ok {
		t.Fatal("refused under the raised bound")
	}
}

func TestIPv6ByPrefix(t *testing.T) {
	// Two addresses of one /64 are one client; peerOf of a conn without a
	// TCP address parses the text.
	a := (*clientip.Resolver)(nil).AddrKey(netip.MustParseAddr("2001:db8::1"))
	b := (*clientip.Resolver)(nil).AddrKey(netip.MustParseAddr("2001:db8::2"))
	if a != b {
		t.Fatalf("one /64, two keys: %q %q", a, b)
	}
	if got := peerOf(fakeConn{}); got != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("peerOf = %v", got)
	}
}

type fakeConn struct{ net.Conn }

func (fakeConn) RemoteAddr() net.Addr { return fakeAddr{} }

type fakeAddr struct{}

func (fakeAddr) Network() string { return "tcp" }
func (fakeAddr) String() string  { return "[::ffff:192.0.2.1]:5" }
