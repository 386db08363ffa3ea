package pgproxy

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate/pgproxy/pgwire"
)

// Clients cancel a query by sending, on a new connection, the key their
// session got in BackendKeyData. The proxy hands each client a key of its
// own instead of the server's: a CancelRequest then reaches the proxy's
// connection, which ends a query waiting under MaxWait (the server knows
// nothing of it) and forwards the server's key upstream. A key is unguessable
// (random, as long as the server's) and dies with its connection.

// cancelMap maps client-visible process IDs to connections.
type cancelMap struct {
	mu sync.Mutex
	m  map[uint32]*conn
}

// backendKey replaces the server's BackendKeyData body (process ID, then
// secret key) in place with a key of the proxy's, registered for this
// connection. A malformed body is passed on unchanged for the client to
// reject.
func (c *conn) backendKey(body []byte) {
	if len(body) < 4+pgwire.MinSecretLen || len(body) > 4+pgwire.MaxSecretLen {
		return
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	if c.clientPID != 0 {
		return // only one per session
	}
	c.upPID = binary.BigEndian.Uint32(body)
	c.upSecret = append([]byte(nil), body[4:]...)
	secret := make([]byte, len(body)-4)
	_, _ = rand.Read(secret)
	pid := c.p.cancels.register(c)
	c.clientPID = pid
	c.clientSecret = secret
	binary.BigEndian.PutUint32(body, pid)
	copy(body[4:], secret)
}

// register picks an unused client-visible process ID for c.
func (m *cancelMap) register(c *conn) uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b [4]byte
	for {
		_, _ = rand.Read(b[:])
		// Positive as an int32, since clients may read it as one.
		pid := binary.BigEndian.Uint32(b[:]) & 0x7fffffff
		if _, taken := m.m[pid]; pid != 0 && !taken {
			m.m[pid] = c
			return pid
		}
	}
}

func (m *cancelMap) lookup(pid uint32, secret []byte) *conn {
	m.mu.Lock()
	c := m.m[pid]
	m.mu.Unlock()
	if c == nil {
		return nil
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	if len(secret) != len(c.clientSecret) || subtle.ConstantTimeCompare(secret, c.clientSecret) != 1 {
		return nil
	}
	return c
}

func (m *cancelMap) remove(c *conn) {
	c.keyMu.Lock()
	pid := c.clientPID
	c.keyMu.Unlock()
	if pid == 0 {
		return
	}
	m.mu.Lock()
	if m.m[pid] == c {
		delete(m.m, pid)
	}
	m.mu.Unlock()
}

// forwardCancel serves a CancelRequest packet: it ends the target's wait,
// if any, and forwards the request with the server's key. Like the server,
// it answers nothing either way.
func (c *conn) forwardCancel(packet []byte) {
	p := c.p
	pid, secret, err := pgwire.ParseCancelRequest(packet)
	if err != nil {
		c.fail("CancelRequest", c.client, err)
		return
	}
	target := p.cancels.lookup(pid, secret)
	if target == nil {
		p.obs.CancelRequest(CancelUnknownKey)
		p.log.Info("pgproxy: CancelRequest for no open session; ignored", "client", c.ipLog)
		return
	}
	select {
	case target.cancelWait <- struct{}{}:
	default:
	}
	target.keyMu.Lock()
	out := pgwire.AppendCancelRequest(nil, target.upPID, target.upSecret)
	target.keyMu.Unlock()
	up, err := c.dialUpstream(c.ctx)
	if err == nil {
		_ = up.SetWriteDeadline(time.Now().Add(p.cfg.ConnectTimeout))
		_, err = up.Write(out)
		up.Close()
	}
	if err != nil {
		p.obs.UpstreamError()
		p.obs.CancelRequest(CancelFailed)
		p.log.Error("pgproxy: cannot forward a CancelRequest to the upstream server", "upstream", p.cfg.Upstream, "err", err)
		return
	}
	p.obs.CancelRequest(CancelForwarded)
}
