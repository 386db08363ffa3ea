package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clock"
)

// corruptClock pins the time, so that nothing refills while a test counts
// charges and "far in the future" is a known instant.
var corruptClock = clock.Func(func() int64 { return time.Date(2026, 3, 1, 0, 10, 0, 0, time.UTC).UnixNano() })

// TestCorruptKeyFailsOnlyItsDecision writes a hash under the key of one
// client, then decides for it and for many others in shared batches: only
// the victim's decisions fail, with ErrCorruptState, and every other key is
// charged exactly once per admission.
func TestCorruptKeyFailsOnlyItsDecision(t *testing.T) {
	client := standalone(t)
	ctx := context.Background()
	calls := countScripts(client)
	s := newStore(t, client, Options{Clock: corruptClock, Prefix: "corrupt:"})
	lim := newLimiter(t, s, "api", floodgate.PerHour(20))
	victim := limKey("corrupt:", lim, "victim", 0)
	if err := client.HSet(ctx, victim, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}

	const keys, workers, rounds = 40, 64, 8
	var wg sync.WaitGroup
	var victimErrs, otherErrs atomic.Int64
	var firstOther atomic.Value
	admitted := make([]atomic.Int64, keys)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				if (w+i)%16 == 0 {
					_, err := floodgate.Allow(ctx, lim, "victim")
					if !errors.Is(err, ErrCorruptState) {
						t.Errorf("victim: error %v, want ErrCorruptState", err)
					}
					victimErrs.Add(1)
					continue
				}
				k := (w*rounds + i) % keys
				res, err := floodgate.Allow(ctx, lim, "k"+strconv.Itoa(k))
				if err != nil {
					otherErrs.Add(1)
					firstOther.CompareAndSwap(nil, err)
					continue
				}
				if res.Allowed {
					admitted[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := otherErrs.Load(); n > 0 {
		t.Fatalf("%d decisions on healthy keys failed, first: %v", n, firstOther.Load())
	}
	if victimErrs.Load() == 0 {
		t.Fatal("the victim was never asked")
	}
	for k := range keys {
		res, err := lim.AllowN(ctx, "k"+strconv.Itoa(k), 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := admitted[k].Load() + res.Remaining; got != 20 {
			t.Errorf("key k%d: %d admitted and %d remaining, want 20 in all: a charge was lost or doubled", k, admitted[k].Load(), res.Remaining)
		}
	}
	if typ := client.Type(ctx, victim).Val(); typ != "hash" {
		t.Errorf("the foreign key is now a %s: the store overwrote it", typ)
	}
	if c, d := calls.calls.Load(), calls.decisions.Load(); c >= d {
		t.Errorf("%d decisions in %d script calls: the victim never shared a batch", d, c)
	}

	// The error says what is wrong and what to do, without the client key.
	_, err := floodgate.Allow(ctx, lim, "victim")
	var ce *CorruptStateError
	if !errors.As(err, &ce) || ce.Key != victim {
		t.Fatalf("error %v: want a *CorruptStateError naming %s", err, victim)
	}
	if msg := err.Error(); !strings.Contains(msg, "hash") || !strings.Contains(msg, "delete") || strings.Contains(msg, "victim") {
		t.Errorf("message %q: want the problem (a hash) and the remedy (delete), and the client key left out", msg)
	}
	// Reset is the remedy: it deletes the key, and decisions resume.
	if err := lim.Reset(ctx, "victim"); err != nil {
		t.Fatal(err)
	}
	if res, err := floodgate.Allow(ctx, lim, "victim"); err != nil || !res.Allowed || res.Remaining != 19 {
		t.Errorf("after Reset: %+v, %v; want allowed with 19 remaining", res, err)
	}
}

// TestCorruptValues stores values of every shape floodgate never writes
// under each algorithm's key: every one fails its decision and its refund
// with ErrCorruptState, and leaves every key of the decision as it was, so
// no limit of the policy is charged behind the error.
func TestCorruptValues(t *testing.T) {
	client := standalone(t)
	ctx := context.Background()
	s := newStore(t, client, Options{Clock: corruptClock, Prefix: "values:"})
	nowUs := corruptClock.UnixNano() / 1e3
	far := strconv.FormatInt(nowUs+10*24*3600*1e6, 10)
	type value struct {
		name string
		set  func(key string) error
	}
	str := func(v string) value {
		return value{"string " + strconv.Quote(v), func(key string) error { return client.Set(ctx, key, v, 0).Err() }}
	}
	hash := value{"hash", func(key string) error { return client.HSet(ctx, key, "f", "v").Err() }}
	zset := func(member string, score float64) value {
		return value{fmt.Sprintf("zset %q %v", member, score), func(key string) error {
			return client.ZAdd(ctx, key, redis.Z{Score: score, Member: member}).Err()
		}}
	}
	for _, c := range []struct {
		limit  floodgate.Limit
		values []value
	}{
		{floodgate.PerHour(10), []value{hash, zset("1", 1), str("1e300"), str("inf"), str("nan"), str("-5"), str("1.5"),
			str("abc"), str(""), str("99999999999999999999"), str(far)}},
		{floodgate.PerHour(10).WithAlgorithm(floodgate.FixedWindow), []value{hash, str("1 2 3"), str("1e300 1"),
			str(far + " 1"), str(strconv.FormatInt(nowUs+1e6, 10) + " 99999999999999999"), str("x")}},
		{floodgate.PerHour(10).WithAlgorithm(floodgate.SlidingWindow), []value{hash, str("1 2"), str(far + " 0 1"),
			str("inf 1 1"), str(strconv.FormatInt(nowUs+1e6, 10) + " 1 99999999999999999")}},
		{floodgate.PerHour(10).WithAlgorithm(floodgate.SlidingLog), []value{hash, str("1"), zset("x", float64(nowUs)),
			zset("0000000000000001:1", float64(nowUs)+0.5), zset("0000000000000001:1", 1e300),
			zset("0000000000000001:1", float64(nowUs+10*24*3600*1e6))}},
	} {
		for _, v := range c.values {
			t.Run(c.limit.Algorithm.String()+"/"+v.name, func(t *testing.T) {
				// The corrupt limit comes second: the first must not be
				// charged although it admits.
				name := c.limit.Algorithm.String() + v.name
				lim := newLimiter(t, s, name, floodgate.PerHour(100), c.limit)
				first, bad := limKey("values:", lim, "k", 0), limKey("values:", lim, "k", 1)
				if err := v.set(bad); err != nil {
					t.Fatal(err)
				}
				before, _ := client.Dump(ctx, bad).Result()
				res, err := floodgate.Allow(ctx, lim, "k")
				if !errors.Is(err, ErrCorruptState) {
					t.Fatalf("Allow = %+v, %v; want ErrCorruptState", res, err)
				}
				t.Logf("%v", err)
				if err := lim.RefundN(ctx, "k", 1); !errors.Is(err, ErrCorruptState) {
					t.Errorf("RefundN = %v, want ErrCorruptState", err)
				}
				if n := client.Exists(ctx, first).Val(); n != 0 {
					t.Errorf("the first limit was charged behind the error")
				}
				if after, _ := client.Dump(ctx, bad).Result(); after != before {
					t.Errorf("the corrupt key was changed")
				}
				// Other clients are unaffected.
				if res, err := floodgate.Allow(ctx, lim, "other"); err != nil || !res.Allowed {
					t.Errorf("Allow(other) = %+v, %v", res, err)
				}
			})
		}
	}
}

// TestCorruptLogMember hides a corrupt admission in the middle of a
// sliding log, where only a denial's search for its retry, or a refund,
// reads it: both fail with ErrCorruptState and change nothing.
func TestCorruptLogMember(t *testing.T) {
	client := standalone(t)
	ctx := context.Background()
	s := newStore(t, client, Options{Clock: corruptClock, Prefix: "member:"})
	lim := newLimiter(t, s, "log", floodgate.PerHour(100), floodgate.PerHour(3).WithAlgorithm(floodgate.SlidingLog))
	first, log := limKey("member:", lim, "k", 0), limKey("member:", lim, "k", 1)
	nowUs := float64(corruptClock.UnixNano() / 1e3)
	if err := client.ZAdd(ctx, log,
		redis.Z{Score: nowUs - 3e6, Member: "0000000000000001:1"},
		redis.Z{Score: nowUs - 2e6, Member: "x"},
		redis.Z{Score: nowUs - 1e6, Member: "0000000000000003:1"},
	).Err(); err != nil {
		t.Fatal(err)
	}
	before, _ := client.Dump(ctx, log).Result()
	// Three units in the log: a cost of 1 is denied without searching,
	// a cost of 2 searches past the first admission.
	if res, err := lim.AllowN(ctx, "k", 1); err != nil || res.Allowed {
		t.Errorf("AllowN(1) = %+v, %v; want a denial", res, err)
	}
	if _, err := lim.AllowN(ctx, "k", 2); !errors.Is(err, ErrCorruptState) || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("AllowN(2) = %v, want ErrCorruptState naming the member", err)
	}
	if err := lim.RefundN(ctx, "k", 2); !errors.Is(err, ErrCorruptState) {
		t.Errorf("RefundN(2) = %v, want ErrCorruptState", err)
	}
	if after, _ := client.Dump(ctx, log).Result(); after != before {
		t.Error("the log was changed")
	}
	if client.Exists(ctx, first).Val() != 0 {
		t.Error("the first limit was charged")
	}
	// A refund of one unit reads only the newest admission, and works.
	if err := lim.RefundN(ctx, "k", 1); err != nil {
		t.Errorf("RefundN(1) = %v", err)
	}
	if n := client.ZCard(ctx, log).Val(); n != 2 {
		t.Errorf("the log holds %d admissions after a refund of the newest, want 2", n)
	}
}
