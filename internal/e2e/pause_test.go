package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/scheduler"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// napScript runs 6 s, recording its run (the run key and a number of its
// own) in its data folder before and after, and patches the session
// state and answers with that number: a state that reflects one run per
// tool holds the number of the run whose outcome was taken.
const napScript = `#!/bin/sh
input=$(cat)
key=$(printf '%s' "$input" | sed 's/.*"runKey":"\([^"]*\)".*/\1/')
tool=$(printf '%s' "$input" | sed 's/.*"toolId":"\([^"]*\)".*/\1/')
run=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
echo "start $key $run" >> data/runs
sleep 6
echo "end $key $run" >> data/runs
echo '{"version":"0","type":"state_patch","patch":{"'$tool'":"'$run'"}}'
echo '{"version":"0","type":"done","ok":true,"output":{"run":"'$run'"}}'
`

// pauseRig is a nats-server, a scheduler in this process and skill
// workers as processes of their own serving the nap skill.
type pauseRig struct {
	srv     *natstest.Server
	dir     string
	skills  string
	workers []*proc
	metrics []string
	nc      *nats.Conn
}

func newPauseRig(t *testing.T, workers int) *pauseRig {
	t.Helper()
	r := &pauseRig{srv: natstest.Start(t), dir: testlog.OpenTempDir(t)}
	r.skills = filepath.Join(r.dir, "skills")
	shellSkill{name: "nap", description: "naps", prompt: "Naps.", script: "run", body: napScript}.write(t, r.skills)
	// a 10 s timeout: the worker's stop outlasts it
	man := `{"name":"nap","version":"1.0.0","description":"naps","scripts":[{"name":"run","path":"scripts/run","timeout":10000}]}`
	require.NoError(t, os.WriteFile(filepath.Join(r.skills, "nap", "skill.json"), []byte(man), 0o644))
	cfg := r.srv.Bus
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	require.NoError(t, bus.Provision(ctx, r.srv.JS, cfg))
	cancel()
	log, _ := testlog.New(t)
	sch, err := scheduler.New(r.srv.Connect(t), scheduler.Config{}, scheduler.Options{Logger: log.With("component", "scheduler"), Bus: cfg})
	require.NoError(t, err)
	require.NoError(t, sch.Start(context.Background()))
	t.Cleanup(sch.Stop)
	bin := build(t, r.dir, "skillworker", "./cmd/skillworker")
	for i := range workers {
		port := freePort(t)
		r.metrics = append(r.metrics, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		r.workers = append(r.workers, startProc(t, r.dir, bin, fmt.Sprintf("worker%d", i),
			[]string{"--nats-url", r.srv.URL(), "--skills-dir", r.skills, "--concurrency", "4", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port)}, nil))
	}
	require.Eventually(t, func() bool { return sch.RegistryRevision("nap") > 0 }, testlog.Budget(30*time.Second), 50*time.Millisecond)
	r.nc = r.srv.Connect(t)
	return r
}

// runs reads the runs the scripts recorded: for each run key, the
// numbers of the runs that started and that ended.
func (r *pauseRig) runs(t *testing.T) (started, ended map[string][]string) {
	t.Helper()
	started, ended = map[string][]string{}, map[string][]string{}
	f, err := os.Open(filepath.Join(r.skills, "nap", "data", "runs"))
	if os.IsNotExist(err) {
		return started, ended
	}
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue
		}
		if f[0] == "start" {
			started[f[1]] = append(started[f[1]], f[2])
		} else {
			ended[f[1]] = append(ended[f[1]], f[2])
		}
	}
	return started, ended
}

// plans publishes n one-tool plans of nap, each in a session of its own,
// and returns a channel of their results.
func (r *pauseRig) plans(t *testing.T, n int) (map[string]string, <-chan messages.ExecutionResult) {
	t.Helper()
	results := make(chan messages.ExecutionResult, 2*n)
	_, err := r.nc.Subscribe("narratoria.results.>", func(m *nats.Msg) {
		var res messages.ExecutionResult
		if json.Unmarshal(m.Data, &res) == nil {
			results <- res
		}
	})
	require.NoError(t, err)
	js, err := jetstream.New(r.nc)
	require.NoError(t, err)
	sessions := map[string]string{}
	for i := range n {
		id, session := uuid.NewString(), fmt.Sprintf("nap%d", i)
		sessions[id] = session
		body := fmt.Sprintf(`{"requestId":%q,"timeoutMs":240000,"tools":[{"toolId":"t","toolPath":"nap/run","retryPolicy":{"maxRetries":3}}]}`, id)
		_, err := js.Publish(context.Background(), "narratoria.plans."+session, []byte(body))
		require.NoError(t, err)
	}
	return sessions, results
}

