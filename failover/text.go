package failover

import (
	"fmt"
	"strings"
)

// MarshalText writes the mode as configuration files do: "fail_open",
// "fail_closed" or "local_fallback".
func (p Mode) MarshalText() ([]byte, error) {
	if p == 0 || int(p) >= len(modeNames) {
		return nil, fmt.Errorf("failover: %s has no name", p)
	}
	return []byte(strings.ReplaceAll(p.String(), "-", "_")), nil
}

// UnmarshalText reads a mode as ParseMode does.
func (p *Mode) UnmarshalText(b []byte) error {
	m, err := ParseMode(string(b))
	if err != nil {
		return err
	}
	*p = m
	return nil
}

// ModeNames are the modes as configuration files write them.
func ModeNames() []string { return []string{"fail_open", "fail_closed", "local_fallback"} }
