package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/chargedenied"
)

// A fixed window decided under chargedenied counts with INCRBY and PEXPIRE
// NX, no script: admitted while the count stays within the limit, a
// denied request charged too, its key gone when the window ends; refunds
// and Reset reach the same count.
func TestPlainCounting(t *testing.T) {
	client := standalone(t)
	scripts := countScripts(client)
	clock := floodgatetest.NewClock(floodgatetest.Start.Add(10 * time.Second))
	lim := floodgatetest.NewLimiter(t, newStore(t, client, Options{Clock: clock}), "plain",
		floodgate.Limit{Algorithm: floodgate.FixedWindow, Rate: 3, Period: time.Minute})
	ctx := chargedenied.With(context.Background())
	want := func(what string, res floodgate.Result, allowed bool, remaining int64) {
		t.Helper()
		if res.Allowed != allowed || res.Remaining != remaining {
			t.Fatalf("%s: allowed %v remaining %d, want %v %d", what, res.Allowed, res.Remaining, allowed, remaining)
		}
		if res.ResetAfter != 50*time.Second {
			t.Fatalf("%s: reset after %s, want 50s (the window's end)", what, res.ResetAfter)
		}
	}
	for i := range int64(3) {
		res, err := lim.AllowN(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		want("admission", res, true, 2-i)
	}
	res, err := lim.AllowN(ctx, "k", 2)
	if err != nil {
		t.Fatal(err)
	}
	want("over the limit", res, false, 0)
	if res.RetryAfter != 50*time.Second {
		t.Errorf("retry after %s, want 50s", res.RetryAfter)
	}
	if n := scripts.calls.Load(); n != 0 {
		t.Errorf("%d script calls, want none", n)
	}
	_, end := lim.LimitsFor("k").Compiled().At(0).Window(clock.UnixNano())
	key := string(plainKey(nil, DefaultPrefix, lim.LimitsFor("k").Compiled(), "k", end))
	if v, err := client.Get(context.Background(), key).Int64(); err != nil || v != 5 {
		t.Fatalf("%s holds %d (%v), want 5: the denied request charged", key, v, err)
	}
	if ttl, err := client.PTTL(context.Background(), key).Result(); err != nil || ttl <= 0 || ttl > 50*time.Second {
		t.Fatalf("%s expires in %s (%v), want within the window's 50s", key, ttl, err)
	}
	// A refund takes units back, never below zero.
	if err := lim.RefundN(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	res, err = lim.AllowN(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	want("after a refund of 3", res, true, 0)
	if err := lim.RefundN(ctx, "k", 100); err != nil {
		t.Fatal(err)
	}
	if n, err := client.Exists(context.Background(), key).Result(); err != nil || n != 0 {
		t.Fatalf("a refund of more than the count left %d keys (%v)", n, err)
	}
	// Reset clears the count.
	for range 4 {
		if _, err := lim.AllowN(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := lim.Reset(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	res, err = lim.AllowN(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	want("after Reset", res, true, 2)
	// The next window counts afresh.
	clock.Advance(time.Minute)
	res, err = lim.AllowN(ctx, "k", 3)
	if err != nil {
		t.Fatal(err)
	}
	want("next window", res, true, 0)
}

// A set that is not one fixed window, or a call not marked, runs the
// script as before.
func TestPlainOnlyWhereMarked(t *testing.T) {
	client := standalone(t)
	scripts := countScripts(client)
	s := newStore(t, client, Options{})
	gcra := floodgatetest.NewLimiter(t, s, "gcra", floodgate.PerMinute(3))
	fixed := floodgatetest.NewLimiter(t, s, "fixed", floodgate.Limit{Algorithm: floodgate.FixedWindow, Rate: 3, Period: time.Minute})
	if _, err := gcra.AllowN(chargedenied.With(context.Background()), "k", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := fixed.AllowN(context.Background(), "k", 1); err != nil {
		t.Fatal(err)
	}
	if n := scripts.calls.Load() - scripts.evals.Load(); n != 2 {
		t.Errorf("%d script calls (EVALSHA), want 2", n)
	}
}

// Another program's value under a plain count's key fails the decision
// with ErrCorruptState and is left as it was.
func TestPlainCorruptState(t *testing.T) {
	client := standalone(t)
	clock := floodgatetest.NewClock(floodgatetest.Start)
	lim := floodgatetest.NewLimiter(t, newStore(t, client, Options{Clock: clock}), "plain",
		floodgate.Limit{Algorithm: floodgate.FixedWindow, Rate: 3, Period: time.Minute})
	set := lim.LimitsFor("k").Compiled()
	_, end := set.At(0).Window(clock.UnixNano())
	key := string(plainKey(nil, DefaultPrefix, set, "k", end))
	if err := client.HSet(context.Background(), key, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := lim.AllowN(chargedenied.With(context.Background()), "k", 1)
	var cs *CorruptStateError
	if !errors.Is(err, ErrCorruptState) || !errors.As(err, &cs) || cs.Key != key {
		t.Fatalf("error %v, want ErrCorruptState naming %s", err, key)
	}
	if typ, _ := client.Type(context.Background(), key).Result(); typ != "hash" {
		t.Errorf("the key is now a %s", typ)
	}
	if ttl, err := client.PTTL(context.Background(), key).Result(); err != nil || ttl != -1 {
		t.Errorf("the key now expires in %s (%v), want no expiry, as it was", ttl, err)
	}
}
