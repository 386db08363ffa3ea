package envoyrls

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/envoyrules"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/chargedenied"
	"github.com/floodgate-go/floodgate/internal/deadline"
)

// kind is what a descriptor's rule does with its limit.
type kind uint8

const (
	enforced kind = iota // over the limit refuses the request
	shadowed             // counted, never refuses
	quota                // refuses only with every other quota of the request
)

// A check is one descriptor's limit in one call.
type check struct {
	desc int // the descriptor's index in the request
	rule *envoyrules.Rule
	lim  floodgate.Limiter
	key  string
	cost int64
	kind kind

	res floodgate.Result
	err error
	// charged is set when the engine holds this check's cost (an admitted
	// check, or a denied one under ChargeDenied).
	charged bool
}

// A group is the checks of one request on one bucket (limiter and key),
// in the request's order: they are decided together, one engine call for
// the sum of their costs, so that nine copies of one descriptor are one
// decision (and never exceed what one decision checks).
type group struct {
	checks []*check
	cost   int64
	res    floodgate.Result
	err    error
}

// ShouldRateLimit implements rlsv3.RateLimitServiceServer.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if why := overBounds(req); why != "" {
		return s.refuseOverBounds(ctx, req, why), nil
	}
	if s.byDeadline {
		ctx = deadline.With(ctx, time.Now().Add(s.timeout))
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}

	rs := s.rules.Load()
	m := s.mode.Load()
	if m.Independent && m.ChargeDenied {
		// Counted as envoyproxy/ratelimit counts: an engine that can
		// charge a denied request in the same step (redisstore, without
		// a script) is told so.
		ctx = chargedenied.With(ctx)
	}
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	descs := sc.entries(req.Descriptors)
	var overrides []*envoyrules.Override
	if s.store != nil {
		var err error
		if overrides, err = overridesOf(req.Descriptors); err != nil {
			return nil, err
		}
	}
	matched := rs.rules.MatchOverrides(req.Domain, descs, overrides)
	ans := newAnswer(len(req.Descriptors))
	statuses := ans.resp.Statuses
	reqCost := int64(max(req.GetHitsAddend(), 1))
	checks := sc.checks[:0]
	for i, d := range req.Descriptors {
		statuses[i] = ans.status(i)
		r := matched[i]
		switch {
		case r == nil:
			continue
		case r.Unlimited:
			// As envoyproxy/ratelimit answers an unlimited descriptor.
			statuses[i].LimitRemaining = math.MaxUint32
			continue
		}
		lim := rs.limiter(r)
		if lim == nil && i < len(overrides) && overrides[i] != nil {
			var err error
			if lim, err = s.overrideLimiter(r); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: its limit: %v", i, err)
			}
		}
		if lim == nil {
			continue
		}
		cost := reqCost
		if h := d.GetHitsAddend(); h != nil {
			cost = int64(min(h.GetValue(), math.MaxInt64))
		}
		if d.GetIsNegativeHits() {
			if err := lim.RefundN(ctx, r.Key, cost); err != nil {
				s.errs.Error(ctx, "envoy: refund failed", slog.String("limit", r.Policy), slog.Any("error", err))
			}
			continue
		}
		k := enforced
		switch {
		case r.Shadow:
			k = shadowed
		case r.Quota:
			k = quota
		}
		checks = append(checks, check{desc: i, rule: r, lim: lim, key: r.Key, cost: cost, kind: k})
	}
	sc.checks = checks
	sc.reserve(len(checks))

	if m.Independent {
		all := sc.ptrs[:0]
		for i := range checks {
			all = append(all, &checks[i])
		}
		sc.ptrs = all
		s.each(ctx, m, sc, all)
	} else {
		s.allOrNothing(ctx, m, sc, checks)
	}

	resp := &ans.resp
	over, quotas, quotasOver := false, 0, 0
	drive := -1
	failClosed := false
	for i := range checks {
		c := &checks[i]
		if c.err != nil {
			s.errs.Error(ctx, "envoy: undecided", slog.String("policy", c.lim.Name()), slog.Any("error", c.err))
			return nil, status.Errorf(codes.Unavailable, "rate limiter could not decide: %v", c.err)
		}
		if m.ErrorStatus && c.res.FromFailureMode() {
			return nil, status.Error(codes.Unavailable, "rate limit storage unavailable")
		}
		failClosed = failClosed || (c.res.Source == floodgate.SourceFailClosed && !c.res.Allowed)
		s.fill(ans, c)
		denied := !c.res.Allowed
		switch c.kind {
		case enforced:
			if denied && !over {
				over, drive = true, i
			}
		case quota:
			quotas++
			if denied {
				quotasOver++
			}
		case shadowed:
			if denied {
				s.denied(ctx, c, true)
			}
		}
	}
	quotasRefuse := quotas > 0 && quotas == quotasOver
	if over || quotasRefuse {
		// The limits that refuse the request: enforced, or every quota.
		// Under the global shadow mode each of them is a shadow denial,
		// and the answer is OK; otherwise the first one is the denial.
		for i := range checks {
			c := &checks[i]
			if c.res.Allowed || c.kind == shadowed || c.kind == quota && !quotasRefuse {
				continue
			}
			s.denied(ctx, c, m.ShadowMode)
			if !m.ShadowMode {
				break
			}
		}
		if !m.ShadowMode {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if failClosed {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: "x-ratelimit-source", Value: string(floodgate.SourceFailClosed)})
	}
	if s.headers {
		s.addHeaders(ctx, rs, resp, checks, drive)
	}
	if m.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, matched, statuses)
	}
	return resp, nil
}

