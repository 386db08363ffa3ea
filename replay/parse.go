package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// A Format is the layout of an access log's lines.
type Format string

const (
	// FormatAuto picks the format from the log's first non-blank line:
	// "{" starts JSON lines, "[" Envoy's default format, anything else
	// nginx's combined format.
	FormatAuto Format = "auto"

	// FormatJSON is one JSON object per line with the fields of a
	// Request (see docs/replay.md): time, method, path, host, headers,
	// peer, status, response_headers.
	FormatJSON Format = "json"

	// FormatNginx is nginx's predefined "combined" log_format:
	//
	//	$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"
	FormatNginx Format = "nginx"

	// FormatEnvoy is Envoy's default access-log format:
	//
	//	[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% %RESPONSE_FLAGS%
	//	%BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%"
	//	"%REQ(USER-AGENT)%" "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"
	FormatEnvoy Format = "envoy"
)

// Formats are the formats ParseFormat accepts.
var Formats = []Format{FormatAuto, FormatJSON, FormatNginx, FormatEnvoy}

// ParseFormat returns the Format named s.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats {
		if strings.EqualFold(s, string(f)) {
			return f, nil
		}
	}
	return "", fmt.Errorf("unknown log format %q (use auto, json, nginx or envoy)", s)
}

// detect is the format of a log whose first non-blank line is line.
func detect(line []byte) Format {
	switch t := bytes.TrimSpace(line); {
	case len(t) > 0 && t[0] == '{':
		return FormatJSON
	case len(t) > 0 && t[0] == '[':
		return FormatEnvoy
	}
	return FormatNginx
}

// A Request is one logged request: what the proxy routes and keys it by,
// and the response it got.
type Request struct {
	// Time is when the request arrived (nginx logs the end of a request;
	// replay takes the time as logged).
	Time time.Time
	// Method is the request's method, e.g. "GET".
	Method string
	// Target is the request target as sent: a path with its query
	// ("/api/items?page=2"), or an absolute URL, whose host then is Host.
	Target string
	// Host is the Host header (the :authority), "" when the log has none.
	Host string
	// Header holds the request header fields the log carries.
	Header http.Header
	// Peer is the address of the connection's peer ("192.0.2.7" or
	// "192.0.2.7:51234"), "" when the log has none.
	Peer string
	// Status is the response's status; 0 when the log has none (an Envoy
	// request that got no response), which counts as a failure (500) for
	// count rules.
	Status int
	// ResponseHeader holds the response header fields the log carries
	// (JSON lines only), for response costs.
	ResponseHeader http.Header
}

// Options say how lines are read into Requests.
type Options struct {
	// ExtraHeaders names the request header fields of quoted fields that
	// follow the format's own at the end of an nginx or Envoy line, in
	// order: a log_format that appends "$http_x_forwarded_for" is read
	// with ExtraHeaders ["X-Forwarded-For"].
	ExtraHeaders []string
}

// errLine is the error of a line that is not a request of its format.
type errLine struct {
	format Format
	reason string
}

func (e *errLine) Error() string { return string(e.format) + ": " + e.reason }

func bad(f Format, format string, args ...any) error {
	return &errLine{format: f, reason: fmt.Sprintf(format, args...)}
}

// Reason is the short reason a malformed line is counted under: the error
// up to its details (a colon or the quoted text of the line).
func Reason(err error) string {
	var e *errLine
	if errors.As(err, &e) {
		if i := strings.IndexAny(e.reason, ":\""); i > 0 {
			return string(e.format) + ": " + strings.TrimSpace(e.reason[:i])
		}
		return e.Error()
	}
	return err.Error()
}

// jsonLine is a JSON line as documented in docs/replay.md.
type jsonLine struct {
	Time            json.RawMessage            `json:"time"`
	Method          string                     `json:"method"`
	Path            string                     `json:"path"`
	Host            string                     `json:"host"`
	Headers         map[string]json.RawMessage `json:"headers"`
	Peer            string                     `json:"peer"`
	Status          int                        `json:"status"`
	ResponseHeaders map[string]json.RawMessage `json:"response_headers"`

	// Fields of floodgate's own denial log lines, which are not requests.
	Msg   string `json:"msg"`
	Front string `json:"front"`
}

