package pgproxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/pgproxy/pgwire"
)

// fakeConn is a net.Conn over a reader and a writer, for driving one relay
// direction without a network.
type fakeConn struct {
	r io.Reader
	w bytes.Buffer
}

func (f *fakeConn) Read(p []byte) (int, error)       { return f.r.Read(p) }
func (f *fakeConn) Write(p []byte) (int, error)      { return f.w.Write(p) }
func (f *fakeConn) Close() error                     { return nil }
func (f *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (f *fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (f *fakeConn) SetDeadline(time.Time) error      { return nil }
func (f *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (f *fakeConn) SetWriteDeadline(time.Time) error { return nil }

// chunked returns at most n bytes per Read, so messages split across reads.
type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}

func fuzzProxy(t testing.TB) *Proxy {
	p, err := New(Config{Upstream: "127.0.0.1:1", MaxMessageSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func frame(typ byte, body string) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{typ}, uint32(4+len(body))), body...)
}

func seeds(f *testing.F) {
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	f.Add(frame('Q', "SELECT 1\x00"), 7)
	f.Add(join(frame('P', "\x00SELECT $1\x00\x00\x00"), frame('B', "\x00\x00\x00\x00\x00\x01\x00\x00"), frame('E', "\x00\x00\x00\x00\x00"), frame('S', "")), 3)
	f.Add(join(frame('Q', "-- ping\x00"), frame('Q', " ; /* a /* nested */ comment */\x00"), frame('X', "")), 1)
	f.Add([]byte{'Q', 0, 0, 0, 2}, 5)
	f.Add([]byte{'Q', 0xff, 0xff, 0xff, 0xff}, 5)
	f.Add(join(frame('d', "copy data"), frame('c', ""), frame('H', "")), 64)
}

// FuzzClientStream runs the client-to-server relay over arbitrary bytes:
// it must end (never hang or panic), and without limits forward exactly a
// prefix of its input.
func FuzzClientStream(f *testing.F) {
	seeds(f)
	p := fuzzProxy(f)
	f.Fuzz(func(t *testing.T, data []byte, chunk int) {
		if chunk <= 0 || chunk > 1<<16 {
			chunk = 1 << 16
		}
		up := &fakeConn{}
		c := newConn(p, &fakeConn{r: bytes.NewReader(nil)})
		c.cr = bufio.NewReaderSize(&chunked{b: data, n: chunk}, 256)
		c.uw = bufio.NewWriterSize(up, 128)
		c.status.Store('I')
		c.started = true
		err := c.clientToServer()
		if err == nil && !bytes.HasSuffix(up.w.Bytes(), []byte{'X', 0, 0, 0, 4}) {
			t.Fatalf("relay ended without error or Terminate")
		}
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, pgwire.ErrProtocol) {
			t.Fatalf("unexpected error %v", err)
		}
		_ = c.flush()
		if !bytes.HasPrefix(data, up.w.Bytes()) {
			t.Fatalf("forwarded bytes are not a prefix of the input")
		}
	})
}

// FuzzServerStream runs the server-to-client relay: it must end, and pass
// the server's bytes on unchanged (BackendKeyData aside).
func FuzzServerStream(f *testing.F) {
	seeds(f)
	f.Add(append(frame('K', "\x00\x00\x00\x07abcd"), frame('Z', "I")...), 3)
	f.Add(frame('K', "\x00\x00\x00\x07"+string(make([]byte, 300))), 9)
	p := fuzzProxy(f)
	f.Fuzz(func(t *testing.T, data []byte, chunk int) {
		if chunk <= 0 || chunk > 1<<16 {
			chunk = 1 << 16
		}
		client := &fakeConn{}
		c := newConn(p, client)
		c.up = &fakeConn{r: &chunked{b: data, n: chunk}}
		err := c.serverToClient()
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, pgwire.ErrProtocol) {
			t.Fatalf("unexpected error %v", err)
		}
		out := client.w.Bytes()
		if len(out) > len(data) {
			t.Fatalf("relayed %d bytes of %d", len(out), len(data))
		}
		if c.clientPID == 0 && !bytes.Equal(out, data[:len(out)]) {
			t.Fatalf("relayed bytes differ from the server's")
		}
		p.cancels.remove(c)
	})
}
