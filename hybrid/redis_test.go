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
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/testkit"
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
func evalshaCalls(t *testing.T, srv *testkit.RedisServer) int64 {
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

// One key driven at 20× its limit through one instance: at least 95% of the
// denied requests never reach Redis, counted both at the store (decisions
// that reached it) and at Redis (script calls it ran). The local filter and
// Redis share a fake clock that advances a fixed step per request, so the
// overload is a count of requests, not a rate the machine must keep up.
// Other instances have used most of the global limit, so Redis denies some
// of what the filter passes.
func TestRedisDeniedRequestsStayLocal(t *testing.T) {
	srv := testkit.Redis(t)
	clock := newClock()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { client.Close() })
	rs, err := redisstore.New(client, redisstore.Options{Clock: clock, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	global := counting(rs)
	s, err := hybrid.New(newMem(t, clock), global, hybrid.Options{Fraction: hybrid.FractionFor(3, 1.5),
		Guard: failover.GuardOptions{Timeout: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	// The filter holds half: 500 at once, 500 more an hour.
	const limit, requests, span = 1000, 20 * 1000, 2 * time.Hour
	lim := newLimiter(t, s, floodgate.PerHour(limit))
	// The other instances' share, charged straight to Redis; it also
	// loads the script (a NOSCRIPT, then a load) before counting.
	others := newLimiter(t, rs, floodgate.PerHour(limit))
	if res, err := others.AllowN(context.Background(), "hot", 900); err != nil || !res.Allowed {
		t.Fatalf("other instances' AllowN(900) = %+v, %v", res, err)
	}
	before, beforeReached := evalshaCalls(t, srv), global.decides.Load()

	var denied, deniedGlobal int
	for range requests {
		res := mustAllow(t, lim, "hot")
		if !res.Allowed {
			denied++
			if res.Source == hybrid.SourceGlobal {
				deniedGlobal++
			}
		}
		clock.Advance(span / requests)
	}
	allowed := requests - denied
	reached := global.decides.Load() - beforeReached
	scripts := evalshaCalls(t, srv) - before
	t.Logf("%d requests over %s of the fake clock, %d allowed, %d denied (%d by Redis); %d decisions reached the store, Redis ran %d script calls",
		requests, span, allowed, denied, deniedGlobal, reached, scripts)
	// What Redis can admit: the 100 the others left, and what refilled.
	if maxAllowed := limit - 900 + int(span.Hours())*limit + 1; allowed > maxAllowed {
		t.Errorf("%d allowed, want at most %d: the global limit was exceeded", allowed, maxAllowed)
	}
	if deniedGlobal == 0 {
		t.Errorf("Redis denied nothing: the test did not exercise a global denial")
	}
	if local := float64(denied-deniedGlobal) / float64(denied); local < 0.95 {
		t.Errorf("%.1f%% of denied requests stayed local, want ≥ 95%%", 100*local)
	}
	// Every request that reached Redis was admitted or denied there; the
	// rest, at least 95% of the denied, never touched it.
	if reached != int64(allowed+deniedGlobal) {
		t.Errorf("%d decisions reached Redis, want the %d allowed plus the %d Redis denied", reached, allowed, deniedGlobal)
	}
	if scripts > reached {
		t.Errorf("Redis ran %d script calls for %d decisions", scripts, reached)
	}
	if maxReach := int64(float64(denied) * 0.05); scripts-int64(allowed) > maxReach {
		t.Errorf("Redis ran %d script calls beyond the admitted requests, want at most 5%% of the %d denied", scripts-int64(allowed), denied)
	}
}

// Three instances, each with its own Redis client and local filter, share
// one Redis: together they admit the global limit (+1%). Three purely local
// limiters admit about three times it.
func TestRedisThreeInstances(t *testing.T) {
	srv := testkit.Redis(t)
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
					res, err := floodgate.Allow(context.Background(), lim, "shared")
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
	if n := bySource[floodgate.SourceLocalFallback]; n > 0 {
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
