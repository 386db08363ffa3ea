// Package grpclimit is floodgate's rate limiter for gRPC servers: unary and
// stream server interceptors with per-method policies, and a client
// interceptor that waits out a limit the server reports.
//
//	lim, err := grpclimit.New(grpclimit.Config{Rules: []grpclimit.Rule{{Limiter: api}}})
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(lim.Unary()),
//		grpc.ChainStreamInterceptor(lim.Stream()),
//	)
//
// A call that a limit denies fails with RESOURCE_EXHAUSTED before its
// handler runs. The status carries a google.rpc.RetryInfo detail with the
// delay after which the same call passes (none when it can never pass) and a
// QuotaFailure naming the policy. Every decided call, denied or not, gets
// the rate-limit state in its response header metadata, the fields of
// package httplimit in lower case: ratelimit-policy and ratelimit
// (draft-ietf-httpapi-ratelimit-headers), x-ratelimit-limit,
// x-ratelimit-remaining and x-ratelimit-reset, and retry-after on denials.
// A limiter whose engine failed closed answers UNAVAILABLE: the server, not
// the client, is at fault.
//
// A call is keyed by default by its peer address, through package
// clientip's trusted-proxy rules: an x-forwarded-for metadata entry (or the
// header Config.ClientIP names) is read only when the peer is a trusted
// proxy, such as an Envoy in front of the server. KeyByMetadata keys by an
// API key the caller sends; any func(ctx, method) string will do.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/httplimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrInvalidConfig is wrapped by every error New returns.
var ErrInvalidConfig = errors.New("grpclimit: invalid config")

// A KeyFunc returns the key of a call to fullMethod
// ("/package.Service/Method"). It runs on every call, so it must be cheap
// and safe for concurrent use.
type KeyFunc func(ctx context.Context, fullMethod string) string

// A Rule is one limit of the interceptors: the methods it applies to, the
// limiter that decides and the key and cost of a call.
type Rule struct {
	// Limiter decides every call the rule matches. It must be set: nil is
	// an error New reports.
	Limiter floodgate.Limiter

	// Methods are the full method names the rule applies to
	// ("/pkg.Service/Method"), or service prefixes ending in a slash
	// ("/pkg.Service/"). Empty, the zero value, means every method.
	Methods []string

	// Key returns the key of a call; nil means its client address (see
	// Config.ClientIP).
	Key KeyFunc

	// Cost returns the units a call costs; nil means 1. A negative cost is
	// a bug: the call fails with INTERNAL.
	Cost func(ctx context.Context, fullMethod string) int64

	// Count selects the calls that count: httplimit.CountFailed keeps the
	// charge only for calls that end with a code other than OK (guessed
	// credentials), CountSuccessful only for those that end OK. The call is
	// charged before its handler runs and refunded when it ends. The zero
	// value, CountAll, counts every call.
	Count httplimit.Count
}

// Config configures the interceptors.
type Config struct {
	// Rules are the limits a call must pass; empty is an error (New
	// reports it). Every rule that matches a call is checked, in order;
	// when one denies, the others are refunded.
	Rules []Rule

	// ClientIP says which peers are trusted proxies and which metadata
	// entry they report the client in (clientip.Config.Header, read in
	// lower case; x-forwarded-for by default). The zero value trusts no
	// one: the key is the peer address.
	ClientIP clientip.Config

	// Headers selects the rate-limit fields of the response metadata; the
	// zero value sends them all.
	Headers httplimit.Headers

	// OnLimited returns the error of every refused call: a limit's denial,
	// and the refusals no limit made, whose Result's Source says why
	// (floodgate.SourceFailClosed or httplimit.SourceError: the limiter
	// failed; httplimit.SourceInvalidCost: a negative cost), so that one
	// function shapes them all (details of the service's own). The
	// rate-limit metadata is set when it runs. Nil means RESOURCE_EXHAUSTED
	// with RetryInfo and QuotaFailure for a denial, UNAVAILABLE for a
	// limiter that failed, INTERNAL for an invalid cost.
	OnLimited func(ctx context.Context, fullMethod string, res floodgate.Result) error

	// OnError decides about a call whose limiter could not decide: nil
	// lets the call through, an error fails it with that error (a status
	// error, such as status.Error(codes.Unavailable, ...)). Nil means the
	// call is served. Errors are logged to Logger (nil: slog.Default()) at
	// most once a second, keys redacted unless LogKeys is set.
	OnError func(ctx context.Context, fullMethod string, err error) error

	// Logger receives limiter errors; nil means slog.Default().
	Logger *slog.Logger

	// LogKeys logs keys as they are; false logs floodgate.RedactKey's
	// stand-ins.
	LogKeys bool
}

