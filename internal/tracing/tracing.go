// Package tracing carries OpenTelemetry traces through Narratoria: W3C
// trace context in NATS headers from prompt to plan to job to outcome to
// result to narration, persisted with a plan so a scheduler taking over
// continues the same trace, and passed to scripts as TRACEPARENT.
//
// Spans are made with the global tracer provider: a no-op unless Setup
// found an OTLP endpoint in the standard OTEL_EXPORTER_OTLP_* variables,
// so tracing costs nothing when it is off. The trace context still travels
// either way, so a prompt sent with a traceparent keeps its trace ID.
package tracing

import (
	"context"
	"errors"
	"os"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// propagator is W3C trace context (the traceparent and tracestate headers).
var propagator = propagation.TraceContext{}

// Tracer returns the named tracer of the global provider.
func Tracer(component string) trace.Tracer {
	return otel.Tracer("github.com/narratoria/runtime/" + component)
}

// Enabled reports whether an OTLP endpoint is configured.
func Enabled() bool {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if os.Getenv(k) != "" {
			return os.Getenv("OTEL_TRACES_EXPORTER") != "none" && os.Getenv("OTEL_SDK_DISABLED") != "true"
		}
	}
	return false
}

// Setup installs an OTLP/HTTP exporter and a batching provider as the
// global tracer provider when an endpoint is configured (see Enabled); it
// returns the function that flushes and stops it (a no-op otherwise).
func Setup(ctx context.Context, service, version string) (func(context.Context) error, error) {
	otel.SetTextMapPropagator(propagator)
	if !Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, err
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName(service), semconv.ServiceVersion(version)))
	if err != nil {
		res = resource.Default()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// headerCarrier adapts nats.Header to the propagation API.
type headerCarrier nats.Header

// Get implements propagation.TextMapCarrier.
func (h headerCarrier) Get(k string) string { return nats.Header(h).Get(k) }

// Set implements propagation.TextMapCarrier.
func (h headerCarrier) Set(k, v string) { nats.Header(h).Set(k, v) }

// Keys implements propagation.TextMapCarrier.
func (h headerCarrier) Keys() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}

// Inject writes ctx's trace context into a message's headers.
func Inject(ctx context.Context, m *nats.Msg) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	propagator.Inject(ctx, headerCarrier(m.Header))
}

// Extract returns ctx with the trace context of a message's headers (ctx
// unchanged when it has none).
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return propagator.Extract(ctx, headerCarrier(h))
}

// Carrier returns ctx's trace context as a map, to persist it.
func Carrier(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	m := propagation.MapCarrier{}
	propagator.Inject(ctx, m)
	return m
}

// FromCarrier returns ctx with a persisted trace context.
func FromCarrier(ctx context.Context, m map[string]string) context.Context {
	if len(m) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier(m))
}

// Link returns ctx carrying the span context found in from (a context
// that holds only a remote parent): the work runs under ctx's lifetime and
// joins from's trace.
func Link(ctx, from context.Context) context.Context {
	if from == nil {
		return ctx
	}
	sc := trace.SpanContextFromContext(from)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, sc)
}

// TraceParent is the traceparent header value of ctx's span ("" when none),
// for a script's TRACEPARENT variable.
func TraceParent(ctx context.Context) string {
	return Carrier(ctx)["traceparent"]
}

// End records err on the span (when not nil) and ends it.
func End(span trace.Span, err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
