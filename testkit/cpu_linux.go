package testkit

import (
	"syscall"
	"time"
)

// rusageThread is RUSAGE_THREAD, which package syscall does not name.
const rusageThread = 1

// ThreadCPU returns the CPU time the calling OS thread has used (lock the
// goroutine to its thread around what is measured). Under load from other
// processes it stays close to the work done, where wall time per op grows
// with every time slice lost; benchmarks report it as cpu-ns/op.
func ThreadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
