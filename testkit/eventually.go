package testkit

import (
	"testing"
	"time"
)

// Eventually polls cond every few milliseconds until it holds, and fails the
// test, naming what, when it does not hold within the given time. The time
// is a hang detector: choose it so generously that only a broken system
// exceeds it, and assert what happened (counts, order), never how fast.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
