package pgproxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Request codes of the packets a client may send before its StartupMessage.
// They stand where a StartupMessage has its protocol version.
const (
	codeCancelRequest = 80877102
	codeSSLRequest    = 80877103
	codeGSSENCRequest = 80877104
)

// Cancel keys: PostgreSQL 18 (protocol 3.2) allows secret keys of up to 256
// bytes; protocol 3.0 has 4.
const (
	minSecretLen = 4
	maxSecretLen = 256
)

// errMalformed is wrapped by every error about bytes that break the
// protocol. It closes only the offending connection.
var errMalformed = errors.New("malformed message")

// readStartup reads one startup-phase packet: a length (itself included)
// and a code, then the rest. body aliases a fresh slice.
func readStartup(r *bufio.Reader, max int) (code uint32, packet []byte, err error) {
	hdr, err := r.Peek(4)
	if err != nil {
		if len(hdr) > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	// The length is checked before anything else is read, so a bad one
	// fails at once instead of waiting for bytes that never come.
	n := binary.BigEndian.Uint32(hdr)
	if n < 8 || n > uint32(max) {
		return 0, nil, fmt.Errorf("%w: startup packet length %d is outside 8..%d", errMalformed, n, max)
	}
	packet = make([]byte, n)
	if _, err := io.ReadFull(r, packet); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return binary.BigEndian.Uint32(packet[4:]), packet, nil
}

// startupParams are the parameters of a StartupMessage the proxy needs.
type startupParams struct {
	user        string
	database    string
	replication bool
}

// parseStartup reads the parameters of a StartupMessage (packet is the
// whole packet): name and value pairs, each NUL-terminated, then a NUL.
func parseStartup(packet []byte) (startupParams, error) {
	var sp startupParams
	b := packet[8:]
	for {
		if len(b) == 0 {
			return sp, fmt.Errorf("%w: startup parameters lack their final NUL", errMalformed)
		}
		if b[0] == 0 {
			if len(b) != 1 {
				return sp, fmt.Errorf("%w: %d bytes after the startup parameters' final NUL", errMalformed, len(b)-1)
			}
			return sp, nil
		}
		name, rest, ok := cutNUL(b)
		if !ok {
			return sp, fmt.Errorf("%w: startup parameter name not NUL-terminated", errMalformed)
		}
		value, rest, ok := cutNUL(rest)
		if !ok {
			return sp, fmt.Errorf("%w: startup parameter %q has no NUL-terminated value", errMalformed, name)
		}
		b = rest
		switch string(name) {
		case "user":
			sp.user = string(value)
		case "database":
			sp.database = string(value)
		case "replication":
			switch string(value) {
			case "false", "off", "no", "0":
			default:
				sp.replication = true
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

// parseCancel reads the backend key of a CancelRequest packet.
func parseCancel(packet []byte) (pid uint32, secret []byte, err error) {
	if len(packet) < 12+minSecretLen || len(packet) > 12+maxSecretLen {
		return 0, nil, fmt.Errorf("%w: CancelRequest of %d bytes; its secret key must be %d to %d bytes", errMalformed, len(packet), minSecretLen, maxSecretLen)
	}
	return binary.BigEndian.Uint32(packet[8:]), packet[12:], nil
}

// clientTypes marks the message types a client may send after startup.
var clientTypes = func() (t [256]bool) {
	for _, c := range []byte("BCcdDEfFHpPQSX") {
		t[c] = true
	}
	return t
}()

// header checks a client message header: a known type and a length (which
// counts itself) of 4 up to max-1, so that the message with its type byte
// is at most max bytes. It returns the whole message's size.
func header(hdr []byte, max int) (typ byte, size int, err error) {
	typ = hdr[0]
	if !clientTypes[typ] {
		return typ, 0, fmt.Errorf("%w: unknown message type 0x%02x", errMalformed, typ)
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < 4 || uint64(n) >= uint64(max) {
		return typ, 0, fmt.Errorf("%w: message %q of length %d is outside 4..%d (MaxMessageSize)", errMalformed, typ, n, max-1)
	}
	if n != 4 && (typ == 'S' || typ == 'H' || typ == 'c' || typ == 'X') {
		return typ, 0, fmt.Errorf("%w: message %q has a body of %d bytes; it has none", errMalformed, typ, n-4)
	}
	return typ, int(n) + 1, nil
}

// cycleCharged reports whether an extended-protocol cycle, whose first
// message starts b, is to be charged: it contains an Execute before its
// Sync. b is what the client has sent so far; when it ends before either,
// the cycle is charged, since a client that streams its cycle (or waits
// for a Flush) almost always executes something.
func cycleCharged(b []byte) bool {
	for len(b) >= 5 {
		switch b[0] {
		case 'E', 'Q', 'F':
			return true
		case 'S':
			return false
		}
		n := binary.BigEndian.Uint32(b[1:])
		if n < 4 || uint64(n)+1 > uint64(len(b)) {
			return true
		}
		b = b[n+1:]
	}
	return true
}

// maxEmptyCheck is the longest query text examined for emptiness; longer
// ones are charged.
const maxEmptyCheck = 1024

// emptyQuery reports whether a simple query's text (NUL included) holds
// only whitespace, semicolons and comments, which the server answers with
// EmptyQueryResponse: the pings of connection pools.
func emptyQuery(q []byte) bool {
	if len(q) > maxEmptyCheck {
		return false
	}
	for i := 0; i < len(q); {
		switch c := q[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == ';':
			i++
		case c == 0:
			return i == len(q)-1
		case c == '-' && i+1 < len(q) && q[i+1] == '-':
			for i < len(q) && q[i] != '\n' && q[i] != 0 {
				i++
			}
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			// Block comments nest in PostgreSQL.
			depth := 0
			for i < len(q) {
				if q[i] == '/' && i+1 < len(q) && q[i+1] == '*' {
					depth++
					i += 2
				} else if q[i] == '*' && i+1 < len(q) && q[i+1] == '/' {
					depth--
					i += 2
					if depth == 0 {
						break
					}
				} else if q[i] == 0 {
					return false // unterminated comment: the server errs
				} else {
					i++
				}
			}
			if depth != 0 {
				return false
			}
		default:
			return false
		}
	}
	return false // no NUL terminator
}

// Fields of an ErrorResponse.
type pgError struct {
	severity, code, message, detail, hint string
}

// appendError appends e as an ErrorResponse message.
func appendError(b []byte, e pgError) []byte {
	start := len(b)
	b = append(b, 'E', 0, 0, 0, 0)
	field := func(t byte, v string) {
		if v != "" {
			b = append(b, t)
			b = append(b, v...)
			b = append(b, 0)
		}
	}
	field('S', e.severity)
	field('V', e.severity)
	field('C', e.code)
	field('M', e.message)
	field('D', e.detail)
	field('H', e.hint)
	b = append(b, 0)
	binary.BigEndian.PutUint32(b[start+1:], uint32(len(b)-start-1))
	return b
}

// appendReady appends a ReadyForQuery message with transaction status st.
func appendReady(b []byte, st byte) []byte {
	return append(b, 'Z', 0, 0, 0, 5, st)
}
