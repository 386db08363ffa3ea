package sdnotify

import (
	"syscall"
	"unsafe"
)

// monotonicUsec reads CLOCK_MONOTONIC in microseconds, the clock systemd
// compares MONOTONIC_USEC with.
func monotonicUsec() (uint64, bool) {
	const clockMonotonic = 1
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0, false
	}
	return uint64(ts.Sec)*1e6 + uint64(ts.Nsec)/1e3, true
}
