// Package pgmode holds the modes of pgproxy that a configuration names,
// apart from the proxy, so that the configuration can read and check them
// without linking the proxy (pgproxy re-exports them).
package pgmode

import (
	"fmt"
	"strings"
)

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
