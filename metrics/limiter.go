package metrics

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate"
)

// Limiter returns l with its decisions counted: floodgate_decisions_total
// (or floodgate_peeks_total for a cost of 0) and
// floodgate_decision_duration_seconds, labelled by l.Name(). The wrapper
// embeds l, so it has every method of floodgate.Limiter and returns l's
// Results and errors unchanged: headers, duplicate-name checks and
// Result.Set work through it as they do on l. RefundN and Reset pass
// through uncounted; they decide nothing, and their engine failures show in
// floodgate_engine_errors_total.
//
// The label children are resolved here, once, so wrap at construction time,
// not per request. Limiters of one policy name share their series. A nil l
// gives nil; an l that these Metrics already wrap is returned as it is, so
// nothing is counted twice. The wrapper's Unwrap method returns l.
func (m *Metrics) Limiter(l floodgate.Limiter) floodgate.Limiter {
	if l == nil {
		return nil
	}
	if w, ok := l.(*limiter); ok && w.pm.m == m {
		return w
	}
	return &limiter{Limiter: l, pm: m.policy(l.Name())}
}

// limiter is the wrapper Metrics.Limiter returns.
type limiter struct {
	floodgate.Limiter
	pm *policyMetrics
}

// Unwrap returns the wrapped Limiter.
func (l *limiter) Unwrap() floodgate.Limiter { return l.Limiter }

// AllowN calls the wrapped AllowN and counts its answer.
func (l *limiter) AllowN(ctx context.Context, key string, cost int64) (floodgate.Result, error) {
	start := monotonic()
	res, err := l.Limiter.AllowN(ctx, key, cost)
	l.pm.observe(start, res, err, cost == 0)
	return res, err
}

// ReserveN calls the wrapped ReserveN and counts its answer as a decision:
// allowed when the units were taken, whatever their wait.
func (l *limiter) ReserveN(ctx context.Context, key string, cost int64) (*floodgate.Reservation, error) {
	start := monotonic()
	r, err := l.Limiter.ReserveN(ctx, key, cost)
	var res floodgate.Result
	if r != nil {
		res = r.Result
	}
	l.pm.observe(start, res, err, cost == 0)
	return r, err
}

// policyMetrics are one policy label's resolved children.
type policyMetrics struct {
	m       *Metrics
	label   string
	latency prometheus.Observer

	// sources is copied on write: the request path loads it and scans a
	// few entries; a new source (a handful per policy, ever) takes mu.
	sources atomic.Pointer[[]*sourceCounters]
	mu      sync.Mutex
}

// Indexes of sourceCounters.c.
const (
	kindDecision = 0
	kindPeek     = 1

	decAllowed = 0
	decDenied  = 1
	decError   = 2
)

var decisionNames = [...]string{decAllowed: "allowed", decDenied: "denied", decError: "error"}

// decisionOf is the decision label's index for a limiter's answer.
func decisionOf(res floodgate.Result, err error) int {
	switch {
	case err != nil:
		return decError
	case res.Allowed:
		return decAllowed
	}
	return decDenied
}

// Outcome names a limiter's answer as the decision label does: allowed,
// denied, or error when err is not nil (a ReserveN's is allowed when the
// units were taken, whatever their wait). The daemon's spans use it too.
func Outcome(res floodgate.Result, err error) string { return decisionNames[decisionOf(res, err)] }

// sourceCounters are the counters of one (policy, source) pair.
type sourceCounters struct {
	source string // Result.Source as the engine spelt it
	c      [2][3]prometheus.Counter
}

// epoch anchors monotonic.
var epoch = time.Now()

// monotonic reads the monotonic clock only: time.Now reads the wall clock
// as well, a second clock read per call that a duration does not need.
func monotonic() time.Duration { return time.Since(epoch) }

func (pm *policyMetrics) observe(start time.Duration, res floodgate.Result, err error, peek bool) {
	pm.latency.Observe((monotonic() - start).Seconds())
	kind := kindDecision
	if peek {
		kind = kindPeek
	}
	dec := decisionOf(res, err)
	src := string(res.Source)
	for _, sc := range *pm.sources.Load() {
		if sc.source == src {
			sc.c[kind][dec].Inc()
			return
		}
	}
	pm.add(src).c[kind][dec].Inc()
}

// add returns the counters of source src, creating them: past maxSources
// sources, the counters of otherSource.
func (pm *policyMetrics) add(src string) *sourceCounters {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	cur := *pm.sources.Load()
	for _, sc := range cur {
		if sc.source == src {
			return sc
		}
	}
	label := labelValue(src)
	switch {
	case len(cur) >= maxSources:
		label = otherSource
	case src == "":
		label = noSource
	}
	sc := &sourceCounters{source: src}
	for kind, vec := range [...]*prometheus.CounterVec{kindDecision: pm.m.decisions, kindPeek: pm.m.peeks} {
		for dec, name := range decisionNames {
			sc.c[kind][dec] = vec.WithLabelValues(pm.label, name, label)
		}
	}
	if len(cur) >= maxSources {
		// Do not remember src: the list would grow with every new source.
		// Such sources take this slow path on every decision, which is
		// the price of an engine that makes up sources as it goes.
		return sc
	}
	next := append(append(make([]*sourceCounters, 0, len(cur)+1), cur...), sc)
	pm.sources.Store(&next)
	return sc
}
