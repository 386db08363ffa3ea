// Package telemetry exports the daemon's metrics and a span per decision by
// OpenTelemetry's OTLP, as a configuration's telemetry section asks
// (docs/telemetry.md). It is the daemon's: floodgate's library packages
// never link OpenTelemetry (internal/boundary checks it).
//
// The metrics are the Prometheus ones, read from the daemon's registry when
// they are exported (through OpenTelemetry's Prometheus bridge) and named
// as OpenTelemetry names them: one set of counters feeds /metrics and OTLP
// alike, and exporting costs the request path nothing.
//
// The spans are made by the wrappers New's Telemetry hands out: Limiter
// (one span per decision, under the request's), HTTP (a server span per
// request, continuing the caller's W3C trace context and passing its own to
// the upstream) and GRPC (the same for the Envoy rate limit service). A nil
// *Telemetry is telemetry off: every wrapper then returns what it was given,
// so nothing is added to the request path.
package telemetry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/credentials"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/internal/buildinfo"
	"github.com/floodgate-go/floodgate/internal/certfile"
)

// ScopeName is the instrumentation scope of floodgate's spans and of the
// metrics read from its registry.
const ScopeName = "github.com/floodgate-go/floodgate"

// Telemetry is the daemon's OpenTelemetry: its providers and exporters.
// Build it with New, hand out its wrappers, and Shutdown it last, which
// exports what is left.
type Telemetry struct {
	tp     *sdktrace.TracerProvider // nil without traces
	mp     *sdkmetric.MeterProvider // nil without metrics
	tracer trace.Tracer             // a no-op one without traces
	meters metric.MeterProvider     // a no-op one without metrics
	traces trace.TracerProvider     // tp, or a no-op one
	prop   propagation.TextMapPropagator
}

// New starts exporting as c says: the metrics of g (the families named
// floodgate_*) every c.MetricsInterval, the spans the wrappers make as they
// end, batched. Export errors are logged on log. A nil c gives a nil *Telemetry: off. Nothing is dialled
// yet: an unreachable receiver shows as export errors in the log (through
// OpenTelemetry's error handler), never as a failing daemon.
func New(c *config.Telemetry, g prometheus.Gatherer, log *slog.Logger) (*Telemetry, error) {
	if c == nil {
		return nil, nil
	}
	// OpenTelemetry reports failed exports to its global handler; the
	// daemon's log is the place for them.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("telemetry: export failed", "error", err) }))
	res, err := newResource(c)
	if err != nil {
		return nil, err
	}
	tc, err := tlsConfig(c)
	if err != nil {
		return nil, err
	}
	t := &Telemetry{
		tracer: tracenoop.NewTracerProvider().Tracer(ScopeName),
		traces: tracenoop.NewTracerProvider(),
		meters: noop.NewMeterProvider(),
		prop:   propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}
	ctx := context.Background()
	if slices.Contains(c.Signals, config.TelemetryTraces) {
		exp, err := traceExporter(ctx, c, tc)
		if err != nil {
			return nil, fmt.Errorf("telemetry: traces: %w", err)
		}
		t.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SamplingRatio))))
		t.traces = t.tp
		t.tracer = t.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(buildinfo.Read().Version))
	}
	if slices.Contains(c.Signals, config.TelemetryMetrics) {
		exp, err := metricExporter(ctx, c, tc)
		if err != nil {
			t.Shutdown(ctx)
			return nil, fmt.Errorf("telemetry: metrics: %w", err)
		}
		reader := sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(c.MetricsInterval.D()),
			sdkmetric.WithProducer(Producer(g)))
		t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))
		t.meters = t.mp
	}
	return t, nil
}

