package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/hybrid"
)

// A reservation waits for the local share and for the global limit: a wait
// the share cannot fit never reaches the global store, a global refusal
// takes the local reservation back, and a global outage leaves the local
// one standing.
func TestReserve(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	global := counting(newMem(t, clock))
	guard, err := failover.NewGuard(global, failover.GuardOptions{Clock: clock, MinCalls: 1000})
	if err != nil {
		t.Fatal(err)
	}
	a, err := hybrid.New(newMem(t, clock), guard, hybrid.Options{Fraction: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	b, err := hybrid.New(newMem(t, clock), guard, hybrid.Options{Fraction: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	la, lb := floodgatetest.NewLimiter(t, a, "api", floodgate.PerSecond(10)), floodgatetest.NewLimiter(t, b, "api", floodgate.PerSecond(10))
	within := func(d time.Duration) context.Context {
		c, cancel := context.WithTimeout(ctx, d)
		t.Cleanup(cancel)
		return c
	}
	// The share is 5/s: five at once, the sixth 200ms later.
	if r, err := la.ReserveN(ctx, "k", 5); err != nil || !r.OK || r.Delay != 0 {
		t.Fatalf("%+v, %v", r, err)
	}
	r, err := la.ReserveN(within(time.Hour), "k", 1)
	if err != nil || !r.OK || r.Delay != 200*time.Millisecond || r.Result.Source != hybrid.SourceGlobal {
		t.Fatalf("%+v, %v; want the share's wait of 200ms, booked globally", r, err)
	}
	// The share would wait 400ms: refused locally, Redis not asked.
	before := global.decides.Load()
	if r, err := la.ReserveN(within(300*time.Millisecond), "k", 1); err != nil || r.OK || r.Result.Source != hybrid.SourceLocal {
		t.Fatalf("%+v, %v; want a local refusal", r, err)
	}
	if global.decides.Load() != before {
		t.Fatal("a reservation the share refused reached the global store")
	}
	// b's share is fresh, but the global limit (6 of 10 taken) fits 4 now:
	// 5 would wait 100ms; within 50ms the global store refuses, and b's
	// share gets its units back.
	if r, err := lb.ReserveN(within(50*time.Millisecond), "k", 5); err != nil || r.OK || r.Result.Source != hybrid.SourceGlobal || r.Delay != 100*time.Millisecond {
		t.Fatalf("%+v, %v; want a global refusal of a wait of 100ms", r, err)
	}
	if r, err := lb.ReserveN(ctx, "k", 4); err != nil || !r.OK || r.Delay != 0 {
		t.Fatalf("after the global refusal: %+v, %v; want b's share whole again", r, err)
	}
	// Redis down: b's share decides alone.
	global.fail.Store(true)
	if r, err := lb.ReserveN(within(time.Hour), "k", 1); err != nil || !r.OK || r.Delay != 0 || r.Result.Source != floodgate.SourceLocalFallback {
		t.Fatalf("%+v, %v; want the share's reservation, local-fallback", r, err)
	}
}
