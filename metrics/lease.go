package metrics

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate/lease"
)

// LeaseOptions configures NewLease. The zero value is a good default.
type LeaseOptions struct {
	// ConstLabels are added to every metric.
	ConstLabels prometheus.Labels
}

// Lease exports what lease.Stores do, as their Observer:
//
//   - floodgate_lease_size_units{policy}: a histogram of the blocks taken
//     from Redis, in units; its _count is the refills;
//   - floodgate_lease_refunded_units_total{policy}: unused units given
//     back to Redis (expiry, demand gone, shutdown);
//   - floodgate_lease_lost_units_total{policy}: unused units that could
//     not go back (their window ended, their bucket refilled by itself,
//     or the refund failed), freed when the window or bucket moves on;
//   - floodgate_lease_failures_total{policy}: refills that failed on Redis;
//   - floodgate_lease_held_units: the units the watched Stores hold now,
//     which the other instances cannot use (Watch).
//
// It is a prometheus.Collector, registered by NewLease, and safe for
// concurrent use. Its methods run on refills and refunds, never on a
// decision answered from a block.
type Lease struct {
	size     *prometheus.HistogramVec
	refunded *prometheus.CounterVec
	lost     *prometheus.CounterVec
	failures *prometheus.CounterVec
	held     prometheus.GaugeFunc

	mu      sync.Mutex
	watched []interface{ Held() int64 }
}

var (
	_ lease.Observer       = (*Lease)(nil)
	_ prometheus.Collector = (*Lease)(nil)
)

// NewLease returns a Lease registered on reg. Give it to
// lease.Options.Observer, and the Store to Watch.
func NewLease(reg prometheus.Registerer, o LeaseOptions) (*Lease, error) {
	if reg == nil {
		return nil, errors.New("metrics: no registerer given; pass prometheus.NewRegistry() or prometheus.DefaultRegisterer")
	}
	m := &Lease{}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: o.ConstLabels}, []string{"policy"})
	}
	m.size = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "lease_size_units", ConstLabels: o.ConstLabels,
		Help:    "Blocks of budget leased from Redis, in units; the count is the refills.",
		Buckets: prometheus.ExponentialBuckets(2, 2, 10),
	}, []string{"policy"})
	m.refunded = counter("lease_refunded_units_total", "Unused leased units given back to Redis (expiry, demand gone, shutdown).")
	m.lost = counter("lease_lost_units_total", "Unused leased units that could not go back: freed when their window or bucket moves on.")
	m.failures = counter("lease_failures_total", "Refills that failed on Redis; the key is decided in Redis until the next try.")
	m.held = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "lease_held_units", ConstLabels: o.ConstLabels,
		Help: "Leased units held now by this process, unavailable to other instances.",
	}, m.heldNow)
	if err := reg.Register(m); err != nil {
		return nil, fmt.Errorf("metrics: register: %w; give each Lease a registry of its own or ConstLabels that tell them apart", err)
	}
	return m, nil
}

// Watch adds s's held units (lease.Store.Held) to
// floodgate_lease_held_units.
func (m *Lease) Watch(s interface{ Held() int64 }) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.watched = append(m.watched, s)
}

func (m *Lease) heldNow() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for _, s := range m.watched {
		n += s.Held()
	}
	return float64(n)
}

// Describe implements prometheus.Collector.
func (m *Lease) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Lease) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

func (m *Lease) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.size, m.refunded, m.lost, m.failures, m.held}
}

// Leased implements lease.Observer.
func (m *Lease) Leased(policy string, units int64) {
	m.size.WithLabelValues(policy).Observe(float64(units))
}

// Refunded implements lease.Observer.
func (m *Lease) Refunded(policy string, units int64) {
	m.refunded.WithLabelValues(policy).Add(float64(units))
}

// Lost implements lease.Observer.
func (m *Lease) Lost(policy string, units int64) {
	m.lost.WithLabelValues(policy).Add(float64(units))
}

// Failed implements lease.Observer.
func (m *Lease) Failed(policy string) { m.failures.WithLabelValues(policy).Inc() }
