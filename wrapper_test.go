package floodgate_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// denyOne embeds a Limiter and overrides AllowN alone: it refuses one key,
// as a deny list in front of a limiter would.
type denyOne struct {
	floodgate.Limiter
	key string
}

func (d denyOne) AllowN(ctx context.Context, key string, cost int64) (floodgate.Result, error) {
	if key == d.key {
		return floodgate.Result{RetryAfter: floodgate.RetryNever, Source: floodgate.SourcePolicy, Policy: d.Name()}, nil
	}
	return d.Limiter.AllowN(ctx, key, cost)
}

// countReserve embeds a Limiter and overrides ReserveN alone: it counts the
// reservations made through it.
type countReserve struct {
	floodgate.Limiter
	n *int
}

func (c countReserve) ReserveN(ctx context.Context, key string, cost int64) (*floodgate.Reservation, error) {
	*c.n++
	return c.Limiter.ReserveN(ctx, key, cost)
}

// A wrapper that overrides one primitive is honoured by every helper built
// on it: Allow and the chain decide through its AllowN, Wait and WaitN
// reserve through its ReserveN. Nothing reaches past it to the limiter it
// embeds.
func TestWrapperOverridingOnePrimitive(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(memstore.Options{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerSecond(100)}})
	if err != nil {
		t.Fatal(err)
	}

	var deny floodgate.Limiter = denyOne{Limiter: lim, key: "banned"}
	if res, err := floodgate.Allow(ctx, deny, "banned"); err != nil || res.Allowed {
		t.Errorf("Allow through the wrapper = %+v, %v; want the wrapper's refusal", res, err)
	}
	if res, _, err := floodgate.AllowAll(ctx, floodgate.Check{Limiter: deny, Key: "banned"}); err != nil || res.Allowed {
		t.Errorf("AllowAll through the wrapper = %+v, %v; want the wrapper's refusal", res, err)
	}
	if res, err := floodgate.Allow(ctx, deny, "other"); err != nil || !res.Allowed {
		t.Errorf("Allow of another key = %+v, %v; want it allowed", res, err)
	}

	n := 0
	var counted floodgate.Limiter = countReserve{Limiter: lim, n: &n}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := floodgate.Wait(wctx, counted, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := floodgate.WaitN(wctx, counted, "k", 2); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("Wait and WaitN made %d reservations through the wrapper, want 2", n)
	}
}

// unwrapping is a wrapper that names the limiter it wraps.
type unwrapping struct{ floodgate.Limiter }

func (u unwrapping) Unwrap() floodgate.Limiter { return u.Limiter }

// As finds a capability through wrappers that Unwrap, as errors.As finds an
// error, and stops at a wrapper that does not.
func TestAs(t *testing.T) {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(store, floodgate.Policy{Name: "api", Limits: []floodgate.Limit{floodgate.PerSecond(100)},
		Overrides: map[string][]floodgate.Limit{"batch": {floodgate.PerSecond(500)}}})
	if err != nil {
		t.Fatal(err)
	}
	chain := unwrapping{unwrapping{lim}}
	d, ok := floodgate.As[floodgate.Describer](chain)
	if !ok || d.LimitsFor("batch").Limit(0) != floodgate.PerSecond(500) || len(d.Overrides()) != 1 {
		t.Fatalf("As[Describer] through two wrappers = %v, %v; want the policy's limiter", d, ok)
	}
	if pl, ok := floodgate.As[*floodgate.PolicyLimiter](chain); !ok || pl != lim {
		t.Errorf("As[*PolicyLimiter] = %v, %v; want %v", pl, ok, lim)
	}
	// denyOne has no Unwrap: the walk ends at it.
	if _, ok := floodgate.As[floodgate.Describer](denyOne{Limiter: lim}); ok {
		t.Error("As walked past a wrapper without Unwrap")
	}
	if _, ok := floodgate.As[floodgate.Describer](nil); ok {
		t.Error("As(nil) found something")
	}
}
