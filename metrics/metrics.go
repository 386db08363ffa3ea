// Package metrics exports floodgate's decisions and engine health as
// Prometheus metrics, for library users and the daemon alike.
//
// A library user adds one line per limiter:
//
//	m, err := metrics.New(registry, metrics.Options{})
//	lim = m.Limiter(lim) // decisions, latency, sources
//
// and, for the engines behind it, one call each:
//
//	fs, err := failover.New(redis, failover.Options{Mode: failover.FailOpen,
//		Guard: m.GuardOptions("redis", failover.GuardOptions{})})
//	err = m.WatchGuard("redis", fs.Guard()) // errors, timeouts, breaker
//	err = m.WatchMemory("memory", mem)      // live keys, evictions
//
// Decisions are counted on the request path with label children resolved
// once per policy, so a decision costs two clock reads, one histogram
// observation and one counter increment, and allocates nothing. Engine
// counters are read from the engines when Prometheus scrapes, so they cost
// the request path nothing at all.
//
// No metric is labelled by key: keys are unbounded and often personal data.
// Policy names come from configuration, but a limiter picked per request
// could make them unbounded too, so at most Options.MaxPolicies names become
// label values; further ones are counted under OtherPolicy.
//
// docs/metrics.md lists every metric, its labels and what to alert on.
package metrics

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric name.
const Namespace = "floodgate"

// DefaultMaxPolicies is the bound on distinct policy label values that
// Options.MaxPolicies' zero value gives. It is far above any configuration
// written by hand and far below what makes a Prometheus server struggle.
const DefaultMaxPolicies = 1000

// OtherPolicy is the policy label of the decisions of every policy named
// after Options.MaxPolicies distinct names were seen.
const OtherPolicy = "other"

// maxSources bounds the source label values per policy. Sources are
// constants of the engines (memory, redis, hybrid:*, fail-*), a handful per
// policy; the bound only guards against an engine that builds them from
// request data.
const maxSources = 16

// otherSource is the source label of sources beyond maxSources.
const otherSource = "other"

// noSource is the source label of a Result without a Source: the Result of
// an error, where no engine decided.
const noSource = "none"

// DefaultBuckets returns the upper bounds, in seconds, of the decision
// latency histogram: 10 µs to 1 s in 1-2.5-5 steps. An in-memory decision
// lands in the first bucket, a Redis round trip between 100 µs and a few
// milliseconds, a failover timeout (100 ms by default) near the top. Whole
// milliseconds would put every fast decision at 0. It is a function so that
// no caller can change the defaults of every other.
func DefaultBuckets() []float64 {
	return []float64{
		10e-6, 25e-6, 50e-6,
		100e-6, 250e-6, 500e-6,
		1e-3, 2.5e-3, 5e-3,
		10e-3, 25e-3, 50e-3,
		100e-3, 250e-3, 500e-3,
		1,
	}
}

// Options configures Metrics. The zero value is a good default.
type Options struct {
	// ConstLabels are added to every metric, e.g. an instance or listener
	// name when several Metrics share one registry.
	ConstLabels prometheus.Labels

	// MaxPolicies bounds the distinct values of the policy label. 0 means
	// DefaultMaxPolicies; a negative value is an error.
	MaxPolicies int

	// Buckets are the latency histogram's upper bounds in seconds, in
	// increasing order. Nil means DefaultBuckets().
	Buckets []float64
}

// Metrics holds floodgate's metrics on one registry. It is a
// prometheus.Collector, registered by New. It is safe for concurrent use.
type Metrics struct {
	decisions   *prometheus.CounterVec
	peeks       *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	transitions *prometheus.CounterVec
	engines     *engines

	maxPolicies int
	mu          sync.Mutex
	policies    map[string]*policyMetrics // by policy label
}

var _ prometheus.Collector = (*Metrics)(nil)

