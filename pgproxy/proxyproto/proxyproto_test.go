package proxyproto

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"
)

func v2(cmd, fam byte, body ...byte) []byte {
	b := append([]byte(nil), v2Sig...)
	return append(append(b, cmd, fam, byte(len(body)>>8), byte(len(body))), body...)
}

func TestRead(t *testing.T) {
	ap := netip.MustParseAddrPort
	tcp4 := v2(0x21, 0x11, 192, 0, 2, 1, 10, 0, 0, 1, 0xc7, 0x38, 0x19, 0x20)
	for _, tc := range []struct {
		name string
		in   []byte
		want Header
	}{
		{"v1 TCP4", []byte("PROXY TCP4 192.0.2.1 10.0.0.1 51000 6432\r\n"),
			Header{Version: 1, Transport: TCP, Source: ap("192.0.2.1:51000"), Destination: ap("10.0.0.1:6432")}},
		{"v1 TCP6", []byte("PROXY TCP6 2001:db8::1 2001:db8::2 1 65535\r\n"),
			Header{Version: 1, Transport: TCP, Source: ap("[2001:db8::1]:1"), Destination: ap("[2001:db8::2]:65535")}},
		{"v1 UNKNOWN", []byte("PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n"), Header{Version: 1}},
		{"v2 TCP4", tcp4, Header{Version: 2, Transport: TCP, Source: ap("192.0.2.1:51000"), Destination: ap("10.0.0.1:6432")}},
		{"v2 UDP6 with a TLV", v2(0x21, 0x22, append(append(append(netip.MustParseAddr("::ffff:192.0.2.9").AsSlice(), netip.MustParseAddr("2001:db8::2").AsSlice()...), 0, 7, 0, 9), 0x04, 0, 1, 0)...),
			Header{Version: 2, Transport: UDP, Source: ap("[::ffff:192.0.2.9]:7"), Destination: ap("[2001:db8::2]:9")}},
		{"v2 LOCAL", v2(0x20, 0x11, make([]byte, 12)...), Header{Version: 2, Local: true}},
		{"v2 UNSPEC", v2(0x21, 0x00), Header{Version: 2}},
		{"v2 Unix", v2(0x21, 0x31, make([]byte, 216)...), Header{Version: 2}},
		{"no header", []byte("\x00\x00\x00\x08\x04\xd2\x16\x2f"), Header{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const after = "\x00\x00\x00\x08startup"
			r := bufio.NewReader(io.MultiReader(bytes.NewReader(tc.in), strings.NewReader(after)))
			h, err := Read(r)
			if err != nil || h != tc.want {
				t.Fatalf("Read = %+v, %v; want %+v", h, err, tc.want)
			}
			rest, _ := io.ReadAll(r)
			wantRest := after
			if h.Version == 0 {
				wantRest = string(tc.in) + after
			}
			if string(rest) != wantRest {
				t.Errorf("left %q unread, want %q", rest, wantRest)
			}
			if h.Version == 0 {
				return
			}
			// A header written as Read reads it comes back whole; a
			// canonical TCP one byte for byte.
			enc := h.Append(nil)
			if h.Transport == TCP && !bytes.Equal(enc, tc.in) {
				t.Errorf("Append = %q, want %q", enc, tc.in)
			}
			if back, err := Read(bufio.NewReader(bytes.NewReader(enc))); err != nil || back != h {
				t.Errorf("read back %+v, %v", back, err)
			}
		})
	}
}

func TestClient(t *testing.T) {
	a := netip.MustParseAddrPort("192.0.2.1:5")
	for _, tc := range []struct {
		h    Header
		want netip.Addr
	}{
		{Header{}, netip.Addr{}},
		{Header{Version: 2, Local: true, Transport: TCP, Source: a}, netip.Addr{}},
		{Header{Version: 1}, netip.Addr{}},
		{Header{Version: 1, Transport: TCP, Source: a}, a.Addr()},
	} {
		if got := tc.h.Client(); got != tc.want {
			t.Errorf("%+v: Client %v, want %v", tc.h, got, tc.want)
		}
	}
}

