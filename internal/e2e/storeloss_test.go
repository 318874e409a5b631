package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/narrator"
	"github.com/narratoria/runtime/internal/scheduler"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// natsServerBinary builds nats-server (the version in go.mod) once per
// test binary.
var natsServerBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "narratoria-nats-server-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nats-server")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build nats-server: %v: %s", err, out)
	}
	return bin, nil
})

// standalone is one nats-server process on a fixed port and store, which a
// test can SIGKILL and start again on the same store.
type standalone struct {
	bin, conf string
	port      int
	cmd       *exec.Cmd
}

func startStandalone(t *testing.T, dir string) *standalone {
	t.Helper()
	bin, err := natsServerBinary()
	require.NoError(t, err)
	s := &standalone{bin: bin, port: freePort(t), conf: filepath.Join(dir, "nats.conf")}
	conf := fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q }\n", s.port, filepath.Join(dir, "store"))
	require.NoError(t, os.WriteFile(s.conf, []byte(conf), 0o644))
	s.start(t)
	return s
}

func (s *standalone) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

func (s *standalone) start(t *testing.T) {
	t.Helper()
	s.cmd = exec.Command(s.bin, "-c", s.conf)
	require.NoError(t, s.cmd.Start())
	cmd := s.cmd
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(t, func() bool {
		nc, err := nats.Connect(s.url())
		if err != nil {
			return false
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = js.AccountInfo(ctx)
		return err == nil
	}, 60*time.Second, 100*time.Millisecond, "nats-server ready")
}

// kill ends the server with SIGKILL, as an OOM kill or a power cut does.
func (s *standalone) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
}

// reconnecting connects to url and reconnects forever, as the components do.
func reconnecting(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// chainOfTally is a plan of n tally tools in a chain.
func chainOfTally(n int) *messages.Plan {
	p := &messages.Plan{RequestID: uuid.NewString(), Narrative: "chain", DisabledSkills: []string{},
		Metadata: messages.PlanMetadata{GenerationAttempt: 1}}
	var prev []string
	for i := range n {
		id := fmt.Sprintf("t%d", i)
		deps := append([]string{}, prev...)
		p.Tools = append(p.Tools, messages.Tool{ToolID: id, ToolPath: "tally/count", Input: json.RawMessage(`{}`),
			Dependencies: deps, Required: true, RetryPolicy: messages.RetryPolicy{MaxRetries: 3, BackoffMs: 100}})
		prev = []string{id}
	}
	return p
}

// TestServerKillForgetsNothing: 32 three-tool plans and 16 prompts finish
// on a standalone nats-server; 2 s later the server is killed with SIGKILL
// (which forgets the deletes and purges of its last moments) and started
// again on the same store. No script runs a second time, and no result or
// narration is published twice.
func TestServerKillForgetsNothing(t *testing.T) {
	dir := t.TempDir()
	srv := startStandalone(t, dir)
	admin := reconnecting(t, srv.url())
	js, err := jetstream.New(admin)
	require.NoError(t, err)
	cfg := bus.Config{URL: srv.url()}.WithDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, bus.Provision(ctx, js, cfg))

	log, _ := testlog.New(t)
	tl := startTally(t, dir, reconnecting(t, srv.url()), cfg, 8, 0)
	sch, err := scheduler.New(reconnecting(t, srv.url()), scheduler.Config{}, scheduler.Options{Logger: log.With("component", "scheduler"), Bus: cfg})
	require.NoError(t, err)
	require.NoError(t, sch.Start(context.Background()))
	t.Cleanup(sch.Stop)
	nar, err := narrator.New(reconnecting(t, srv.url()), narrator.Config{}, narrator.Options{Logger: log.With("component", "narrator"), Bus: cfg})
	require.NoError(t, err)
	require.NoError(t, nar.Start(context.Background()))
	t.Cleanup(nar.Stop)

	// Everything published on results and narrations, counted live.
	var mu sync.Mutex
	results, narrations := map[string]int{}, map[string]int{}
	watch := reconnecting(t, srv.url())
	_, err = watch.Subscribe("narratoria.results.>", func(m *nats.Msg) {
		var r messages.ExecutionResult
		if json.Unmarshal(m.Data, &r) == nil {
			mu.Lock()
			results[r.PlanID]++
			mu.Unlock()
		}
	})
	require.NoError(t, err)
	_, err = watch.Subscribe("narratoria.narrations.>", func(m *nats.Msg) {
		var n messages.Narration
		if json.Unmarshal(m.Data, &n) == nil {
			mu.Lock()
			narrations[n.SessionID+"/"+n.PromptID]++
			mu.Unlock()
		}
	})
	require.NoError(t, err)
	require.NoError(t, watch.Flush())

	const plans, prompts = 32, 16
	for i := range plans {
		body, _ := json.Marshal(chainOfTally(3))
		_, err := js.Publish(ctx, fmt.Sprintf("narratoria.plans.kp%02d", i%8), body)
		require.NoError(t, err)
	}
	game, err := client.New(admin)
	require.NoError(t, err)
	for i := range prompts {
		_, err := game.Submit(ctx, messages.Prompt{SessionID: fmt.Sprintf("kn%02d", i%8), Text: "count the coins", PromptID: fmt.Sprintf("p%02d", i)})
		require.NoError(t, err)
	}
	counts := func() (int, int, int) {
		mu.Lock()
		defer mu.Unlock()
		_, ran := tl.twice(t)
		return len(results), len(narrations), ran
	}
	require.Eventually(t, func() bool {
		r, n, _ := counts()
		return r >= plans+prompts && n >= prompts
	}, 60*time.Second, 50*time.Millisecond, "every plan and prompt finished")
	_, _, ranBefore := counts()
	require.Equal(t, plans*3+prompts, ranBefore, "every script ran once before the kill")

	time.Sleep(2 * time.Second)
	storeReport(t, js, "before the kill")
	srv.kill()
	time.Sleep(5 * time.Second) // longer than every lease: the partitions are recovered from the store
	srv.start(t)
	storeReport(t, js, "after the restart")

	// Long enough for every lease, ack wait and lost-attempt clock to
	// have acted on what the server brought back.
	time.Sleep(20 * time.Second)
	_, _, ranAfter := counts()
	twice, _ := tl.twice(t)
	mu.Lock()
	dupResults, dupNarrations := 0, 0
	for _, n := range results {
		if n > 1 {
			dupResults++
		}
	}
	for _, n := range narrations {
		if n > 1 {
			dupNarrations++
		}
	}
	mu.Unlock()
	t.Logf("after SIGKILL of nats-server: scripts run %d (before %d), run twice %d, results twice %d, narrations twice %d",
		ranAfter, ranBefore, twice, dupResults, dupNarrations)
	require.Zero(t, twice, "no script ran a second time")
	require.Zero(t, dupResults, "every result once")
	require.Zero(t, dupNarrations, "every narration once")
}

// storeReport logs what the plans bucket and the work queues hold.
func storeReport(t *testing.T, js jetstream.JetStream, when string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{"KV_" + messages.BucketPlans, messages.StreamJobs, messages.StreamOutcomes, messages.StreamPlans, messages.StreamPrompts, "KV_" + messages.BucketInflight} {
		var st jetstream.Stream
		var err error
		for range 50 {
			if st, err = js.Stream(ctx, name); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Logf("%s: %s: %v", when, name, err)
			continue
		}
		i := st.CachedInfo()
		t.Logf("%s: %s msgs=%d first=%d last=%d", when, name, i.State.Msgs, i.State.FirstSeq, i.State.LastSeq)
	}
}
