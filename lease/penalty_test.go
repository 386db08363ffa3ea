package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
)

// A leased policy with a penalty: the penalty (one unit, never leased) is
// kept by the remote store, so a limiter deciding on the remote store
// directly sees the penalty that the leasing one started, and its reset
// lifts it for both; the leased limit never admits more than its
// capacity.
func TestPenaltyOfALeasedPolicy(t *testing.T) {
	ctx := context.Background()
	mem := newMem(t)
	s := newLease(t, mem, lease.Options{TTL: time.Minute, MaxLease: 50})
	pol := floodgate.Policy{Name: "p", Limits: []floodgate.Limit{floodgate.PerHour(1000)}, Penalty: time.Hour}
	leased, err := floodgate.New(s, pol)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := floodgate.New(mem, pol)
	if err != nil {
		t.Fatal(err)
	}
	var admitted int
	var res floodgate.Result
	for range 2000 {
		if res, err = leased.AllowN(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			break
		}
		admitted++
	}
	if admitted > 1000 || res.Allowed || res.Source != floodgate.SourcePenalty || res.RetryAfter <= 59*time.Minute {
		t.Fatalf("admitted %d, then %+v; want at most 1000, then a refusal by a penalty of about an hour", admitted, res)
	}
	if r, err := plain.AllowN(ctx, "k", 0); err != nil || r.Source != floodgate.SourcePenalty {
		t.Fatalf("the remote store's limiter: %+v, %v; want the penalty", r, err)
	}
	if err := plain.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if r, err := leased.AllowN(ctx, "k", 1); err != nil || !r.Allowed {
		t.Fatalf("after a reset: %+v, %v; want allowed", r, err)
	}
}
