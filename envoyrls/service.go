// Package envoyrls is floodgate's Envoy rate limit service: the gRPC API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit and the gRPC
// health service) that Envoy's rate limit filter calls, answering from
// envoyproxy/ratelimit rules (package envoyrules) with floodgate limiters.
// It is the only part of floodgate that imports gRPC.
package envoyrls

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/envoyrules"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/denylog"
	"github.com/floodgate-go/floodgate/internal/webguard"
)

// StreamWorkers is how many goroutines Serve keeps to run calls on: about
// 8 KiB each while idle, and enough for the calls in flight at once of a
// busy instance (a call beyond them runs on a goroutine of its own).
const StreamWorkers = 256

// DefaultTimeout bounds one ShouldRateLimit call when Config.Timeout is
// zero.
const DefaultTimeout = time.Second

// Config configures the Envoy rate limit service.
type Config struct {
	// ResponseHeaders selects response_headers_to_add: none (the zero
	// value), draft (x-ratelimit-*) or ietf (RateLimit-Policy, RateLimit).
	ResponseHeaders envoyrules.HeaderStyle

	// Timeout bounds each call, whatever the caller's deadline; 0 means
	// DefaultTimeout. Keep the engine's timeout
	// (failover.GuardOptions.Timeout) below it and below Envoy's filter
	// timeout, so that a Redis that hangs is answered by the failure
	// policy.
	Timeout time.Duration

	// DeadlineBound promises that every limiter's engine returns by its
	// context's deadline even when the context's Done channel has not
	// closed (floodgate's own engines do: the memory engine never waits,
	// and a failover.Guard made with DeadlineBound over redisstore bounds
	// its calls by their deadline). Each call then gets Timeout as a
	// deadline on the caller's context (a few bytes) rather than a
	// context derived with context.WithTimeout (a timer, a registration
	// with the caller's context, and a channel once the engine waits).
	// Leave it false for an engine that waits on Done alone.
	DeadlineBound bool

	// Rules are the envoyproxy/ratelimit rules descriptors are matched
	// against. Required; SetRules replaces them.
	Rules *envoyrules.Rules

	// Limiters decide, by rule policy (envoyrules.Rule.Policy): one for
	// every policy of Rules.Policies. SetRules replaces them.
	Limiters map[string]floodgate.Limiter

	// Mode is how descriptors are counted and answered; SetMode
	// replaces it.
	Mode Mode

	// Store, when set, decides descriptors that carry their own limit
	// (Envoy's limit override, RateLimitDescriptor.limit) under that limit,
	// as envoyproxy/ratelimit does (envoyrules.Rules.MatchOverrides), with
	// limiters made on it as overrides appear (at most MaxOverrides
	// distinct limits are kept; more are made per call). Nil: such limits
	// are ignored and the descriptor's rule applies.
	Store floodgate.Store

	// OnShadow, when set, is called for every descriptor limit in shadow
	// mode that would have been over limit.
	OnShadow func(name string, res floodgate.Result)

	// ServerOptions are added to the gRPC server's own, e.g. a
	// grpc.StatsHandler that traces each call.
	ServerOptions []grpc.ServerOption

	// Logger receives denials (sampled) and errors. Nil means
	// slog.Default().
	Logger *slog.Logger

	// TLS, when set, serves gRPC over TLS with it (set ClientCAs and
	// ClientAuth for mutual TLS). Nil serves plaintext gRPC, as Envoy's
	// cluster definition of a rate limit service expects by default.
	TLS *tls.Config

	// Token, when set, must come with every ShouldRateLimit call as the
	// metadata "authorization: Bearer TOKEN" (Envoy's grpc_service
	// initial_metadata); a call without it is refused with UNAUTHENTICATED
	// before anything is counted. The health service needs no token: it
	// tells nothing and spends nothing. SetToken replaces it.
	Token string

	// RawKeys writes keys as they are in the denial log lines; false, the
	// default, writes floodgate.RedactKey's stand-ins.
	RawKeys bool

	// Bounds limit what one client may hold of the grpc.Server that Serve
	// runs; Register ignores them.
	Bounds Bounds
}

