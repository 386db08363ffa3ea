package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate/failover"
	"github.com/floodgate-go/floodgate/outbound"
)

// DefaultMaxUpstreams is the bound on distinct upstream label values that
// OutboundOptions.MaxUpstreams' zero value gives: a program calls a
// handful of APIs, and an Upstream function that names one per request
// must not make the series unbounded.
const DefaultMaxUpstreams = 100

// OtherUpstream is the upstream label of everything an outbound.Transport
// did for upstreams named after MaxUpstreams distinct ones were seen.
const OtherUpstream = "other"

// DefaultWaitBuckets returns the upper bounds, in seconds, of the
// outbound wait histogram: 1 ms to 10 min. A budget wait is a fraction of
// a unit's interval, a pause a Retry-After of seconds to minutes.
func DefaultWaitBuckets() []float64 {
	return []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600}
}

// OutboundOptions configures NewOutbound. The zero value is a good
// default.
type OutboundOptions struct {
	// ConstLabels are added to every metric.
	ConstLabels prometheus.Labels

	// MaxUpstreams bounds the distinct values of the upstream label. 0
	// means DefaultMaxUpstreams; a negative value is an error.
	MaxUpstreams int

	// Buckets are the wait histogram's upper bounds in seconds, in
	// increasing order. Nil means DefaultWaitBuckets().
	Buckets []float64
}

// Outbound exports what outbound.Transports do, as their Observer:
//
//   - floodgate_outbound_wait_seconds{upstream,cause}: waits before a
//     request was sent, for budget, a pause or a retry's back-off;
//   - floodgate_outbound_pauses_total{upstream,code}: pauses an answer set
//     (code 429, 503, or the 2xx that said nothing was left);
//   - floodgate_outbound_retries_total{upstream,code}: refused requests sent
//     again;
//   - floodgate_outbound_breaker_state{upstream}: 0 closed, 1 open, 2
//     half-open, as the last transition left it;
//   - floodgate_outbound_breaker_transitions_total{upstream,from,to}.
//
// One Outbound can observe several Transports. It is a
// prometheus.Collector, registered by NewOutbound, and safe for concurrent
// use.
type Outbound struct {
	waits       *prometheus.HistogramVec
	pauses      *prometheus.CounterVec
	retries     *prometheus.CounterVec
	state       *prometheus.GaugeVec
	transitions *prometheus.CounterVec

	max       int
	mu        sync.Mutex
	upstreams map[string]bool
}

var (
	_ outbound.Observer    = (*Outbound)(nil)
	_ prometheus.Collector = (*Outbound)(nil)
)

// NewOutbound returns an Outbound registered on reg. Give it to
// outbound.Options.Observer.
func NewOutbound(reg prometheus.Registerer, o OutboundOptions) (*Outbound, error) {
	if reg == nil {
		return nil, errors.New("metrics: no registerer given; pass prometheus.NewRegistry() or prometheus.DefaultRegisterer")
	}
	if o.MaxUpstreams < 0 {
		return nil, fmt.Errorf("metrics: MaxUpstreams %d is negative; use 0 for the default of %d", o.MaxUpstreams, DefaultMaxUpstreams)
	}
	buckets := o.Buckets
	if buckets == nil {
		buckets = DefaultWaitBuckets()
	}
	if len(buckets) == 0 {
		return nil, errors.New("metrics: Buckets is empty; use nil for DefaultWaitBuckets()")
	}
	for i := 1; i < len(buckets); i++ {
		if !(buckets[i] > buckets[i-1]) {
			return nil, fmt.Errorf("metrics: Buckets must increase; bucket %d (%g) is not above bucket %d (%g)", i+1, buckets[i], i, buckets[i-1])
		}
	}
	m := &Outbound{
		waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "outbound_wait_seconds", ConstLabels: o.ConstLabels,
			Help:    "Time an outbound request waited before it was sent, by upstream and cause (budget, pause, backoff).",
			Buckets: buckets,
		}, []string{"upstream", "cause"}),
		pauses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "outbound_pauses_total", ConstLabels: o.ConstLabels,
			Help: "Pauses of an upstream set by its answers, by upstream and the answer's status code.",
		}, []string{"upstream", "code"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "outbound_retries_total", ConstLabels: o.ConstLabels,
			Help: "Refused outbound requests sent again, by upstream and the refusal's status code.",
		}, []string{"upstream", "code"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "outbound_breaker_state", ConstLabels: o.ConstLabels,
			Help: "State of an upstream's circuit breaker: 0 closed, 1 open, 2 half-open.",
		}, []string{"upstream"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "outbound_breaker_transitions_total", ConstLabels: o.ConstLabels,
			Help: "Transitions of an upstream's circuit breaker, by upstream and the states it went from and to.",
		}, []string{"upstream", "from", "to"}),
		max:       o.MaxUpstreams,
		upstreams: make(map[string]bool),
	}
	if m.max == 0 {
		m.max = DefaultMaxUpstreams
	}
	if err := reg.Register(m); err != nil {
		return nil, fmt.Errorf("metrics: register: %w; give each Outbound a registry of its own or ConstLabels that tell them apart", err)
	}
	return m, nil
}

// Describe implements prometheus.Collector.
func (m *Outbound) Describe(ch chan<- *prometheus.Desc) {
	m.waits.Describe(ch)
	m.pauses.Describe(ch)
	m.retries.Describe(ch)
	m.state.Describe(ch)
	m.transitions.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Outbound) Collect(ch chan<- prometheus.Metric) {
	m.waits.Collect(ch)
	m.pauses.Collect(ch)
	m.retries.Collect(ch)
	m.state.Collect(ch)
	m.transitions.Collect(ch)
}

// upstream returns the label of upstream: itself, or OtherUpstream past
// the bound.
func (m *Outbound) upstream(name string) string {
	label := labelValue(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.upstreams[label] {
		return label
	}
	if len(m.upstreams) >= m.max {
		return OtherUpstream
	}
	m.upstreams[label] = true
	return label
}

// Waited implements outbound.Observer.
func (m *Outbound) Waited(upstream string, cause outbound.WaitCause, d time.Duration) {
	m.waits.WithLabelValues(m.upstream(upstream), string(cause)).Observe(d.Seconds())
}

// Paused implements outbound.Observer.
func (m *Outbound) Paused(upstream string, code int, _ time.Duration) {
	m.pauses.WithLabelValues(m.upstream(upstream), codeLabel(code)).Inc()
}

// Retried implements outbound.Observer.
func (m *Outbound) Retried(upstream string, code int) {
	m.retries.WithLabelValues(m.upstream(upstream), codeLabel(code)).Inc()
}

// BreakerChanged implements outbound.Observer.
func (m *Outbound) BreakerChanged(upstream string, from, to failover.BreakerState) {
	label := m.upstream(upstream)
	m.transitions.WithLabelValues(label, from.String(), to.String()).Inc()
	m.state.WithLabelValues(label).Set(float64(to))
}

// codeLabel is a status code as a label; anything outside 100-599 is one
// value, so a broken server cannot grow the series.
func codeLabel(code int) string {
	if code < 100 || code > 599 {
		return "invalid"
	}
	return strconv.Itoa(code)
}
