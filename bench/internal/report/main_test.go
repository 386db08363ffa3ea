package main

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	in := `goos: linux
BenchmarkMemory/impl=xrate/keys=64k-2   	 3416628	       342.9 ns/op	         1.000 allowed/op	       0 B/op	       0 allocs/op
BenchmarkMemory/impl=xrate/keys=64k-2   	 3416628	       300.1 ns/op	         1.000 allowed/op	       0 B/op	       0 allocs/op
BenchmarkMemory/impl=xrate/keys=64k-2   	 3416628	       310.0 ns/op	         1.000 allowed/op	       0 B/op	       0 allocs/op
--- BENCH: BenchmarkMemory/impl=throttled/keys=1-2
PASS
`
	s, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := s.median("keys=64k", "xrate", "ns/op"); !ok || got != 310 {
		t.Errorf("median ns/op = %v, %v; want 310", got, ok)
	}
	if got, ok := s.median("keys=64k", "xrate", "allowed/op"); !ok || got != 1 {
		t.Errorf("median allowed/op = %v, %v; want 1", got, ok)
	}
	if len(s) != 1 {
		t.Errorf("workloads = %v, want only keys=64k", s.workloads())
	}
}
