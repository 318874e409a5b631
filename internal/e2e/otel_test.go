package e2e

import (
	"debug/buildinfo"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// components are the three component commands and the service name each
// reports, in its traces and as its NATS micro service.
var components = map[string]string{
	"narrator":    "narratoria-narrator",
	"scheduler":   "narratoria-scheduler",
	"skillworker": "narratoria-skillworker",
}

// TestComponentsNameThemselves runs the narrator, the scheduler and the
// skill worker as their own processes against a real nats-server, with
// traces sent to an OTLP/HTTP collector named only in the configuration
// file's otel section. Each lists itself in NATS micro discovery
// ($SRV.INFO) with its binary's build version, and after one prompt the
// spans exported by each carry its service name, that version and a
// service.instance.id of its own.
func TestComponentsNameThemselves(t *testing.T) {
	t.Parallel()
	if os.Getenv("NARRATORIA_LONG") == "" {
		// It builds three more binaries; make test's traces are
		// TestUpExportsTraces's and its micro versions
		// TestClientCommandsAgainstUp's (internal/cli).
		t.Skip("builds and runs the three component binaries (make test-long)")
	}
	type seen struct {
		spans    int
		versions map[string]bool
		ids      map[string]bool
	}
	var mu sync.Mutex
	services := map[string]*seen{} // service.name -> what its spans said
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if proto.Unmarshal(body, &req) == nil {
			mu.Lock()
			for _, rs := range req.ResourceSpans {
				attrs := map[string]string{}
				for _, kv := range rs.GetResource().GetAttributes() {
					attrs[kv.Key] = kv.Value.GetStringValue()
				}
				s := services[attrs["service.name"]]
				if s == nil {
					s = &seen{versions: map[string]bool{}, ids: map[string]bool{}}
					services[attrs["service.name"]] = s
				}
				for _, ss := range rs.ScopeSpans {
					s.spans += len(ss.Spans)
				}
				s.versions[attrs["service.version"]] = true
				s.ids[attrs["service.instance.id"]] = true
			}
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()

	dir := testlog.OpenTempDir(t)
	srv := natstest.Start(t)
	skills := filepath.Join(dir, "skills")
	copyDir(t, "../../skills", skills)
	build(t, filepath.Join(skills, ".bin"), "narratoria-skills", "./cmd/narratoria-skills")
	cfg := filepath.Join(dir, "narratoria.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("otel:\n  endpoint: "+collector.URL+"\n"), 0o644))
	// Only the configuration names the collector.
	env := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_SERVICE_NAME=",
		"OTEL_RESOURCE_ATTRIBUTES=", "OTEL_SDK_DISABLED=", "OTEL_TRACES_EXPORTER=", "OTEL_BSP_SCHEDULE_DELAY=100",
		"NARRATORIA_LOG_LEVEL=warn"}
	versions := map[string]string{} // service name -> its binary's build version
	for cmd, service := range components {
		bin := build(t, dir, cmd, "./cmd/"+cmd)
		bi, err := buildinfo.ReadFile(bin)
		versions[service] = bus.BuildVersion(bi, err == nil)
		args := []string{"--config", cfg, "--nats-url", srv.URL()}
		if cmd == "skillworker" {
			args = append(args, "--skills-dir", skills)
		}
		startProc(t, dir, bin, cmd, args, env)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for cmd := range components {
				b, _ := os.ReadFile(filepath.Join(dir, cmd+".log"))
				t.Logf("%s:\n%s", cmd, b)
			}
		}
	})

	// Every narratoria service in micro discovery reports its build version.
	var infos []micro.Info
	require.Eventually(t, func() bool {
		infos = discover(t, srv.NC)
		found := map[string]bool{}
		for _, in := range infos {
			found[in.Name] = true
		}
		return len(found) == len(components) && found["narratoria-narrator"] && found["narratoria-scheduler"] && found["narratoria-skillworker"]
	}, testlog.Budget(60*time.Second), 200*time.Millisecond, "the three components list themselves in $SRV.INFO")
	for _, in := range infos {
		require.True(t, strings.HasPrefix(in.Name, "narratoria"), "only our services here: %s", in.Name)
		require.NotEmpty(t, in.Version, "%s reports a version", in.Name)
		require.Equal(t, versions[in.Name], in.Version, "%s reports its build version", in.Name)
	}

	// One prompt, narrated by a plan the worker runs.
	req, err := json.Marshal(messages.Prompt{SessionID: "otel", Text: "I roll to pick the lock"})
	require.NoError(t, err)
	reply, err := srv.NC.Request("narratoria.narrate", req, testlog.Budget(30*time.Second))
	require.NoError(t, err)
	var n messages.Narration
	require.NoError(t, json.Unmarshal(reply.Data, &n), string(reply.Data))

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, name := range components {
			if services[name] == nil || services[name].spans == 0 {
				return false
			}
		}
		return true
	}, testlog.Budget(20*time.Second), 100*time.Millisecond, "spans of all three services exported")
	mu.Lock()
	defer mu.Unlock()
	instances := map[string]string{}
	for name, s := range services {
		require.Contains(t, versions, name, "spans of an unknown service %q (unknown_service:* means the resource lost its name)", name)
		require.Equal(t, map[string]bool{versions[name]: true}, s.versions, "%s: service.version is its build version", name)
		require.Len(t, s.ids, 1, "%s: one service.instance.id", name)
		for id := range s.ids {
			require.NotEmpty(t, id, "%s: service.instance.id", name)
			require.NotContains(t, instances, id, "%s: its own service.instance.id", name)
			instances[id] = name
		}
	}
}

// discover asks every NATS micro service for its info ($SRV.INFO) and
// returns the answers that come within half a second.
func discover(t *testing.T, nc *nats.Conn) []micro.Info {
	t.Helper()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, nc.PublishRequest("$SRV.INFO", inbox, nil))
	var out []micro.Info
	deadline := time.Now().Add(500 * time.Millisecond)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			return out
		}
		var in micro.Info
		if json.Unmarshal(m.Data, &in) == nil {
			out = append(out, in)
		}
	}
}
