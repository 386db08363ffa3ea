package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/algo"
	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/hybrid"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/metrics"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/testkit"
)

func TestMemoryCollector(t *testing.T) {
	ctx := context.Background()
	m, reg := newMetrics(t, metrics.Options{})
	s := memStore(t, memstore.Options{Shards: 1, MaxKeys: 8})
	if err := m.WatchMemory("memory", s); err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, s, "api", floodgate.PerMinute(10))
	for i := range 20 {
		if _, err := floodgate.Allow(ctx, lim, fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	n, ev := s.Len(), s.Evictions()
	if n == 0 || ev == 0 {
		t.Fatalf("20 keys in a store of 8: %d live, %d evicted; the test needs both", n, ev)
	}
	compare(t, reg, fmt.Sprintf(`
# HELP floodgate_memory_keys Entries an in-memory engine holds (one per key and limit).
# TYPE floodgate_memory_keys gauge
floodgate_memory_keys{engine="memory"} %d
# HELP floodgate_memory_evictions_total Entries an in-memory engine evicted because it was full (MaxKeys).
# TYPE floodgate_memory_evictions_total counter
floodgate_memory_evictions_total{engine="memory"} %d
`, n, ev), "floodgate_memory_keys", "floodgate_memory_evictions_total")

	// The gauge follows the store at scrape time.
	for i := range 20 {
		if err := lim.Reset(ctx, fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	compare(t, reg, `
# HELP floodgate_memory_keys Entries an in-memory engine holds (one per key and limit).
# TYPE floodgate_memory_keys gauge
floodgate_memory_keys{engine="memory"} 0
`, "floodgate_memory_keys")
}

func TestWatchErrors(t *testing.T) {
	m, _ := newMetrics(t, metrics.Options{})
	s := memStore(t, memstore.Options{})
	g, err := failover.NewGuard(s, failover.GuardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WatchGuard("", g); err == nil {
		t.Error("WatchGuard with no name: no error")
	}
	if err := m.WatchGuard("redis", nil); err == nil {
		t.Error("WatchGuard(nil): no error")
	}
	if err := m.WatchMemory("memory", nil); err == nil {
		t.Error("WatchMemory(nil): no error")
	}
	if err := m.WatchGuard("redis", g); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchGuard("redis", g); err == nil {
		t.Error("a second Guard under one engine name: no error, but their series would clash")
	}
	if err := m.WatchMemory("redis", s); err != nil {
		t.Errorf("a memory store may share a name with a Guard (their metrics differ): %v", err)
	}
	if err := m.WatchMemory("redis", s); err == nil {
		t.Error("a second memory store under one engine name: no error")
	}
}

// guardText is the exposition of one engine's Guard metrics.
func guardText(engine string, calls, errs, skipped uint64, state failover.BreakerState, opened, probes, closed, reopened int) string {
	return fmt.Sprintf(`
# HELP floodgate_engine_calls_total Calls made to the engine behind a circuit breaker.
# TYPE floodgate_engine_calls_total counter
floodgate_engine_calls_total{engine=%[1]q} %[2]d
# HELP floodgate_engine_errors_total Calls to the engine that failed or timed out, by operation (decide, refund, reset).
# TYPE floodgate_engine_errors_total counter
floodgate_engine_errors_total{engine=%[1]q,op="decide"} %[3]d
floodgate_engine_errors_total{engine=%[1]q,op="refund"} 0
floodgate_engine_errors_total{engine=%[1]q,op="reset"} 0
# HELP floodgate_engine_timeouts_total Calls to the engine cut off by the per-call slow timeout (also counted in engine_errors_total).
# TYPE floodgate_engine_timeouts_total counter
floodgate_engine_timeouts_total{engine=%[1]q} 0
# HELP floodgate_engine_slow_total Calls to the engine answered later than the per-call timeout but within the slow timeout; their answers were used.
# TYPE floodgate_engine_slow_total counter
floodgate_engine_slow_total{engine=%[1]q} 0
# HELP floodgate_engine_skipped_total Calls not made because the circuit breaker was open; the failure policy decided them.
# TYPE floodgate_engine_skipped_total counter
floodgate_engine_skipped_total{engine=%[1]q} %[4]d
# HELP floodgate_engine_canceled_total Calls abandoned because the caller's context ended first; they say nothing about the engine.
# TYPE floodgate_engine_canceled_total counter
floodgate_engine_canceled_total{engine=%[1]q} 0
# HELP floodgate_breaker_state State of the engine's circuit breaker: 0 closed, 1 open, 2 half-open.
# TYPE floodgate_breaker_state gauge
floodgate_breaker_state{engine=%[1]q} %[5]d
# HELP floodgate_breaker_transitions_total Transitions of an engine's circuit breaker, by engine and the states it went from and to (closed, open, half_open).
# TYPE floodgate_breaker_transitions_total counter
floodgate_breaker_transitions_total{engine=%[1]q,from="closed",to="open"} %[6]d
floodgate_breaker_transitions_total{engine=%[1]q,from="open",to="half_open"} %[7]d
floodgate_breaker_transitions_total{engine=%[1]q,from="half_open",to="closed"} %[8]d
floodgate_breaker_transitions_total{engine=%[1]q,from="half_open",to="open"} %[9]d
`, engine, calls, errs, skipped, state, opened, probes, closed, reopened)
}

var guardMetrics = []string{
	"floodgate_engine_calls_total", "floodgate_engine_errors_total", "floodgate_engine_timeouts_total",
	"floodgate_engine_slow_total", "floodgate_engine_skipped_total", "floodgate_engine_canceled_total",
	"floodgate_breaker_state", "floodgate_breaker_transitions_total",
}

func redisStore(t *testing.T, addr string) *redisstore.Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// decide makes n decisions of one key and checks each one's Source.
func decide(t *testing.T, lim floodgate.Limiter, n int, allowed bool, source floodgate.Source) {
	t.Helper()
	for i := range n {
		res, err := floodgate.Allow(context.Background(), lim, "user:1")
		if err != nil || res.Allowed != allowed || res.Source != source {
			t.Fatalf("decision %d: allowed %v from %q, %v; want allowed %v from %q", i+1, res.Allowed, res.Source, err, allowed, source)
		}
	}
}

// TestRedisKilledFailOpen kills a real redis-server under a FailOpen store
// and brings it back: the engine's errors, skipped calls, breaker state and
// every transition show in the metrics, and the decisions' source moves
// from redis to fail-open and back.
func TestRedisKilledFailOpen(t *testing.T) {
	srv := testkit.Redis(t)
	m, reg := newMetrics(t, metrics.Options{})
	// The breaker runs on a pinned clock, so its back-off ends when the
	// test says, not when a timer does. The timeout is far above any
	// healthy call on a loaded machine, so only the outage fails calls.
	clock := floodgatetest.NewClock(floodgatetest.Start)
	fs, err := failover.New(redisStore(t, srv.Addr), failover.Options{
		Mode: failover.FailOpen,
		Guard: m.GuardOptions("redis", failover.GuardOptions{
			Timeout: 10 * time.Second, MinCalls: 3, Backoff: time.Second, MaxBackoff: time.Second,
			ContextBound: true, Clock: clock,
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WatchGuard("redis", fs.Guard()); err != nil {
		t.Fatal(err)
	}
	lim := m.Limiter(newLimiter(t, fs, "api", floodgate.PerSecond(1000)))

	decide(t, lim, 5, true, redisstore.Source)
	compare(t, reg, guardText("redis", 5, 0, 0, failover.Closed, 0, 0, 0, 0), guardMetrics...)

	srv.Kill()
	// MinCalls refused connections in a row open the breaker: three
	// failures after the five answers; the other seven are not tried.
	decide(t, lim, 10, true, floodgate.SourceFailOpen)
	compare(t, reg, guardText("redis", 8, 3, 7, failover.Open, 1, 0, 0, 0), guardMetrics...)

	srv.Restart()
	// Each decision after a back-off is the probe. A probe may still meet
	// a connection of the dead server and fail, so probe until one passes.
	probes := 0
	for {
		clock.Advance(2 * time.Second)
		probes++
		res, err := floodgate.Allow(context.Background(), lim, "user:1")
		if err != nil {
			t.Fatal(err)
		}
		if res.Source == redisstore.Source {
			break
		}
		if res.Source != floodgate.SourceFailOpen || probes == 20 {
			t.Fatalf("probe %d: %+v; want the restarted redis to answer", probes, res)
		}
	}
	compare(t, reg, guardText("redis", uint64(8+probes), uint64(3+probes-1), 7, failover.Closed, 1, probes, 1, probes-1), guardMetrics...)

	compare(t, reg, decisionsHelp+fmt.Sprintf(`
floodgate_decisions_total{decision="allowed",policy="api",source="redis"} 6
floodgate_decisions_total{decision="denied",policy="api",source="redis"} 0
floodgate_decisions_total{decision="error",policy="api",source="redis"} 0
floodgate_decisions_total{decision="allowed",policy="api",source="fail-open"} %d
floodgate_decisions_total{decision="denied",policy="api",source="fail-open"} 0
floodgate_decisions_total{decision="error",policy="api",source="fail-open"} 0
`, 10+probes-1), "floodgate_decisions_total")
}

// TestHybridRedisKilled is the course's degradation experiment: with Redis
// stopped, traffic keeps flowing on the local filter, the decisions' source
// becomes local-fallback and the engine error counter grows.
func TestHybridRedisKilled(t *testing.T) {
	srv := testkit.Redis(t)
	m, reg := newMetrics(t, metrics.Options{})
	local := memStore(t, memstore.Options{})
	hs, err := hybrid.New(local, redisStore(t, srv.Addr), hybrid.Options{
		Fraction: 0.5,
		Guard:    m.GuardOptions("redis", failover.GuardOptions{Timeout: 10 * time.Second, MinCalls: 5, ContextBound: true}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WatchGuard("redis", hs.Guard()); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchMemory("hybrid-local", local); err != nil {
		t.Fatal(err)
	}
	// 10 a minute globally, 5 in the local filter; nothing refills during
	// the test on the local store's pinned clock.
	lim := m.Limiter(newLimiter(t, hs, "api", floodgate.PerMinute(10)))

	decide(t, lim, 3, true, hybrid.SourceGlobal)
	srv.Kill()
	decide(t, lim, 2, true, floodgate.SourceLocalFallback)
	decide(t, lim, 2, false, hybrid.SourceLocal) // the filter's 5 are spent; redis is not asked

	compare(t, reg, decisionsHelp+`
floodgate_decisions_total{decision="allowed",policy="api",source="hybrid:global"} 3
floodgate_decisions_total{decision="denied",policy="api",source="hybrid:global"} 0
floodgate_decisions_total{decision="error",policy="api",source="hybrid:global"} 0
floodgate_decisions_total{decision="allowed",policy="api",source="local-fallback"} 2
floodgate_decisions_total{decision="denied",policy="api",source="local-fallback"} 0
floodgate_decisions_total{decision="error",policy="api",source="local-fallback"} 0
floodgate_decisions_total{decision="allowed",policy="api",source="hybrid:local"} 0
floodgate_decisions_total{decision="denied",policy="api",source="hybrid:local"} 2
floodgate_decisions_total{decision="error",policy="api",source="hybrid:local"} 0
`, "floodgate_decisions_total")
	compare(t, reg, guardText("redis", 5, 2, 0, failover.Closed, 0, 0, 0, 0)+`
# HELP floodgate_memory_keys Entries an in-memory engine holds (one per key and limit).
# TYPE floodgate_memory_keys gauge
floodgate_memory_keys{engine="hybrid-local"} 1
`, append(guardMetrics, "floodgate_memory_keys")...)
}

// downStore is an engine that is always down.
type downStore struct{ floodgate.Store }

func (downStore) Decide(context.Context, *algo.Set, string, int64) (algo.Verdict, error) {
	return algo.Verdict{}, errors.New("connection refused")
}
func (downStore) Reserve(context.Context, *algo.Set, string, int64, time.Duration) (algo.Verdict, algo.Ticket, error) {
	return algo.Verdict{}, algo.Ticket{}, errors.New("connection refused")
}
func (downStore) Cancel(context.Context, *algo.Set, string, int64, algo.Ticket) error {
	return errors.New("connection refused")
}

// TestGuardOptionsKeepsHooks: the hook GuardOptions installs counts and
// then calls the one the options had; other options pass through.
func TestGuardOptionsKeepsHooks(t *testing.T) {
	m, reg := newMetrics(t, metrics.Options{})
	var seen []string
	o := m.GuardOptions("down", failover.GuardOptions{
		MinCalls: 1, Timeout: time.Minute, ContextBound: true,
		OnStateChange: func(from, to failover.BreakerState) { seen = append(seen, from.String()+">"+to.String()) },
	})
	if o.MinCalls != 1 || o.Timeout != time.Minute || !o.ContextBound {
		t.Fatalf("GuardOptions changed the options: %+v", o)
	}
	g, err := failover.NewGuard(downStore{memStore(t, memstore.Options{})}, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WatchGuard("down", g); err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, g, "api", floodgate.PerSecond(1))
	if _, err := floodgate.Allow(context.Background(), lim, "k"); err == nil {
		t.Fatal("a Guard over a store that is down decided without error")
	}
	if len(seen) != 1 || seen[0] != "closed>open" {
		t.Errorf("the options' own hook saw %v; want [closed>open]", seen)
	}
	compare(t, reg, guardText("down", 1, 1, 0, failover.Open, 1, 0, 0, 0), guardMetrics...)
}
