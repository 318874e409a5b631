package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestResourceNamesTheService: the resource carries the service's name,
// version and instance ID with the configured attributes, and the
// standard variables win over the configuration.
func TestResourceNamesTheService(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	c := Config{ResourceAttributes: map[string]string{"deployment.environment.name": "test"}}
	res, err := Resource(context.Background(), c, "narratoria-x", "1.2.3", "inst-1")
	require.NoError(t, err)
	attrs := map[string]string{}
	for _, kv := range res.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	require.Equal(t, "narratoria-x", attrs["service.name"])
	require.Equal(t, "1.2.3", attrs["service.version"])
	require.Equal(t, "inst-1", attrs["service.instance.id"])
	require.Equal(t, "test", attrs["deployment.environment.name"])
	require.NotEmpty(t, attrs["telemetry.sdk.version"])

	c.ServiceName = "game"
	res, err = Resource(context.Background(), c, "narratoria-x", "1.2.3", "inst-1")
	require.NoError(t, err)
	name, _ := res.Set().Value("service.name")
	require.Equal(t, "game", name.AsString(), "otel.serviceName replaces the component's")

	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=prod")
	res, err = Resource(context.Background(), c, "narratoria-x", "1.2.3", "inst-1")
	require.NoError(t, err)
	name, _ = res.Set().Value("service.name")
	require.Equal(t, "from-env", name.AsString(), "OTEL_SERVICE_NAME wins")
	env, _ := res.Set().Value("deployment.environment.name")
	require.Equal(t, "prod", env.AsString(), "OTEL_RESOURCE_ATTRIBUTES wins")
}

// TestSetupExportsToTheConfiguredEndpoint: with only otel.endpoint set (no
// OTEL_* variable), spans reach that collector over OTLP/HTTP with the
// service's resource.
func TestSetupExportsToTheConfiguredEndpoint(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SERVICE_NAME",
		"OTEL_RESOURCE_ATTRIBUTES", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_TRACES_SAMPLER"} {
		t.Setenv(k, "")
	}
	var mu sync.Mutex
	services := map[string]int{}
	var paths []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if proto.Unmarshal(body, &req) == nil {
			mu.Lock()
			paths = append(paths, r.URL.Path)
			for _, rs := range req.ResourceSpans {
				for _, kv := range rs.Resource.GetAttributes() {
					if kv.Key == "service.name" {
						services[kv.Value.GetStringValue()] += len(rs.ScopeSpans)
					}
				}
			}
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	prev := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	require.False(t, Config{}.Enabled())
	c := Config{Endpoint: collector.URL}
	require.True(t, c.Enabled())
	shutdown, err := Setup(context.Background(), c, "narratoria-test", "1.2.3")
	require.NoError(t, err)
	_, span := Tracer("test").Start(context.Background(), "test.span")
	span.End()
	require.NoError(t, shutdown(context.Background()))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, services["narratoria-test"], "one span of narratoria-test exported: %v", services)
	require.Equal(t, []string{"/v1/traces"}, paths)

	_, err = Setup(context.Background(), Config{SampleRatio: 2}, "narratoria-test", "1.2.3")
	require.ErrorContains(t, err, "otel.sampleRatio")
}