func TestReadMalformed(t *testing.T) {
	for _, tc := range []struct{ in, msg string }{
		{"PROXY TCP4 192.0.2.1 10.0.0.1 51000\r\n", "it has 5 fields"},
		{"PROXY TCP4 192.0.2.1 10.0.0.1 51000 6432\r", "ended inside"},
		{"PROXY " + strings.Repeat("x", 200) + "\r\n", "without CRLF in its first 107 bytes"},
		{"PROXY TCP4 2001:db8::1 10.0.0.1 1 2\r\n", "source address"},
		{"PROXY TCP6 2001:db8::1 10.0.0.1 1 2\r\n", "destination address"},
		{"PROXY TCP6 fe80::1%eth0 2001:db8::2 1 2\r\n", "source address"},
		{"PROXY TCP4 192.0.2.1 10.0.0.1 051000 6432\r\n", "port"},
		{"PROXY TCP4 192.0.2.1 10.0.0.1 65536 6432\r\n", "port"},
		{"PROXY UDP4 192.0.2.1 10.0.0.1 1 2\r\n", "protocol"},
		{"PROXIES\r\n", "invalid PROXY protocol v1 header"},
		{"\r\n\r\n\x00\r\nQUIX\n\x21\x11\x00\x0c", "signature"},
		{"\r\n\r\n\x00\r\nQUIT\n\x31\x11\x00\x0c", "version/command"},
		{"\r\n\r\n\x00\r\nQUIT\n\x21\x11\xff\xff", "more than 4096"},
		{"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c\x01\x02", "ended inside"},
		{"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x04\x01\x02\x03\x04", "IPv4 addresses need 12 bytes"},
		{"\r\n\r\n\x00\r\nQUIT\n\x21\x21\x00\x0c" + strings.Repeat("\x00", 12), "IPv6 addresses need 36 bytes"},
		{"\r\n\r\n\x00", "ended inside"},
	} {
		_, err := Read(bufio.NewReader(strings.NewReader(tc.in)))
		var he *HeaderError
		if !errors.Is(err, ErrMalformed) || !errors.As(err, &he) || !strings.Contains(he.Message, tc.msg) {
			t.Errorf("%q: %v; want a HeaderError saying %q", tc.in, err, tc.msg)
		}
	}
	// An empty connection is an end of input, not a malformed header.
	if _, err := Read(bufio.NewReader(strings.NewReader(""))); err != io.EOF {
		t.Errorf("empty input: %v, want io.EOF", err)
	}
}

// oneByte hands out its bytes one per Read, counting them, so a test sees
// exactly how far a reader was read.
type oneByte struct {
	b []byte
	n int
}

func (o *oneByte) Read(p []byte) (int, error) {
	if len(o.b) == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = o.b[0]
	o.b = o.b[1:]
	o.n++
	return 1, nil
}

// FuzzRead reads arbitrary bytes as a PROXY header: Read never panics,
// never takes more than a header's bound from the connection (and of a
// header, not a byte past its end), leaves what follows unread, and a
// header it accepts is written back by Append and read again unchanged.
func FuzzRead(f *testing.F) {
	f.Add([]byte("PROXY TCP4 192.0.2.1 192.0.2.2 1 2\r\n"))
	f.Add([]byte("PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n"))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add(v2(0x21, 0x11, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2))
	f.Add(v2(0x21, 0x21, make([]byte, 40)...))
	f.Add(v2(0x20, 0x00))
	f.Add([]byte("\x00\x00\x00\x08\x04\xd2\x16\x2f"))
	const trailer = "\x00\x00\x00\x08startup"
	f.Fuzz(func(t *testing.T, data []byte) {
		in := append(append([]byte(nil), data...), trailer...)
		src := &oneByte{b: in}
		r := bufio.NewReaderSize(src, MaxV1+1)
		h, err := Read(r)
		taken := src.n // bytes taken from the connection
		if taken > MaxV2 {
			t.Fatalf("read %d bytes, more than MaxV2 (%d)", taken, MaxV2)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) && err != io.EOF {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		rest, _ := io.ReadAll(r)
		used := len(in) - len(rest)
		if !bytes.Equal(rest, in[used:]) {
			t.Fatalf("what follows the header was changed")
		}
		if h.Version == 0 {
			if used != 0 || taken != 1 {
				t.Fatalf("no header, yet %d bytes consumed and %d read", used, taken)
			}
			return
		}
		if taken != used {
			t.Fatalf("read %d bytes for a header of %d", taken, used)
		}
		if h.Version == 1 && used > MaxV1 || used > MaxV2 {
			t.Fatalf("a version %d header of %d bytes", h.Version, used)
		}
		enc := h.Append(nil)
		back, err := Read(bufio.NewReader(bytes.NewReader(enc)))
		if err != nil || back != h {
			t.Fatalf("%+v written as %q read back as %+v, %v", h, enc, back, err)
		}
	})
}
