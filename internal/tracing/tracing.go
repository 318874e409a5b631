// Package tracing carries OpenTelemetry traces through Narratoria: W3C
// trace context in NATS headers from prompt to plan to job to outcome to
// result to narration, persisted with a plan so a scheduler taking over
// continues the same trace, and passed to scripts as TRACEPARENT.
//
// Spans are made with the global tracer provider: a no-op unless Setup
// found an OTLP endpoint, in the configuration's otel section or in the
// standard OTEL_EXPORTER_OTLP_* variables, so tracing costs nothing when
// it is off. The trace context still travels
// either way, so a prompt sent with a traceparent keeps its trace ID.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// propagator is W3C trace context (the traceparent and tracestate headers).
var propagator = propagation.TraceContext{}

// Tracer returns the named tracer of the global provider.
func Tracer(component string) trace.Tracer {
	return otel.Tracer("github.com/narratoria/runtime/" + component)
}

// unset is the global tracer provider before anyone set one: it makes
// spans that record nothing.
var unset = otel.GetTracerProvider()

// On says whether a tracer provider was set (by Setup, or by a test):
// otherwise a span records nothing, and its context is its parent's.
func On() bool { return otel.GetTracerProvider() != unset }

// Start starts a span of the named component's tracer, as
// Tracer(component).Start does, when tracing is On. Otherwise it returns
// ctx and the span ctx holds (its parent's, which records nothing), without
// building the span's options: the same trace context travels on, and a
// tool's spans cost nothing (they were a few µs per tool of figure 9,
// their attributes built for nothing).
func Start(ctx context.Context, component, name string, opts func() []trace.SpanStartOption) (context.Context, trace.Span) {
	if !On() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return Tracer(component).Start(ctx, name, opts()...)
}

// Config is the otel section of the configuration file: where spans go
// and how they are described. Every setting has a standard OTEL_*
// variable that wins over it when set (docs/decisions/, "OpenTelemetry
// settings").
type Config struct {
	// Endpoint is the OTLP/HTTP collector: host:port (spans go to
	// /v1/traces, over HTTPS unless Insecure) or a URL, http://host:4318
	// or https://… (its path, /v1/traces when it has none). Empty: no
	// export unless OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, which win over it.
	Endpoint string `yaml:"endpoint"`
	// Insecure sends to a host:port Endpoint over plain HTTP. A URL's
	// scheme decides for itself (https with Insecure is an error).
	Insecure bool `yaml:"insecure"`
	// SampleRatio is the share of new traces recorded, 0..1; a trace
	// started by a caller follows the caller's decision. 0 means the
	// default, 1 (every trace). OTEL_TRACES_SAMPLER wins over it.
	SampleRatio float64 `yaml:"sampleRatio"`
	// ServiceName replaces the component's service name
	// (narratoria-narrator, …; narratoria for `narratoria up`).
	// OTEL_SERVICE_NAME wins over it.
	ServiceName string `yaml:"serviceName"`
	// ResourceAttributes are added to every span's resource
	// (deployment.environment.name, say). service.name, service.version
	// and service.instance.id are set by Narratoria and refused here.
	// OTEL_RESOURCE_ATTRIBUTES wins over them key by key.
	ResourceAttributes map[string]string `yaml:"resourceAttributes"`
}

// Validate checks the section, naming the key at fault.
func (c Config) Validate() error {
	if c.Endpoint != "" {
		if _, _, _, err := c.target(); err != nil {
			return err
		}
	}
	if c.SampleRatio < 0 || c.SampleRatio > 1 {
		return fmt.Errorf("otel.sampleRatio: %v must be between 0 and 1", c.SampleRatio)
	}
	for k := range c.ResourceAttributes {
		switch k {
		case "":
			return errors.New("otel.resourceAttributes: an empty key")
		case string(semconv.ServiceNameKey):
			return fmt.Errorf("otel.resourceAttributes: %s is set by otel.serviceName", k)
		case string(semconv.ServiceVersionKey), string(semconv.ServiceInstanceIDKey):
			return fmt.Errorf("otel.resourceAttributes: %s is set by Narratoria", k)
		}
	}
	return nil
}

// target splits Endpoint into host:port, URL path and whether it is
// plain HTTP.
func (c Config) target() (host, path string, insecure bool, err error) {
	if !strings.Contains(c.Endpoint, "://") {
		if strings.ContainsAny(c.Endpoint, "/?#") || !strings.Contains(c.Endpoint, ":") {
			return "", "", false, fmt.Errorf("otel.endpoint: %q is neither host:port nor an http(s) URL", c.Endpoint)
		}
		return c.Endpoint, "/v1/traces", c.Insecure, nil
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", "", false, fmt.Errorf("otel.endpoint: %q is neither host:port nor an http(s) URL", c.Endpoint)
	}
	if u.Scheme == "https" && c.Insecure {
		return "", "", false, fmt.Errorf("otel.insecure: true contradicts the https endpoint %q", c.Endpoint)
	}
	path = u.Path
	if path == "" || path == "/" {
		path = "/v1/traces"
	}
	return u.Host, path, u.Scheme == "http", nil
}

// envEndpoint reports whether an OTLP endpoint variable is set.
func envEndpoint() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Enabled reports whether spans are exported: an OTLP endpoint is
// configured (in c or the standard variables) and neither
// OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none turns it off.
func (c Config) Enabled() bool {
	if os.Getenv("OTEL_TRACES_EXPORTER") == "none" || os.Getenv("OTEL_SDK_DISABLED") == "true" {
		return false
	}
	return c.Endpoint != "" || envEndpoint()
}

// Setup installs an OTLP/HTTP exporter and a batching provider as the
// global tracer provider when c is enabled (see Config.Enabled); it
// returns the function that flushes and stops it (a no-op otherwise).
// Its spans' resource names the service (service, or c.ServiceName),
// its version and this process (a UUID made here), and an error building
// it stops Setup rather than exporting anonymous spans.
func Setup(ctx context.Context, c Config, service, version string) (func(context.Context) error, error) {
	otel.SetTextMapPropagator(propagator)
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if !c.Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	res, err := Resource(ctx, c, service, version, uuid.NewString())
	if err != nil {
		return nil, err
	}
	var opts []otlptracehttp.Option
	if c.Endpoint != "" && !envEndpoint() {
		host, path, insecure, _ := c.target()
		opts = append(opts, otlptracehttp.WithEndpoint(host), otlptracehttp.WithURLPath(path))
		if insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, err
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if c.SampleRatio > 0 && c.SampleRatio < 1 && os.Getenv("OTEL_TRACES_SAMPLER") == "" {
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// Resource describes a process's spans: service.name (c.ServiceName, else
// service), service.version, service.instance.id (instanceID), c's
// resource attributes, the SDK's and the host's, then
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES over them. It is built
// under one schema URL, the one of the SDK's semantic conventions, and
// any conflict is an error.
func Resource(ctx context.Context, c Config, service, version, instanceID string) (*resource.Resource, error) {
	if c.ServiceName != "" {
		service = c.ServiceName
	}
	keys := make([]string, 0, len(c.ResourceAttributes))
	for k := range c.ResourceAttributes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	attrs := make([]attribute.KeyValue, 0, len(keys)+3)
	for _, k := range keys {
		attrs = append(attrs, attribute.String(k, c.ResourceAttributes[k]))
	}
	attrs = append(attrs, semconv.ServiceName(service), semconv.ServiceVersion(version), semconv.ServiceInstanceID(instanceID))
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithAttributes(attrs...),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	return res, nil
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
