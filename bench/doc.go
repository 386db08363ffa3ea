// Package bench compares floodgate with other Go rate limiters on the same
// workloads, in the same `go test -bench` run, so that the ratios between
// them are fair on a small and noisy machine.
//
// It is a separate module so that floodgate itself never depends on the
// limiters it is compared with. Everything lives in _test.go files; run.sh
// runs the three families (in-memory engines, Redis engines, HTTP
// middleware) and benchstat, and RESULTS.md holds the latest tables.
//
// Names follow benchstat's key=value convention, e.g.
// BenchmarkMemory/impl=floodgate/keys=64k, so that
//
//	benchstat -col /impl results/memory.txt
//
// puts the implementations side by side.
package bench
