package hybrid_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/hybrid"
	"github.com/floodgate-go/floodgate/internal/testenv"
	"github.com/floodgate-go/floodgate/redisstore"
)

// newRedisStore returns a Redis engine over a client of its own, as one
// service instance would have.
func newRedisStore(t *testing.T, addr string) *redisstore.Store {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { client.Close() })
	s, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// evalshaCalls reads how many script calls Redis has run.
func evalshaCalls(t *testing.T, srv *testenv.RedisServer) int64 {
	t.Helper()
	v, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(v.(string), "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
				c, err := strconv.ParseInt(calls, 10, 64)
				if err != nil {
					t.Fatalf("INFO commandstats: %q: %v", line, err)
				}
				n += c
			}
		}
	}
	return n
}

// One key driven at 10× its limit through one instance: at least 95% of the
// denied requests never reach Redis, counted both at the store (decisions
// that reached it) and at Redis (script calls it ran).
func TestRedisDeniedRequestsStayLocal(t *testing.T) {
	srv := testenv.Redis(t)
	global := counting(newRedisStore(t, srv.Addr))
	s, err := hybrid.New(newMem(t, nil), global, hybrid.Options{Fraction: hybrid.FractionFor(3, 1.5),
		Guard: failover.GuardOptions{Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	const rate = 200 // per second, and as many at once
	lim := newLimiter(t, s, floodgate.PerSecond(rate))
	mustAllow(t, lim, "warm-up") // loads the script (a NOSCRIPT, then a load) before counting
	before, beforeReached := evalshaCalls(t, srv), global.decides.Load()

	// 10 × rate requests per second for 1.5 s, paced against the clock so
	// that a slow start is caught up on, not lost.
	const overload, duration = 10, 1500 * time.Millisecond
	var sent, denied, deniedGlobal int
	start := time.Now()
	for {
		elapsed := time.Since(start)
		if elapsed >= duration {
			break
		}
		for due := int(elapsed.Seconds() * overload * rate); sent < due; sent++ {
			res := mustAllow(t, lim, "hot")
			if !res.Allowed {
				denied++
				if res.Source == hybrid.SourceGlobal {
					deniedGlobal++
				}
			}
		}
		time.Sleep(time.Millisecond)
	}
	reached := global.decides.Load() - beforeReached
	scripts := evalshaCalls(t, srv) - before
	t.Logf("%d requests in %s, %d denied (%d by Redis); %d decisions reached the store, Redis ran %d script calls",
		sent, time.Since(start).Round(time.Millisecond), denied, deniedGlobal, reached, scripts)
	if rate := float64(sent) / time.Since(start).Seconds() / rate; rate < 8 {
		t.Fatalf("drove the key at only %.1f × its limit; the machine is too slow for this test", rate)
	}
	if local := float64(denied-deniedGlobal) / float64(denied); local < 0.95 {
		t.Errorf("%.1f%% of denied requests stayed local, want ≥ 95%%", 100*local)
	}
	// Every request that reached Redis was admitted or denied there; the
	// rest, at least 95% of the denied, never touched it.
	if allowed := sent - denied; reached != int64(allowed+deniedGlobal) {
		t.Errorf("%d decisions reached Redis, want the %d allowed plus the %d Redis denied", reached, allowed, deniedGlobal)
	}
	if scripts > reached {
		t.Errorf("Redis ran %d script calls for %d decisions", scripts, reached)
	}
	if maxReach := int64(float64(denied) * 0.05); scripts-int64(sent-denied) > maxReach {
		t.Errorf("Redis ran %d script calls beyond the admitted requests, want at most 5%% of the %d denied", scripts-int64(sent-denied), denied)
	}
}

// Three instances, each with its own Redis client and local filter, share
// one Redis: together they admit the global limit (+1%). Three purely local
// limiters admit about three times it.
func TestRedisThreeInstances(t *testing.T) {
	srv := testenv.Redis(t)
	// An hourly limit barely refills during the test, so what is admitted
	// is the limit itself, whatever the timing.
	limit := floodgate.PerHour(1000)
	const perInstance = 2000
	f := hybrid.FractionFor(3, 1.5)
	var hybrids, locals []floodgate.Limiter
	var globals []*countingStore
	for range 3 {
		global := counting(newRedisStore(t, srv.Addr))
		globals = append(globals, global)
		// This test is about sharing, not failures: a timeout far above any
		// scheduling hiccup keeps a busy machine from causing fallbacks.
		h, err := hybrid.New(newMem(t, nil), global, hybrid.Options{Fraction: f, Guard: failover.GuardOptions{Timeout: 5 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		hybrids = append(hybrids, newLimiter(t, h, limit))
		locals = append(locals, newLimiter(t, newMem(t, nil), limit))
	}
	drive := func(lims []floodgate.Limiter) (admitted int, bySource map[floodgate.Source]int) {
		var mu sync.Mutex
		bySource = map[floodgate.Source]int{}
		var wg sync.WaitGroup
		for _, lim := range lims {
			wg.Go(func() {
				for range perInstance {
					res, err := lim.Allow(context.Background(), "shared")
					mu.Lock()
					if err != nil {
						t.Errorf("Allow: %v", err)
					} else if res.Allowed {
						admitted++
					}
					bySource[res.Source]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return admitted, bySource
	}
	admitted, bySource := drive(hybrids)
	t.Logf("three hybrid instances admitted %d of %d: %v", admitted, 3*perInstance, bySource)
	if admitted < 1000 || admitted > 1010 {
		t.Errorf("three hybrid instances admitted %d, want the global limit of 1000 (+1%%)", admitted)
	}
	if n := bySource[hybrid.SourceLocalFallback]; n > 0 {
		t.Errorf("%d decisions fell back to the local filter with Redis up", n)
	}
	// Redis sees what the filters pass: at most fraction × instances = 1.5
	// times the limit, however hard the key is driven.
	var reached int64
	for _, g := range globals {
		reached += g.decides.Load()
	}
	if reached > 1500+3 {
		t.Errorf("%d decisions reached Redis, want at most 1.5 × the limit", reached)
	}
	admitted, _ = drive(locals)
	t.Logf("three local limiters admitted %d", admitted)
	if admitted < 2970 || admitted > 3030 {
		t.Errorf("three local limiters admitted %d, want about 3 × 1000", admitted)
	}
}
