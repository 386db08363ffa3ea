package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
)

// DefaultEnvoyTimeout bounds one ShouldRateLimit call when
// EnvoyConfig.Timeout is zero.
const DefaultEnvoyTimeout = time.Second

// An Entry is one key/value pair of a rate limit descriptor.
type Entry struct{ Key, Value string }

// A DescriptorLimit is what one descriptor is limited by: the limiter
// deciding, the key it decides for, or Unlimited.
type DescriptorLimit struct {
	// Name names the limit in current_limit and logs.
	Name string

	// Limiter decides; nil only when Unlimited.
	Limiter floodgate.Limiter

	// Key is the key of the descriptor under Limiter, typically built from
	// the domain and the descriptor's entries.
	Key string

	// Unlimited answers OK without a decision.
	Unlimited bool

	// Shadow decides and counts but answers OK: the would-be denial is
	// reported to EnvoyConfig.OnShadow and logged.
	Shadow bool

	// Replaces names the limits (by Name) that this one replaces when both
	// apply to one request: those are dropped, as envoyproxy/ratelimit's
	// replaces does.
	Replaces []string
}

// Descriptors maps a request's domain and one descriptor to its limits,
// e.g. an envoyproxy/ratelimit configuration. It must be safe for
// concurrent use; the returned slice is read, never changed. ok is false
// when nothing matches: the descriptor is then not limited (status OK
// without current_limit, as envoyproxy/ratelimit answers).
type Descriptors interface {
	Lookup(domain string, entries []Entry) (limits []DescriptorLimit, ok bool)
}

// Response header families for EnvoyConfig.ResponseHeaders.
const (
	// HeadersNone adds no response headers. It is the default.
	HeadersNone = "none"
	// HeadersDraft adds x-ratelimit-limit, x-ratelimit-remaining and
	// x-ratelimit-reset (draft 03, the form envoyproxy/ratelimit sends).
	HeadersDraft = "draft"
	// HeadersIETF adds the RateLimit-Policy and RateLimit fields of
	// draft-ietf-httpapi-ratelimit-headers, one item per limit decided.
	HeadersIETF = "ietf"
)

