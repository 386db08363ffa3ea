package status

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
)

// The tags a Recorder counts decisions under, by the Source that decided.
const (
	tagOther = iota
	tagMemory
	tagRedis
	tagHybridLocal
	tagHybridGlobal
	tagFailOpen
	tagFailClosed
	tagLocalFallback
	tagPenalty
)

// tagNames are the sources of the tags, as Results spell them.
var tagNames = [maxTags]string{
	tagOther: "other", tagMemory: "memory", tagRedis: "redis",
	tagHybridLocal: "hybrid:local", tagHybridGlobal: "hybrid:global",
	tagFailOpen: string(floodgate.SourceFailOpen), tagFailClosed: string(floodgate.SourceFailClosed),
	tagLocalFallback: string(floodgate.SourceLocalFallback), tagPenalty: string(floodgate.SourcePenalty),
}

func tagOf(src floodgate.Source) int {
	switch src {
	case "memory":
		return tagMemory
	case "redis":
		return tagRedis
	case "hybrid:local":
		return tagHybridLocal
	case "hybrid:global":
		return tagHybridGlobal
	case floodgate.SourceFailOpen:
		return tagFailOpen
	case floodgate.SourceFailClosed:
		return tagFailClosed
	case floodgate.SourceLocalFallback:
		return tagLocalFallback
	case floodgate.SourcePenalty:
		return tagPenalty
	}
	return tagOther
}

// policy is what a Status records for one policy name: the keys it denied
// (weighted by requests) and the units it let pass (weighted by cost).
type policy struct {
	name      string
	perShard  int                     // the windows' sizes (Options.PerShard)
	buckets   int                     // and Options.Buckets
	mu        sync.Mutex              // makes w
	w         atomic.Pointer[windows] // nil until the policy's first decision
	errors    atomic.Uint64           // decisions that failed: no engine decided, no key counts
	limits    []string                // the policy's default limits, for the page
	overrides []Override              // the keys with limits of their own, for the page
	hot       atomic.Pointer[hotKeys] // the top limited keys, whose decisions are kept
}

// windows are a policy's record of keys. A policy gets them on its first
// decision, not when it is built: a file of many policies (an Envoy file
// of thousands of descriptors) costs the memory of those that see traffic.
type windows struct {
	limited  Window // denied decisions, one per request
	consumed Window // allowed decisions, weighted by cost
}

// windows returns p's windows, made on the first call.
func (p *policy) windows() *windows {
	if w := p.w.Load(); w != nil {
		return w
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := p.w.Load(); w != nil {
		return w
	}
	w := new(windows)
	w.limited.size(p.perShard, p.buckets)
	w.consumed.size(p.perShard, p.buckets)
	p.w.Store(w)
	return w
}

// record counts one decision. It takes the two fields it needs, not the
// Result: copying a Result is a measurable part of a decision's cost.
func (p *policy) record(key string, cost int64, allowed bool, src floodgate.Source, err error) {
	switch {
	case cost == 0:
		// A peek (key inspection among them) decides nothing.
	case err != nil:
		p.windows() // the chart shows the policy's errors from now on
		p.errors.Add(1)
	case allowed:
		p.windows().consumed.Add(key, uint64(cost), tagOf(src))
	default:
		p.windows().limited.Add(key, 1, tagOf(src))
	}
}

// limiter is the wrapper Status.Limiter returns.
type limiter struct {
	floodgate.Limiter
	p     *policy
	route string
}

// WithRoute returns l recording its decisions as asked by the named route
// (Record.Route), into the same record, when l is a limiter that
// Status.Limiter returned; any other l as it is.
func WithRoute(l floodgate.Limiter, route string) floodgate.Limiter {
	if w, ok := l.(*limiter); ok {
		return &limiter{Limiter: w.Limiter, p: w.p, route: route}
	}
	return l
}

// Unwrap returns the wrapped Limiter.
func (l *limiter) Unwrap() floodgate.Limiter { return l.Limiter }

// AllowN calls the wrapped AllowN and records its decision.
func (l *limiter) AllowN(ctx context.Context, key string, cost int64) (floodgate.Result, error) {
	res, err := l.Limiter.AllowN(ctx, key, cost)
	l.p.record(key, cost, res.Allowed, res.Source, err)
	if err == nil && cost != 0 {
		l.p.remember(key, l.route, cost, &res)
	}
	return res, err
}

// ReserveN calls the wrapped ReserveN and records its answer: taken units
// count as admitted, whatever their wait.
func (l *limiter) ReserveN(ctx context.Context, key string, cost int64) (*floodgate.Reservation, error) {
	r, err := l.Limiter.ReserveN(ctx, key, cost)
	var res floodgate.Result
	if r != nil {
		res = r.Result
	}
	l.p.record(key, cost, res.Allowed, res.Source, err)
	return r, err
}
