package hybrid_test

import (
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/hybrid"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
)

// A lease store is a global part only when it leases from a Guard, whose
// breaker the hybrid store falls back by.
func TestLeaseNeedsGuard(t *testing.T) {
	global := memstore.New(memstore.Options{})
	defer global.Close()
	ls, err := lease.New(global, lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	local := memstore.New(memstore.Options{})
	defer local.Close()
	_, err = hybrid.New(local, ls, hybrid.Options{Fraction: 0.5})
	if err == nil || !strings.Contains(err.Error(), "*failover.Guard") {
		t.Fatalf("a lease store over %T: %v, want an error naming the Guard", global, err)
	}
}
