package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/testkit"
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
		NewStore: func(t *testing.T, clock clock.Clock) floodgate.Store {
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

// evalshaCalls is how many EVALSHA calls srv has run.
func evalshaCalls(t *testing.T, srv *testkit.RedisServer) int64 {
	t.Helper()
	v, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := v.(string)
	_, rest, ok := strings.Cut(s, "cmdstat_evalsha:calls=")
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
	return n
}

// TestWaitWhileRedisIsBlocked: a Wait whose deadline comes while Redis is
// busy (a long script, DEBUG SLEEP) fails with ErrWaitDeadline and the
// context's error, and the script that Redis runs once it is free, after
// the deadline, charges nothing: the key is as fresh as before. A client
// that honours contexts gives up at the deadline, with the script sent; one
// that does not waits for Redis's answer, which comes after the deadline.
func TestWaitWhileRedisIsBlocked(t *testing.T) {
	srv := testkit.Redis(t)
	for _, honour := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", honour), func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: honour})
			t.Cleanup(func() { client.Close() })
			waitWhileBlocked(t, srv, client)
		})
	}
}

func waitWhileBlocked(t *testing.T, srv *testkit.RedisServer, client *redis.Client) {
	lim := newLimiter(t, newStore(t, client, Options{}), "blocked", floodgate.Every(2*time.Second))
	ctx := context.Background()
	if _, err := lim.ReserveN(ctx, "warm", 1); err != nil { // loads the script
		t.Fatal(err)
	}
	for round := range 3 {
		key := fmt.Sprintf("k%d-%p", round, client)
		before := evalshaCalls(t, srv)
		slept := srv.DebugSleep(time.Second)
		// Wait until the server is asleep: a PING no longer answers at once.
		testkit.Eventually(t, 10*time.Second, "DEBUG SLEEP under way", func() bool { return !answers(t, srv.Addr) })
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := floodgate.Wait(wctx, lim, key)
		cancel()
		if !errors.Is(err, floodgate.ErrWaitDeadline) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("round %d: Wait = %v, want an error wrapping ErrWaitDeadline and context.DeadlineExceeded", round, err)
		}
		if err := <-slept; err != nil {
			t.Fatal(err)
		}
		// The reservation's script, sent before the deadline, runs now.
		testkit.Eventually(t, 10*time.Second, "the held script ran", func() bool { return evalshaCalls(t, srv) > before })
		res, err := floodgate.Allow(ctx, lim, key)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			t.Fatalf("round %d: the failed Wait was charged: Allow = %+v", round, res)
		}
	}
}

// answers reports whether the server at addr answers a PING within 20ms.
func answers(t *testing.T, addr string) bool {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	_, err = bufio.NewReader(conn).ReadString('\n')
	return err == nil
}
