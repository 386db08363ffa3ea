package pgwire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

func frame(typ byte, body string) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{typ}, uint32(4+len(body))), body...)
}

func join(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func startup(version uint32, kv ...string) []byte {
	b := binary.BigEndian.AppendUint32(make([]byte, 4), version)
	for _, s := range kv {
		b = append(append(b, s...), 0)
	}
	b = append(b, 0)
	binary.BigEndian.PutUint32(b, uint32(len(b)))
	return b
}

// protocolError returns err's ProtocolError, failing the test when it is
// not one.
func protocolError(t *testing.T, err error) *ProtocolError {
	t.Helper()
	var pe *ProtocolError
	if !errors.As(err, &pe) || !errors.Is(err, ErrProtocol) {
		t.Fatalf("error %v (%T) is not a ProtocolError wrapping ErrProtocol", err, err)
	}
	return pe
}

func TestReadStartup(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		code string // "" for success; the SQLSTATE of the ProtocolError
		msg  string // in the message
	}{
		{"StartupMessage", startup(3<<16, "user", "alice"), "", ""},
		{"LengthBelowEight", []byte{0, 0, 0, 7, 0, 0, 0, 0}, CodeProtocolViolation, "invalid length of startup packet: 7"},
		{"LengthAboveMax", binary.BigEndian.AppendUint32(nil, MaxStartupSize+1), CodeProtocolViolation, "invalid length of startup packet: 10001"},
		{"EndsInLength", []byte{0, 0}, CodeProtocolViolation, "incomplete startup packet"},
		{"EndsInBody", []byte{0, 0, 0, 20, 0, 3, 0, 0}, CodeProtocolViolation, "after 8 of its 20 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, packet, err := ReadStartup(bufio.NewReader(bytes.NewReader(tc.in)), MaxStartupSize)
			if tc.code == "" {
				if err != nil || code != 3<<16 || !bytes.Equal(packet, tc.in) {
					t.Fatalf("ReadStartup = %d, %q, %v", code, packet, err)
				}
				return
			}
			pe := protocolError(t, err)
			if pe.Code != tc.code || !strings.Contains(pe.Message, tc.msg) {
				t.Fatalf("error %q (%s), want %s and %q", pe.Message, pe.Code, tc.code, tc.msg)
			}
		})
	}
	if _, _, err := ReadStartup(bufio.NewReader(bytes.NewReader(nil)), MaxStartupSize); err != io.EOF {
		t.Errorf("no bytes at all: %v, want io.EOF (a client gone, not a violation)", err)
	}
}

func TestCheckStartupCode(t *testing.T) {
	for _, tc := range []struct {
		code uint32
		n    int
		want string // "" or the SQLSTATE
	}{
		{3 << 16, 40, ""},
		{3<<16 | 2, 40, ""},
		{3<<16 | 9999, 40, ""}, // the server negotiates it down
		{CodeSSLRequest, 8, ""},
		{CodeGSSENCRequest, 8, ""},
		{CodeCancelRequest, 16, ""},
		{CodeSSLRequest, 12, CodeProtocolViolation},
		{2 << 16, 40, CodeProtocolViolation},
		{1 << 16, 40, CodeProtocolViolation},
		{4 << 16, 40, CodeProtocolViolation},
		{0x12345678, 40, CodeProtocolViolation},
		{0, 8, CodeProtocolViolation},
	} {
		err := CheckStartupCode(tc.code, tc.n)
		if tc.want == "" {
			if err != nil {
				t.Errorf("code %#x: %v", tc.code, err)
			}
			continue
		}
		if pe := protocolError(t, err); pe.Code != tc.want {
			t.Errorf("code %#x: %s %q, want %s", tc.code, pe.Code, pe.Message, tc.want)
		}
	}
}

func TestParseStartupMessage(t *testing.T) {
	sp, err := ParseStartupMessage(startup(3<<16, "user", "alice", "database", "db", "replication", "database"))
	if err != nil || sp != (StartupParams{User: "alice", Database: "db", Replication: true}) {
		t.Fatalf("%+v, %v", sp, err)
	}
	if sp, _ := ParseStartupMessage(startup(3<<16, "user", "bob", "replication", "off")); sp.Replication {
		t.Error("replication=off read as a replication connection")
	}
	bad := startup(3<<16, "user", "x")
	for name, p := range map[string][]byte{
		"NoTerminator":  append(bad[:len(bad)-1:len(bad)-1], 'y'),
		"NoValue":       append(binary.BigEndian.AppendUint32([]byte{0, 0, 0, 13}, 3<<16), "user\x00"...),
		"AfterTheEnd":   append(bad[:len(bad):len(bad)], 'z'),
		"ShorterThan8":  {0, 0, 0, 4},
		"NoParamsNoNUL": binary.BigEndian.AppendUint32([]byte{0, 0, 0, 8}, 3<<16),
	} {
		if _, err := ParseStartupMessage(p); err == nil {
			t.Errorf("%s: accepted", name)
		} else if pe := protocolError(t, err); pe.Code != CodeProtocolViolation {
			t.Errorf("%s: %s", name, pe.Code)
		}
	}
}

