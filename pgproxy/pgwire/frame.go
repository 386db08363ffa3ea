package pgwire

import "encoding/binary"

// clientTypes marks the message types a client may send after startup.
var clientTypes = func() (t [256]bool) {
	for _, c := range []byte("BCcdDEfFHpPQSX") {
		t[c] = true
	}
	return t
}()

// ClientHeader checks the header of a client message after startup (hdr
// holds at least HeaderSize bytes): a type a client may send and a length
// (which counts itself) of 4 up to max-1, so that the message with its type
// byte is at most max bytes; Sync, Flush, CopyDone and Terminate have no
// body. It returns the whole message's size, header included.
func ClientHeader(hdr []byte, max int) (typ byte, size int, err error) {
	typ = hdr[0]
	if !clientTypes[typ] {
		return typ, 0, Violation("invalid frontend message type %d (%q)", typ, typ)
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < 4 {
		return typ, 0, Violation("invalid message length %d for message type %q", n, typ)
	}
	if uint64(n) >= uint64(max) {
		return typ, 0, Violation("message of type %q is %d bytes, more than the proxy's limit of %d", typ, uint64(n)+1, max)
	}
	if n != 4 && (typ == 'S' || typ == 'H' || typ == 'c' || typ == 'X') {
		return typ, 0, Violation("invalid message format: message type %q has a body of %d bytes, and it has none", typ, n-4)
	}
	return typ, int(n) + 1, nil
}

// ServerHeader checks the header of a server message (hdr holds at least
// HeaderSize bytes): a length of at least 4. Types are not checked, so that
// a newer server's messages pass. It returns the whole message's size.
func ServerHeader(hdr []byte) (typ byte, size int, err error) {
	typ = hdr[0]
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < 4 || uint64(n) >= MaxMessageSize {
		return typ, 0, Violation("the server sent message type %q with invalid length %d", typ, n)
	}
	return typ, int(n) + 1, nil
}

// Authentication request codes of the server's Authentication ('R')
// messages.
const (
	AuthOK          = 0
	AuthSASLFinal   = 12
	AuthSASL        = 10
	AuthCleartext   = 3
	AuthMD5         = 5
	AuthGSS         = 7
	AuthGSSContinue = 8
)

// AuthExpectsResponse reports whether an Authentication message with code
// asks the client for a response (a PasswordMessage, SASL or GSS message,
// all of type 'p'): every code but AuthenticationOk and SASLFinal does.
func AuthExpectsResponse(code uint32) bool { return code != AuthOK && code != AuthSASLFinal }

// CycleExecutes reports whether an extended-protocol cycle, whose first
// message starts b, holds an Execute (or a Query or FunctionCall, which
// run at once) before its Sync. b is what the client has sent so far; when
// it ends before either, the cycle is taken to execute, since a client
// that streams its cycle (or waits for a Flush) almost always executes
// something.
func CycleExecutes(b []byte) bool {
	for len(b) >= HeaderSize {
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

// MaxEmptyCheck is the longest query text EmptyQuery examines; a longer
// one is not empty.
const MaxEmptyCheck = 1024

// EmptyQuery reports whether a simple query's text (its NUL included)
// holds only whitespace, semicolons and comments, which the server answers
// with EmptyQueryResponse: the pings of connection pools ("-- ping", ";").
func EmptyQuery(q []byte) bool {
	if len(q) > MaxEmptyCheck {
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
