// Package proxyproto reads and writes HAProxy's PROXY protocol headers,
// versions 1 (text) and 2 (binary), by which a load balancer tells the
// server behind it who the client is.
//
// Read takes the header off the front of a connection's reader and leaves
// every byte after it unread. It reads no more than the header (at most
// MaxV1 bytes of a version 1 line, MaxV2 of a version 2 header), so a
// client that sends nothing more until it is answered is not waited for,
// and never panics, whatever the bytes (a fuzz target holds it to that).
// A header that breaks the protocol is an error wrapping ErrMalformed.
//
// Whether a header may be read at all is the caller's decision: only from
// peers trusted to send one (see clientip.Prefixes), or any client could
// name its own address.
package proxyproto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
)

// Bounds of a header.
const (
	// MaxV1 is the longest version 1 line, CRLF included.
	MaxV1 = 107
	// MaxV2Body is the longest body (addresses and TLVs) of a version 2
	// header accepted; more is not from a sane balancer.
	MaxV2Body = 4096
	// MaxV2 is the longest version 2 header accepted, its 16-byte prefix
	// included.
	MaxV2 = v2HeaderLen + MaxV2Body
)

// v2Sig starts every version 2 header.
var v2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

const v2HeaderLen = 16 // signature, version/command, family, length

// ErrMalformed is wrapped by every error about a header that breaks the
// protocol, including one the connection ends inside.
var ErrMalformed = errors.New("malformed PROXY protocol header")

// A HeaderError says what is wrong with a header. Message is meant for
// the peer and the log.
type HeaderError struct{ Message string }

func (e *HeaderError) Error() string { return e.Message }

// Unwrap returns ErrMalformed.
func (e *HeaderError) Unwrap() error { return ErrMalformed }

func malformed(format string, args ...any) error {
	return &HeaderError{Message: fmt.Sprintf(format, args...)}
}

// Transport is what a header says the client spoke.
type Transport uint8

const (
	// Unknown: the header names no client (version 1 UNKNOWN, version 2
	// UNSPEC, a Unix socket or a family this package does not read).
	Unknown Transport = iota
	// TCP over IPv4 or IPv6.
	TCP
	// UDP over IPv4 or IPv6 (version 2 only).
	UDP
)

// A Header is one PROXY protocol header.
type Header struct {
	// Version is 1 or 2; 0 means there was no header.
	Version int
	// Local is a version 2 LOCAL command: the balancer's own connection
	// (a health check, say); the peer is the client.
	Local bool
	// Transport and the addresses are set when the header names a client:
	// a PROXY command over TCP or UDP. The addresses are as written
	// (IPv4-mapped ones are left mapped); Source is the client.
	Transport           Transport
	Source, Destination netip.AddrPort
}

// Client returns the client's address, or the zero Addr when the header
// names none (no header, LOCAL, UNKNOWN): the peer is then the client.
func (h Header) Client() netip.Addr {
	if h.Local || h.Transport == Unknown {
		return netip.Addr{}
	}
	return h.Source.Addr()
}

// Read reads a PROXY header if r starts with one: a version 1 line when
// the first byte is 'P', a version 2 header when it is '\r'. Otherwise it
// consumes nothing and returns the zero Header. r's buffer must hold MaxV1
// bytes (bufio's default size does). An error from r is
// returned as it is, except an end of input inside a header, which is
// malformed.
func Read(r *bufio.Reader) (Header, error) {
	first, err := r.Peek(1)
	if err != nil {
		return Header{}, err
	}
	switch first[0] {
	case 'P':
		return readV1(r)
	case '\r':
		return readV2(r)
	}
	return Header{}, nil
}

func readV1(r *bufio.Reader) (Header, error) {
	// The line is read as it arrives: the client may well send nothing
	// more until it is answered.
	var b []byte
	end := -1
	for n := 1; end < 0; n = len(b) + 1 {
		if n > MaxV1 {
			return Header{}, malformed("PROXY protocol v1 header without CRLF in its first %d bytes", MaxV1)
		}
		var err error
		if b, err = r.Peek(min(max(n, r.Buffered()), MaxV1)); err != nil && len(b) < n {
			if errors.Is(err, io.EOF) {
				err = malformed("the connection ended inside a PROXY protocol v1 header")
			}
			return Header{}, err
		}
		end = bytes.Index(b, []byte("\r\n"))
	}
	line := string(b[:end])
	_, _ = r.Discard(end + 2)
	f := bytes.Fields([]byte(line))
	if len(f) < 2 || string(f[0]) != "PROXY" {
		return Header{}, malformed("invalid PROXY protocol v1 header %q", line)
	}
	h := Header{Version: 1}
	var want4 bool
	switch string(f[1]) {
	case "UNKNOWN": // the rest of the line is to be ignored
		return h, nil
	case "TCP4":
		want4 = true
	case "TCP6":
	default:
		return Header{}, malformed("invalid PROXY protocol v1 header: protocol %q", f[1])
	}
	if len(f) != 6 {
		return Header{}, malformed("invalid PROXY protocol v1 header %q: it has %d fields, want 6", line, len(f))
	}
	var addrs [2]netip.Addr
	for i, name := range []string{"source", "destination"} {
		a, err := netip.ParseAddr(string(f[2+i]))
		if err != nil || a.Zone() != "" || a.Is4() != want4 {
			return Header{}, malformed("invalid PROXY protocol v1 header: %s address %q", name, f[2+i])
		}
		addrs[i] = a
	}
	var ports [2]uint16
	for i, port := range f[4:] {
		v, err := strconv.ParseUint(string(port), 10, 16)
		if err != nil || (len(port) > 1 && port[0] == '0') {
			return Header{}, malformed("invalid PROXY protocol v1 header: port %q", port)
		}
		ports[i] = uint16(v)
	}
	h.Transport = TCP
	h.Source = netip.AddrPortFrom(addrs[0], ports[0])
	h.Destination = netip.AddrPortFrom(addrs[1], ports[1])
	return h, nil
}