// Bounds limit the connections and calls of Serve's grpc.Server, for a
// listener in front of untrusted clients. A zero field is gRPC's default.
type Bounds struct {
	// MaxHeaderBytes bounds a call's header list (its metadata), counted
	// as HTTP/2 counts it: every field's name and value and 32 bytes more.
	// It does not bound the request message, which carries whatever
	// clients put in the headers Envoy makes descriptors of: that is
	// MaxRequestBytes, MaxDescriptors and MaxEntries.
	MaxHeaderBytes int

	// MaxConcurrentStreams bounds the calls in flight on one connection.
	MaxConcurrentStreams int

	// ConnectionTimeout bounds setting a connection up (gRPC's default is
	// 120s).
	ConnectionTimeout time.Duration

	// IdleTimeout closes a connection without calls for this long.
	IdleTimeout time.Duration
}

// options are b as grpc.Server options.
func (b Bounds) options() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if b.MaxHeaderBytes > 0 {
		opts = append(opts, grpc.MaxHeaderListSize(uint32(b.MaxHeaderBytes)))
	}
	if b.MaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(b.MaxConcurrentStreams)))
	}
	if b.ConnectionTimeout > 0 {
		opts = append(opts, grpc.ConnectionTimeout(b.ConnectionTimeout))
	}
	if b.IdleTimeout > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: b.IdleTimeout}))
	}
	return opts
}

// Mode is how the service counts descriptors and what its answers carry.
// The zero value is floodgate's own: all or nothing, denials not charged,
// failures answered by the storage's failure mode, no dynamic metadata.
type Mode struct {
	// ShadowMode answers every request OK overall, while counting as
	// usual; each descriptor's status still says whether it was over its
	// limit (envoyproxy/ratelimit's SHADOW_MODE).
	ShadowMode bool

	// Independent decides and charges each descriptor of a request on its
	// own, as envoyproxy/ratelimit does: one over its limit refuses the
	// request, and the others are charged all the same. The default is all
	// or nothing: a request refused by one descriptor is charged to none.
	Independent bool

	// ChargeDenied charges a descriptor that is over its limit too
	// (envoyproxy/ratelimit adds the hits, then compares), so a client that
	// keeps retrying while limited stays limited; its status then reports
	// limit_remaining 0. The default charges only what is admitted.
	ChargeDenied bool

	// ErrorStatus answers a call whose limits the storage could not reach
	// with the gRPC error UNAVAILABLE, as envoyproxy/ratelimit does when
	// Redis fails, so that Envoy's failure_mode_deny decides, instead of
	// the answer of the storage's failure mode (fail-open: OK,
	// fail-closed: OVER_LIMIT).
	ErrorStatus bool

	// DynamicMetadata sets each answer's dynamic_metadata as
	// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does: the domain,
	// the request's descriptors (entries as "key=value", limit,
	// hitsAddend), the request's hitsAddend, and the metadata of the rules
	// of every descriptor that was not over its limit, merged (the first
	// value of a field wins; maps merge field by field).
	DynamicMetadata bool
}

// Service is the Envoy rate limit service. Each descriptor of a request is
// matched to its rule (envoyrules.Rules.MatchRequest, replaces applied) and
// decided under Mode: by default all or nothing, so a request over one
// limit charges none; the descriptors of one bucket (the same rule and
// values) are decided as one check of their summed cost, and different
// buckets at once, so the engine can batch them into one round trip.
//
// Answers, as envoyproxy/ratelimit gives them:
//
//   - overall_code OK when every enforced limit passed, OVER_LIMIT when one
//     did not, or when every quota_mode descriptor of the request is over
//     its quota; OK whatever happened under Mode.ShadowMode.
//   - one status per descriptor, in the request's order, each saying what
//     the engine holds for it after the call (a descriptor refunded because
//     another one denied reports the units it still has): code,
//     current_limit (requests_per_unit and unit of its rule, named by the
//     rate_limit's name), limit_remaining, and duration_until_reset in
//     whole seconds, rounded up (for a fixed window, the end of the epoch
//     window). A shadow_mode descriptor is always OK; unlimited: true is OK
//     with limit_remaining 4294967295 and no current_limit;
//     requests_per_unit 0 is OVER_LIMIT with a current_limit of 0.
//   - A Redis outage is answered by the engine's failure policy: fail-open
//     is OK (no current_limit: no state was read), fail-closed is
//     OVER_LIMIT with the header x-ratelimit-source: fail-closed, local
//     fallback decides on local state; with Mode.ErrorStatus it is the
//     gRPC error UNAVAILABLE instead.
//   - A call the engine could not decide within Timeout fails with gRPC
//     code UNAVAILABLE, so Envoy applies its own failure_mode_deny.
//   - An empty domain or no descriptors is INVALID_ARGUMENT.
//
// Costs: the request's hits_addend (0, proto3's "unset", means 1, as in
// envoyproxy/ratelimit), overridden by a descriptor's hits_addend when set,
// where 0 checks without charging. A descriptor with is_negative_hits gives
// its hits back (RefundN) and is answered OK. A descriptor's own limit
// (RateLimitDescriptor.limit) is decided on Config.Store when it is set.
//
// In all-or-nothing counting, shadow and quota limits are decided after
// the enforced ones, and only looked at (cost 0) when those denied: a
// request that is refused is charged nowhere.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	timeout    time.Duration
	byDeadline bool // Config.DeadlineBound
	serverOpts []grpc.ServerOption
	mode       atomic.Pointer[Mode]
	store      floodgate.Store
	overMu     sync.Mutex
	over       map[string]floodgate.Limiter // override limiters by policy
	hdr        httplimit.Headers            // the fields response_headers selects
	headers    bool
	onShadow   func(string, floodgate.Result)
	rules      atomic.Pointer[ruleSet]
	sample     *denylog.Sampler
	errs       denylog.Errors
	health     *health.Server

	token atomic.Pointer[string]
	tls   *tls.Config

	mu      sync.Mutex
	srv     *grpc.Server
	stopped bool
}

