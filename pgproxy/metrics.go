package pgproxy

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are plain atomic counters on the hot path; Collect turns them
// into Prometheus samples when scraped.

type decision uint8

const (
	decisionAllowed decision = iota
	decisionDenied
	decisionError
	numDecisions
)

var decisionNames = [numDecisions]string{"allowed", "denied", "error"}

type unchargedReason uint8

const (
	reasonTransaction unchargedReason = iota // inside a transaction block
	reasonEmpty                              // an empty query (a pool's ping)
	reasonReplication                        // a replication connection under ReplicationExempt
	numReasons
)

var reasonNames = [numReasons]string{"transaction", "empty", "replication"}

type waitOutcome uint8

const (
	waitPassed waitOutcome = iota
	waitRejected
	waitCanceled
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"passed", "rejected", "canceled"}

type cancelResult uint8

const (
	cancelForwarded cancelResult = iota
	cancelUnknown
	cancelFailed
	numCancelResults
)

var cancelNames = [numCancelResults]string{"forwarded", "unknown_key", "failed"}

type metrics struct {
	queries        [numScopes][numDecisions]atomic.Uint64
	uncharged      [numReasons]atomic.Uint64
	waits          [numScopes][numOutcomes]atomic.Uint64
	waitNanos      atomic.Uint64
	waiting        atomic.Int64
	connDenied     [numScopes]atomic.Uint64
	clientConns    atomic.Int64
	upstreamErrors atomic.Uint64
	malformed      atomic.Uint64
	cancels        [numCancelResults]atomic.Uint64
	toServer       atomic.Uint64
	toClient       atomic.Uint64
	slotRefused    atomic.Uint64

	dSlotRefused, dQueries, dUncharged, dWaits, dWaitSeconds, dWaiting, dConnDenied, dConns, dUpErrors, dMalformed, dCancels, dBytes *prometheus.Desc
}

func (m *metrics) init() {
	m.dQueries = prometheus.NewDesc("floodgate_pg_queries_total",
		"Queries decided under each scope: allowed (every scope passed it), denied (this scope refused it), error (this scope could not decide, and the query was refused).",
		[]string{"scope", "decision"}, nil)
	m.dUncharged = prometheus.NewDesc("floodgate_pg_queries_uncharged_total",
		"Queries passed without a charge, by reason: inside a transaction block, empty (a pool's ping), replication.",
		[]string{"reason"}, nil)
	m.dWaits = prometheus.NewDesc("floodgate_pg_query_waits_total",
		"Queries that waited under a scope's max_wait, by how the wait ended.",
		[]string{"scope", "outcome"}, nil)
	m.dWaitSeconds = prometheus.NewDesc("floodgate_pg_query_wait_seconds_total",
		"Time queries spent waiting under max_wait.", nil, nil)
	m.dWaiting = prometheus.NewDesc("floodgate_pg_queries_waiting",
		"Queries waiting under max_wait now.", nil, nil)
	m.dConnDenied = prometheus.NewDesc("floodgate_pg_connections_denied_total",
		"New connections refused by a connection rate limit (or its failure), by scope.",
		[]string{"scope"}, nil)
	m.dConns = prometheus.NewDesc("floodgate_pg_client_connections",
		"Client connections open now.", nil, nil)
	m.dUpErrors = prometheus.NewDesc("floodgate_pg_upstream_connect_errors_total",
		"Failures to connect to the upstream server (TLS included).", nil, nil)
	m.dMalformed = prometheus.NewDesc("floodgate_pg_malformed_total",
		"Client connections closed for breaking the protocol (malformed or oversized messages).", nil, nil)
	m.dCancels = prometheus.NewDesc("floodgate_pg_cancel_requests_total",
		"CancelRequests received, by result.", []string{"result"}, nil)
	m.dSlotRefused = prometheus.NewDesc("floodgate_pg_concurrent_queries_refused_total",
		"Queries refused because their user had ConcurrentQueries in flight (after any wait).", nil, nil)
	m.dBytes = prometheus.NewDesc("floodgate_pg_bytes_total",
		"Bytes relayed, by direction.", []string{"direction"}, nil)
}

// Describe implements prometheus.Collector: register the Proxy with the
// caller's registry to export its metrics.
func (p *Proxy) Describe(ch chan<- *prometheus.Desc) {
	m := &p.metrics
	for _, d := range []*prometheus.Desc{m.dQueries, m.dUncharged, m.dWaits, m.dWaitSeconds, m.dWaiting, m.dConnDenied, m.dConns, m.dUpErrors, m.dMalformed, m.dCancels, m.dBytes, m.dSlotRefused} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (p *Proxy) Collect(ch chan<- prometheus.Metric) {
	m := &p.metrics
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for s := range numScopes {
		for d := range numDecisions {
			counter(m.dQueries, m.queries[s][d].Load(), s.String(), decisionNames[d])
		}
		for o := range numOutcomes {
			counter(m.dWaits, m.waits[s][o].Load(), s.String(), outcomeNames[o])
		}
		if s != scopeGlobal {
			counter(m.dConnDenied, m.connDenied[s].Load(), s.String())
		}
	}
	for r := range numReasons {
		counter(m.dUncharged, m.uncharged[r].Load(), reasonNames[r])
	}
	ch <- prometheus.MustNewConstMetric(m.dWaitSeconds, prometheus.CounterValue, time.Duration(m.waitNanos.Load()).Seconds())
	ch <- prometheus.MustNewConstMetric(m.dWaiting, prometheus.GaugeValue, float64(m.waiting.Load()))
	ch <- prometheus.MustNewConstMetric(m.dConns, prometheus.GaugeValue, float64(m.clientConns.Load()))
	counter(m.dUpErrors, m.upstreamErrors.Load())
	counter(m.dMalformed, m.malformed.Load())
	counter(m.dSlotRefused, m.slotRefused.Load())
	for r := range numCancelResults {
		counter(m.dCancels, m.cancels[r].Load(), cancelNames[r])
	}
	counter(m.dBytes, m.toServer.Load(), "client_to_server")
	counter(m.dBytes, m.toClient.Load(), "server_to_client")
}

var _ prometheus.Collector = (*Proxy)(nil)
