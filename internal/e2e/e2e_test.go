// Package e2e runs the built binaries as a user would: `narratoria up` with
// the sample skills, then the client commands, all as subprocesses.
package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// build puts the binary of pkg (such as "./cmd/narratoria") at dir/out
// (natstest.Install: linked once per run, then linked or copied).
func build(t *testing.T, dir, out, pkg string) string {
	t.Helper()
	return natstest.Install(t, filepath.Join("../..", pkg), filepath.Join(dir, out))
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// copyDir copies the repo's skills folder (scripts keep their modes).
func copyDir(t *testing.T, src, dst string) {
	require.NoError(t, filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if strings.HasPrefix(rel, ".bin") || strings.Contains(rel, string(filepath.Separator)+"data") {
			return nil
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	}))
}

func TestFirstRun(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	dir := testlog.OpenTempDir(t) // scripts run as a user of their own reach the skills
	creds := upCreds(dir)
	narratoria := build(t, dir, "narratoria", "./cmd/narratoria")
	skills := filepath.Join(dir, "skills")
	copyDir(t, "../../skills", skills)
	build(t, filepath.Join(skills, ".bin"), "narratoria-skills", "./cmd/narratoria-skills")

	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	ready := filepath.Join(dir, "ready")
	// startUp runs `narratoria up` on the same data dir; stop ends it with
	// SIGINT (Ctrl-C) and waits.
	startUp := func() (stop func()) {
		_ = os.Remove(ready)
		var upOut bytes.Buffer
		up := exec.Command(narratoria, "up", "--data-dir", filepath.Join(dir, "data"), "--nats-port", strconv.Itoa(port),
			"--metrics-port", "0", "--console-port", "-1", "--skills-dir", skills, "--ready-file", ready)
		up.Stdout, up.Stderr = &upOut, &upOut
		require.NoError(t, up.Start())
		var once sync.Once
		stop = func() {
			once.Do(func() {
				_ = up.Process.Signal(syscall.SIGINT)
				done := make(chan struct{})
				go func() { _ = up.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(15 * time.Second):
					_ = up.Process.Kill()
					t.Errorf("narratoria up did not stop on SIGINT")
				}
				if t.Failed() {
					t.Log(upOut.String())
				}
			})
		}
		t.Cleanup(stop)
		require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, testlog.Budget(60*time.Second), 100*time.Millisecond)
		return stop
	}
	stopUp := startUp()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var watchOut bytes.Buffer
	watch := exec.CommandContext(ctx, narratoria, "watch", "--nats-url", url, "--creds", creds, "--session", "demo")
	watch.Stdout = &watchOut
	require.NoError(t, watch.Start())
	time.Sleep(300 * time.Millisecond) // let watch subscribe

	// The embedded server refuses a prompt on the literal
	// narratoria.prompts.* with an error to its publisher.
	lnc, err := nats.Connect(url, nats.UserCredentials(creds))
	require.NoError(t, err)
	ljs, err := jetstream.New(lnc)
	require.NoError(t, err)
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = ljs.Publish(lctx, "narratoria.prompts.*", []byte(`{"text":"to every session"}`))
	lcancel()
	lnc.Close()
	require.Error(t, err, "a prompt on the literal narratoria.prompts.* is refused")

	prompt := exec.Command(narratoria, "prompt", "--nats-url", url, "--creds", creds, "--session", "demo", "I roll to pick the lock")
	out, err := prompt.CombinedOutput()
	require.NoError(t, err, string(out))
	text := string(out)
	require.Contains(t, text, "The dice tumble: 1d20 comes up")
	require.Contains(t, text, "you roll to pick the lock")

	state, err := exec.Command(narratoria, "state", "--nats-url", url, "--creds", creds, "demo").CombinedOutput()
	require.NoError(t, err, string(state))
	require.Contains(t, string(state), "lastRoll")

	time.Sleep(300 * time.Millisecond)
	cancel()
	_ = watch.Wait()
	require.Contains(t, watchOut.String(), `"type":"ui_event","event":"dice_roll"`, "watch shows the script events")
	require.Contains(t, watchOut.String(), "narration:")

	// Ctrl-C, then a second `up` on the same data dir resumes where the first stopped.
	stopUp()
	startUp()
	state2, err := exec.Command(narratoria, "state", "--nats-url", url, "--creds", creds, "demo").CombinedOutput()
	require.NoError(t, err, string(state2))
	require.JSONEq(t, string(state), string(state2), "the session state survived the restart")
	out, err = exec.Command(narratoria, "prompt", "--nats-url", url, "--creds", creds, "--session", "demo", "I roll again").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "comes up")

	// Context re-planning (§9.1) with the sample skills: the storyteller
	// asks for memories it lacks; the rule-based planner adds a recall and
	// runs the storyteller again with them.
	out, err = exec.Command(narratoria, "prompt", "--nats-url", url, "--creds", creds, "--session", "demo", "Store this memory: the knight Aldric guards the old bridge").CombinedOutput()
	require.NoError(t, err, string(out))
	out, err = exec.Command(narratoria, "prompt", "--nats-url", url, "--creds", creds, "--session", "demo", "Have I met the knight before?").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "You remember:", "the storyteller got the recalled memories")
	require.Contains(t, string(out), "Aldric")
}