// Interceptors limits gRPC calls. It is safe for concurrent use.
type Interceptors struct {
	d         *httplimit.Evaluator
	rules     []Rule
	onError   func(context.Context, string, error) error
	onLimited func(context.Context, string, floodgate.Result) error
}

// New validates cfg and returns its interceptors.
func New(cfg Config) (*Interceptors, error) {
	var errs []error
	if n := len(cfg.Rules); n == 0 || n > httplimit.MaxRules {
		errs = append(errs, fmt.Errorf("%w: %d rules; give 1 to %d", ErrInvalidConfig, n, httplimit.MaxRules))
	}
	d, err := httplimit.NewEvaluator(httplimit.EvaluatorConfig{Headers: cfg.Headers, Logger: cfg.Logger, LogKeys: cfg.LogKeys})
	if err != nil {
		errs = append(errs, err)
	}
	pk, err := httplimit.NewPeerKeyer(cfg.ClientIP)
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: ClientIP: %w", ErrInvalidConfig, err))
	}
	rules := append([]Rule(nil), cfg.Rules...)
	for i := range rules {
		r := &rules[i]
		if r.Limiter == nil {
			errs = append(errs, fmt.Errorf("%w: rule %d has no Limiter", ErrInvalidConfig, i+1))
		}
		if r.Count > httplimit.CountSuccessful {
			errs = append(errs, fmt.Errorf("%w: rule %d: unknown Count %d", ErrInvalidConfig, i+1, r.Count))
		}
		if r.Key == nil && pk != nil {
			r.Key = KeyByPeer(pk)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Interceptors{d: d, rules: rules, onError: cfg.OnError, onLimited: cfg.OnLimited}, nil
}

// KeyByPeer keys calls by client address as k resolves it from the peer
// and, from a trusted proxy only, the metadata entry k.Header names.
func KeyByPeer(k *httplimit.PeerKeyer) KeyFunc {
	name := strings.ToLower(k.Header())
	return func(ctx context.Context, _ string) string {
		var addr netip.AddrPort
		if p, ok := peer.FromContext(ctx); ok {
			if a, ok := p.Addr.(*net.TCPAddr); ok {
				addr = a.AddrPort()
			}
		}
		var lines []string
		if name != "" {
			if md, ok := metadata.FromIncomingContext(ctx); ok {
				lines = md[name]
			}
		}
		return k.Key(addr, lines)
	}
}

// KeyByMetadata keys calls by the first value of a metadata entry, such as
// an API key: "<name>:<value>", or, when the call has none, "ip:" and the
// key of fallback (nil: the peer address). The caller writes the entry, so
// use it for values the server checks before the limiter runs.
func KeyByMetadata(name string, fallback KeyFunc) KeyFunc {
	name = strings.ToLower(name)
	tag := name + ":"
	if fallback == nil {
		pk, _ := httplimit.NewPeerKeyer(clientip.Config{})
		fallback = KeyByPeer(pk)
	}
	return func(ctx context.Context, method string) string {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md[name]; len(v) > 0 && strings.TrimSpace(v[0]) != "" {
				return tag + strings.TrimSpace(v[0])
			}
		}
		return "ip:" + fallback(ctx, method)
	}
}

func (r *Rule) matches(method string) bool {
	if len(r.Methods) == 0 {
		return true
	}
	for _, m := range r.Methods {
		if m == method || (strings.HasSuffix(m, "/") && strings.HasPrefix(method, m)) {
			return true
		}
	}
	return false
}

