package proxy

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// A ClientFault is why a request failed by its client's fault, not the
// upstream's: what Config.OnClientError is told and the daemon's
// floodgate_proxy_client_errors_total counts as its reason.
type ClientFault string

const (
	// ClientBodyTimeout: the client sent its request body more slowly than
	// the listener's body timeout allows (the daemon's body_timeout). The
	// request is answered 408 Request Timeout and its connection closed,
	// as nginx does.
	ClientBodyTimeout ClientFault = "body_timeout"

	// ClientBodyBroken: the request body could not be read to its end
	// though the client is still there (a malformed chunked body). The
	// request is answered 400 Bad Request.
	ClientBodyBroken ClientFault = "body_broken"

	// ClientGone: the client went away before it was answered (an HTTP/2
	// stream reset, a closed connection). Nothing is sent; a request gone
	// before it was decided was neither charged nor counted as a decision.
	ClientGone ClientFault = "gone"
)

// statusClientGone is the status a request whose client went away is
// settled with (nginx logs such requests as 499): a count rule counts it as
// failed, and no client reads it.
const statusClientGone = 499

// A clientBody is a request body that remembers why reading it failed, so
// that an upstream request that failed while sending it is known for the
// client's fault.
type clientBody struct {
	io.ReadCloser
	reading chan struct{} // holds a token while a Read is in flight
	err     atomic.Pointer[error]
}

func newClientBody(rc io.ReadCloser) *clientBody {
	return &clientBody{ReadCloser: rc, reading: make(chan struct{}, 1)}
}

func (b *clientBody) Read(p []byte) (int, error) {
	b.reading <- struct{}{}
	defer func() { <-b.reading }()
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.err.Load() == nil {
		b.err.Store(&err)
	}
	return n, err
}

// failure is why reading the body failed, nil if it has not. It first
// waits for a Read in flight to return, at most for settle: the server
// cancels the request's context as soon as reading the connection fails,
// and the transport may give up on that cancellation before the failed
// Read has returned here.
func (b *clientBody) failure(settle time.Duration) error {
	t := time.NewTimer(settle)
	defer t.Stop()
	select {
	case b.reading <- struct{}{}:
		<-b.reading
	case <-t.C:
	}
	if err := b.err.Load(); err != nil {
		return *err
	}
	return nil
}

// bodySettle bounds how long faultOf waits for a failed body Read to
// return; one whose connection failed returns at once.
const bodySettle = time.Second

// faultOf reports whether the failed request r failed by its client's
// fault, and which: a body read that timed out, a client gone (its
// request's context ended: a reset stream, a closed connection), or a
// body that could not be read (malformed).
func faultOf(r *http.Request) (ClientFault, bool) {
	gone := r.Context().Err() != nil
	var bodyErr error
	if b, ok := r.Body.(*clientBody); ok && (gone || b.err.Load() != nil) {
		bodyErr = b.failure(bodySettle)
	}
	var ne net.Error
	switch {
	case bodyErr != nil && (errors.Is(bodyErr, os.ErrDeadlineExceeded) || errors.As(bodyErr, &ne) && ne.Timeout()):
		return ClientBodyTimeout, true
	case gone:
		return ClientGone, true
	case bodyErr != nil:
		return ClientBodyBroken, true
	}
	return "", false
}

// clientError answers a request that failed by its client's fault: 408 or
// 400 (see ClientFault), or only a status for the count rules when the
// client is gone. It is reported to Config.OnClientError and, but for a
// client gone, logged at info level: the operator can do nothing about it,
// and it says nothing about the upstream.
func (p *Proxy) clientError(w http.ResponseWriter, r *http.Request, route string, why ClientFault, err error) {
	if p.cfg.OnClientError != nil {
		p.cfg.OnClientError(route, why)
	}
	if why == ClientGone {
		w.WriteHeader(statusClientGone)
		return
	}
	p.clientErrs.Error(r.Context(), "proxy: the client failed to send its request", slog.String("route", route),
		slog.String("reason", string(why)), slog.Any("error", err))
	status, body := http.StatusBadRequest, badBodyBody
	if why == ClientBodyTimeout {
		status, body = http.StatusRequestTimeout, bodyTimeoutBody
	}
	h := w.Header()
	h["Content-Type"] = []string{"application/problem+json"}
	h["Connection"] = []string{"close"}
	w.WriteHeader(status)
	w.Write([]byte(body))
}

const (
	bodyTimeoutBody = `{"type":"about:blank","title":"Request Timeout","status":408,` +
		`"detail":"The request body was not received in time."}` + "\n"
	badBodyBody = `{"type":"about:blank","title":"Bad Request","status":400,` +
		`"detail":"The request body could not be read."}` + "\n"
)
