package pgwire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

// checkErr fails unless err is nil, an I/O end or a ProtocolError with a
// message and SQLSTATE 08P01.
func checkErr(t *testing.T, err error) {
	t.Helper()
	if err == nil || errors.Is(err, io.EOF) {
		return
	}
	var pe *ProtocolError
	if !errors.As(err, &pe) || pe.Message == "" || pe.Code != CodeProtocolViolation {
		t.Fatalf("error %v (%T) is not a ProtocolError with a message and SQLSTATE 08P01", err, err)
	}
}

// FuzzStartup reads arbitrary bytes as the startup phase: packets one
// after another, each checked and parsed as the proxy does.
func FuzzStartup(f *testing.F) {
	f.Add(startup(3<<16, "user", "alice", "database", "db", "replication", "on"))
	f.Add(AppendCancelRequest(nil, 7, []byte{1, 2, 3, 4}))
	f.Add(append(SSLRequest[:], startup(3<<16|2, "user", "u")...))
	f.Add([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30})
	f.Add([]byte{0, 0, 0, 7})
	f.Add(startup(2<<16, "user", "old"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(data), 16)
		for {
			code, packet, err := ReadStartup(r, MaxStartupSize)
			if err == nil {
				err = CheckStartupCode(code, len(packet))
			}
			checkErr(t, err)
			if err != nil {
				return
			}
			if len(packet) < MinStartupSize || len(packet) > MaxStartupSize {
				t.Fatalf("a packet of %d bytes accepted", len(packet))
			}
			switch {
			case code == CodeCancelRequest:
				_, s, err := ParseCancelRequest(packet)
				checkErr(t, err)
				if err == nil && (len(s) < MinSecretLen || len(s) > MaxSecretLen) {
					t.Fatalf("a secret of %d bytes accepted", len(s))
				}
			case ProtocolMajor(code) == 3:
				_, err := ParseStartupMessage(packet)
				checkErr(t, err)
			}
		}
	})
}

// fuzzStream splits data into messages with header, as a relay does, and
// checks what it finds: every message it accepts lies within data and is
// at least a header long; it ends with a violation or with the data.
func fuzzStream(t *testing.T, data []byte, header func([]byte) (byte, int, error)) {
	for pos := 0; len(data)-pos >= HeaderSize; {
		typ, size, err := header(data[pos:])
		checkErr(t, err)
		if err != nil {
			return
		}
		if typ != data[pos] || size < HeaderSize {
			t.Fatalf("header at %d: type %q, size %d", pos, typ, size)
		}
		if pos+size > len(data) {
			return // a message still in transit
		}
		if typ == 'Q' {
			EmptyQuery(data[pos+HeaderSize : pos+size])
		}
		CycleExecutes(data[pos:])
		pos += size
	}
}

// FuzzClientFrames reads arbitrary bytes as a client's stream after
// startup.
func FuzzClientFrames(f *testing.F) {
	f.Add(frame('Q', "SELECT 1\x00"))
	f.Add(join(frame('P', "\x00SELECT $1\x00\x00\x00"), frame('B', "\x00\x00\x00\x00\x00\x01\x00\x00"), frame('E', "\x00\x00\x00\x00\x00"), frame('S', "")))
	f.Add(join(frame('Q', "-- ping\x00"), frame('Q', " ; /* a /* nested */ comment */\x00"), frame('X', "")))
	f.Add([]byte{'Q', 0, 0, 0, 2})
	f.Add([]byte{'Q', 0xff, 0xff, 0xff, 0xff})
	f.Add(join(frame('d', "copy data"), frame('c', ""), frame('H', "")))
	f.Add(frame('S', "body"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzStream(t, data, func(h []byte) (byte, int, error) { return ClientHeader(h, 1<<16) })
	})
}

// FuzzServerFrames reads arbitrary bytes as a server's stream.
func FuzzServerFrames(f *testing.F) {
	f.Add(join(frame('R', "\x00\x00\x00\x00"), frame('K', "\x00\x00\x00\x07abcd"), frame('Z', "I")))
	f.Add(join(frame('T', "\x00\x01a\x00"), frame('D', "\x00\x01\x00\x00\x00\x011"), frame('C', "SELECT 1\x00"), frame('Z', "I")))
	f.Add(frame('R', "\x00\x00\x00\x0aSCRAM-SHA-256\x00\x00"))
	f.Add([]byte{'E', 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzStream(t, data, ServerHeader)
	})
}