// secondRuns sums the workers' narratoria_skillworker_second_runs_total.
func (r *pauseRig) secondRuns(t *testing.T) int {
	t.Helper()
	total := 0
	for _, u := range r.metrics {
		resp, err := http.Get(u)
		require.NoError(t, err)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "narratoria_skillworker_second_runs_total{") {
				f := strings.Fields(line)
				n, _ := strconv.ParseFloat(f[len(f)-1], 64)
				total += int(n)
			}
		}
		_ = resp.Body.Close()
	}
	return total
}

// TestPausedWorkerRunsNothingTwice: a skill worker (a process of its own)
// stopped with SIGSTOP for 25 s while it runs four 6-second scripts with a
// 10 s timeout, then continued: the scheduler's overdue attempts keep
// waiting while their jobs are held, the worker takes its scripts' exits
// over the timeouts that fell due in the pause, and every plan has one
// result, every script ran once.
func TestPausedWorkerRunsNothingTwice(t *testing.T) {
	testlog.Long(t, "stops a worker for 25 s")
	t.Parallel()
	r := newPauseRig(t, 1)
	sessions, results := r.plans(t, 4)
	require.Eventually(t, func() bool { s, _ := r.runs(t); return len(s) == 4 }, testlog.Budget(30*time.Second), 20*time.Millisecond, "four scripts started")
	require.NoError(t, r.workers[0].cmd.Process.Signal(syscall.SIGSTOP))
	time.Sleep(25 * time.Second)
	require.NoError(t, r.workers[0].cmd.Process.Signal(syscall.SIGCONT))
	got := collectResults(t, results, sessions)
	started, ended := r.runs(t)
	for plan, res := range got {
		require.True(t, res.Success, "%s: %s", plan, res.Message)
		key := plan + ".t"
		require.Len(t, started[key], 1, "%s ran once", key)
		require.Equal(t, started[key], ended[key])
	}
	require.Zero(t, r.secondRuns(t))
}

// TestWorkerPausedBesideALiveOne (make test-long): two workers, one stopped
// for 30 s (past the jobs' ack wait) while the other lives, eight scripts.
// The stopped worker's jobs go to the live one, whose scheduler still waits
// for them: they run a second time there, counted. Every plan has one
// result, and each session's state holds the run whose outcome was taken.
func TestWorkerPausedBesideALiveOne(t *testing.T) {
	if os.Getenv("NARRATORIA_LONG") == "" {
		t.Skip("set NARRATORIA_LONG=1 (make test-long)")
	}
	t.Parallel()
	r := newPauseRig(t, 2)
	sessions, results := r.plans(t, 8)
	require.Eventually(t, func() bool { s, _ := r.runs(t); return len(s) == 8 }, testlog.Budget(30*time.Second), 20*time.Millisecond, "eight scripts started")
	require.NoError(t, r.workers[0].cmd.Process.Signal(syscall.SIGSTOP))
	time.Sleep(30 * time.Second)
	require.NoError(t, r.workers[0].cmd.Process.Signal(syscall.SIGCONT))
	got := collectResults(t, results, sessions)
	time.Sleep(2 * time.Second) // the stopped worker's late outcomes come and are dropped
	started, _ := r.runs(t)
	twice := 0
	kv, err := r.srv.JS.KeyValue(context.Background(), messages.BucketSessions)
	require.NoError(t, err)
	for plan, res := range got {
		require.True(t, res.Success, "%s: %s", plan, res.Message)
		twice += len(started[plan+".t"]) - 1
		var out struct{ Run string }
		require.NoError(t, json.Unmarshal(res.ToolResults[0].Output, &out))
		e, err := kv.Get(context.Background(), sessions[plan])
		require.NoError(t, err)
		var state map[string]string
		require.NoError(t, json.Unmarshal(e.Value(), &state))
		require.Equal(t, out.Run, state["t"], "the session state holds the run whose outcome was taken")
	}
	t.Logf("second runs: %d of 8 scripts (counted by the workers: %d)", twice, r.secondRuns(t))
	require.Equal(t, twice, r.secondRuns(t), "every second run is counted")
}

// collectResults waits for one result of each plan, and fails on a second.
func collectResults(t *testing.T, results <-chan messages.ExecutionResult, sessions map[string]string) map[string]messages.ExecutionResult {
	t.Helper()
	got := map[string]messages.ExecutionResult{}
	deadline := time.After(testlog.Budget(120 * time.Second))
	for len(got) < len(sessions) {
		select {
		case res := <-results:
			_, dup := got[res.PlanID]
			require.False(t, dup, "plan %s has a second result", res.PlanID)
			got[res.PlanID] = res
		case <-deadline:
			t.Fatalf("%d of %d plans have a result", len(got), len(sessions))
		}
	}
	select {
	case res := <-results:
		t.Fatalf("plan %s has a second result", res.PlanID)
	case <-time.After(time.Second):
	}
	return got
}