// ruleSet is one generation of rules and limiters, with the Evaluator that
// evaluates and describes their limits (it caches a description per limit
// set, so it is renewed with them).
type ruleSet struct {
	rules    *envoyrules.Rules
	limiters map[string]floodgate.Limiter
	eval     *httplimit.Evaluator
}

// New validates cfg and returns its service.
func New(cfg Config) (*Service, error) {
	s := &Service{timeout: cfg.Timeout, byDeadline: cfg.DeadlineBound, onShadow: cfg.OnShadow, sample: denylog.New(cfg.Logger, cfg.RawKeys), health: health.NewServer()}
	s.SetMode(cfg.Mode)
	s.SetToken(cfg.Token)
	s.store, s.tls = cfg.Store, cfg.TLS
	s.serverOpts = append(cfg.Bounds.options(), cfg.ServerOptions...)

	s.errs.Log = s.sample.Logger()
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	switch cfg.ResponseHeaders {
	case envoyrules.HeadersNone, "":
	case envoyrules.HeadersDraft:
		s.hdr, s.headers = httplimit.Headers{DisableRateLimit: true, DisableRetryAfter: true}, true
	case envoyrules.HeadersIETF:
		s.hdr, s.headers = httplimit.Headers{DisableXRateLimit: true, DisableRetryAfter: true}, true
	default:
		return nil, fmt.Errorf("envoyrls: response headers %q: use none, draft or ietf", cfg.ResponseHeaders)
	}
	if cfg.Rules == nil {
		return nil, errors.New("envoyrls: no rules configured (ratelimit_config)")
	}
	s.SetRules(cfg.Rules, cfg.Limiters)
	return s, nil
}

// SetRules replaces the rules and their limiters atomically: a call is
// decided under the old pair or the new one.
func (s *Service) SetRules(rules *envoyrules.Rules, limiters map[string]floodgate.Limiter) {
	dec, err := httplimit.NewEvaluator(httplimit.EvaluatorConfig{Headers: s.hdr, Body: httplimit.BodyNone, Logger: s.sample.Logger()})
	if err != nil {
		panic(err) // the config is fixed and valid
	}
	s.rules.Store(&ruleSet{rules: rules, limiters: limiters, eval: dec})
}

// SetMode replaces how descriptors are counted and answered: a call is
// answered under the old Mode or the new one.
func (s *Service) SetMode(m Mode) { s.mode.Store(&m) }

// Register registers the rate limit service and the gRPC health service
// (grpc.health.v1, serving for "" and the rate limit service's name) on
// reg, for a caller that runs its own grpc.Server. Such a server reads
// messages under its own options: give it grpc.MaxRecvMsgSize of
// MaxRequestBytes at least, or a request of large descriptor values fails
// instead of being decided (requests over MaxDescriptors or MaxEntries
// are answered OVER_LIMIT either way, but decoded whole).
func (s *Service) Register(reg grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(reg, s)
	healthpb.RegisterHealthServer(reg, s.health)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
}

