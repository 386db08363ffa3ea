package proxy

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// A tunnelWriter is the writer of a request that asks to switch protocols
// (a WebSocket). When the upstream agrees, ReverseProxy hijacks the
// client's connection through it and copies bytes both ways until one side
// closes: the connection it gets closes itself after Config.TunnelIdleTimeout
// without a byte either way, as http.Server's IdleTimeout closes a
// kept-alive connection, which a hijacked one no longer is.
type tunnelWriter struct {
	http.ResponseWriter
	idle time.Duration
}

// Unwrap returns the client's writer, for http.ResponseController.
func (w *tunnelWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher for handlers that test for it.
func (w *tunnelWriter) Flush() { http.NewResponseController(w.ResponseWriter).Flush() }

// Hijack hijacks the client's connection, returned with the idle timeout.
func (w *tunnelWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return c, brw, err
	}
	ic := &idleConn{Conn: c, idle: w.idle}
	ic.touch()
	return ic, brw, nil
}

// An idleConn is a tunnel's client connection that times out after idle
// without traffic in either direction: a read waits as long as something
// was read or written within idle, so a tunnel where only the upstream
// talks stays open.
type idleConn struct {
	net.Conn
	idle time.Duration
	last atomic.Int64 // monotonic nanoseconds (since epoch) of the last byte either way
}

// epoch anchors idleConn's clock.
var epoch = time.Now()

func (c *idleConn) touch() { c.last.Store(int64(time.Since(epoch))) }

// expiry is when the connection times out unless traffic comes first.
func (c *idleConn) expiry() time.Time {
	return epoch.Add(time.Duration(c.last.Load()) + c.idle)
}

func (c *idleConn) Read(p []byte) (int, error) {
	for {
		if err := c.Conn.SetReadDeadline(c.expiry()); err != nil {
			return 0, err
		}
		n, err := c.Conn.Read(p)
		if n > 0 {
			c.touch()
		}
		if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) && time.Now().Before(c.expiry()) {
			continue // the other direction had traffic meanwhile
		}
		return n, err
	}
}

// Write writes p whole, however long a slow reader takes, as long as each
// part finds room within idle: a client that reads nothing holds the
// tunnel for idle at most, one that reads slowly is not idle.
func (c *idleConn) Write(p []byte) (int, error) {
	written := 0
	for {
		c.touch()
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
			return written, err
		}
		n, err := c.Conn.Write(p[written:])
		written += n
		c.touch()
		if n > 0 && written < len(p) && errors.Is(err, os.ErrDeadlineExceeded) {
			continue // the client took some within idle: it reads, slowly
		}
		return written, err
	}
}

// CloseWrite half-closes the client's connection when the upstream has
// closed its side, as ReverseProxy does with a connection that can.
func (c *idleConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
