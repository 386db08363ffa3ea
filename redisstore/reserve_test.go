package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// raceInstances makes two Stores over client, as two instances of a
// service would, on one pinned clock, and a limiter of one policy on each.
func raceInstances(t *testing.T, client redis.UniversalClient, prefix string, l floodgate.Limit) []floodgate.Limiter {
	t.Helper()
	clock := floodgatetest.NewClock(floodgatetest.Start)
	var lims []floodgate.Limiter
	for range 2 {
		s, err := New(client, Options{Prefix: prefix, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		lim, err := floodgate.New(s, floodgate.Policy{Name: "race", Limits: []floodgate.Limit{l}})
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, lim)
	}
	return lims
}

// Waiting callers of two instances share one line: their reservations
// over one Redis are dense and never over-admit.
func TestRaceReservationsAcrossInstances(t *testing.T) {
	lims := raceInstances(t, standalone(t), "race:", floodgate.PerSecond(100).WithBurst(10))
	floodgatetest.RaceReservations(t, 10, 10*time.Millisecond, 4, 40, lims...)
}

// Random reservations, decisions and cancellations on one Redis never
// over-admit.
func TestRandomReservations(t *testing.T) {
	client := standalone(t)
	var n int
	floodgatetest.RandomReservations(t, floodgatetest.Harness{
		NewStore: func(t *testing.T, clock floodgate.Clock) floodgate.Store {
			n++
			return newStore(t, client, Options{Prefix: fmt.Sprintf("prop%d:", n), Clock: clock})
		},
	}, 300, 60)
}

// A server that lost the script (a restart, SCRIPT FLUSH) is sent it
// again.
func TestReserveAfterScriptFlush(t *testing.T) {
	client := standalone(t)
	lim := raceInstances(t, client, "flush-res:", floodgate.PerSecond(10))[0]
	ctx := context.Background()
	for range 2 {
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if r, err := lim.ReserveN(ctx, "k", 1); err != nil || !r.OK {
			t.Fatalf("%+v, %v", r, err)
		}
	}
}

// A reservation that meets state floodgate did not write fails with
// ErrCorruptState and writes nothing.
func TestReserveCorruptState(t *testing.T) {
	client := standalone(t)
	lims := raceInstances(t, client, "corrupt-res:", floodgate.PerSecond(10))
	lim := lims[0].(*floodgate.PolicyLimiter)
	key := Key("corrupt-res:", lim.LimitsFor("k").Compiled(), "k", 0)
	ctx := context.Background()
	if err := client.Set(ctx, key, "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := lim.ReserveN(ctx, "k", 1); !errors.Is(err, floodgate.ErrCorruptState) {
		t.Fatalf("ReserveN = %v, want ErrCorruptState", err)
	}
	if v, _ := client.Get(ctx, key).Result(); v != "garbage" {
		t.Fatalf("the key now holds %q", v)
	}
}