// EnvoyConfig configures the Envoy rate limit service
// (envoy.service.ratelimit.v3.RateLimitService), the YAML "envoy".
type EnvoyConfig struct {
	// Listen is the gRPC listener's address, e.g. ":8081".
	Listen string

	// ResponseHeaders selects response_headers_to_add: HeadersNone (""),
	// HeadersDraft or HeadersIETF.
	ResponseHeaders string

	// Timeout bounds each call, whatever the caller's deadline; 0 means
	// DefaultEnvoyTimeout. Keep the engine's timeout
	// (failover.GuardOptions.Timeout) below it and below Envoy's filter
	// timeout, so that a Redis that hangs is answered by the failure
	// policy.
	Timeout time.Duration

	// Descriptors maps descriptors to limits. SetDescriptors replaces it.
	Descriptors Descriptors

	// OnShadow, when set, is called for every descriptor limit in shadow
	// mode that would have been over limit.
	OnShadow func(name string, res floodgate.Result)

	// Logger receives denials (sampled) and errors. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// RLS is the Envoy rate limit service. Each descriptor of a request is
// looked up; every limit found (shadow ones apart) is decided all or
// nothing (floodgate.AllowAll), so a request over one limit charges none.
//
// Answers:
//
//   - overall_code OK when every limit passed, OVER_LIMIT when one did not;
//     one status per descriptor, in the request's order, with
//     current_limit, limit_remaining and duration_until_reset of the
//     descriptor's most restrictive limit.
//   - A Redis outage is answered by the engine's failure policy: fail-open
//     is OK (no current_limit: no state was read), fail-closed is
//     OVER_LIMIT with the header x-ratelimit-source: fail-closed, local
//     fallback decides on local state.
//   - A call the engine could not decide within Timeout fails with gRPC
//     code UNAVAILABLE, so Envoy applies its own failure_mode_deny.
//   - An empty domain or no descriptors is INVALID_ARGUMENT.
//
// Costs: the request's hits_addend (0, proto3's "unset", means 1, as in
// envoyproxy/ratelimit), overridden by a descriptor's hits_addend when set,
// where 0 checks without charging. A descriptor with is_negative_hits gives
// its hits back (RefundN) and is answered OK. A descriptor's own limit
// override (RateLimitDescriptor.limit) is ignored: limits come from
// configuration.
//
// Shadow limits are decided after the enforced ones, and only when those
// pass: a request that is over an enforced limit is refused anyway and
// charged nowhere, so the shadow limit would not have seen it either.
type RLS struct {
	rlsv3.UnimplementedRateLimitServiceServer

	timeout  time.Duration
	hdr      httplimit.Headers // the fields response_headers selects
	headers  bool
	onShadow func(string, floodgate.Result)
	desc     atomic.Pointer[descriptorSet]
	sample   *sampler
	errs     errorLog
	health   *health.Server

	mu  sync.Mutex
	srv *grpc.Server
	ln  net.Listener
}

// descriptorSet is one generation of descriptors, with the Decider that
// decides and describes their limits (it caches a description per limit
// set, so it is renewed with them).
type descriptorSet struct {
	d       Descriptors
	decider *httplimit.Decider
}

// NewRLS validates cfg and returns its service.
func NewRLS(cfg EnvoyConfig) (*RLS, error) {
	s := &RLS{timeout: cfg.Timeout, onShadow: cfg.OnShadow, sample: newSampler(cfg.Logger), health: health.NewServer()}
	s.errs.log = s.sample.log
	if s.timeout <= 0 {
		s.timeout = DefaultEnvoyTimeout
	}
	switch strings.ToLower(cfg.ResponseHeaders) {
	case "", HeadersNone:
	case HeadersDraft:
		s.hdr, s.headers = httplimit.Headers{DisableRateLimit: true, DisableRetryAfter: true}, true
	case HeadersIETF:
		s.hdr, s.headers = httplimit.Headers{DisableXRateLimit: true, DisableRetryAfter: true}, true
	default:
		return nil, fmt.Errorf("%w: envoy response_headers %q: use none, draft or ietf", ErrInvalidConfig, cfg.ResponseHeaders)
	}
	if cfg.Descriptors == nil {
		return nil, fmt.Errorf("%w: envoy: no descriptors configured (ratelimit_config)", ErrInvalidConfig)
	}
	s.SetDescriptors(cfg.Descriptors)
	return s, nil
}

// SetDescriptors replaces the descriptor configuration atomically.
func (s *RLS) SetDescriptors(d Descriptors) {
	dec, err := httplimit.NewDecider(httplimit.DeciderConfig{Headers: s.hdr, Body: httplimit.BodyNone, Logger: s.sample.log})
	if err != nil {
		panic(err) // the config is fixed and valid
	}
	s.desc.Store(&descriptorSet{d: d, decider: dec})
}

// Register registers the rate limit service and the gRPC health service
// (grpc.health.v1, serving for "" and the rate limit service's name) on
// reg, for a caller that runs its own grpc.Server.
func (s *RLS) Register(reg grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(reg, s)
	healthpb.RegisterHealthServer(reg, s.health)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
}

// bind makes the gRPC server for ln; serve then serves it. They are apart
// so that a shutdown right after Start finds the server to stop.
func (s *RLS) bind(ln net.Listener) {
	srv := grpc.NewServer()
	s.Register(srv)
	s.mu.Lock()
	s.srv, s.ln = srv, ln
	s.mu.Unlock()
}

func (s *RLS) serve() error {
	s.mu.Lock()
	srv, ln := s.srv, s.ln
	s.mu.Unlock()
	err := srv.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

func (s *RLS) addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// shutdown reports NOT_SERVING, then stops gracefully until ctx ends.
func (s *RLS) shutdown(ctx context.Context) error {
	s.health.Shutdown()
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		srv.Stop()
		<-done
		return ctx.Err()
	}
}

// rlsState is one call's scratch space, pooled.
type rlsState struct {
	entries []Entry
	checks  []httplimit.Charge
	owner   []int // per check: the descriptor it belongs to
	shadow  []rlsShadow
	v       httplimit.Verdict
}

type rlsShadow struct {
	desc int
	lim  *DescriptorLimit
}

var rlsPool = sync.Pool{New: func() any { return new(rlsState) }}

// ShouldRateLimit implements rlsv3.RateLimitServiceServer.
func (s *RLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()

	st := rlsPool.Get().(*rlsState)
	defer func() {
		clear(st.checks)
		clear(st.shadow)
		*st = rlsState{entries: st.entries[:0], checks: st.checks[:0], owner: st.owner[:0], shadow: st.shadow[:0]}
		rlsPool.Put(st)
	}()
	ds := s.desc.Load()
	reqCost := int64(max(req.GetHitsAddend(), 1))
	statuses := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.Descriptors))
	// Look every descriptor up first: a limit that another matched limit
	// replaces (envoyproxy/ratelimit's replaces, by name) is dropped.
	looked := make([][]DescriptorLimit, len(req.Descriptors))
	var replaced map[string]bool
	for i, d := range req.Descriptors {
		st.entries = st.entries[:0]
		for _, e := range d.GetEntries() {
			st.entries = append(st.entries, Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		limits, ok := ds.d.Lookup(req.Domain, st.entries)
		if !ok {
			continue
		}
		looked[i] = limits
		for j := range limits {
			for _, name := range limits[j].Replaces {
				if replaced == nil {
					replaced = make(map[string]bool)
				}
				replaced[name] = true
			}
		}
	}
	for i, d := range req.Descriptors {
		limits := looked[i]
		cost := reqCost
		if h := d.GetHitsAddend(); h != nil {
			cost = int64(min(h.GetValue(), math.MaxInt64))
		}
		for j := range limits {
			l := &limits[j]
			switch {
			case l.Unlimited || l.Limiter == nil || replaced[l.Name]:
			case d.GetIsNegativeHits():
				if err := l.Limiter.RefundN(ctx, l.Key, cost); err != nil {
					s.errs.error(ctx, "envoy: refund failed", slog.String("limit", l.Name), slog.Any("error", err))
				}
			case l.Shadow:
				st.shadow = append(st.shadow, rlsShadow{desc: i, lim: l})
			default:
				st.checks = append(st.checks, httplimit.Charge{Limiter: l.Limiter, Key: l.Key, Cost: cost})
				st.owner = append(st.owner, i)
			}
		}
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: statuses}
	var res floodgate.Result
	drive := 0
	if len(st.checks) > 0 {
		v := &st.v
		ds.decider.Decide(ctx, v, st.checks...)
		var err error
		res, drive, err = v.Result(), v.Drive(), v.Err()
		if err != nil {
			s.errs.error(ctx, "envoy: undecided", slog.String("policy", st.checks[drive].Limiter.Name()), slog.Any("error", err))
			return nil, status.Errorf(codes.Unavailable, "rate limiter could not decide: %v", err)
		}
		decided := len(st.checks)
		if !res.Allowed {
			decided = drive + 1
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			s.sample.denied(ctx, "envoy", st.checks[drive].Key, &res, false)
		}
		best := make([]int, len(statuses)) // per descriptor: 1 + its driving check
		results := make([]floodgate.Result, decided)
		for k := range decided {
			results[k] = v.ResultOf(k)
			i := st.owner[k]
			if b := best[i]; b == 0 || restrictive(&results[k], &results[b-1]) {
				best[i] = k + 1
			}
		}
		for i, b := range best {
			if b > 0 {
				fillStatus(statuses[i], &results[b-1], "")
			}
		}
		if res.Source == floodgate.SourceFailClosed && !res.Allowed {
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: "x-ratelimit-source", Value: string(floodgate.SourceFailClosed)})
		}
		if s.headers {
			v.Headers(func(name, value string) {
				resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: strings.ToLower(name), Value: value})
			})
		}
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OK {
		s.decideShadow(ctx, st, statuses)
	}
	return resp, nil
}