// TestFirstRunWithoutBuildStep: `narratoria up` on a fresh copy of the
// sample skills, whose Go skills binary was never built (what `go run
// ./cmd/narratoria up` meets): the wrappers run the skills through the
// narratoria binary itself, and the first prompt is narrated at the first
// attempt with the dice-roller and the storyteller.
func TestFirstRunWithoutBuildStep(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	narratoria, url, creds := upFresh(t)
	out, err := exec.Command(narratoria, "prompt", "--json", "--nats-url", url, "--creds", creds, "--session", "fresh",
		"I roll to pick the lock").CombinedOutput()
	require.NoError(t, err, string(out))
	var n messages.Narration
	require.NoError(t, json.Unmarshal(out, &n), string(out))
	require.False(t, n.Fallback, string(out))
	require.Equal(t, 1, n.Attempts, "narrated at the first attempt")
	require.Empty(t, n.DisabledSkills)
	require.Contains(t, n.Text, "The dice tumble")
	require.Contains(t, n.Text, "you roll to pick the lock")
}

// TestUpExportsTraces: `narratoria up` with OTEL_EXPORTER_OTLP_ENDPOINT
// set exports, over OTLP/HTTP, one trace per prompt whose spans cover the
// narrator, the scheduler, the worker and the script.
func TestUpExportsTraces(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	var mu sync.Mutex
	spans := map[string][]string{} // trace ID -> span names
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err == nil {
			mu.Lock()
			for _, rs := range req.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					for _, s := range ss.Spans {
						id := hex.EncodeToString(s.TraceId)
						spans[id] = append(spans[id], s.Name)
					}
				}
			}
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()

	narratoria, url, creds := upFresh(t, "OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL, "OTEL_BSP_SCHEDULE_DELAY=100")
	out, err := exec.Command(narratoria, "prompt", "--nats-url", url, "--creds", creds, "--session", "otel",
		"I roll to pick the lock").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, names := range spans {
			all := strings.Join(names, ",")
			if strings.Contains(all, "narrator.prompt") && strings.Contains(all, "scheduler.plan") &&
				strings.Contains(all, "skillworker.job") && strings.Contains(all, "script.run") {
				return true
			}
		}
		return false
	}, testlog.Budget(20*time.Second), 100*time.Millisecond, "one exported trace covers the narrator, the scheduler, the worker and the script")
}

// upFresh builds narratoria, copies the sample skills without their built
// binary (as a fresh clone has them) and runs `narratoria up` on them with
// env added, until the test ends; it returns the binary and the NATS URL.
func upFresh(t *testing.T, env ...string) (bin, url, creds string) {
	t.Helper()
	bin, url, dir := startUp(t, nil, env...)
	creds = upCreds(dir)
	return bin, url, creds
}

// upCreds are the client credentials `narratoria up` writes into its data
// folder under dir: nothing gets in without them.
func upCreds(dir string) string { return filepath.Join(dir, "data", "narratoria.creds") }

// startUp is upFresh with more flags for `narratoria up` (a later flag
// wins over the defaults), and returns the folder whose data/ and ready
// file it uses.
func startUp(t *testing.T, flags []string, env ...string) (bin, url, dir string) {
	t.Helper()
	dir = testlog.OpenTempDir(t) // scripts run as a user of their own reach the skills
	bin = build(t, dir, "narratoria", "./cmd/narratoria")
	skills := filepath.Join(dir, "skills")
	copyDir(t, "../../skills", skills)
	_ = os.RemoveAll(filepath.Join(skills, ".bin"))
	port := freePort(t)
	ready := filepath.Join(dir, "ready")
	var upOut bytes.Buffer
	args := append([]string{"up", "--data-dir", filepath.Join(dir, "data"), "--nats-port", strconv.Itoa(port),
		"--metrics-port", "0", "--console-port", "0", "--skills-dir", skills, "--ready-file", ready}, flags...)
	up := exec.Command(bin, args...)
	up.Env = append(os.Environ(), env...)
	up.Stdout, up.Stderr = &upOut, &upOut
	require.NoError(t, up.Start())
	t.Cleanup(func() {
		_ = up.Process.Signal(syscall.SIGINT)
		_ = up.Wait()
		if t.Failed() {
			t.Log(upOut.String())
		}
	})
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, testlog.Budget(60*time.Second), 100*time.Millisecond)
	return bin, "nats://127.0.0.1:" + strconv.Itoa(port), dir
}
