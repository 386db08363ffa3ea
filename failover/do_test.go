package failover_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/redisstore"
)

// TestDoSharesTheBreaker: calls made with the Guard's Breaker's Do and
// calls of the remote store are judged by one breaker. Failures of Do open
// it for Decide, an open breaker skips Do's function, Do's calls are
// bounded by the timeout, and a refusal (a corrupt key) is an answer, not
// an outage.
func TestDoSharesTheBreaker(t *testing.T) {
	clock := newClock()
	remote := newFakeRemote(t, clock)
	var errs []*failover.Error
	g, err := failover.NewGuard(remote, failover.GuardOptions{
		Name: "conc", Clock: clock, MinCalls: 4, FailureRate: 0.5, Backoff: time.Second,
		Timeout: 20 * time.Millisecond, SlowTimeout: 50 * time.Millisecond,
		OnError: func(e *failover.Error) { errs = append(errs, e) },
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := failover.New(g, failover.Options{Mode: failover.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	lim := floodgatetest.NewLimiter(t, s, "api", floodgate.PerSecond(1000))
	ctx := context.Background()
	down := errors.New("lease backend: connection refused")
	ran := 0
	do := func(err error) error {
		return g.Breaker().Do(ctx, func(context.Context) error { ran++; return err })
	}

	if err := do(nil); err != nil {
		t.Fatalf("a call that succeeds: %v", err)
	}
	corrupt := fmt.Errorf("%w: key k", floodgate.ErrCorruptState)
	for range 4 {
		if err := do(corrupt); !errors.Is(err, floodgate.ErrCorruptState) {
			t.Fatalf("a refusal: %v", err)
		}
	}
	if g.State() != failover.Closed {
		t.Fatalf("refusals opened the breaker: %s", g.State())
	}
	if r := mustAllow(t, lim, "k"); r.Source != redisstore.Source {
		t.Fatalf("Source %q before any failure", r.Source)
	}
	for range 4 {
		if err := do(down); err != down {
			t.Fatalf("a failure: %v, want the call's own error", err)
		}
	}
	if g.State() != failover.Open {
		t.Fatalf("state %s after Do's failures, want open", g.State())
	}
	if len(errs) != 4 || errs[0].Op != failover.OpCall || errs[0].Policy != "conc" || errs[0].Error() != "failover: conc: call: "+down.Error() {
		t.Fatalf("OnError saw %v", errs)
	}
	if st := g.Stats(); st.Failures.Decide != 4 {
		t.Fatalf("Do's failures counted as %+v, want 4 with Decide's", st.Failures)
	}
	// The open breaker skips both kinds of call.
	before, calls := ran, remote.Calls()
	if err := do(nil); !errors.Is(err, failover.ErrOpen) {
		t.Fatalf("Do while open: %v", err)
	}
	if r := mustAllow(t, lim, "k"); r.Source != floodgate.SourceFailOpen {
		t.Fatalf("Decide while open: Source %q", r.Source)
	}
	if ran != before || remote.Calls() != calls {
		t.Fatal("a call ran while the breaker was open")
	}

	// A function that overruns the slow timeout is cut off; its context
	// ends with the Guard's deadline.
	g2, err := failover.NewGuard(remote, failover.GuardOptions{Timeout: 10 * time.Millisecond, SlowTimeout: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	err = g2.Breaker().Do(ctx, func(context.Context) error { <-release; return nil })
	if !errors.Is(err, failover.ErrTimeout) {
		t.Fatalf("a call that hangs: %v", err)
	}
	err = g2.Breaker().Do(ctx, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	if !errors.Is(err, failover.ErrTimeout) {
		t.Fatalf("a call that waits for its context: %v", err)
	}
}