// decideShadow decides the shadow limits of a request that passed: each is
// charged like an enforced one, and one that would refuse is counted and
// logged while the descriptor stays OK.
func (s *RLS) decideShadow(ctx context.Context, st *rlsState, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) {
	for _, sh := range st.shadow {
		res, err := sh.lim.Limiter.Allow(ctx, sh.lim.Key)
		if err != nil {
			s.errs.error(ctx, "envoy: shadow limit undecided", slog.String("limit", sh.lim.Name), slog.Any("error", err))
			continue
		}
		if !res.Allowed {
			if s.onShadow != nil {
				s.onShadow(sh.lim.Name, res)
			}
			s.sample.denied(ctx, "envoy", sh.lim.Key, &res, true)
		}
		if statuses[sh.desc].CurrentLimit == nil {
			fillStatus(statuses[sh.desc], &res, sh.lim.Name)
			statuses[sh.desc].Code = rlsv3.RateLimitResponse_OK
		}
	}
}

// restrictive reports whether a drives a descriptor's status rather than b:
// a denial over an admission, else the fewer units remaining.
func restrictive(a, b *floodgate.Result) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	return a.Remaining < b.Remaining
}

// fillStatus describes res in st: its code, and, when it read state, the
// limit, the units remaining and the time until the limit is full again.
func fillStatus(st *rlsv3.RateLimitResponse_DescriptorStatus, res *floodgate.Result, name string) {
	if res.Allowed {
		st.Code = rlsv3.RateLimitResponse_OK
	} else {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if res.Set == nil || res.Source == floodgate.SourceFailOpen || res.Source == floodgate.SourceFailClosed {
		return
	}
	if name == "" {
		name = res.Policy
	}
	st.CurrentLimit = currentLimit(res.Limit, name)
	st.LimitRemaining = uint32(min(res.Remaining, math.MaxUint32))
	st.DurationUntilReset = durationpb.New(res.ResetAfter)
}

// units are the Envoy units that are exact durations, longest first.
var units = [...]struct {
	d time.Duration
	u rlsv3.RateLimitResponse_RateLimit_Unit
}{
	{7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
	{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
	{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
}

// currentLimit expresses l in Envoy's terms: its rate per the longest unit
// that divides its period, with unit_multiplier for the number of units
// (100 per 30 s is 100 per 30 SECOND). A period that is not a whole number
// of seconds is rounded up to one, with the rate scaled down, the way the
// RateLimit-Policy field rounds: the advertised limit never exceeds the
// real one. A rate above 2^32-1 is capped.
func currentLimit(l floodgate.Limit, name string) *rlsv3.RateLimitResponse_RateLimit {
	q, w := l.Rate, l.Period
	if w%time.Second != 0 {
		qs, ws := httplimit.Quota(l)
		q, w = qs, time.Duration(ws)*time.Second
	}
	cl := &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: uint32(min(q, math.MaxUint32))}
	for _, u := range units {
		if w%u.d == 0 {
			cl.Unit = u.u
			if n := w / u.d; n != 1 {
				cl.UnitMultiplier = wrapperspb.UInt32(uint32(min(int64(n), math.MaxUint32)))
			}
			break
		}
	}
	return cl
}
