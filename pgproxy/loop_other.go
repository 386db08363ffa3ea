//go:build !linux

package pgproxy

// Elsewhere than Linux every connection is relayed by goroutines
// (relay.go); the event loop is loop_linux.go.

type loopEvent uint8

const (
	loopWrite loopEvent = iota
	loopClose
)

// loops stand in for the event loops.
type loops struct{}

func (*loops) stop() {}

// loopConn is never made.
type loopConn struct {
	parked bool
	uout   []byte
	gone   chan struct{}
}

func (*loopConn) post(loopEvent)       {}
func (*loopConn) queueClient(b []byte) {}
func (p *Proxy) toLoop(c *conn) bool   { return false }
