// Package status shows what floodgate is doing: which keys are being
// limited now, how many decisions each policy makes, how healthy the engine
// is and which configuration is in service. It records decisions through a
// Limiter wrapper, keeps the heaviest keys in bounded memory (Window), and
// serves a status page, its JSON (/v1/status) and key inspection and reset
// (/v1/keys) for the daemon's admin listener.
//
// docs/operating.md explains the page and how to use it in an incident.
package status

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Defaults of Options.
const (
	DefaultPerShard = 8
	DefaultBuckets  = 7
	DefaultSpan     = 10 * time.Second
	DefaultHistory  = 300
	DefaultStep     = time.Second
	DefaultTop      = 10
)

// Options configures a Status. The zero value is a good default: a window
// of the last minute (7 buckets of 10 s: 60 to 70 s), 8 counters per shard
// and bucket (so a key's overestimate is at most a 128th of its policy's
// traffic), and a chart of the last 5 minutes in 1 s steps.
type Options struct {
	PerShard int           // counters per shard and bucket; 0: DefaultPerShard
	Buckets  int           // time buckets of the window; 0: DefaultBuckets
	Span     time.Duration // time one bucket covers; 0: DefaultSpan
	History  int           // chart points kept; 0: DefaultHistory
	Step     time.Duration // time one chart point covers; 0: DefaultStep
	Top      int           // keys listed per policy; 0: DefaultTop

	// RawKeys shows keys as they are; otherwise floodgate.RedactKey's
	// stand-ins (the same in the daemon's logs).
	RawKeys bool

	// Engine describes the engine's health for the page; nil leaves the
	// panel out.
	Engine func() *Engine

	// RuntimeOverrides returns the overrides set at runtime and in force,
	// by policy; nil shows none.
	RuntimeOverrides func() map[string][]RuntimeOverride
}

// A Status records the decisions of the limiters it wraps and describes
// them. It is safe for concurrent use.
type Status struct {
	o Options

	mu       sync.Mutex
	policies map[string]*policyState
	config   Config
	ticks    int // Ticks since the window last rotated, in Steps
}

// policyState is a policy's recorder and what Tick derived from it.
type policyState struct {
	*policy
	last   sample
	points []Point // oldest first, at most o.History
}

// sample is what a policy had decided in all, at one Tick.
type sample struct {
	allowed, denied, errors, units uint64
	tags                           [maxTags]uint64
}

// New returns a Status. Call Tick every Options.Step (Run does).
func New(o Options) *Status {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.PerShard, DefaultPerShard)
	def(&o.Buckets, DefaultBuckets)
	def(&o.History, DefaultHistory)
	def(&o.Top, DefaultTop)
	if o.Span <= 0 {
		o.Span = DefaultSpan
	}
	if o.Step <= 0 {
		o.Step = DefaultStep
	}
	return &Status{o: o, policies: map[string]*policyState{}}
}

// Limiter returns l with its decisions recorded under l.Name(). Wrap at
// construction, not per request. Limiters of one name share their record,
// so a policy rebuilt by a reload keeps its top keys. The wrapper embeds l,
// so it keeps every method of floodgate.Limiter and returns l's answers
// unchanged; peeks (cost 0), RefundN and Reset are not recorded. Its Unwrap
// method returns l.
func (s *Status) Limiter(l floodgate.Limiter) floodgate.Limiter {
	if l == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := s.policies[l.Name()]
	if ps == nil {
		ps = &policyState{policy: &policy{name: l.Name(), perShard: s.o.PerShard, buckets: s.o.Buckets}}
		s.policies[l.Name()] = ps
	}
	ps.limits, ps.overrides = describeLimits(l)
	return &limiter{Limiter: l, p: ps.policy}
}

// describeLimits names l's default limits and those of its overrides, when
// a limiter in its chain of wrappers can tell them (floodgate.Describer).
func describeLimits(l floodgate.Limiter) (limits []string, overrides []Override) {
	names := func(set *floodgate.LimitSet) []string {
		out := make([]string, set.Len())
		for i := range out {
			out[i] = set.Limit(i).String()
		}
		return out
	}
	d, ok := floodgate.As[floodgate.Describer](l)
	if !ok {
		return nil, nil
	}
	limits = names(d.LimitsFor(""))
	for _, k := range d.Overrides() {
		overrides = append(overrides, Override{Key: k, Limits: names(d.LimitsFor(k))})
	}
	return limits, overrides
}

// Retain forgets every policy not named in keep, e.g. after a reload that
// removed some.
func (s *Status) Retain(keep []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.policies {
		if !slices.Contains(keep, name) {
			delete(s.policies, name)
		}
	}
}

// Run calls Tick every Options.Step until ctx ends.
func (s *Status) Run(ctx context.Context) {
	t := time.NewTicker(s.o.Step)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Tick()
		}
	}
}

