package pgwire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
)

// ReadStartup reads one startup-phase packet: a length that counts itself,
// a code (a protocol version or a request code), then the rest. It returns
// the whole packet in a fresh slice. A length outside MinStartupSize..max
// fails as soon as the length is read, without waiting for bytes that may
// never come. A connection that ends before the first byte returns io.EOF
// (a client that went away, not a violation); one that ends inside the
// packet is a violation.
func ReadStartup(r *bufio.Reader, max int) (code uint32, packet []byte, err error) {
	hdr, err := r.Peek(4)
	if err != nil {
		if len(hdr) > 0 && errors.Is(err, io.EOF) {
			return 0, nil, Violation("incomplete startup packet: the connection ended after %d bytes", len(hdr))
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr)
	if n < MinStartupSize || n > uint32(max) {
		return 0, nil, Violation("invalid length of startup packet: %d bytes; it must be %d to %d", n, MinStartupSize, max)
	}
	packet = make([]byte, n)
	if k, err := io.ReadFull(r, packet); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, Violation("incomplete startup packet: the connection ended after %d of its %d bytes", k, n)
		}
		return 0, nil, err
	}
	return binary.BigEndian.Uint32(packet[4:]), packet, nil
}

// StartupParams are the parameters of a StartupMessage that the proxy
// reads; the packet itself is forwarded unchanged.
type StartupParams struct {
	User, Database string
	// Replication reports a replication connection: a parameter
	// replication other than false, off, no or 0.
	Replication bool
}

// ParseStartupMessage reads the parameters of a StartupMessage, packet
// being the whole packet (length and version included): name and value
// pairs, each NUL-terminated, then a final NUL.
func ParseStartupMessage(packet []byte) (StartupParams, error) {
	var sp StartupParams
	if len(packet) < MinStartupSize {
		return sp, Violation("invalid length of startup packet: %d bytes", len(packet))
	}
	b := packet[8:]
	for {
		if len(b) == 0 {
			return sp, Violation("invalid startup packet layout: expected terminator as last byte")
		}
		if b[0] == 0 {
			if len(b) != 1 {
				return sp, Violation("invalid startup packet layout: %d bytes after the terminator", len(b)-1)
			}
			return sp, nil
		}
		name, rest, ok := cutNUL(b)
		if !ok {
			return sp, Violation("invalid startup packet layout: expected terminator as last byte")
		}
		value, rest, ok := cutNUL(rest)
		if !ok {
			return sp, Violation("invalid startup packet layout: parameter %q has no value", name)
		}
		b = rest
		switch string(name) {
		case "user":
			sp.User = string(value)
		case "database":
			sp.Database = string(value)
		case "replication":
			switch string(value) {
			case "false", "off", "no", "0":
			default:
				sp.Replication = true
			}
		}
	}
}

func cutNUL(b []byte) (before, after []byte, ok bool) {
	for i, c := range b {
		if c == 0 {
			return b[:i], b[i+1:], true
		}
	}
	return nil, nil, false
}

// ParseCancelRequest reads the backend key of a CancelRequest packet (the
// whole packet): a process ID and a secret of MinSecretLen to MaxSecretLen
// bytes. secret aliases packet.
func ParseCancelRequest(packet []byte) (pid uint32, secret []byte, err error) {
	if len(packet) < 12+MinSecretLen || len(packet) > 12+MaxSecretLen {
		return 0, nil, Violation("invalid length of CancelRequest: %d bytes; its secret key must be %d to %d bytes", len(packet), MinSecretLen, MaxSecretLen)
	}
	return binary.BigEndian.Uint32(packet[8:]), packet[12:], nil
}

// AppendCancelRequest appends a CancelRequest for the backend key (pid,
// secret).
func AppendCancelRequest(b []byte, pid uint32, secret []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(12+len(secret)))
	b = binary.BigEndian.AppendUint32(b, CodeCancelRequest)
	b = binary.BigEndian.AppendUint32(b, pid)
	return append(b, secret...)
}

// SSLRequest is the packet that asks a server for TLS.
var SSLRequest = [8]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}

// ProtocolMajor is the major protocol version of a StartupMessage's code.
func ProtocolMajor(code uint32) uint32 { return code >> 16 }

// CheckStartupCode says whether code, read from a startup packet of n
// bytes, is one the proxy serves: a request (cancel, SSL, GSS encryption;
// the two encryption requests are exactly 8 bytes) or protocol 3.x, any
// minor version, which the server negotiates down itself. Any other code,
// an old protocol version (1.x, 2.x) included, is a violation.
func CheckStartupCode(code uint32, n int) error {
	switch {
	case code == CodeSSLRequest || code == CodeGSSENCRequest:
		if n != MinStartupSize {
			return Violation("invalid length of encryption request: %d bytes; it is 8", n)
		}
		return nil
	case code == CodeCancelRequest, ProtocolMajor(code) == 3:
		return nil
	}
	return Violation("unsupported frontend protocol %d.%d: the proxy speaks protocol 3", code>>16, code&0xffff)
}
