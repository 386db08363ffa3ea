package telemetry

import (
	"context"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/metrics"
)

// The attributes of a decision's span.
const (
	AttrPolicy   = attribute.Key("floodgate.policy")
	AttrDecision = attribute.Key("floodgate.decision")
	AttrSource   = attribute.Key("floodgate.source")
	AttrCost     = attribute.Key("floodgate.cost")
	AttrKey      = attribute.Key("floodgate.key")
)

// DecisionSpan is the name of a decision's span.
const DecisionSpan = "floodgate.decide"

// Limiter returns l with a span around each decision (AllowN and ReserveN,
// what the front ends call): DecisionSpan, a child of the span in the
// call's context, with the policy (l's name), the cost, the decision
// (allowed, denied, error, as the metrics name it) and the source that
// decided (the engine, or the failure policy: fail-open, fail-closed) as
// attributes. The key is an attribute as it is with rawKeys, and as the
// logs' stand-in for it (floodgate.RedactKey) without. With t nil, l.
func (t *Telemetry) Limiter(l floodgate.Limiter, rawKeys bool) floodgate.Limiter {
	if t == nil || t.tp == nil || l == nil {
		return l
	}
	return &limiter{Limiter: l, t: t, policy: AttrPolicy.String(l.Name()), rawKeys: rawKeys}
}

type limiter struct {
	floodgate.Limiter
	t       *Telemetry
	policy  attribute.KeyValue
	rawKeys bool
}

// Unwrap returns the wrapped Limiter.
func (l *limiter) Unwrap() floodgate.Limiter { return l.Limiter }

func (l *limiter) start(ctx context.Context, key string, cost int64) (context.Context, trace.Span) {
	ctx, span := l.t.tracer.Start(ctx, DecisionSpan, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		k := key
		if !l.rawKeys {
			k = floodgate.RedactKey(key)
		}
		span.SetAttributes(l.policy, AttrCost.Int64(cost), AttrKey.String(k))
	}
	return ctx, span
}

func end(span trace.Span, res floodgate.Result, err error) {
	if span.IsRecording() {
		span.SetAttributes(AttrDecision.String(metrics.Outcome(res, err)))
		if res.Source != "" {
			span.SetAttributes(AttrSource.String(string(res.Source)))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// AllowN decides in a span.
func (l *limiter) AllowN(ctx context.Context, key string, cost int64) (floodgate.Result, error) {
	ctx, span := l.start(ctx, key, cost)
	res, err := l.Limiter.AllowN(ctx, key, cost)
	end(span, res, err)
	return res, err
}

// ReserveN reserves in a span; a reservation is allowed when its units
// were taken, whatever their wait.
func (l *limiter) ReserveN(ctx context.Context, key string, cost int64) (*floodgate.Reservation, error) {
	ctx, span := l.start(ctx, key, cost)
	r, err := l.Limiter.ReserveN(ctx, key, cost)
	var res floodgate.Result
	if r != nil {
		res = r.Result
	}
	end(span, res, err)
	return r, err
}

// HTTP returns h in a server span per request, named operation, that
// continues the caller's W3C trace context (traceparent, tracestate,
// baggage) and records OpenTelemetry's HTTP server metrics
// (http.server.request.duration and the body sizes). With forward, the
// request's trace context headers are replaced by the server span's before
// h sees it, so that a reverse proxy passes floodgate's span to the
// upstream as its parent. With t nil, h.
func (t *Telemetry) HTTP(operation string, h http.Handler, forward bool) http.Handler {
	if t == nil {
		return h
	}
	inner := h
	if forward {
		inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t.prop.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
			h.ServeHTTP(w, r)
		})
	}
	return otelhttp.NewHandler(inner, operation, otelhttp.WithTracerProvider(t.traces),
		otelhttp.WithMeterProvider(t.meters), otelhttp.WithPropagators(t.prop))
}

// GRPC returns the gRPC server options that put each call in a server span
// continuing the caller's trace context (gRPC metadata traceparent) and
// record OpenTelemetry's RPC server metrics. With t nil, none.
func (t *Telemetry) GRPC() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(t.traces),
		otelgrpc.WithMeterProvider(t.meters), otelgrpc.WithPropagators(t.prop)))}
}
