package main

import (
	"bytes"
	"strings"
	"testing"
)

// The help text names each subcommand once (explain was listed twice).
func TestHelpListsEachCommandOnce(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--help"}, &out, &out); code != 0 {
		t.Fatalf("exit %d", code)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "floodgate" {
			seen[f[1]]++
		}
	}
	for _, cmd := range []string{"serve", "validate", "check", "key", "explain", "replay", "health", "version"} {
		if seen[cmd] != 1 {
			t.Errorf("%s is listed %d times:\n%s", cmd, seen[cmd], out.String())
		}
	}
	if len(seen) != 8 {
		t.Errorf("commands listed: %v", seen)
	}
}
