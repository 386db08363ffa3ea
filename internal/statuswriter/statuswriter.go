// Package statuswriter records the status of an HTTP response as a handler
// writes it, for the middleware that decides after the response: httplimit's
// rules that count only failed or only successful responses, and the
// throttle's adaptive limits, which learn from the status.
package statuswriter

import (
	"bufio"
	"io"
	"net"
	"net/http"
)

// Writer records the status of a response: Status is 0 until the handler
// writes a final status, a body or a flush, or hijacks the connection.
//
// It implements http.Flusher, http.Hijacker and io.ReaderFrom by passing them
// on, since many handlers and libraries test for these with a type assertion
// (httputil.ReverseProxy, server-sent events, WebSocket upgrades, sendfile),
// and Unwrap, so that http.ResponseController reaches the writer underneath
// for everything else (deadlines, full duplex).
type Writer struct {
	http.ResponseWriter
	Status int

	// Tap, when set, is given every piece of the body after it is
	// written, with the response's header: a reader of the body's
	// contents (httplimit's token rules) sees it as it passes, unbuffered.
	Tap func(h http.Header, p []byte)
}

func (w *Writer) WriteHeader(code int) {
	// 1xx responses other than 101 are informational; the final status
	// comes later.
	if w.Status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.Status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *Writer) Write(b []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	if w.Tap == nil {
		return w.ResponseWriter.Write(b)
	}
	n, err := w.ResponseWriter.Write(b)
	w.Tap(w.Header(), b[:n])
	return n, err
}

// Unwrap returns the writer underneath, for http.ResponseController.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher. A writer underneath that cannot flush makes
// it a no-op, as http.Flusher has no way to report an error.
func (w *Writer) Flush() {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker. It fails with http.ErrNotSupported when
// the connection underneath cannot be hijacked (HTTP/2). A hijacked
// connection counts as a success.
func (w *Writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.Status == 0 {
		w.Status = http.StatusSwitchingProtocols
	}
	return c, rw, err
}

// ReadFrom implements io.ReaderFrom, keeping net/http's sendfile path.
func (w *Writer) ReadFrom(src io.Reader) (int64, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	if w.Tap != nil {
		// Through Write, so that Tap sees the body.
		return io.Copy(writerOnly{w}, src)
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, src)
}

// writerOnly hides every method but Write, so io.Copy cannot come back to
// ReadFrom.
type writerOnly struct{ io.Writer }
