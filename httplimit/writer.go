package httplimit

import (
	"bufio"
	"io"
	"net"
	"net/http"
)

// statusWriter records the status of a response for rules that count only
// failed or only successful responses. It is used for those requests only.
//
// It implements http.Flusher, http.Hijacker and io.ReaderFrom by passing them
// on, since many handlers and libraries test for these with a type assertion
// (httputil.ReverseProxy, server-sent events, WebSocket upgrades, sendfile),
// and Unwrap, so that http.ResponseController reaches the writer underneath
// for everything else (deadlines, full duplex).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	// 1xx responses other than 101 are informational; the final status
	// comes later.
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap returns the writer underneath, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher. A writer underneath that cannot flush makes
// it a no-op, as http.Flusher has no way to report an error.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker. It fails with http.ErrNotSupported when
// the connection underneath cannot be hijacked (HTTP/2). A hijacked
// connection counts as a success.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return c, rw, err
}

// ReadFrom implements io.ReaderFrom, keeping net/http's sendfile path.
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, src)
}

// writerOnly hides every method but Write, so io.Copy cannot come back to
// ReadFrom.
type writerOnly struct{ io.Writer }
