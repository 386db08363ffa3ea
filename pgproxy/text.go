package pgproxy

import (
	"fmt"
	"strings"
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
