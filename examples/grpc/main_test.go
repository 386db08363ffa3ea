package main

import (
	"net"
	"testing"

	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/memstore"
)

// The client's retries wait until a check passes, so every check of the
// loop passes, however fast it runs.
func TestRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New(memstore.Options{Clock: clock.System})
	defer store.Close()
	passed, err := run(ln, store, 15)
	if err != nil {
		t.Fatal(err)
	}
	if passed != 15 {
		t.Errorf("%d of 15 checks passed, want all", passed)
	}
}