// ParseJSON reads a JSON line. time is RFC 3339 text or a number of Unix
// seconds (fractions allowed); headers and response_headers map a name to
// a string or a list of strings.
func ParseJSON(line []byte) (Request, error) {
	var j jsonLine
	d := json.NewDecoder(bytes.NewReader(line))
	if err := d.Decode(&j); err != nil {
		return Request{}, bad(FormatJSON, "not a JSON object: %v", err)
	}
	if d.More() {
		return Request{}, bad(FormatJSON, "not a JSON object: text after the object")
	}
	if j.Front != "" && j.Method == "" && j.Path == "" {
		return Request{}, bad(FormatJSON, "a floodgate %s log line (%q): it names no method, path or peer, so it cannot be replayed; replay the access log of the server in front or behind", j.Front, j.Msg)
	}
	t, err := jsonTime(j.Time)
	if err != nil {
		return Request{}, bad(FormatJSON, "time: %v", err)
	}
	if j.Method == "" {
		return Request{}, bad(FormatJSON, "no method: give the request's method in \"method\"")
	}
	if j.Path == "" {
		return Request{}, bad(FormatJSON, "no path: give the request target in \"path\"")
	}
	r := Request{Time: t, Method: j.Method, Target: j.Path, Host: j.Host, Peer: j.Peer, Status: j.Status}
	if r.Header, err = jsonHeader(j.Headers); err != nil {
		return Request{}, bad(FormatJSON, "headers: %v", err)
	}
	if r.ResponseHeader, err = jsonHeader(j.ResponseHeaders); err != nil {
		return Request{}, bad(FormatJSON, "response_headers: %v", err)
	}
	if r.Host == "" {
		r.Host = r.Header.Get("Host")
	}
	if j.Status < 0 || j.Status > 999 {
		return Request{}, bad(FormatJSON, "status: %d is not an HTTP status", j.Status)
	}
	return r, nil
}

func jsonTime(raw json.RawMessage) (time.Time, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return time.Time{}, errors.New("missing: give RFC 3339 text or Unix seconds")
	}
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return time.Time{}, err
		}
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t, nil
		}
	} else {
		s = string(raw)
	}
	f, err := strconv.ParseFloat(s, 64)
	// Unix seconds between 1970 and 9999; anything else is not a time.
	if err != nil || f < 0 || f >= 253402300800 {
		return time.Time{}, fmt.Errorf("%s is neither RFC 3339 nor Unix seconds", raw)
	}
	sec, frac := int64(f), f-float64(int64(f))
	return time.Unix(sec, int64(frac*1e9)).UTC(), nil
}

func jsonHeader(m map[string]json.RawMessage) (http.Header, error) {
	h := make(http.Header, len(m))
	for name, raw := range m {
		var one string
		if err := json.Unmarshal(raw, &one); err == nil {
			h.Add(name, one)
			continue
		}
		var many []string
		if err := json.Unmarshal(raw, &many); err != nil {
			return nil, fmt.Errorf("%q: give a string or a list of strings", name)
		}
		for _, v := range many {
			h.Add(name, v)
		}
	}
	return h, nil
}

// nginxTime is $time_local's layout.
const nginxTime = "02/Jan/2006:15:04:05 -0700"

// ParseNginx reads a line of nginx's combined format; quoted fields after
// the user agent are the request header fields o.ExtraHeaders names.
func ParseNginx(line []byte, o Options) (Request, error) {
	f := FormatNginx
	tok, err := tokens(line)
	if err != nil {
		return Request{}, bad(f, "%v", err)
	}
	if len(tok) < 9 {
		return Request{}, bad(f, "%d fields, the combined format has 9: $remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\"", len(tok))
	}
	if tok[3].kind != '[' || tok[4].kind != '"' || tok[7].kind != '"' || tok[8].kind != '"' {
		return Request{}, bad(f, "fields out of place: not the combined format")
	}
	r := Request{Header: http.Header{}}
	if r.Peer = tok[0].text; !validAddr(r.Peer) {
		return Request{}, bad(f, "remote address %q is not an IP address", clip(r.Peer))
	}
	if r.Time, err = time.Parse(nginxTime, tok[3].text); err != nil {
		return Request{}, bad(f, "time %q: not $time_local (%s)", clip(tok[3].text), nginxTime)
	}
	if r.Method, r.Target, err = requestLine(tok[4].text); err != nil {
		return Request{}, bad(f, "request %q: %v", clip(tok[4].text), err)
	}
	if r.Status, err = status(tok[5].text); err != nil {
		return Request{}, bad(f, "status: %v", err)
	}
	setHeader(r.Header, "Referer", tok[7].text)
	setHeader(r.Header, "User-Agent", tok[8].text)
	if err := extra(r.Header, tok[9:], o); err != nil {
		return Request{}, bad(f, "%v", err)
	}
	r.Host = r.Header.Get("Host")
	return r, nil
}

