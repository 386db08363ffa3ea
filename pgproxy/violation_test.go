package pgproxy_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/pgproxy"
	"github.com/floodgate-go/floodgate/testkit"
)

// An answer is what a peer sent back to a malformed input before the
// connection ended: its ErrorResponses, and whether it closed.
type answer struct {
	errors []errorFields
	closed bool
}

type errorFields struct{ severity, code, message string }

func (a answer) String() string {
	var parts []string
	for _, e := range a.errors {
		parts = append(parts, fmt.Sprintf("%s %s %q", e.severity, e.code, e.message))
	}
	if len(parts) == 0 {
		parts = append(parts, "no ErrorResponse")
	}
	if a.closed {
		parts = append(parts, "closed")
	} else {
		parts = append(parts, "left open")
	}
	return strings.Join(parts, ", ")
}

// readAnswer reads until the peer closes the connection (or, as a hang
// detector, a deadline passes), keeping the ErrorResponses.
func readAnswer(t *testing.T, nc net.Conn, wait time.Duration) answer {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(wait))
	r := bufio.NewReader(nc)
	var a answer
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			var ne net.Error
			a.closed = !(errors.As(err, &ne) && ne.Timeout())
			return a
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[1:])-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return a
		}
		if hdr[0] != 'E' {
			continue
		}
		var e errorFields
		for _, f := range strings.Split(string(body), "\x00") {
			if f == "" {
				continue
			}
			switch f[0] {
			case 'S':
				e.severity = f[1:]
			case 'C':
				e.code = f[1:]
			case 'M':
				e.message = f[1:]
			}
		}
		a.errors = append(a.errors, e)
	}
}

// TestProtocolViolations sends the same malformed inputs to PostgreSQL,
// pgbouncer and the proxy, and logs what each answered (go test -v shows
// the table docs/postgres.md keeps). The proxy answers every one with one
// FATAL ErrorResponse, SQLSTATE 08P01 and a message saying what was wrong,
// then closes; where pgbouncer or PostgreSQL answers 08P01, the proxy never
// answers anything else. (PostgreSQL closes silently on a bad length, and
// answers an unknown protocol version 0A000; pgbouncer answers 08P01 to
// almost all.)
func TestProtocolViolations(t *testing.T) {
	pg := testkit.Postgres(t)
	bouncer := testkit.PgBouncer(t, pg, "session")
	lim, _ := memLimiter(t, floodgate.Policy{Name: "g", Limits: []floodgate.Limit{burst(1000)}})
	tp := startProxy(t, pg, pgproxy.Config{Limits: pgproxy.Limits{Global: pgproxy.Scope{Limiter: lim}, PerUser: pgproxy.Scope{Limiter: lim}}})
	targets := []struct{ name, addr string }{{"postgres", pg.Addr}, {"pgbouncer", bouncer.Addr}, {"floodgate", tp.Addr}}

	q := func(s string) []byte { return msg('Q', s+"\x00") }
	type tcase struct {
		name string
		// user, when set, opens a session first (raw startup up to
		// ReadyForQuery) or, with auth, only sends the StartupMessage.
		user string
		auth bool
		send []byte
		// closeWrite ends the client's stream after send.
		closeWrite bool
		code       string // the proxy's SQLSTATE
		log        string // in the proxy's log line
	}
	cases := []tcase{
		{name: "StartupLengthTooLong", send: binary.BigEndian.AppendUint32(nil, 1_000_000), code: "08P01", log: "invalid length of startup packet: 1000000"},
		{name: "StartupLengthTooShort", send: []byte{0, 0, 0, 3, 0, 0, 0, 0}, code: "08P01", log: "invalid length of startup packet: 3"},
		{name: "StartupTruncated", send: []byte{0, 0, 0, 40, 0, 3, 0, 0}, closeWrite: true, code: "08P01", log: "incomplete startup packet"},
		{name: "StartupUnterminated", send: func() []byte {
			p := startupPacket(3<<16, "user", "x")
			return append(p[:len(p)-1:len(p)-1], 'y')
		}(), code: "08P01", log: "invalid startup packet layout"},
		{name: "UnknownStartupCode", send: binary.BigEndian.AppendUint32([]byte{0, 0, 0, 8}, 0x12345678), code: "08P01", log: "unsupported frontend protocol 4660.22136"},
		{name: "ProtocolTwo", send: startupPacket(2<<16, "user", "x"), code: "08P01", log: "unsupported frontend protocol 2.0"},
		{name: "EncryptionRequestTooLong", send: append(binary.BigEndian.AppendUint32([]byte{0, 0, 0, 12}, 80877103), 0, 0, 0, 0), code: "08P01", log: "invalid length of encryption request"},
		{name: "CancelKeyTooLong", send: append(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 300), 80877102), make([]byte, 292)...), code: "08P01", log: "invalid length of CancelRequest"},
		{name: "UnknownMessageType", user: testkit.PostgresTrustUser, send: msg(0xff, "x"), code: "08P01", log: "invalid frontend message type 255"},
		{name: "MessageLengthBelowFour", user: testkit.PostgresTrustUser, send: []byte{'Q', 0, 0, 0, 2}, code: "08P01", log: "invalid message length 2"},
		{name: "MessageTooLarge", user: testkit.PostgresTrustUser, send: []byte{'Q', 0x7f, 0xff, 0xff, 0xff}, code: "08P01", log: "more than the proxy's limit"},
		{name: "MessageTruncated", user: testkit.PostgresTrustUser, send: append(binary.BigEndian.AppendUint32([]byte{'Q'}, 100), "SELECT"...), closeWrite: true, code: "08P01", log: "the connection ended inside a message of 101 bytes"},
		{name: "HeaderTruncated", user: testkit.PostgresTrustUser, send: []byte{'Q', 0, 0}, closeWrite: true, code: "08P01", log: "inside a message header"},
		{name: "SyncWithBody", user: testkit.PostgresTrustUser, send: msg('S', "body"), code: "08P01", log: "has a body of 4 bytes"},
		{name: "QueryDuringAuthentication", user: testkit.PostgresSCRAMUser, auth: true, send: q("SELECT 1"), code: "08P01", log: "expected password response, got message type 81"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]answer{}
			for _, tg := range targets {
				nc, err := net.Dial("tcp", tg.addr)
				if err != nil {
					t.Fatal(err)
				}
				if tc.user != "" && !tc.auth {
					s := &rawSession{t: t, nc: nc, r: bufio.NewReader(nc)}
					_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
					s.write(startupPacket(3<<16, "user", tc.user, "database", "postgres"))
					s.until('Z')
					_ = nc.SetDeadline(time.Time{})
					nc = &bufferedConn{Conn: nc, r: s.r}
				} else if tc.auth {
					nc.Write(startupPacket(3<<16, "user", tc.user, "database", "postgres"))
				}
				nc.Write(tc.send)
				if tc.closeWrite {
					nc.(interface{ CloseWrite() error }).CloseWrite()
				}
				// The references may wait for more bytes; the proxy must not.
				wait := 2 * time.Second
				if tg.name == "floodgate" {
					wait = 15 * time.Second
				}
				got[tg.name] = readAnswer(t, nc, wait)
				nc.Close()
			}
			t.Logf("postgres:  %s", got["postgres"])
			t.Logf("pgbouncer: %s", got["pgbouncer"])
			t.Logf("floodgate: %s", got["floodgate"])
			fg := got["floodgate"]
			if len(fg.errors) != 1 || !fg.closed {
				t.Fatalf("floodgate: %s; want one ErrorResponse, then the connection closed", fg)
			}
			if e := fg.errors[0]; e.severity != "FATAL" || e.code != tc.code || e.message == "" {
				t.Errorf("floodgate answered %s %s %q; want FATAL %s with a message", e.severity, e.code, e.message, tc.code)
			}
			for _, ref := range []string{"postgres", "pgbouncer"} {
				for _, e := range got[ref].errors {
					if e.code == "08P01" && fg.errors[0].code != e.code {
						t.Errorf("%s answers 08P01, floodgate %s", ref, fg.errors[0].code)
					}
				}
			}
			tp.waitLog(t, tc.log)
		})
	}
	// Each case counted once in the proxy's metric, and logged.
	if got := tp.metric(t, "floodgate_pg_malformed_total"); int(got) != len(cases) {
		t.Errorf("malformed metric %v, want %d", got, len(cases))
	}
}

