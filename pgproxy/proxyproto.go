package pgproxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"

	"github.com/floodgate-go/floodgate/pgproxy/pgwire"
)

// The PROXY protocol (HAProxy's, versions 1 and 2) lets a load balancer
// tell the proxy who the client is. Headers are read only from the peers of
// Config.ProxyProtocolFrom.

// proxyV2Sig starts every version 2 header.
var proxyV2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

const (
	proxyV1Max     = 107  // the longest version 1 line, CRLF included
	proxyV2MaxBody = 4096 // addresses and TLVs; more is not from a sane balancer
)

// readProxyHeader reads a PROXY header if the connection starts with one.
// It returns the client's address, or the zero Addr when there is no header
// or the header names no client (LOCAL, UNKNOWN, a Unix socket): the peer
// is then the client.
func readProxyHeader(r *bufio.Reader) (netip.Addr, error) {
	first, err := r.Peek(1)
	if err != nil {
		return netip.Addr{}, err
	}
	switch first[0] {
	case 'P':
		return readProxyV1(r)
	case '\r':
		return readProxyV2(r)
	}
	return netip.Addr{}, nil
}

func readProxyV1(r *bufio.Reader) (netip.Addr, error) {
	// The line is read as it arrives: the client may well send nothing
	// more until it is answered.
	var b []byte
	end := -1
	for n := 1; end < 0; n = len(b) + 1 {
		if n > proxyV1Max {
			return netip.Addr{}, pgwire.Violation("PROXY protocol v1 header without CRLF in its first %d bytes", proxyV1Max)
		}
		var err error
		if b, err = r.Peek(max(n, r.Buffered())); err != nil && len(b) < n {
			if errors.Is(err, io.EOF) {
				err = pgwire.Violation("the connection ended inside a PROXY protocol v1 header")
			}
			return netip.Addr{}, err
		}
		b = b[:min(len(b), proxyV1Max)]
		end = bytes.Index(b, []byte("\r\n"))
	}
	line := string(b[:end])
	_, _ = r.Discard(end + 2)
	f := bytes.Fields([]byte(line))
	if len(f) < 2 || string(f[0]) != "PROXY" {
		return netip.Addr{}, pgwire.Violation("invalid PROXY protocol v1 header %q", line)
	}
	switch string(f[1]) {
	case "UNKNOWN":
		return netip.Addr{}, nil
	case "TCP4", "TCP6":
	default:
		return netip.Addr{}, pgwire.Violation("invalid PROXY protocol v1 header: protocol %q", f[1])
	}
	if len(f) != 6 {
		return netip.Addr{}, pgwire.Violation("invalid PROXY protocol v1 header %q: it has %d fields, want 6", line, len(f))
	}
	src, err := netip.ParseAddr(string(f[2]))
	if err != nil || src.Zone() != "" || src.Is4() != (string(f[1]) == "TCP4") {
		return netip.Addr{}, pgwire.Violation("invalid PROXY protocol v1 header: source address %q", f[2])
	}
	if _, err := netip.ParseAddr(string(f[3])); err != nil {
		return netip.Addr{}, pgwire.Violation("invalid PROXY protocol v1 header: destination address %q", f[3])
	}
	for _, port := range f[4:] {
		if _, err := strconv.ParseUint(string(port), 10, 16); err != nil || (len(port) > 1 && port[0] == '0') {
			return netip.Addr{}, pgwire.Violation("invalid PROXY protocol v1 header: port %q", port)
		}
	}
	return src, nil
}

func readProxyV2(r *bufio.Reader) (netip.Addr, error) {
	hdr, err := r.Peek(16)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = pgwire.Violation("the connection ended inside a PROXY protocol v2 header")
		}
		return netip.Addr{}, err
	}
	if !bytes.Equal(hdr[:12], proxyV2Sig) {
		return netip.Addr{}, pgwire.Violation("not a PROXY protocol v2 signature")
	}
	verCmd, fam := hdr[12], hdr[13]
	n := int(binary.BigEndian.Uint16(hdr[14:]))
	if verCmd>>4 != 2 || verCmd&0xf > 1 {
		return netip.Addr{}, pgwire.Violation("invalid PROXY protocol v2 header: version/command byte 0x%02x", verCmd)
	}
	if n > proxyV2MaxBody {
		return netip.Addr{}, pgwire.Violation("PROXY protocol v2 header of %d bytes, more than %d", n, proxyV2MaxBody)
	}
	b := make([]byte, 16+n)
	if _, err := io.ReadFull(r, b); err != nil {
		return netip.Addr{}, pgwire.Violation("the connection ended inside a PROXY protocol v2 header")
	}
	body := b[16:]
	if verCmd&0xf == 0 { // LOCAL: the balancer's own connection, e.g. a health check
		return netip.Addr{}, nil
	}
	switch fam {
	case 0x11, 0x12: // TCP or UDP over IPv4
		if len(body) < 12 {
			return netip.Addr{}, pgwire.Violation("invalid PROXY protocol v2 header: IPv4 addresses need 12 bytes, got %d", len(body))
		}
		return netip.AddrFrom4([4]byte(body[:4])), nil
	case 0x21, 0x22: // over IPv6
		if len(body) < 36 {
			return netip.Addr{}, pgwire.Violation("invalid PROXY protocol v2 header: IPv6 addresses need 36 bytes, got %d", len(body))
		}
		return netip.AddrFrom16([16]byte(body[:16])).Unmap(), nil
	}
	return netip.Addr{}, nil // UNSPEC or Unix: no client address
}

// addrOf returns the IP address of a connection's peer, as the connection
// reports it (zone included); clientip normalises it where it is compared
// and keyed.
func addrOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr()
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr()
	}
	return netip.Addr{}
}
