// Package pgwire is the part of the PostgreSQL frontend/backend protocol
// (version 3) that floodgate's proxy needs: the startup packets, the framing
// of both streams after startup, the few message fields the proxy reads, and
// the messages it writes itself. It works on raw bytes and never allocates
// per message on the relay path, so that a proxy can pass frames through
// unchanged and look only at their headers.
//
// Every function that reads bytes from a peer either succeeds or returns an
// error wrapping ErrProtocol: a *ProtocolError whose Code and Message are
// what the peer should be told in a FATAL ErrorResponse before the
// connection closes, as PostgreSQL itself words them where it has words.
// Reading never panics, whatever the bytes (the fuzz targets hold it to
// that).
package pgwire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Request codes of the packets a client may send before its
// StartupMessage. They stand where a StartupMessage has its protocol
// version.
const (
	CodeCancelRequest = 80877102
	CodeSSLRequest    = 80877103
	CodeGSSENCRequest = 80877104
)

// Sizes the protocol fixes.
const (
	// MaxStartupSize is PostgreSQL's bound on a startup packet
	// (MAX_STARTUP_PACKET_LENGTH).
	MaxStartupSize = 10000
	// MinStartupSize is the smallest startup packet: a length and a code.
	MinStartupSize = 8
	// MaxMessageSize is PostgreSQL's own bound on one message (MaxAllocSize
	// less one byte), type byte and length included.
	MaxMessageSize = 1<<30 - 1
	// HeaderSize is a message's type byte and length.
	HeaderSize = 5
	// MinSecretLen and MaxSecretLen bound a cancel key's secret: protocol
	// 3.0 has 4 bytes, 3.2 (PostgreSQL 18) up to 256.
	MinSecretLen = 4
	MaxSecretLen = 256
)

// CodeProtocolViolation is the SQLSTATE protocol_violation, what
// pgbouncer answers every malformed input with (and PostgreSQL most).
const CodeProtocolViolation = "08P01"

// ErrProtocol is wrapped by every error about bytes that break the
// protocol.
var ErrProtocol = errors.New("protocol violation")

// A ProtocolError says how a peer broke the protocol: Message is meant for
// the peer (in a FATAL ErrorResponse) and for the log.
type ProtocolError struct {
	// Code is the SQLSTATE to answer with, CodeProtocolViolation.
	Code    string
	Message string
}

// Violation returns a ProtocolError with CodeProtocolViolation and a
// message formatted as by fmt.Sprintf.
func Violation(format string, args ...any) *ProtocolError {
	return &ProtocolError{Code: CodeProtocolViolation, Message: fmt.Sprintf(format, args...)}
}

func (e *ProtocolError) Error() string { return "protocol violation: " + e.Message }

// Unwrap returns ErrProtocol.
func (e *ProtocolError) Unwrap() error { return ErrProtocol }

// Fatal is the FATAL ErrorResponse that tells the peer about e.
func (e *ProtocolError) Fatal() ErrorResponse {
	return ErrorResponse{Severity: "FATAL", Code: e.Code, Message: e.Message}
}

// An ErrorResponse is an error (or a FATAL) the proxy answers itself.
type ErrorResponse struct {
	Severity, Code, Message, Detail, Hint string
}

// Append appends e as an ErrorResponse message. The severity goes both as
// the localized S and the unlocalized V field, as PostgreSQL sends it since
// 9.6; empty fields are left out.
func (e ErrorResponse) Append(b []byte) []byte {
	start := len(b)
	b = append(b, 'E', 0, 0, 0, 0)
	for _, f := range [...]struct {
		t byte
		v string
	}{{'S', e.Severity}, {'V', e.Severity}, {'C', e.Code}, {'M', e.Message}, {'D', e.Detail}, {'H', e.Hint}} {
		if f.v != "" {
			b = append(b, f.t)
			b = append(b, f.v...)
			b = append(b, 0)
		}
	}
	b = append(b, 0)
	binary.BigEndian.PutUint32(b[start+1:], uint32(len(b)-start-1))
	return b
}

// AppendReadyForQuery appends a ReadyForQuery with transaction status st
// ('I', 'T' or 'E').
func AppendReadyForQuery(b []byte, st byte) []byte {
	return append(b, 'Z', 0, 0, 0, 5, st)
}

// AppendTerminate appends a Terminate message.
func AppendTerminate(b []byte) []byte {
	return append(b, 'X', 0, 0, 0, 4)
}