// Shutdown exports what is left (the spans not yet sent, the metrics'
// last values) and stops the exporters, within ctx. A nil t does nothing.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	if t.tp != nil {
		errs = append(errs, t.tp.Shutdown(ctx))
	}
	if t.mp != nil {
		errs = append(errs, t.mp.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

func newResource(c *config.Telemetry) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{attribute.String("service.version", buildinfo.Read().Version)}
	// The configuration's service name wins over OTEL_SERVICE_NAME only
	// when it is not the default: the variable then names the instance.
	if _, env := os.LookupEnv("OTEL_SERVICE_NAME"); !env || c.ServiceName != "floodgate" {
		attrs = append(attrs, attribute.String("service.name", c.ServiceName))
	}
	for _, k := range slices.Sorted(maps.Keys(c.ResourceAttributes)) {
		attrs = append(attrs, attribute.String(k, c.ResourceAttributes[k]))
	}
	// Later detectors win: the environment's attributes over the
	// defaults, the configuration's over the environment's.
	r, err := resource.New(context.Background(), resource.WithTelemetrySDK(), resource.WithHost(),
		resource.WithFromEnv(), resource.WithAttributes(attrs...))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	return r, nil
}

// tlsConfig is the exporters' TLS: nil to leave it to the exporters (the
// system's roots, or the OTEL_EXPORTER_OTLP_CERTIFICATE variable), a
// config verifying against c.CAFile otherwise.
func tlsConfig(c *config.Telemetry) (*tls.Config, error) {
	if c.CAFile == "" || c.Insecure {
		return nil, nil
	}
	pool, err := certfile.Pool(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("telemetry: ca_file: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}

func isURL(endpoint string) bool { return strings.Contains(endpoint, "://") }

func traceExporter(ctx context.Context, c *config.Telemetry, tc *tls.Config) (sdktrace.SpanExporter, error) {
	if c.Protocol == config.TelemetryHTTP {
		var o []otlptracehttp.Option
		switch {
		case isURL(c.Endpoint):
			o = append(o, otlptracehttp.WithEndpointURL(strings.TrimSuffix(c.Endpoint, "/")+"/v1/traces"))
		case c.Endpoint != "":
			o = append(o, otlptracehttp.WithEndpoint(c.Endpoint))
		}
		if c.Insecure {
			o = append(o, otlptracehttp.WithInsecure())
		} else if tc != nil {
			o = append(o, otlptracehttp.WithTLSClientConfig(tc))
		}
		if len(c.Headers) > 0 {
			o = append(o, otlptracehttp.WithHeaders(c.Headers))
		}
		return otlptracehttp.New(ctx, o...)
	}
	var o []otlptracegrpc.Option
	switch {
	case isURL(c.Endpoint):
		o = append(o, otlptracegrpc.WithEndpointURL(c.Endpoint))
	case c.Endpoint != "":
		o = append(o, otlptracegrpc.WithEndpoint(c.Endpoint))
	}
	if c.Insecure {
		o = append(o, otlptracegrpc.WithInsecure())
	} else if tc != nil {
		o = append(o, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(tc)))
	}
	if len(c.Headers) > 0 {
		o = append(o, otlptracegrpc.WithHeaders(c.Headers))
	}
	return otlptracegrpc.New(ctx, o...)
}

func metricExporter(ctx context.Context, c *config.Telemetry, tc *tls.Config) (sdkmetric.Exporter, error) {
	if c.Protocol == config.TelemetryHTTP {
		var o []otlpmetrichttp.Option
		switch {
		case isURL(c.Endpoint):
			o = append(o, otlpmetrichttp.WithEndpointURL(strings.TrimSuffix(c.Endpoint, "/")+"/v1/metrics"))
		case c.Endpoint != "":
			o = append(o, otlpmetrichttp.WithEndpoint(c.Endpoint))
		}
		if c.Insecure {
			o = append(o, otlpmetrichttp.WithInsecure())
		} else if tc != nil {
			o = append(o, otlpmetrichttp.WithTLSClientConfig(tc))
		}
		if len(c.Headers) > 0 {
			o = append(o, otlpmetrichttp.WithHeaders(c.Headers))
		}
		return otlpmetrichttp.New(ctx, o...)
	}
	var o []otlpmetricgrpc.Option
	switch {
	case isURL(c.Endpoint):
		o = append(o, otlpmetricgrpc.WithEndpointURL(c.Endpoint))
	case c.Endpoint != "":
		o = append(o, otlpmetricgrpc.WithEndpoint(c.Endpoint))
	}
	if c.Insecure {
		o = append(o, otlpmetricgrpc.WithInsecure())
	} else if tc != nil {
		o = append(o, otlpmetricgrpc.WithTLSCredentials(credentials.NewTLS(tc)))
	}
	if len(c.Headers) > 0 {
		o = append(o, otlpmetricgrpc.WithHeaders(c.Headers))
	}
	return otlpmetricgrpc.New(ctx, o...)
}
