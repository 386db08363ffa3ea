package metrics_test

import (
	"syscall"
	"time"
)

// rusageThread is RUSAGE_THREAD, which package syscall does not name.
const rusageThread = 1

// threadCPU returns the CPU time the calling OS thread has used. Under
// load from other processes it stays close to the work done, where wall
// time per op grows with every time slice lost.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