// SetToken replaces the token calls must carry, e.g. when a reload read a
// rotated token_file: the next call needs the new one. An empty token turns
// the check off.
func (s *Service) SetToken(token string) { s.token.Store(&token) }

// authorize refuses a rate limit call without the token, when there is
// one. Health checks pass: they reveal and spend nothing.
func (s *Service) authorize(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	token := *s.token.Load()
	if token == "" || !strings.HasPrefix(info.FullMethod, "/"+rlsv3.RateLimitService_ServiceDesc.ServiceName+"/") {
		return next(ctx, req)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if webguard.BearerValue(v, token) {
			return next(ctx, req)
		}
	}
	return nil, status.Error(codes.Unauthenticated, "send the rate limit service's token as the metadata authorization: Bearer <token> (Envoy: grpc_service.initial_metadata)")
}

// Serve serves the service and the health service on ln until Shutdown.
// It returns nil after Shutdown.
func (s *Service) Serve(ln net.Listener) error {
	// Calls run on a pool of stream workers instead of a new goroutine
	// per call, whose stack grew anew on every call. A worker is busy for
	// the whole call, Redis's round trip included, and gRPC starts a new
	// goroutine when every worker is busy: so there are as many as the
	// calls one instance keeps in flight (StreamWorkers).
	opts := append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(s.authorize), grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.ForceServerCodecV2(boundedCodec{encoding.GetCodecV2(proto.Name)}),
		grpc.NumStreamWorkers(StreamWorkers)}, s.serverOpts...)
	if s.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls)))
	}
	srv := grpc.NewServer(opts...)
	s.Register(srv)
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.srv = srv
	s.mu.Unlock()
	err := srv.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Shutdown reports NOT_SERVING, then stops gracefully until ctx ends, when
// the calls still running are cut off.
func (s *Service) Shutdown(ctx context.Context) error {
	s.health.Shutdown()
	s.mu.Lock()
	srv := s.srv
	s.stopped = true
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

// units are the Envoy units that are exact durations, longest first.
var units = [...]struct {
	d time.Duration
	u rlsv3.RateLimitResponse_RateLimit_Unit
}{
	{365 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_YEAR},
	{30 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH},
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
// real one. A rate above 2^32-1 is capped. It fills cl, empty, and
// returns it.
func currentLimit(cl *rlsv3.RateLimitResponse_RateLimit, l floodgate.Limit, name string) *rlsv3.RateLimitResponse_RateLimit {
	q, w := l.Rate, l.Period
	if w%time.Second != 0 {
		qs, ws := httplimit.Quota(l)
		q, w = qs, time.Duration(ws)*time.Second
	}
	cl.Name, cl.RequestsPerUnit = name, uint32(min(q, math.MaxUint32))
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

// limiter returns the limiter that decides r: the configured one of its
// policy, or for a rule of requests_per_unit 0 one that denies everything.
func (rs *ruleSet) limiter(r *envoyrules.Rule) floodgate.Limiter {
	if r.Blocked {
		return blocked(r.Policy)
	}
	return rs.limiters[r.Policy]
}

// ruleName is how a rule is named in logs and to OnShadow: its rate_limit
// name, else its metric key.
func ruleName(r *envoyrules.Rule) string {
	if r.Name != "" {
		return r.Name
	}
	return r.MetricKey
}

// blocked is the limiter of a rule with requests_per_unit 0: every request
// is denied, and can never pass.
type blocked string

func (b blocked) Name() string { return string(b) }

func (b blocked) AllowN(_ context.Context, _ string, cost int64) (floodgate.Result, error) {
	if cost == 0 {
		return floodgate.Result{Allowed: true, Source: floodgate.SourcePolicy, Policy: string(b)}, nil
	}
	return floodgate.Result{RetryAfter: floodgate.RetryNever, Source: floodgate.SourcePolicy, Policy: string(b)}, nil
}

func (blocked) RefundN(context.Context, string, int64) error { return nil }
func (blocked) Reset(context.Context, string) error          { return nil }

// ReserveN reserves nothing: the units can never pass.
func (b blocked) ReserveN(ctx context.Context, key string, cost int64) (*floodgate.Reservation, error) {
	res, err := b.AllowN(ctx, key, cost)
	return &floodgate.Reservation{OK: res.Allowed, Delay: res.RetryAfter, Result: res}, err
}