// bufferedConn reads through the bufio.Reader a session was read with.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b *bufferedConn) CloseWrite() error { return b.Conn.(*net.TCPConn).CloseWrite() }

// TestHostileServer: a server that breaks the framing of its own stream
// gets its client a FATAL 08P01 between two whole messages, then the end of
// the connection. The server here is a listener that answers the startup
// and then sends a message whose length is below 4.
func TestHostileServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				var n [4]byte
				if _, err := io.ReadFull(r, n[:]); err != nil {
					return
				}
				if _, err := r.Discard(int(binary.BigEndian.Uint32(n[:])) - 4); err != nil {
					return
				}
				c.Write(append(msg('R', "\x00\x00\x00\x00"), msg('Z', "I")...))
				var hdr [5]byte
				if _, err := io.ReadFull(r, hdr[:]); err != nil {
					return
				}
				c.Write(append(msg('N', "SNOTICE\x00Mfirst a whole message\x00\x00"), 'T', 0, 0, 0, 1))
				io.Copy(io.Discard, r)
			}()
		}
	}()
	tp := startProxy(t, nil, pgproxy.Config{Upstream: ln.Addr().String()})
	s := rawConnect(t, tp.Addr, "anyone")
	s.write(msg('Q', "SELECT 1\x00"))
	a := readAnswer(t, &bufferedConn{Conn: s.nc, r: s.r}, 20*time.Second)
	if len(a.errors) != 1 || !a.closed || a.errors[0].severity != "FATAL" || a.errors[0].code != "08P01" || !strings.Contains(a.errors[0].message, "lost synchronization with the server") {
		t.Fatalf("the client got %s; want FATAL 08P01 lost synchronization with the server, then the end", a)
	}
	tp.waitLog(t, "the server sent message type 'T' with invalid length 1")
}