// ParseEnvoy reads a line of Envoy's default access-log format. The
// format logs no peer address: the peer is the last address of the logged
// X-Forwarded-For (the downstream address Envoy appends when it uses the
// remote address), and the addresses before it stay X-Forwarded-For, so
// the configuration's trusted proxies see the request as floodgate would
// where Envoy stands. Quoted fields after the upstream host are the request
// header fields o.ExtraHeaders names.
func ParseEnvoy(line []byte, o Options) (Request, error) {
	f := FormatEnvoy
	tok, err := tokens(line)
	if err != nil {
		return Request{}, bad(f, "%v", err)
	}
	if len(tok) < 13 {
		return Request{}, bad(f, "%d fields, Envoy's default format has 13", len(tok))
	}
	if tok[0].kind != '[' || tok[1].kind != '"' {
		return Request{}, bad(f, "fields out of place: not Envoy's default format")
	}
	for i := 8; i < 13; i++ {
		if tok[i].kind != '"' {
			return Request{}, bad(f, "fields out of place: field %d is not quoted", i+1)
		}
	}
	r := Request{Header: http.Header{}}
	if r.Time, err = time.Parse(time.RFC3339Nano, tok[0].text); err != nil {
		return Request{}, bad(f, "start time %q: not RFC 3339", clip(tok[0].text))
	}
	if r.Method, r.Target, err = requestLine(tok[1].text); err != nil {
		return Request{}, bad(f, "request %q: %v", clip(tok[1].text), err)
	}
	if r.Status, err = status(tok[2].text); err != nil {
		return Request{}, bad(f, "response code: %v", err)
	}
	if xff := tok[8].text; xff != "-" && xff != "" {
		hops := strings.Split(xff, ",")
		last := strings.TrimSpace(hops[len(hops)-1])
		if !validAddr(last) {
			return Request{}, bad(f, "X-Forwarded-For %q: the last address is not an IP address", clip(xff))
		}
		r.Peer = last
		if len(hops) > 1 {
			r.Header.Set("X-Forwarded-For", strings.Join(hops[:len(hops)-1], ","))
		}
	}
	setHeader(r.Header, "User-Agent", tok[9].text)
	setHeader(r.Header, "X-Request-Id", tok[10].text)
	if a := tok[11].text; a != "-" {
		r.Host = a
	}
	if err := extra(r.Header, tok[13:], o); err != nil {
		return Request{}, bad(f, "%v", err)
	}
	return r, nil
}

// extra sets the header fields o.ExtraHeaders names from the quoted
// fields after a format's own.
func extra(h http.Header, tok []token, o Options) error {
	for i, t := range tok {
		if i >= len(o.ExtraHeaders) {
			break
		}
		if t.kind != '"' {
			return fmt.Errorf("extra field %d (%s) is not quoted", i+1, o.ExtraHeaders[i])
		}
		setHeader(h, o.ExtraHeaders[i], t.text)
	}
	return nil
}

// setHeader sets name to v unless the log wrote "-" (no value).
func setHeader(h http.Header, name, v string) {
	if v != "-" && v != "" {
		h.Set(name, v)
	}
}

func validAddr(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	_, err := netip.ParseAddrPort(s)
	return err == nil
}

func status(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 999 {
		return 0, fmt.Errorf("%q is not an HTTP status", clip(s))
	}
	return n, nil
}

// requestLine splits "GET /path HTTP/1.1" (the protocol may be missing,
// as in HTTP/0.9 lines).
func requestLine(s string) (method, target string, err error) {
	parts := strings.Fields(s)
	if len(parts) < 2 || len(parts) > 3 {
		return "", "", errors.New("not a request line (METHOD TARGET PROTOCOL)")
	}
	return parts[0], parts[1], nil
}

// clip shortens text quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// A token is a field of an nginx or Envoy line: bare text, "quoted" or
// [bracketed].
type token struct {
	kind byte // 0, '"' or '['
	text string
}

// tokens splits a line into its fields. Inside quotes, nginx's escapes
// (\" \\ \xHH) and Envoy's (\") are decoded.
func tokens(line []byte) ([]token, error) {
	var out []token
	i := 0
	for {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n') {
			i++
		}
		if i == len(line) {
			return out, nil
		}
		switch line[i] {
		case '[':
			j := bytes.IndexByte(line[i+1:], ']')
			if j < 0 {
				return nil, errors.New("a [ without its ]")
			}
			out = append(out, token{'[', string(line[i+1 : i+1+j])})
			i += j + 2
		case '"':
			var b []byte
			i++
			for {
				if i >= len(line) {
					return nil, errors.New("a quoted field without its closing quote")
				}
				c := line[i]
				if c == '"' {
					i++
					break
				}
				if c == '\\' && i+1 < len(line) {
					switch n := line[i+1]; {
					case n == 'x' && i+3 < len(line) && isHex(line[i+2]) && isHex(line[i+3]):
						v, _ := strconv.ParseUint(string(line[i+2:i+4]), 16, 8)
						b = append(b, byte(v))
						i += 4
						continue
					case n == '"' || n == '\\':
						b = append(b, n)
						i += 2
						continue
					}
				}
				b = append(b, c)
				i++
			}
			out = append(out, token{'"', string(b)})
		default:
			j := i
			for j < len(line) && line[j] != ' ' && line[j] != '\t' && line[j] != '\r' && line[j] != '\n' {
				j++
			}
			out = append(out, token{0, string(line[i:j])})
			i = j
		}
	}
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}
