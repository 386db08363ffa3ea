package metrics

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate/pgproxy"
)

// PostgresOptions configures NewPostgres. The zero value is a good
// default.
type PostgresOptions struct {
	// ConstLabels are added to every metric.
	ConstLabels prometheus.Labels
}

// Postgres exports what pgproxy.Proxies do, as their Observer:
//
//   - floodgate_pg_queries_total{scope,decision}: queries decided under
//     each scope (global, user, ip): allowed (every scope passed it),
//     denied (this scope refused it), error (this scope could not decide,
//     and the query was refused);
//   - floodgate_pg_queries_uncharged_total{reason}: queries passed without
//     a charge (transaction, empty, replication);
//   - floodgate_pg_query_waits_total{scope,outcome}: waits under a scope's
//     max_wait, by how they ended (passed, rejected, canceled);
//   - floodgate_pg_query_wait_seconds_total and floodgate_pg_queries_waiting;
//   - floodgate_pg_connections_denied_total{scope}: new connections refused
//     by a connection limit (user, ip);
//   - floodgate_pg_client_connections: client connections open now;
//   - floodgate_pg_upstream_connect_errors_total, floodgate_pg_malformed_total,
//     floodgate_pg_concurrent_queries_refused_total;
//   - floodgate_pg_cancel_requests_total{result}: forwarded, unknown_key,
//     failed;
//   - floodgate_pg_bytes_total{direction}: client_to_server,
//     server_to_client.
//
// Every series exists from the start, at zero. The label children are
// resolved when it is made, so observing allocates nothing. One Postgres
// can observe several Proxies (their counts add up). It is a
// prometheus.Collector, registered by NewPostgres, and safe for concurrent
// use.
type Postgres struct {
	collectors []prometheus.Collector

	queries     [3][3]prometheus.Counter // [level][decision]
	uncharged   [3]prometheus.Counter
	waits       [3][3]prometheus.Counter // [level][outcome]
	waitSeconds prometheus.Counter
	waiting     prometheus.Gauge
	connDenied  [3]prometheus.Counter // [level]; global has none
	conns       prometheus.Gauge
	upErrors    prometheus.Counter
	malformed   prometheus.Counter
	slotRefused prometheus.Counter
	cancels     [3]prometheus.Counter
	bytes       [2]prometheus.Counter // [direction]
}

var (
	_ pgproxy.Observer     = (*Postgres)(nil)
	_ prometheus.Collector = (*Postgres)(nil)
)

// NewPostgres returns a Postgres registered on reg. Give it to
// pgproxy.Config.Observer.
func NewPostgres(reg prometheus.Registerer, o PostgresOptions) (*Postgres, error) {
	if reg == nil {
		return nil, errors.New("metrics: no registerer given; pass prometheus.NewRegistry() or prometheus.DefaultRegisterer")
	}
	m := &Postgres{}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: o.ConstLabels}, labels)
		m.collectors = append(m.collectors, v)
		return v
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: o.ConstLabels})
		m.collectors = append(m.collectors, c)
		return c
	}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: o.ConstLabels})
		m.collectors = append(m.collectors, g)
		return g
	}
	levels := []pgproxy.Level{pgproxy.LevelGlobal, pgproxy.LevelUser, pgproxy.LevelIP}

	queries := counterVec("pg_queries_total",
		"Queries decided under each scope: allowed (every scope passed it), denied (this scope refused it), error (this scope could not decide, and the query was refused).",
		"scope", "decision")
	waits := counterVec("pg_query_waits_total",
		"Queries that waited under a scope's max_wait, by how the wait ended.", "scope", "outcome")
	connDenied := counterVec("pg_connections_denied_total",
		"New connections refused by a connection rate limit (or its failure), by scope.", "scope")
	for _, l := range levels {
		for _, d := range []pgproxy.QueryOutcome{pgproxy.Allowed, pgproxy.Denied, pgproxy.Failed} {
			m.queries[l][d] = queries.WithLabelValues(l.String(), d.String())
		}
		for _, w := range []pgproxy.WaitOutcome{pgproxy.WaitPassed, pgproxy.WaitRejected, pgproxy.WaitCanceled} {
			m.waits[l][w] = waits.WithLabelValues(l.String(), w.String())
		}
		if l != pgproxy.LevelGlobal {
			m.connDenied[l] = connDenied.WithLabelValues(l.String())
		}
	}
	uncharged := counterVec("pg_queries_uncharged_total",
		"Queries passed without a charge, by reason: inside a transaction block, empty (a pool's ping), replication.", "reason")
	for _, r := range []pgproxy.UnchargedReason{pgproxy.UnchargedTransaction, pgproxy.UnchargedEmpty, pgproxy.UnchargedReplication} {
		m.uncharged[r] = uncharged.WithLabelValues(r.String())
	}
	m.waitSeconds = counter("pg_query_wait_seconds_total", "Time queries spent waiting under max_wait.")
	m.waiting = gauge("pg_queries_waiting", "Queries waiting under max_wait now.")
	m.conns = gauge("pg_client_connections", "Client connections open now.")
	m.upErrors = counter("pg_upstream_connect_errors_total", "Failures to connect to the upstream server (TLS included).")
	m.malformed = counter("pg_malformed_total", "Client connections closed for breaking the protocol (malformed or oversized messages).")
	cancels := counterVec("pg_cancel_requests_total", "CancelRequests received, by result.", "result")
	for _, r := range []pgproxy.CancelResult{pgproxy.CancelForwarded, pgproxy.CancelUnknownKey, pgproxy.CancelFailed} {
		m.cancels[r] = cancels.WithLabelValues(r.String())
	}
	m.slotRefused = counter("pg_concurrent_queries_refused_total",
		"Queries refused because their user had ConcurrentQueries in flight (after any wait).")
	bytes := counterVec("pg_bytes_total", "Bytes relayed, by direction.", "direction")
	for _, d := range []pgproxy.Direction{pgproxy.ClientToServer, pgproxy.ServerToClient} {
		m.bytes[d] = bytes.WithLabelValues(d.String())
	}
	if err := reg.Register(m); err != nil {
		return nil, fmt.Errorf("metrics: register: %w; give each Postgres a registry of its own or ConstLabels that tell them apart", err)
	}
	return m, nil
}