// New returns Metrics registered on reg. Pass a registry of your own
// (prometheus.NewRegistry()) or, to serve them with everything else the
// process exports, prometheus.DefaultRegisterer; New never falls back to the
// global one by itself.
func New(reg prometheus.Registerer, o Options) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: no registerer given; pass prometheus.NewRegistry() or prometheus.DefaultRegisterer")
	}
	if o.MaxPolicies < 0 {
		return nil, fmt.Errorf("metrics: MaxPolicies %d is negative; use 0 for the default of %d", o.MaxPolicies, DefaultMaxPolicies)
	}
	buckets := o.Buckets
	if buckets == nil {
		buckets = DefaultBuckets()
	}
	if len(buckets) == 0 {
		return nil, errors.New("metrics: Buckets is empty; use nil for DefaultBuckets()")
	}
	for i := 1; i < len(buckets); i++ {
		if !(buckets[i] > buckets[i-1]) {
			return nil, fmt.Errorf("metrics: Buckets must increase; bucket %d (%g) is not above bucket %d (%g)", i+1, buckets[i], i, buckets[i-1])
		}
	}
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "decisions_total", ConstLabels: o.ConstLabels,
			Help: "Decisions that charged units (cost > 0), by policy, decision (allowed, denied, error) and the source that decided.",
		}, []string{"policy", "decision", "source"}),
		peeks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "peeks_total", ConstLabels: o.ConstLabels,
			Help: "Decisions with cost 0, which charge nothing, by policy, decision and source.",
		}, []string{"policy", "decision", "source"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "decision_duration_seconds", ConstLabels: o.ConstLabels,
			Help:    "Time a caller waited for a decision (peeks and errors included), by policy.",
			Buckets: buckets,
		}, []string{"policy"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "breaker_transitions_total", ConstLabels: o.ConstLabels,
			Help: "Transitions of an engine's circuit breaker, by engine and the states it went from and to (closed, open, half_open).",
		}, []string{"engine", "from", "to"}),
		engines:     newEngines(o.ConstLabels),
		maxPolicies: o.MaxPolicies,
		policies:    make(map[string]*policyMetrics),
	}
	if m.maxPolicies == 0 {
		m.maxPolicies = DefaultMaxPolicies
	}
	if err := reg.Register(m); err != nil {
		return nil, fmt.Errorf("metrics: register: %w; give each Metrics a registry of its own or ConstLabels that tell them apart", err)
	}
	return m, nil
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.decisions.Describe(ch)
	m.peeks.Describe(ch)
	m.latency.Describe(ch)
	m.transitions.Describe(ch)
	m.engines.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.decisions.Collect(ch)
	m.peeks.Collect(ch)
	m.latency.Collect(ch)
	m.transitions.Collect(ch)
	m.engines.Collect(ch)
}

// policy returns the metrics of the policy named name, creating them on
// first use; past maxPolicies names it returns OtherPolicy's.
func (m *Metrics) policy(name string) *policyMetrics {
	label := labelValue(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if pm, ok := m.policies[label]; ok {
		return pm
	}
	if len(m.policies) >= m.maxPolicies {
		// The map then holds maxPolicies names plus "other", whatever
		// happens later: names past the bound are not remembered.
		label = OtherPolicy
		if pm, ok := m.policies[label]; ok {
			return pm
		}
	}
	pm := &policyMetrics{m: m, label: label, latency: m.latency.WithLabelValues(label)}
	pm.sources.Store(&[]*sourceCounters{})
	m.policies[label] = pm
	return pm
}

// labelValue returns s as Prometheus accepts it: client_golang panics on a
// label value that is not UTF-8, and a policy or engine name is not
// checked for that anywhere else.
func labelValue(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// Retain drops the series of every policy not named in keep. A daemon
// calls it after a reload, so that policies renamed or removed over weeks
// of reloads neither stay exported nor keep their memory. A limiter of a
// dropped policy keeps working; what it decides afterwards is no longer
// exported.
func (m *Metrics) Retain(keep []string) {
	set := make(map[string]bool, len(keep)+1)
	set[OtherPolicy] = true
	for _, k := range keep {
		set[labelValue(k)] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for label := range m.policies {
		if set[label] {
			continue
		}
		delete(m.policies, label)
		m.decisions.DeletePartialMatch(prometheus.Labels{"policy": label})
		m.peeks.DeletePartialMatch(prometheus.Labels{"policy": label})
		m.latency.DeleteLabelValues(label)
	}
}
