// Package replay runs recorded traffic through a configuration: each line
// of an access log (JSON lines, nginx's combined format or Envoy's default
// format) is routed, keyed and decided by the daemon's own proxy, built as
// `floodgate serve` builds it, over a memory engine whose clock is the
// log's timestamps. A Report counts per route and policy what would be
// allowed and denied, and what changes against another configuration: the
// what-if of a limit before it ships. See docs/replay.md.
package replay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/daemon"
	"github.com/floodgate-go/floodgate/proxy"
)

// A Sim decides requests with one configuration's proxy on a clock that
// the requests' times drive. It decides one request at a time.
type Sim struct {
	d   *daemon.Daemon
	now atomic.Int64 // Unix nanoseconds; the engine's clock
}

// NewSim builds cfg as serve builds it (daemon.New: policies, overrides,
// tiers, routes, key functions, front ends), short of listening, with a
// memory engine on the Sim's clock in place of the storage section's
// engine. cfg must have a proxy section.
func NewSim(cfg *config.Config) (*Sim, error) {
	if cfg.Proxy == nil {
		return nil, fmt.Errorf("%s: %w; replay decides HTTP requests with the proxy's routes", cfg.File, daemon.ErrNoProxy)
	}
	s := &Sim{}
	d, err := daemon.New(cfg, daemon.Options{
		Logger:   slog.New(slog.DiscardHandler),
		NoStatus: true,
		Clock:    clock.Func(s.now.Load),
	})
	if err != nil {
		return nil, err
	}
	s.d = d
	return s, nil
}

// Close releases the Sim's engine.
func (s *Sim) Close() { s.d.Close() }

// Evaluate decides req at its time: the clock is set to req.Time, or kept
// where it is when req is older than a request decided before (logs are
// nearly, not strictly, in order), so time never runs backwards for the
// engine.
func (s *Sim) Evaluate(ctx context.Context, req *Request) (proxy.Evaluation, error) {
	r, err := httpRequest(ctx, req)
	if err != nil {
		return proxy.Evaluation{}, err
	}
	if t := req.Time.UnixNano(); t > s.now.Load() {
		s.now.Store(t)
	}
	status := req.Status
	if status == 0 {
		status = http.StatusInternalServerError // no response: a failure
	}
	return s.d.EvaluateHTTP(r, status, req.ResponseHeader)
}

// httpRequest is req as the proxy's listener would hand it over.
func httpRequest(ctx context.Context, req *Request) (*http.Request, error) {
	target := req.Target
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, fmt.Errorf("request target %q: %v", clip(target), err)
	}
	if !strings.HasPrefix(target, "/") && !u.IsAbs() && target != "*" {
		return nil, fmt.Errorf("request target %q: not a path or an absolute URL", clip(target))
	}
	if !validMethod(req.Method) {
		return nil, fmt.Errorf("method %q: not an HTTP method token", clip(req.Method))
	}
	host := req.Host
	if u.IsAbs() {
		host = u.Host
		u.Scheme, u.Host = "", ""
	}
	r := (&http.Request{
		Method:     req.Method,
		URL:        u,
		RequestURI: target,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:     req.Header,
		Host:       host,
		RemoteAddr: peerAddr(req.Peer),
		Body:       http.NoBody,
	}).WithContext(ctx)
	if r.Header == nil {
		r.Header = http.Header{}
	}
	return r, nil
}

// peerAddr writes a peer as net/http writes RemoteAddr ("ip:port"); a
// bare address gets port 0.
func peerAddr(p string) string {
	if a, err := netip.ParseAddr(p); err == nil {
		return netip.AddrPortFrom(a, 0).String()
	}
	return p
}

func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	return true
}

// maxLine bounds a log line; longer ones are counted malformed.
const maxLine = 1 << 20

// A Reader reads Requests from an access log, counting the lines that are
// not requests of its format.
type Reader struct {
	br     *bufio.Reader
	format Format
	o      Options
	line   int
	err    error
}

// NewReader reads the log r in format f (FormatAuto: detected from the
// first non-blank line).
func NewReader(r io.Reader, f Format, o Options) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), format: f, o: o}
}

// Format is the format being read; for FormatAuto, the one detected once a
// line has been read.
func (r *Reader) Format() Format { return r.format }

// Line is the number of the line Next returned last.
func (r *Reader) Line() int { return r.line }

// Next returns the next request. A line that is not one returns a
// *LineError (read on); the end of the log returns io.EOF, and a failure
// to read it the error.
func (r *Reader) Next() (Request, error) {
	for {
		if r.err != nil {
			return Request{}, r.err
		}
		line, read, long, err := r.readLine()
		if err != nil {
			r.err = err
			if !read {
				return Request{}, err
			}
		}
		r.line++
		if long {
			return Request{}, &LineError{Line: r.line, Err: bad(r.format, "line longer than %d bytes", maxLine)}
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if r.format == FormatAuto || r.format == "" {
			r.format = detect(line)
		}
		req, perr := Parse(r.format, line, r.o)
		if perr != nil {
			return Request{}, &LineError{Line: r.line, Err: perr}
		}
		return req, nil
	}
}

// readLine reads one line without its end; read reports that there was
// one (a last line without a newline included), long a line longer than
// maxLine, whose rest is skipped.
func (r *Reader) readLine() (line []byte, read, long bool, err error) {
	var buf []byte
	for {
		chunk, err := r.br.ReadSlice('\n')
		read = read || len(chunk) > 0
		if len(buf)+len(chunk) > maxLine {
			long = true
		} else {
			buf = append(buf, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if long {
			buf = nil
		}
		return bytes.TrimRight(buf, "\r\n"), read, long, err
	}
}

// Parse reads one line of format f (FormatAuto: the format it looks like).
func Parse(f Format, line []byte, o Options) (Request, error) {
	if f != FormatJSON && bytes.HasPrefix(line, []byte("time=")) && bytes.Contains(line, []byte(" msg=")) {
		// floodgate's own text log (log.format: text); its JSON lines are
		// recognised by ParseJSON.
		return Request{}, bad(f, "a floodgate log line (log.format text): it names no method, path or peer, so it cannot be replayed; replay the access log of the server in front or behind")
	}
	switch f {
	case FormatJSON:
		return ParseJSON(line)
	case FormatNginx:
		return ParseNginx(line, o)
	case FormatEnvoy:
		return ParseEnvoy(line, o)
	}
	return Parse(detect(line), line, o) // FormatAuto: the format the line looks like
}

// A LineError is a line of the log that is not a request.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

func (e *LineError) Unwrap() error { return e.Err }

// timeOf formats a time for a report.
func timeOf(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