// Tick adds one chart point per policy (what it decided since the last
// Tick) and, every Span, moves the windows on by one bucket.
func (s *Status) Tick() {
	s.mu.Lock()
	var states []*policyState // those that decided
	defer func() {
		s.mu.Unlock()
		// The heavy hitters whose decisions are kept, outside the lock:
		// Top reads every shard.
		for _, ps := range states {
			ps.refreshHot(ps.w.Load().limited.Top(s.o.Top))
		}
	}()
	s.ticks++
	rotate := time.Duration(s.ticks)*s.o.Step >= s.o.Span
	if rotate {
		s.ticks = 0
	}
	for _, ps := range s.policies {
		w := ps.w.Load()
		if w == nil {
			// No decision yet: no chart, nothing to rotate.
			continue
		}
		states = append(states, ps)
		now := ps.read()
		ps.points = append(ps.points, Point{Allowed: now.allowed - ps.last.allowed, Denied: now.denied - ps.last.denied,
			Errors: now.errors - ps.last.errors})
		if over := len(ps.points) - s.o.History; over > 0 {
			ps.points = slices.Delete(ps.points, 0, over)
		}
		ps.last = now
		if rotate {
			w.limited.Rotate()
			w.consumed.Rotate()
		}
	}
}

func (p *policy) read() sample {
	out := sample{errors: p.errors.Load()}
	w := p.w.Load()
	if w == nil {
		return out
	}
	a, d := w.consumed.Totals(), w.limited.Totals()
	out.allowed, out.denied, out.units = a.Events, d.Events, a.Weight
	for i := range out.tags {
		out.tags[i] = a.Tags[i] + d.Tags[i]
	}
	return out
}

// ConfigLoaded records the configuration now in service.
func (s *Status) ConfigLoaded(file, version string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.config.File, s.config.Version, s.config.LoadedAt = file, version, at
	s.config.LastReload = &Reload{At: at, OK: true}
}

// ReloadFailed records a configuration that was rejected; err names the
// file and line at fault when the loader knew them.
func (s *Status) ReloadFailed(err error, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.config.LastReload = &Reload{At: at, Error: err.Error()}
}

// Snapshot describes the present.
func (s *Status) Snapshot() *Snapshot {
	s.mu.Lock()
	out := &Snapshot{
		Time:          time.Now(),
		WindowSeconds: (time.Duration(s.o.Buckets-1) * s.o.Span).Seconds(),
		StepSeconds:   s.o.Step.Seconds(),
		History:       s.o.History,
		RawKeys:       s.o.RawKeys,
		Config:        s.config,
		Policies:      []PolicyStatus{},
	}
	if out.Config.LastReload != nil {
		r := *out.Config.LastReload
		out.Config.LastReload = &r
	}
	states := make([]*policyState, 0, len(s.policies))
	for _, ps := range s.policies {
		states = append(states, ps)
	}
	recent := int(time.Minute / s.o.Step)
	for _, ps := range states {
		out.Policies = append(out.Policies, ps.describe(recent))
	}
	s.mu.Unlock()
	if s.o.RuntimeOverrides != nil {
		runtime := s.o.RuntimeOverrides()
		for i := range out.Policies {
			p := &out.Policies[i]
			for _, o := range runtime[p.Name] {
				if !s.o.RawKeys && o.Key != "" {
					o.Key = floodgate.RedactKey(o.Key)
				}
				p.RuntimeOverrides = append(p.RuntimeOverrides, o)
			}
		}
	}

	for i, ps := range states {
		p := &out.Policies[i]
		p.TopLimited, p.TopConsuming = []KeyCount{}, []KeyCount{}
		if w := ps.w.Load(); w != nil {
			p.TopLimited = s.keys(w.limited.Top(s.o.Top), ps.policy)
			p.TopConsuming = s.keys(w.consumed.Top(s.o.Top), nil)
		}
	}
	slices.SortFunc(out.Policies, func(a, b PolicyStatus) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	if s.o.Engine != nil {
		out.Engine = s.o.Engine()
	}
	return out
}

// describe is the policy's counts; under s.mu.
func (ps *policyState) describe(recent int) PolicyStatus {
	p := PolicyStatus{Name: ps.name, Limits: ps.limits, Overrides: ps.overrides, Points: append([]Point{}, ps.points...), Sources: map[string]uint64{}}
	now := ps.read()
	p.Total = Point{Allowed: now.allowed, Denied: now.denied, Errors: now.errors}
	// The last minute: the chart's points plus what happened since the
	// last Tick.
	from := max(0, len(ps.points)-recent)
	for _, pt := range ps.points[from:] {
		p.LastMinute.Allowed += pt.Allowed
		p.LastMinute.Denied += pt.Denied
		p.LastMinute.Errors += pt.Errors
	}
	p.LastMinute.Allowed += now.allowed - ps.last.allowed
	p.LastMinute.Denied += now.denied - ps.last.denied
	p.LastMinute.Errors += now.errors - ps.last.errors
	if n := p.LastMinute.Allowed + p.LastMinute.Denied; n > 0 {
		p.DenialRatio = float64(p.LastMinute.Denied) / float64(n)
	}
	for i, n := range now.tags {
		if n > 0 {
			p.Sources[tagNames[i]] = n
		}
	}
	return p
}

// keys describes top, with each key's recent decisions when p is given.
func (s *Status) keys(top []Count, p *policy) []KeyCount {
	out := make([]KeyCount, len(top))
	for i, c := range top {
		k := c.Key
		if !s.o.RawKeys {
			k = floodgate.RedactKey(k)
		}
		out[i] = KeyCount{Key: k, Count: c.Count, Error: c.Error}
		if p != nil {
			out[i].Recent = p.recent(c.Key)
		}
	}
	return out
}