func readV2(r *bufio.Reader) (Header, error) {
	hdr, err := r.Peek(v2HeaderLen)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = malformed("the connection ended inside a PROXY protocol v2 header")
		}
		return Header{}, err
	}
	if !bytes.Equal(hdr[:12], v2Sig) {
		return Header{}, malformed("not a PROXY protocol v2 signature")
	}
	verCmd, fam := hdr[12], hdr[13]
	n := int(binary.BigEndian.Uint16(hdr[14:]))
	if verCmd>>4 != 2 || verCmd&0xf > 1 {
		return Header{}, malformed("invalid PROXY protocol v2 header: version/command byte 0x%02x", verCmd)
	}
	if n > MaxV2Body {
		return Header{}, malformed("PROXY protocol v2 header of %d bytes, more than %d", n, MaxV2Body)
	}
	b := make([]byte, v2HeaderLen+n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = malformed("the connection ended inside a PROXY protocol v2 header")
		}
		return Header{}, err
	}
	body := b[v2HeaderLen:]
	h := Header{Version: 2}
	if verCmd&0xf == 0 { // LOCAL: the addresses, if any, are not a client's
		h.Local = true
		return h, nil
	}
	tr := Unknown
	switch fam & 0xf {
	case 1:
		tr = TCP
	case 2:
		tr = UDP
	}
	switch fam >> 4 {
	case 1: // IPv4
		if tr == Unknown {
			return h, nil
		}
		if len(body) < 12 {
			return Header{}, malformed("invalid PROXY protocol v2 header: IPv4 addresses need 12 bytes, got %d", len(body))
		}
		h.Transport = tr
		h.Source = netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[:4])), binary.BigEndian.Uint16(body[8:]))
		h.Destination = netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[4:8])), binary.BigEndian.Uint16(body[10:]))
	case 2: // IPv6
		if tr == Unknown {
			return h, nil
		}
		if len(body) < 36 {
			return Header{}, malformed("invalid PROXY protocol v2 header: IPv6 addresses need 36 bytes, got %d", len(body))
		}
		h.Transport = tr
		h.Source = netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[:16])), binary.BigEndian.Uint16(body[32:]))
		h.Destination = netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[16:32])), binary.BigEndian.Uint16(body[34:]))
	}
	return h, nil // UNSPEC, Unix or unknown: no client address
}

// Append appends h in its Version's encoding (version 1 when Version is
// not 2) and returns the extended buffer. A header that names no client
// is written as version 1 UNKNOWN or version 2 UNSPEC (LOCAL when Local);
// a version 1 header over UDP, which version 1 cannot say, as UNKNOWN; a
// Destination missing or of the other family than Source as the
// unspecified address.
// Reading the result gives h back, addresses and all.
func (h Header) Append(b []byte) []byte {
	named := !h.Local && h.Transport != Unknown && h.Source.Addr().IsValid()
	src, dst := h.Source.Addr().WithZone(""), h.Destination.Addr().WithZone("")
	if dst.Is4() != src.Is4() || !dst.IsValid() { // not this family's: unspecified
		dst = netip.IPv6Unspecified()
		if src.Is4() {
			dst = netip.IPv4Unspecified()
		}
	}
	if h.Version != 2 {
		if !named || h.Transport != TCP {
			return append(b, "PROXY UNKNOWN\r\n"...)
		}
		fam := "TCP6 "
		if h.Source.Addr().Is4() {
			fam = "TCP4 "
		}
		b = append(append(b, "PROXY "...), fam...)
		b = src.AppendTo(b)
		b = append(b, ' ')
		b = dst.AppendTo(b)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(h.Source.Port()), 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(h.Destination.Port()), 10)
		return append(b, "\r\n"...)
	}
	b = append(b, v2Sig...)
	if !named {
		cmd := byte(0x21)
		if h.Local {
			cmd = 0x20
		}
		return append(b, cmd, 0, 0, 0)
	}
	proto := byte(1)
	if h.Transport == UDP {
		proto = 2
	}
	if src.Is4() {
		s, d := src.As4(), dst.As4()
		b = append(b, 0x21, 0x10|proto, 0, 12)
		b = append(append(b, s[:]...), d[:]...)
	} else {
		s, d := src.As16(), dst.As16()
		b = append(b, 0x21, 0x20|proto, 0, 36)
		b = append(append(b, s[:]...), d[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, h.Source.Port())
	return binary.BigEndian.AppendUint16(b, h.Destination.Port())
}