// decide checks a call. A nil error means serve it; v then says whether it
// must be settled.
func (in *Interceptors) decide(ctx context.Context, method string, v *httplimit.Answer, setHeader func(metadata.MD) error) error {
	var charges [httplimit.MaxRules]httplimit.Charge
	n := 0
	for i := range in.rules {
		r := &in.rules[i]
		if !r.matches(method) {
			continue
		}
		cost := int64(1)
		if r.Cost != nil {
			cost = r.Cost(ctx, method)
		}
		charges[n] = httplimit.Charge{Limiter: r.Limiter, Key: r.Key(ctx, method), Cost: cost, Count: r.Count}
		n++
	}
	in.d.Evaluate(ctx, v, charges[:n]...)
	if err := v.Err(); err != nil {
		if in.onError != nil {
			return in.onError(ctx, method, err)
		}
		return nil
	}
	// The fields share one backing array: one allocation for all values.
	// The values of one name (RateLimit-Policy) come one after another.
	var md metadata.MD
	var vals []string
	last, start := "", 0
	v.Headers(func(name, value string) {
		if md == nil {
			md, vals = make(metadata.MD, 8), make([]string, 0, 8+httplimit.MaxRules)
		}
		k := lowerName(name)
		if k != last {
			last, start = k, len(vals)
		}
		vals = append(vals, value)
		md[k] = vals[start:len(vals):len(vals)]
	})
	if md != nil {
		setHeader(md) // fails only once headers were sent: not yet
	}
	st := v.Status()
	if st != 0 && in.onLimited != nil {
		return in.onLimited(ctx, method, v.Result())
	}
	switch st {
	case 0:
		return nil
	case 429:
		return exhausted(v.Result())
	case 503:
		return status.Error(codes.Unavailable, "rate limiter unavailable; retry shortly")
	default:
		return status.Error(codes.Internal, "rate limiter given an invalid call cost")
	}
}

// exhausted is the status of a denied call: RESOURCE_EXHAUSTED with a
// RetryInfo (unless the call can never pass) and a QuotaFailure.
func exhausted(res floodgate.Result) error {
	st := status.New(codes.ResourceExhausted, "rate limit exceeded: "+res.Policy)
	qf := &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject:     "policy:" + res.Policy,
		Description: "the call costs more than the limit admits at once; it can never pass",
	}}}
	var err error
	if res.RetryAfter == floodgate.RetryNever {
		st, err = st.WithDetails(qf)
	} else {
		qf.Violations[0].Description = "retry after " + res.RetryAfter.String()
		st, err = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(res.RetryAfter)}, qf)
	}
	if err != nil {
		// The details are well-formed messages; marshalling them cannot
		// fail, but a status without them still says what happened.
		return status.Error(codes.ResourceExhausted, "rate limit exceeded: "+res.Policy)
	}
	return st.Err()
}

// lowerName is a header field name as a metadata key. The fields a
// Answer writes are few and fixed; others are lowered as they come.
func lowerName(name string) string {
	switch name {
	case "X-Ratelimit-Limit":
		return "x-ratelimit-limit"
	case "X-Ratelimit-Remaining":
		return "x-ratelimit-remaining"
	case "X-Ratelimit-Reset":
		return "x-ratelimit-reset"
	case "X-Ratelimit-Source":
		return "x-ratelimit-source"
	case "Retry-After":
		return "retry-after"
	case "Ratelimit":
		return "ratelimit"
	case "Ratelimit-Policy":
		return "ratelimit-policy"
	}
	return strings.ToLower(name)
}

// code2status maps the end of a call to the status its count rules read:
// OK is a success, any other code a failure.
func code2status(err error) int {
	if status.Code(err) == codes.OK {
		return 200
	}
	return 500
}

// Unary returns the unary server interceptor.
func (in *Interceptors) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		var v httplimit.Answer
		if err := in.decide(ctx, info.FullMethod, &v, func(md metadata.MD) error { return grpc.SetHeader(ctx, md) }); err != nil {
			return nil, err
		}
		var resp any
		var err error
		v.Serve(func() int {
			resp, err = handler(ctx, req)
			return code2status(err)
		}, nil)
		return resp, err
	}
}

// Stream returns the stream server interceptor. A stream is decided once,
// when it opens; count rules settle when its handler returns.
func (in *Interceptors) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		var v httplimit.Answer
		if err := in.decide(ss.Context(), info.FullMethod, &v, ss.SetHeader); err != nil {
			return err
		}
		var err error
		v.Serve(func() int {
			err = handler(srv, ss)
			return code2status(err)
		}, nil)
		return err
	}
}

// RetryDelay returns the delay of a RESOURCE_EXHAUSTED error's RetryInfo
// detail, and whether it has one.
func RetryDelay(err error) (time.Duration, bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, isRI := d.(*errdetails.RetryInfo); isRI && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}
