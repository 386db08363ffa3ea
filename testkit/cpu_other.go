//go:build !linux

package testkit

import "time"

// ThreadCPU is not available here: benchmarks report wall time only.
func ThreadCPU() (time.Duration, bool) { return 0, false }