// denied reports c's denial: to the denial log, and when shadow (a
// shadow_mode descriptor, or any limit under the global shadow mode: it
// was over but did not refuse) to OnShadow, which the daemon counts in
// floodgate_shadow_denials_total. Every denial a call reports goes
// through here, so the log and the count say the same.
func (s *Service) denied(ctx context.Context, c *check, shadow bool) {
	if shadow && s.onShadow != nil {
		s.onShadow(ruleName(c.rule), c.res)
	}
	s.sample.Denied(ctx, "envoy", c.key, &c.res, shadow)
}

// refuseOverBounds answers a request over MaxDescriptors or MaxEntries:
// OVER_LIMIT, every descriptor OVER_LIMIT, nothing counted.
func (s *Service) refuseOverBounds(ctx context.Context, req *rlsv3.RateLimitRequest, why string) *rlsv3.RateLimitResponse {
	s.errs.Error(ctx, "envoy: request over bounds, answered OVER_LIMIT", slog.String("why", why))
	statuses := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.Descriptors))
	for i := range statuses {
		statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: statuses}
}

// dynamicMetadata is an answer's dynamic_metadata (Config.DynamicMetadata).
func dynamicMetadata(req *rlsv3.RateLimitRequest, matched []*envoyrules.Rule, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.Domain)}
	descs := make([]*structpb.Value, 0, len(req.Descriptors))
	for _, d := range req.Descriptors {
		df := map[string]*structpb.Value{}
		es := make([]*structpb.Value, len(d.GetEntries()))
		for i, e := range d.GetEntries() {
			es[i] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
		}
		df["entries"] = structpb.NewListValue(&structpb.ListValue{Values: es})
		if l := d.GetLimit(); l != nil {
			df["limit"] = structpb.NewStringValue(l.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			df["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: df}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	merged := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i, r := range matched {
		if r == nil || len(r.Metadata) == 0 || statuses[i].Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			continue
		}
		if m, err := structpb.NewStruct(r.Metadata); err == nil {
			mergeMetadata(merged, m)
		}
	}
	if len(merged.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(merged)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeMetadata adds src's fields to dst: a field dst has keeps its value,
// except that two maps merge field by field.
func mergeMetadata(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		switch {
		case !ok:
			dst.Fields[k] = v
		case have.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeMetadata(have.GetStructValue(), v.GetStructValue())
		}
	}
}

// allOrNothing decides checks so that a request refused by one enforced
// limit (or by all of its quotas) is charged to none of them: the enforced
// checks first, all at once, refunded when one denies; then the shadow and
// quota checks, each on its own, when the enforced ones passed, and
// otherwise only looked at (cost 0), so that every descriptor still reports
// what the engine holds.
func (s *Service) allOrNothing(ctx context.Context, m *Mode, sc *scratch, checks []check) {
	enf, rest := sc.ptrs[:0], sc.rest[:0]
	for i := range checks {
		if checks[i].kind == enforced {
			enf = append(enf, &checks[i])
		} else {
			rest = append(rest, &checks[i])
		}
	}
	sc.ptrs, sc.rest = enf, rest
	groups := sc.group(enf)
	s.decideGroups(ctx, m, groups)
	passed := true
	for _, g := range groups {
		passed = passed && g.err == nil && g.res.Allowed
	}
	if !passed {
		s.refundGroups(ctx, groups)
		for _, c := range rest {
			c.cost = 0
		}
	}
	s.each(ctx, m, sc, rest)
	if !passed {
		return
	}
	quotas, quotasOver := 0, 0
	for _, c := range rest {
		if c.kind == quota {
			quotas++
			if c.err == nil && !c.res.Allowed {
				quotasOver++
			}
		}
	}
	if quotas > 0 && quotas == quotasOver {
		// Refused by its quotas: the enforced limits give their charge back.
		s.refundGroups(ctx, groups)
	}
}

// each decides checks independently: the checks of one bucket in order,
// different buckets at once.
func (s *Service) each(ctx context.Context, m *Mode, sc *scratch, checks []*check) {
	groups := sc.group(checks)
	switch len(groups) {
	case 0:
		return
	case 1:
		// No closure made for one group (it would escape to parallel's
		// goroutines).
		s.eachGroup(ctx, m, groups[0])
		return
	}
	parallel(groups, func(g *group) { s.eachGroup(ctx, m, g) })
}

// eachGroup decides the checks of one bucket in order, each on its own.
func (s *Service) eachGroup(ctx context.Context, m *Mode, g *group) {
	for _, c := range g.checks {
		c.res, c.err = c.lim.AllowN(ctx, c.key, c.cost)
		c.charged = c.err == nil && c.res.Allowed && c.cost > 0
		if c.err == nil && !c.res.Allowed && c.cost > 0 && m.ChargeDenied {
			s.chargeDenied(ctx, c.lim, c.key, &c.res)
			c.charged = true
		}
	}
}

// decideGroups decides each group as one check of its summed cost, the
// groups at once, and gives every check of a group its own numbers: in an
// admitted group, the units left after it and the checks before it.
func (s *Service) decideGroups(ctx context.Context, m *Mode, groups []*group) {
	switch len(groups) {
	case 0:
		return
	case 1:
		s.decideGroup(ctx, m, groups[0])
		return
	}
	parallel(groups, func(g *group) { s.decideGroup(ctx, m, g) })
}

// decideGroup decides one group of decideGroups.
func (s *Service) decideGroup(ctx context.Context, m *Mode, g *group) {
	g.res, g.err = g.checks[0].lim.AllowN(ctx, g.checks[0].key, g.cost)
	if g.err == nil && !g.res.Allowed && g.res.Source == floodgate.SourcePolicy && g.res.Set != nil {
		// More than the limit could ever admit: decided without
		// reading state. Look, so the answer says what is left.
		if peek, err := g.checks[0].lim.AllowN(ctx, g.checks[0].key, 0); err == nil {
			g.res.Remaining, g.res.ResetAfter = peek.Remaining, peek.ResetAfter
		}
	}
	if g.err == nil && !g.res.Allowed && g.cost > 0 && m.ChargeDenied {
		s.chargeDenied(ctx, g.checks[0].lim, g.checks[0].key, &g.res)
	}
	after := int64(0)
	for i := len(g.checks) - 1; i >= 0; i-- {
		c := g.checks[i]
		c.res, c.err = g.res, g.err
		c.charged = g.err == nil && (g.res.Allowed || m.ChargeDenied) && g.cost > 0
		if g.err == nil && g.res.Allowed {
			c.res.Remaining += after
			after += c.cost
		}
	}
}

// refundGroups gives back the cost of every admitted group and reports
// its checks as the engine now holds them: admissible, with the units
// they would have left.
func (s *Service) refundGroups(ctx context.Context, groups []*group) {
	parallel(groups, func(g *group) {
		if g.err != nil || !g.res.Allowed || g.cost == 0 || !g.checks[0].charged {
			return
		}
		c0 := g.checks[0]
		if err := c0.lim.RefundN(ctx, c0.key, g.cost); err != nil {
			s.errs.Error(ctx, "envoy: refund failed", slog.String("limit", c0.lim.Name()), slog.Any("error", err))
			return
		}
		for _, c := range g.checks {
			c.charged = false
			c.res.Remaining = g.res.Remaining + g.cost
			if capacity := c.res.Limit.Capacity(); capacity > 0 {
				c.res.Remaining = min(c.res.Remaining, capacity)
			}
		}
	})
}

// chargeDenied charges a denied request's bucket as far as it goes (the
// engine keeps no count above a limit): every later request of the window
// is then denied, as if the denied units had been added.
func (s *Service) chargeDenied(ctx context.Context, lim floodgate.Limiter, key string, res *floodgate.Result) {
	left := res.Remaining
	if res.Source == floodgate.SourcePolicy {
		peek, err := lim.AllowN(ctx, key, 0)
		if err != nil {
			return
		}
		left = peek.Remaining
	}
	if left > 0 && res.HasState() {
		if _, err := lim.AllowN(ctx, key, left); err != nil {
			s.errs.Error(ctx, "envoy: charging a denied request failed", slog.String("limit", lim.Name()), slog.Any("error", err))
		}
	}
	res.Remaining = 0
}

// group groups checks by bucket, keeping the request's order within each
// group and the order of first appearance between groups. The groups live
// in sc until it is released; reserve must have made room for every check
// a call groups (each check is grouped once).
func (sc *scratch) group(checks []*check) []*group {
	start := len(sc.groups)
	var index map[bucket]*group
	if len(checks) > 8 {
		index = make(map[bucket]*group, len(checks))
	}
	for _, c := range checks {
		var g *group
		if index != nil {
			g = index[bucket{c.lim, c.key}]
		} else {
			for j := start; j < len(sc.groups); j++ {
				if h := &sc.groups[j]; h.checks[0].key == c.key && h.checks[0].lim == c.lim {
					g = h
					break
				}
			}
		}
		if g == nil {
			sc.groups = append(sc.groups, group{checks: sc.members(), cost: 0})
			g = &sc.groups[len(sc.groups)-1]
			if index != nil {
				index[bucket{c.lim, c.key}] = g
			}
		}
		g.checks = append(g.checks, c)
		g.cost += c.cost
	}
	out := sc.gptrs[len(sc.gptrs):]
	for j := start; j < len(sc.groups); j++ {
		out = append(out, &sc.groups[j])
	}
	sc.gptrs = sc.gptrs[:len(sc.gptrs)+len(out)]
	return out
}

// A bucket is what a check counts in.
type bucket struct {
	lim floodgate.Limiter
	key string
}

// scratch is one call's working memory, pooled.
type scratch struct {
	descs  [][]envoyrules.Entry
	flat   []envoyrules.Entry
	checks []check
	ptrs   []*check
	rest   []*check
	groups []group
	gptrs  []*group
	spare  [][]*check // the groups' member lists, reused
	used   int
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// entries converts the request's descriptors, in sc's memory.
func (sc *scratch) entries(ds []*ratelimitv3.RateLimitDescriptor) [][]envoyrules.Entry {
	n := 0
	for _, d := range ds {
		n += len(d.GetEntries())
	}
	if cap(sc.flat) < n {
		sc.flat = make([]envoyrules.Entry, 0, n)
	}
	flat := sc.flat[:0]
	descs := sc.descs[:0]
	for _, d := range ds {
		from := len(flat)
		for _, e := range d.GetEntries() {
			flat = append(flat, envoyrules.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		descs = append(descs, flat[from:len(flat):len(flat)])
	}
	sc.flat, sc.descs = flat, descs
	return descs
}

// reserve makes room for grouping n checks without moving a group.
func (sc *scratch) reserve(n int) {
	if cap(sc.groups) < n {
		sc.groups = make([]group, 0, n)
	}
	if cap(sc.gptrs) < n {
		sc.gptrs = make([]*group, 0, n)
	}
}

// members returns an empty member list for a new group.
func (sc *scratch) members() []*check {
	if sc.used < len(sc.spare) {
		m := sc.spare[sc.used][:0]
		sc.used++
		return m
	}
	return nil
}

// release clears sc (it holds no request's data afterwards) and pools it.
func (sc *scratch) release() {
	for i := range sc.groups {
		g := &sc.groups[i]
		clear(g.checks)
		if i < len(sc.spare) {
			sc.spare[i] = g.checks[:0]
		} else if g.checks != nil {
			sc.spare = append(sc.spare, g.checks[:0])
		}
	}
	clear(sc.descs)
	clear(sc.flat)
	clear(sc.checks)
	clear(sc.ptrs)
	clear(sc.rest)
	clear(sc.groups)
	clear(sc.gptrs)
	*sc = scratch{descs: sc.descs[:0], flat: sc.flat[:0], checks: sc.checks[:0], ptrs: sc.ptrs[:0], rest: sc.rest[:0],
		groups: sc.groups[:0], gptrs: sc.gptrs[:0], spare: sc.spare}
	scratchPool.Put(sc)
}

// parallel runs f on every group, at once when there are several: the
// engine batches concurrent decisions into one round trip.
func parallel(groups []*group, f func(*group)) {
	switch len(groups) {
	case 0:
	case 1:
		f(groups[0])
	default:
		var wg sync.WaitGroup
		for _, g := range groups[1:] {
			wg.Add(1)
			help(helperTask{f: f, g: g, wg: &wg})
		}
		f(groups[0])
		wg.Wait()
	}
}

// A helperTask is one group of a parallel call, run by a helper.
type helperTask struct {
	f  func(*group)
	g  *group
	wg *sync.WaitGroup
}

// maxHelpers bounds the helper goroutines kept between calls.
const maxHelpers = StreamWorkers

var (
	helperWork = make(chan helperTask) // an idle helper takes a task
	helpers    atomic.Int64            // helpers kept
)

// help runs t on an idle helper, or on a new goroutine when none is idle.
// Helpers are kept (up to maxHelpers) rather than started per call: a new
// goroutine's stack grows anew, in every call, to the depth of a decision.
func help(t helperTask) {
	select {
	case helperWork <- t:
	default:
		go helper(t)
	}
}

// helper runs t, then, if kept, every task it is given.
func helper(t helperTask) {
	t.run()
	if helpers.Add(1) > maxHelpers {
		helpers.Add(-1)
		return
	}
	for t := range helperWork {
		t.run()
	}
}

func (t helperTask) run() {
	defer t.wg.Done()
	t.f(t.g)
}

// fill describes c in its descriptor's status: the code, and, when state
// was read, the limit, the units remaining and the time until the window
// (or bucket) resets, in whole seconds rounded up as envoyproxy/ratelimit
// counts them.
func (s *Service) fill(ans *answer, c *check) {
	st, res := ans.resp.Statuses[c.desc], &c.res
	if res.Allowed || c.kind == shadowed {
		st.Code = rlsv3.RateLimitResponse_OK
	} else {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if c.rule.Blocked {
		st.CurrentLimit = currentLimit(ans.limit(c.desc), floodgate.Limit{Period: c.rule.BlockedPeriod}, c.rule.Name)
		st.CurrentLimit.RequestsPerUnit = 0
		st.DurationUntilReset = ans.duration(c.desc, windowLeft(c.rule.BlockedPeriod))
		return
	}
	if !res.HasState() {
		return
	}
	st.CurrentLimit = currentLimit(ans.limit(c.desc), res.Limit, c.rule.Name)
	st.LimitRemaining = uint32(min(res.Remaining, math.MaxUint32))
	reset := res.ResetAfter
	if reset == 0 && res.Limit.Algorithm == floodgate.FixedWindow {
		// An empty window: it ends where every window of the limit ends.
		reset = windowLeft(res.Limit.Period)
	}
	st.DurationUntilReset = ans.duration(c.desc, ceilSecond(reset))
}

// answerInline is how many descriptors' statuses an answer holds inline.
const answerInline = 2

// An answer is one call's response with, for its first answerInline
// descriptors, the messages its statuses point to: one allocation for the
// response of a request of up to answerInline descriptors, where each
// message would be one. Nothing is pooled: gRPC owns the response once it
// is returned.
type answer struct {
	resp rlsv3.RateLimitResponse
	ptrs [answerInline]*rlsv3.RateLimitResponse_DescriptorStatus
	sts  [answerInline]rlsv3.RateLimitResponse_DescriptorStatus
	lims [answerInline]rlsv3.RateLimitResponse_RateLimit
	durs [answerInline]durationpb.Duration
}

// newAnswer returns an OK response with room for n statuses.
func newAnswer(n int) *answer {
	a := &answer{}
	a.resp.OverallCode = rlsv3.RateLimitResponse_OK
	if n <= answerInline {
		a.resp.Statuses = a.ptrs[:n]
	} else {
		a.resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	}
	return a
}

// status returns descriptor i's status, OK.
func (a *answer) status(i int) *rlsv3.RateLimitResponse_DescriptorStatus {
	if i < answerInline {
		a.sts[i].Code = rlsv3.RateLimitResponse_OK
		return &a.sts[i]
	}
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
}

// limit returns descriptor i's current_limit message, empty.
func (a *answer) limit(i int) *rlsv3.RateLimitResponse_RateLimit {
	if i < answerInline {
		return &a.lims[i]
	}
	return &rlsv3.RateLimitResponse_RateLimit{}
}

// duration returns d as descriptor i's duration_until_reset message.
func (a *answer) duration(i int, d time.Duration) *durationpb.Duration {
	secs, nanos := int64(d/time.Second), int32(d%time.Second)
	if i < answerInline {
		a.durs[i].Seconds, a.durs[i].Nanos = secs, nanos
		return &a.durs[i]
	}
	return &durationpb.Duration{Seconds: secs, Nanos: nanos}
}

// windowLeft is the time until the current window of period ends, windows
// being aligned to the Unix epoch.
func windowLeft(period time.Duration) time.Duration {
	if period <= 0 {
		return 0
	}
	now := time.Now().UnixNano()
	return ceilSecond(time.Duration(int64(period) - now%int64(period)))
}

func ceilSecond(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}

// addHeaders adds the rate-limit header fields of the decided checks to
// resp (the driving check: the first enforced denial, else the fewest
// units left), through the Evaluator, so they read as the proxy's.
func (s *Service) addHeaders(ctx context.Context, rs *ruleSet, resp *rlsv3.RateLimitResponse, checks []check, drive int) {
	var fc []floodgate.Check
	best := -1
	for i := range checks {
		c := &checks[i]
		if c.res.Set == nil || c.kind == shadowed || len(fc) == httplimit.MaxRules {
			continue
		}
		if i == drive || drive < 0 && (best < 0 || c.res.Remaining < fc[best].Result.Remaining) {
			best = len(fc)
		}
		fc = append(fc, floodgate.Check{Limiter: c.lim, Key: c.key, Cost: c.cost, Result: c.res})
	}
	if best < 0 {
		return
	}
	var v httplimit.Answer
	rs.eval.FromChecks(ctx, &v, best, fc...)
	v.Headers(func(name, value string) {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: strings.ToLower(name), Value: value})
	})
}

// MaxOverrides bounds the limiters the service keeps for limits sent in
// descriptors.
const MaxOverrides = 1024

// overrideUnits are the durations of Envoy's units of a limit override.
var overrideUnits = map[typev3.RateLimitUnit]time.Duration{
	typev3.RateLimitUnit_SECOND: time.Second,
	typev3.RateLimitUnit_MINUTE: time.Minute,
	typev3.RateLimitUnit_HOUR:   time.Hour,
	typev3.RateLimitUnit_DAY:    24 * time.Hour,
	typev3.RateLimitUnit_MONTH:  30 * 24 * time.Hour,
	typev3.RateLimitUnit_YEAR:   365 * 24 * time.Hour,
}

// overridesOf reads the limits the descriptors carry; nil when none does.
func overridesOf(ds []*ratelimitv3.RateLimitDescriptor) ([]*envoyrules.Override, error) {
	var out []*envoyrules.Override
	for i, d := range ds {
		l := d.GetLimit()
		if l == nil {
			continue
		}
		unit, ok := overrideUnits[l.GetUnit()]
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: its limit has unit %s; use SECOND, MINUTE, HOUR, DAY or MONTH", i, l.GetUnit())
		}
		if m := l.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
			unit *= time.Duration(m.GetValue())
		}
		if out == nil {
			out = make([]*envoyrules.Override, len(ds))
		}
		out[i] = &envoyrules.Override{RequestsPerUnit: int64(l.GetRequestsPerUnit()), Period: unit}
	}
	return out, nil
}

// overrideLimiter returns the limiter of an override rule, made on the
// store the first time its limit is seen.
func (s *Service) overrideLimiter(r *envoyrules.Rule) (floodgate.Limiter, error) {
	if r.Blocked {
		return blocked(r.Policy), nil
	}
	s.overMu.Lock()
	defer s.overMu.Unlock()
	if lim := s.over[r.Policy]; lim != nil {
		return lim, nil
	}
	lim, err := floodgate.New(s.store, r.FloodgatePolicy())
	if err != nil {
		return nil, err
	}
	if s.over == nil {
		s.over = map[string]floodgate.Limiter{}
	}
	if len(s.over) < MaxOverrides {
		s.over[r.Policy] = lim
	}
	return lim, nil
}
