//go:build !linux

package sdnotify

// monotonicUsec: systemd runs on Linux only; elsewhere RELOADING=1 goes
// without a time.
func monotonicUsec() (uint64, bool) { return 0, false }
