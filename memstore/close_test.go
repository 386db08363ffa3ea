package memstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// buildLimiter is the mistake TestClosedStoreFailsLoudly guards against: a
// constructor that closes the store it hands to the limiter it returns.
func buildLimiter(t *testing.T, l floodgate.Limit) *floodgate.PolicyLimiter {
	t.Helper()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	return newLimiter(t, store, l)
}

func TestClosedStoreFailsLoudly(t *testing.T) {
	ctx := context.Background()
	for _, l := range []floodgate.Limit{
		floodgate.PerSecond(10),
		floodgate.PerSecond(10).WithAlgorithm(floodgate.FixedWindow),
		floodgate.PerSecond(10).WithAlgorithm(floodgate.SlidingLog),
	} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			lim := buildLimiter(t, l)
			check := func(op string, err error) {
				t.Helper()
				if !errors.Is(err, floodgate.ErrClosed) {
					t.Fatalf("%s after Close: %v, want an error wrapping floodgate.ErrClosed", op, err)
				}
				if !strings.Contains(err.Error(), "open") {
					t.Errorf("%s after Close: %q does not say to keep the store open", op, err)
				}
			}
			for i := range 3 {
				res, err := floodgate.Allow(ctx, lim, "k")
				check("Allow", err)
				if res.Allowed {
					t.Fatalf("Allow %d after Close allowed", i)
				}
			}
			_, err := lim.AllowN(ctx, "k", 0)
			check("peek", err)
			check("RefundN", lim.RefundN(ctx, "k", 1))
			check("Reset", lim.Reset(ctx, "k"))
		})
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	s := memstore.New(memstore.Options{})
	for range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
}