func TestCancelRequest(t *testing.T) {
	secret := []byte("0123456789abcdef")
	p := AppendCancelRequest(nil, 42, secret)
	if code := binary.BigEndian.Uint32(p[4:]); code != CodeCancelRequest || int(binary.BigEndian.Uint32(p)) != len(p) {
		t.Fatalf("AppendCancelRequest wrote %x", p)
	}
	pid, s, err := ParseCancelRequest(p)
	if err != nil || pid != 42 || !bytes.Equal(s, secret) {
		t.Fatalf("ParseCancelRequest = %d, %q, %v", pid, s, err)
	}
	for _, n := range []int{MinSecretLen - 1, MaxSecretLen + 1} {
		if _, _, err := ParseCancelRequest(AppendCancelRequest(nil, 1, make([]byte, n))); err == nil {
			t.Errorf("a secret of %d bytes accepted", n)
		}
	}
}

func TestClientHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  []byte
		size int    // when valid
		msg  string // in the violation's message
	}{
		{"Query", frame('Q', "SELECT 1\x00"), 14, ""},
		{"Sync", frame('S', ""), 5, ""},
		{"UnknownType", frame('Z', "I"), 0, "invalid frontend message type 90"},
		{"NulType", frame(0, ""), 0, "invalid frontend message type 0"},
		{"LengthBelowFour", []byte{'Q', 0, 0, 0, 3}, 0, "invalid message length 3"},
		{"AboveMax", []byte{'Q', 0, 1, 0, 0}, 0, "more than the proxy's limit of 65536"},
		{"SyncWithBody", frame('S', "x"), 0, "has a body of 1 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			typ, size, err := ClientHeader(tc.hdr, 1<<16)
			if tc.msg == "" {
				if err != nil || typ != tc.hdr[0] || size != tc.size {
					t.Fatalf("ClientHeader = %q, %d, %v; want size %d", typ, size, err, tc.size)
				}
				return
			}
			if pe := protocolError(t, err); pe.Code != CodeProtocolViolation || !strings.Contains(pe.Message, tc.msg) {
				t.Fatalf("%s %q, want 08P01 and %q", pe.Code, pe.Message, tc.msg)
			}
		})
	}
	if _, size, err := ClientHeader([]byte{'Q', 0, 0, 0xff, 0xff}, 1<<16); err != nil || size != 1<<16 {
		t.Errorf("a message of exactly MaxMessageSize bytes: %d, %v", size, err)
	}
}

func TestErrorResponse(t *testing.T) {
	b := ErrorResponse{Severity: "FATAL", Code: "08P01", Message: "m", Hint: "h"}.Append([]byte("prefix"))
	want := "prefix" + string(frame('E', "SFATAL\x00VFATAL\x00C08P01\x00Mm\x00Hh\x00\x00"))
	if string(b) != want {
		t.Fatalf("Append = %q\nwant     %q", b, want)
	}
	pe := Violation("invalid frontend message type %d", 90)
	if got := pe.Fatal(); got != (ErrorResponse{Severity: "FATAL", Code: "08P01", Message: "invalid frontend message type 90"}) {
		t.Errorf("Fatal() = %+v", got)
	}
	if got := string(AppendReadyForQuery(nil, 'I')) + string(AppendTerminate(nil)); got != string(frame('Z', "I"))+string(frame('X', "")) {
		t.Errorf("ReadyForQuery, Terminate = %q", got)
	}
}

func TestEmptyQuery(t *testing.T) {
	for q, want := range map[string]bool{
		"\x00":                           true,
		" ;\n\t;\x00":                    true,
		"-- ping\x00":                    true,
		"/* a /* b */ c */ ;\x00":        true,
		"/* unterminated \x00":           false,
		"SELECT 1\x00":                   false,
		"-- c\nSELECT 1\x00":             false,
		"/* a */ x\x00":                  false,
		";":                              false, // no NUL: not a whole query
		"\x00\x00":                       false,
		"/* a /* b */ SELECT 1 */ x\x00": false,
	} {
		if got := EmptyQuery([]byte(q)); got != want {
			t.Errorf("EmptyQuery(%q) = %v, want %v", q, got, want)
		}
	}
	if EmptyQuery(append(bytes.Repeat([]byte(" "), MaxEmptyCheck), 0)) {
		t.Error("a query text above MaxEmptyCheck read as empty")
	}
}

func TestCycleExecutes(t *testing.T) {
	parse, bind, exec, sync, desc := frame('P', "\x00x\x00\x00\x00"), frame('B', "x"), frame('E', "x"), frame('S', ""), frame('D', "Sx")
	for name, tc := range map[string]struct {
		b    []byte
		want bool
	}{
		"prepare":        {join(parse, desc, sync), false},
		"execute":        {join(bind, exec, sync), true},
		"sync alone":     {sync, false},
		"unfinished":     {join(parse, desc), true},
		"split message":  {join(parse, bind[:3]), true},
		"execute later":  {join(parse, sync, exec), false},
		"close and sync": {join(frame('C', "Sx\x00"), sync), false},
		"bad length":     {[]byte{'P', 0, 0, 0, 1, 'S', 0, 0, 0, 4}, true},
	} {
		if got := CycleExecutes(tc.b); got != tc.want {
			t.Errorf("%s: CycleExecutes = %v, want %v", name, got, tc.want)
		}
	}
}