// Describe implements prometheus.Collector.
func (m *Postgres) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Postgres) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors {
		c.Collect(ch)
	}
}

// QueryChecked implements pgproxy.Observer.
func (m *Postgres) QueryChecked(l pgproxy.Level, d pgproxy.QueryOutcome) {
	if int(l) < len(m.queries) && int(d) < len(m.queries[l]) {
		m.queries[l][d].Inc()
	}
}

// QueryUncharged implements pgproxy.Observer.
func (m *Postgres) QueryUncharged(r pgproxy.UnchargedReason) {
	if int(r) < len(m.uncharged) {
		m.uncharged[r].Inc()
	}
}

// WaitStarted implements pgproxy.Observer.
func (m *Postgres) WaitStarted() { m.waiting.Inc() }

// WaitEnded implements pgproxy.Observer.
func (m *Postgres) WaitEnded(l pgproxy.Level, o pgproxy.WaitOutcome, waited time.Duration) {
	m.waiting.Dec()
	if int(l) < len(m.waits) && int(o) < len(m.waits[l]) {
		m.waits[l][o].Inc()
	}
	if waited > 0 {
		m.waitSeconds.Add(waited.Seconds())
	}
}

// ClientConnected implements pgproxy.Observer.
func (m *Postgres) ClientConnected() { m.conns.Inc() }

// ClientDisconnected implements pgproxy.Observer.
func (m *Postgres) ClientDisconnected() { m.conns.Dec() }

// ConnectionDenied implements pgproxy.Observer.
func (m *Postgres) ConnectionDenied(l pgproxy.Level) {
	if int(l) < len(m.connDenied) && m.connDenied[l] != nil {
		m.connDenied[l].Inc()
	}
}

// UpstreamError implements pgproxy.Observer.
func (m *Postgres) UpstreamError() { m.upErrors.Inc() }

// Malformed implements pgproxy.Observer.
func (m *Postgres) Malformed() { m.malformed.Inc() }

// CancelRequest implements pgproxy.Observer.
func (m *Postgres) CancelRequest(r pgproxy.CancelResult) {
	if int(r) < len(m.cancels) {
		m.cancels[r].Inc()
	}
}

// ConcurrentQueryRefused implements pgproxy.Observer.
func (m *Postgres) ConcurrentQueryRefused() { m.slotRefused.Inc() }

// Relayed implements pgproxy.Observer.
func (m *Postgres) Relayed(d pgproxy.Direction, n int) {
	if int(d) < len(m.bytes) && n > 0 {
		m.bytes[d].Add(float64(n))
	}
}
