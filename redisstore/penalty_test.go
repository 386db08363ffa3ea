package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// Two instances (stores of their own, each with its own client) on one
// Redis share a policy's penalty: one instance's denial starts it, the
// other refuses the key until it ends, and a reset on either lifts it.
func TestPenaltySharedByInstances(t *testing.T) {
	ctx := context.Background()
	srv := standalone(t)
	addr := srv.Options().Addr
	clock := floodgatetest.NewClock(floodgatetest.Start)
	pol := floodgate.Policy{Name: "login", Limits: []floodgate.Limit{floodgate.PerMinute(3)}, Penalty: 15 * time.Minute}
	lims := make([]*floodgate.PolicyLimiter, 2)
	for i := range lims {
		s, err := New(newClient(t, addr), Options{Prefix: "pen:", Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if lims[i], err = floodgate.New(s, pol); err != nil {
			t.Fatal(err)
		}
	}
	a, b := lims[0], lims[1]
	const key = "ip:192.0.2.7"
	allow := func(l *floodgate.PolicyLimiter, want bool, wantSource floodgate.Source, wantRetry time.Duration) {
		t.Helper()
		res, err := l.AllowN(ctx, key, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != want || res.Source != wantSource || res.RetryAfter != wantRetry {
			t.Fatalf("at +%s: Allowed %v Source %s RetryAfter %s, want %v %s %s", clock.Now().Sub(floodgatetest.Start),
				res.Allowed, res.Source, res.RetryAfter, want, wantSource, wantRetry)
		}
		if !want && (res.Remaining != 0 || res.ResetAfter != res.RetryAfter) {
			t.Fatalf("a refusal by the penalty says Remaining %d ResetAfter %s; want 0 and its end", res.Remaining, res.ResetAfter)
		}
	}
	for range 3 {
		allow(a, true, Source, 0)
	}
	allow(b, false, floodgate.SourcePenalty, 15*time.Minute) // b's denial starts it
	clock.Advance(5 * time.Minute)
	allow(a, false, floodgate.SourcePenalty, 10*time.Minute) // a sees it; the limit itself is full again
	clock.Advance(10*time.Minute - time.Microsecond)
	allow(b, false, floodgate.SourcePenalty, time.Microsecond)
	clock.Advance(time.Microsecond)
	allow(a, true, Source, 0)

	// Again, and this time b lifts it by a reset.
	allow(a, true, Source, 0)
	allow(a, true, Source, 0)
	allow(a, false, floodgate.SourcePenalty, 15*time.Minute)
	if err := b.Reset(ctx, key); err != nil {
		t.Fatal(err)
	}
	allow(a, true, Source, 0)
}
