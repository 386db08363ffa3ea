//go:build !race

package concurrency_test

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate/concurrency"
)

// TestAllocsPerAcquire: over a Local, Do holds a slot without allocating,
// Acquire allocates its Permit only, and a refusal allocates nothing. (A
// token, a Permit and its hold made three allocations of every admitted
// request, and the token one of every refused one.) The race detector
// changes allocation counts, so this runs without it.
func TestAllocsPerAcquire(t *testing.T) {
	ctx := context.Background()
	l := newLimiter(t, concurrency.NewLocal(), concurrency.Options{Limit: 1, MaxWaiting: 4})
	work := func(concurrency.Result) concurrency.Outcome { return concurrency.Success }
	if n := testing.AllocsPerRun(200, func() {
		if !l.Do(ctx, "", work).Allowed {
			t.Fatal("refused")
		}
	}); n != 0 {
		t.Errorf("Do: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(200, func() {
		_, p := l.Acquire(ctx, "")
		p.Release()
	}); n > 1 {
		t.Errorf("Acquire and Release: %v allocations, want at most 1 (the Permit)", n)
	}
	full := newLimiter(t, concurrency.NewLocal(), concurrency.Options{Limit: 1})
	_, p := full.Acquire(ctx, "")
	defer p.Release()
	if n := testing.AllocsPerRun(200, func() {
		if full.Do(ctx, "", work).Allowed {
			t.Fatal("admitted")
		}
	}); n != 0 {
		t.Errorf("refused: %v allocations, want 0", n)
	}
}
