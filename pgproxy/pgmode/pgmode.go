// Package pgmode holds what of pgproxy a configuration names (the
// replication modes, the startup bound's default), apart from the proxy,
// so that the configuration can read, check and default them without
// linking the proxy (pgproxy re-exports them).
package pgmode

import (
	"fmt"
	"strings"
	"time"
)

// DefaultStartupTimeout is the one default bound of a client's startup:
// from accepting the connection to its StartupMessage (or CancelRequest),
// PROXY header and TLS handshake included; authentication is the
// server's to time out (authentication_timeout). Ten seconds are plenty
// for a client that means to connect, and short enough that a client
// which opens connections and sends nothing holds each for little time.
// pgproxy.Config.StartupTimeout's zero value and the daemon's
// postgres.bounds.header_timeout default to it.
const DefaultStartupTimeout = 10 * time.Second

// ReplicationMode says how replication connections (a startup parameter
// replication other than false/off/no/0) are treated.
type ReplicationMode uint8

const (
	// ReplicationCharge limits the queries of replication connections like
	// any other (replication commands are simple queries).
	ReplicationCharge ReplicationMode = iota
	// ReplicationExempt relays replication connections without query
	// limits; connection limits still apply.
	ReplicationExempt
	// ReplicationRefuse answers replication connections FATAL 28000 before
	// they reach the server.
	ReplicationRefuse
)

var replicationNames = [...]string{ReplicationCharge: "charge", ReplicationExempt: "exempt", ReplicationRefuse: "refuse"}

// String returns the mode's name: "charge", "exempt" or "refuse".
func (m ReplicationMode) String() string {
	if int(m) < len(replicationNames) {
		return replicationNames[m]
	}
	return fmt.Sprintf("replication(%d)", uint8(m))
}

// MarshalText writes the mode's name.
func (m ReplicationMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText reads a mode's name; anything else is an error naming the
// valid ones.
func (m *ReplicationMode) UnmarshalText(b []byte) error {
	for i, n := range replicationNames {
		if string(b) == n {
			*m = ReplicationMode(i)
			return nil
		}
	}
	return fmt.Errorf("%q is not valid (use one of %s)", b, strings.Join(replicationNames[:], ", "))
}

// ReplicationModeNames are the modes' names.
func ReplicationModeNames() []string { return append([]string(nil), replicationNames[:]...) }
