package floodgatetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/testkit"
)

// Each Fault does what it says to a limiter's call, and every call is
// counted, failed or not.
func TestFaultStore(t *testing.T) {
	mem := memstore.New(memstore.Options{})
	defer mem.Close()
	f := floodgatetest.NewFaultStore(mem)
	f.Source = "remote"
	lim := floodgatetest.NewLimiter(t, f, "api", floodgate.PerSecond(1))
	ctx := context.Background()

	if res, err := floodgate.Allow(ctx, lim, "k"); err != nil || !res.Allowed || res.Source != "remote" {
		t.Fatalf("healthy: %+v, %v; want allowed by the store underneath, Source remote", res, err)
	}
	f.Set(floodgatetest.Failing)
	if _, err := floodgate.Allow(ctx, lim, "k"); !errors.Is(err, floodgatetest.ErrDown) {
		t.Fatalf("failing: err %v, want ErrDown", err)
	}
	refusal := errors.New("refused")
	f.Refuse(refusal)
	if _, err := floodgate.Allow(ctx, lim, "k"); !errors.Is(err, refusal) {
		t.Fatalf("refusing: err %v, want the refusal", err)
	}
	f.Set(floodgatetest.Stalling)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := floodgate.Allow(cctx, lim, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stalling: err %v, want the context's error", err)
	}
	f.Set(floodgatetest.Hanging)
	done := make(chan error)
	go func() { _, err := floodgate.Allow(ctx, lim, "k"); done <- err }()
	testkit.Eventually(t, 10*time.Second, "the hanging call to reach the store", func() bool { return f.Calls() == 5 })
	f.Release()
	if err := <-done; !errors.Is(err, floodgatetest.ErrDown) {
		t.Fatalf("hanging: err %v after Release, want ErrDown", err)
	}
	f.Set(floodgatetest.Healthy)
	if res, err := floodgate.Allow(ctx, lim, "k"); err != nil || res.Allowed {
		t.Fatalf("healthy again: %+v, %v; want denied (the first call spent the second's unit)", res, err)
	}
	if n := f.Calls(); n != 6 {
		t.Fatalf("Calls() = %d, want 6", n)
	}
}
