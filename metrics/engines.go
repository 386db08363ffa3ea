package metrics

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate/failover"
)

// GuardOptions returns o with its OnStateChange hook also counting
// floodgate_breaker_transitions_total{engine}; a hook already in o still
// runs, after the count. Pass the result to failover.New, failover.NewGuard
// or hybrid.New, then give the Guard they build to WatchGuard under the
// same engine name for the rest of its metrics.
//
// The hook is the only way to see every transition: a Guard's Stats count
// how often the breaker opened and probed, not how each probe ended.
func (m *Metrics) GuardOptions(engine string, o failover.GuardOptions) failover.GuardOptions {
	engine = labelValue(engine)
	// All four transitions a breaker makes are resolved now, so they are
	// exported as 0 before the first outage (an alert on increase() then
	// fires on the first one) and the hook allocates nothing.
	var counters [3][3]prometheus.Counter
	for _, t := range [...][2]failover.BreakerState{
		{failover.Closed, failover.Open},
		{failover.Open, failover.HalfOpen},
		{failover.HalfOpen, failover.Closed},
		{failover.HalfOpen, failover.Open},
	} {
		counters[t[0]][t[1]] = m.transitions.WithLabelValues(engine, t[0].String(), t[1].String())
	}
	next := o.OnStateChange
	o.OnStateChange = func(from, to failover.BreakerState) {
		if valid(from) && valid(to) && counters[from][to] != nil {
			counters[from][to].Inc()
		} else {
			m.transitions.WithLabelValues(engine, from.String(), to.String()).Inc()
		}
		if next != nil {
			next(from, to)
		}
	}
	return o
}

func valid(s failover.BreakerState) bool { return s >= failover.Closed && s <= failover.HalfOpen }

// WatchGuard exports g's counters and breaker state under the label
// engine, read from g.Stats() at every scrape: floodgate_engine_calls_total,
// floodgate_engine_errors_total{op}, floodgate_engine_timeouts_total,
// floodgate_engine_slow_total,
// floodgate_engine_skipped_total, floodgate_engine_canceled_total and
// floodgate_breaker_state. Several Guards (one per Redis, say) can be
// watched under different names; an empty name, a nil g or a name already
// watched is an error.
func (m *Metrics) WatchGuard(engine string, g GuardStats) error {
	if isNil(g) {
		return fmt.Errorf("metrics: engine %q: no Guard given", engine)
	}
	return m.engines.add(engine, g, nil)
}

// WatchMemory exports s's live entries (floodgate_memory_keys) and its
// evictions (floodgate_memory_evictions_total) under the label engine, read
// at every scrape. Reading the entries locks each shard of s in turn, for a
// moment. A hybrid store's local filter can be watched too, under a name
// of its own.
func (m *Metrics) WatchMemory(engine string, s Memory) error {
	if isNil(s) {
		return fmt.Errorf("metrics: engine %q: no memstore.Store given", engine)
	}
	return m.engines.add(engine, nil, s)
}

// GuardStats is what WatchGuard reads at every scrape: the counters of a
// *failover.Guard (or of a *failover.Breaker, or anything that keeps them).
type GuardStats interface {
	Stats() failover.Stats
}

// A Memory is what WatchMemory reads at every scrape: a *memstore.Store.
type Memory interface {
	// Len is the number of entries held.
	Len() int
	// Evictions is the number of entries evicted because the store was
	// full.
	Evictions() uint64
}

// engines is the collector over watched engines.
type engines struct {
	calls, errs, timeouts, slow, skipped, canceled, state *prometheus.Desc
	keys, evictions                                       *prometheus.Desc

	mu     sync.Mutex
	guards []watched[GuardStats]
	mems   []watched[Memory]
}

type watched[T any] struct {
	engine string
	v      T
}

func newEngines(cl prometheus.Labels) *engines {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, append([]string{"engine"}, labels...), cl)
	}
	return &engines{
		calls:     desc("engine_calls_total", "Calls made to the engine behind a circuit breaker."),
		errs:      desc("engine_errors_total", "Calls to the engine that failed or timed out, by operation (decide, refund, reset).", "op"),
		timeouts:  desc("engine_timeouts_total", "Calls to the engine cut off by the per-call slow timeout (also counted in engine_errors_total)."),
		slow:      desc("engine_slow_total", "Calls to the engine answered later than the per-call timeout but within the slow timeout; their answers were used."),
		skipped:   desc("engine_skipped_total", "Calls not made because the circuit breaker was open; the failure policy decided them."),
		canceled:  desc("engine_canceled_total", "Calls abandoned because the caller's context ended first; they say nothing about the engine."),
		state:     desc("breaker_state", "State of the engine's circuit breaker: 0 closed, 1 open, 2 half-open."),
		keys:      desc("memory_keys", "Entries an in-memory engine holds (one per key and limit)."),
		evictions: desc("memory_evictions_total", "Entries an in-memory engine evicted because it was full (MaxKeys)."),
	}
}

func (e *engines) add(engine string, g GuardStats, s Memory) error {
	if engine == "" {
		return errors.New("metrics: the engine needs a name, e.g. \"redis\"")
	}
	engine = labelValue(engine)
	e.mu.Lock()
	defer e.mu.Unlock()
	if g != nil {
		if slices.ContainsFunc(e.guards, func(w watched[GuardStats]) bool { return w.engine == engine }) {
			return fmt.Errorf("metrics: a Guard is already watched as engine %q; give each a name of its own", engine)
		}
		e.guards = append(e.guards, watched[GuardStats]{engine, g})
		return nil
	}
	if slices.ContainsFunc(e.mems, func(w watched[Memory]) bool { return w.engine == engine }) {
		return fmt.Errorf("metrics: a memstore.Store is already watched as engine %q; give each a name of its own", engine)
	}
	e.mems = append(e.mems, watched[Memory]{engine, s})
	return nil
}

// Describe implements prometheus.Collector.
func (e *engines) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range [...]*prometheus.Desc{e.calls, e.errs, e.timeouts, e.slow, e.skipped, e.canceled, e.state, e.keys, e.evictions} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (e *engines) Collect(ch chan<- prometheus.Metric) {
	e.mu.Lock()
	guards, mems := slices.Clone(e.guards), slices.Clone(e.mems)
	e.mu.Unlock()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, w := range guards {
		st := w.v.Stats()
		counter(e.calls, st.Calls, w.engine)
		counter(e.errs, st.Failures.Decide, w.engine, string(failover.OpDecide))
		counter(e.errs, st.Failures.Refund, w.engine, string(failover.OpRefund))
		counter(e.errs, st.Failures.Reset, w.engine, string(failover.OpReset))
		counter(e.timeouts, st.Timeouts, w.engine)
		counter(e.slow, st.Slow, w.engine)
		counter(e.skipped, st.Skipped, w.engine)
		counter(e.canceled, st.Canceled, w.engine)
		ch <- prometheus.MustNewConstMetric(e.state, prometheus.GaugeValue, float64(st.State), w.engine)
	}
	for _, w := range mems {
		ch <- prometheus.MustNewConstMetric(e.keys, prometheus.GaugeValue, float64(w.v.Len()), w.engine)
		counter(e.evictions, w.v.Evictions(), w.engine)
	}
}

// isNil reports whether v is nil or a nil pointer in an interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
