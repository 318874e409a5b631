package skillworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/runner"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// writeSkill creates skills/<name> with one script per entry of scripts.
func writeSkill(t *testing.T, dir, name string, scripts map[string]string, inputSchema string) {
	t.Helper()
	sd := filepath.Join(dir, name)
	require.NoError(t, os.MkdirAll(filepath.Join(sd, "scripts"), 0o755))
	var specs []string
	for s, body := range scripts {
		require.NoError(t, os.WriteFile(filepath.Join(sd, "scripts", s), []byte("#!/bin/sh\n"+body+"\n"), 0o755))
		spec := fmt.Sprintf(`{"name":%q,"path":"scripts/%s","timeout":5000`, s, s)
		if inputSchema != "" {
			spec += `,"inputSchema":` + inputSchema
		}
		specs = append(specs, spec+"}")
	}
	manifest := fmt.Sprintf(`{"name":%q,"version":"1.0.0","description":"test skill","scripts":[%s]}`, name, strings.Join(specs, ","))
	require.NoError(t, os.WriteFile(filepath.Join(sd, "skill.json"), []byte(manifest), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(sd, "prompt.md"), []byte("# "+name), 0o644))
}

const doneOK = `echo '{"version":"0","type":"done","ok":true,"output":{"ok":1}}'`

type harness struct {
	srv      *natstest.Server
	dir      string
	outcomes chan messages.Outcome
	early    map[string]messages.Outcome // outcomes received while waiting for another plan
}

func newHarness(t *testing.T) *harness {
	return newHarnessOn(t, natstest.Start(t))
}

func newHarnessOn(t *testing.T, srv *natstest.Server) *harness {
	h := &harness{srv: srv, dir: testlog.OpenTempDir(t), outcomes: make(chan messages.Outcome, 100), early: map[string]messages.Outcome{}}
	sub, err := srv.NC.Subscribe("narratoria.outcomes.>", func(m *nats.Msg) {
		var o messages.Outcome
		if json.Unmarshal(m.Data, &o) == nil {
			h.outcomes <- o
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return h
}

func (h *harness) worker(t *testing.T, cfg Config, opts Options) *Worker {
	t.Helper()
	cfg.SkillsDir = h.dir
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 2
	}
	if cfg.WatchInterval == 0 {
		cfg.WatchInterval = 100 * time.Millisecond
	}
	cfg.ShutdownGrace = cmpDur(cfg.ShutdownGrace, time.Second)
	log, _ := testlog.New(t)
	if opts.Logger == nil {
		opts.Logger = log
	}
	opts.Bus = h.srv.Bus
	nc := h.srv.Connect(t)
	w, err := New(nc, cfg, opts)
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(w.Stop)
	return w
}

func cmpDur(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

func (h *harness) publish(t *testing.T, j messages.ToolJob) messages.ToolJob {
	t.Helper()
	if j.PlanID == "" {
		j.PlanID = uuid.NewString()
	}
	if j.SessionID == "" {
		j.SessionID = "s1"
	}
	if j.ToolID == "" {
		j.ToolID = "t1"
	}
	if j.Attempt == 0 {
		j.Attempt = 1
	}
	if j.Input == nil {
		j.Input = json.RawMessage(`{}`)
	}
	b, _ := json.Marshal(j)
	_, err := h.srv.JS.Publish(context.Background(), "narratoria.jobs."+j.Skill+"."+j.PlanID+"."+j.ToolID, b)
	require.NoError(t, err)
	return j
}

func (h *harness) outcome(t *testing.T, plan string) messages.Outcome {
	t.Helper()
	if o, ok := h.early[plan]; ok {
		delete(h.early, plan)
		return o
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case o := <-h.outcomes:
			if o.PlanID == plan {
				return o
			}
			h.early[o.PlanID] = o
		case <-deadline:
			t.Fatalf("no outcome for plan %s", plan)
		}
	}
}

func TestJobRunsAndEventsStreamLive(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeSkill(t, h.dir, "slow", map[string]string{"run": `echo '{"version":"0","type":"log","level":"info","message":"started"}'
sleep 1
` + doneOK}, "")
	h.worker(t, Config{}, Options{})
	type seen struct {
		at      time.Time
		attempt string
	}
	evs := make(chan seen, 10)
	sub, err := h.srv.NC.Subscribe("narratoria.events.>", func(m *nats.Msg) {
		evs <- seen{time.Now(), m.Header.Get("Narratoria-Attempt")}
	})
	require.NoError(t, err)
	defer sub.Unsubscribe()
	j := h.publish(t, messages.ToolJob{Skill: "slow", Script: "run"})
	o := h.outcome(t, j.PlanID)
	outAt := time.Now()
	require.Equal(t, messages.ToolSuccess, o.State, "%+v", o.Error)
	require.JSONEq(t, `{"ok":1}`, string(o.Output))
	require.Len(t, o.Events, 2)
	require.EqualValues(t, 1, o.Deliveries)
	var first seen
	select {
	case first = <-evs:
	case <-time.After(10 * time.Second):
		t.Fatal("no event was published on the events subject")
	}
	require.Equal(t, "1", first.attempt)
	require.Greater(t, outAt.Sub(first.at), 500*time.Millisecond, "the first event arrived while the script was still running")
}

func TestRegistryEntry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeSkill(t, h.dir, "alpha", map[string]string{"run": doneOK}, `{"type":"object"}`)
	w := h.worker(t, Config{Heartbeat: 200 * time.Millisecond, WorkerTTL: time.Second}, Options{})
	kv, err := h.srv.JS.KeyValue(context.Background(), messages.BucketSkills)
	require.NoError(t, err)
	e, err := kv.Get(context.Background(), "alpha")
	require.NoError(t, err)
	var re messages.RegistryEntry
	require.NoError(t, json.Unmarshal(e.Value(), &re))
	require.Equal(t, "alpha", re.Name)
	require.Equal(t, "# alpha", re.Prompt)
	require.Len(t, re.Scripts, 1)
	require.JSONEq(t, `{"type":"object"}`, string(re.Scripts[0].InputSchema))
	require.Len(t, re.LiveWorkers(time.Now(), time.Second), 1)
	require.Equal(t, w.ID(), re.LiveWorkers(time.Now(), time.Second)[0].ID)
	w.Stop()
	e, err = kv.Get(context.Background(), "alpha")
	require.NoError(t, err)
	var after messages.RegistryEntry
	require.NoError(t, json.Unmarshal(e.Value(), &after))
	require.Empty(t, after.Workers, "a stopped worker leaves the registry")
}

func TestWorkerSurvivesHostileJobs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeSkill(t, h.dir, "bad", map[string]string{
		"garbage": `echo 'this is not json'`,
		"nodone":  `echo '{"version":"0","type":"log","level":"info","message":"x"}'`,
		"slow":    `sleep 30`,
		"crash":   doneOK + "\nexit 7",
		"good":    doneOK,
	}, `{"type":"object","properties":{"n":{"type":"integer"}}}`)
	h.worker(t, Config{}, Options{})
	cases := []struct {
		script, code, category string
		timeoutMs              int64
		input                  string
	}{
		{"garbage", "protocol_error", messages.CategoryInvalidJSON, 0, ""},
		{"nodone", "no_done", messages.CategoryToolFailure, 0, ""},
		{"slow", "timeout", messages.CategoryTimeout, 300, ""},
		{"crash", "exit_code", messages.CategoryToolFailure, 0, ""},
		{"good", "invalid_input", messages.CategoryInvalidInput, 0, `{"n":"not a number"}`},
		{"missing", "unknown_script", messages.CategoryUnknownSkill, 0, ""},
	}
	for _, c := range cases {
		j := messages.ToolJob{Skill: "bad", Script: c.script, TimeoutMs: c.timeoutMs}
		if c.input != "" {
			j.Input = json.RawMessage(c.input)
		}
		j = h.publish(t, j)
		o := h.outcome(t, j.PlanID)
		require.NotEqual(t, messages.ToolSuccess, o.State, c.script)
		require.Equal(t, c.code, o.Error.Code, c.script)
		require.Equal(t, c.category, o.Error.Category, c.script)
		require.NotEmpty(t, o.Error.Message, c.script)
		if c.code == "invalid_input" {
			require.Contains(t, o.Error.Message, "input.n")
		}
	}
	// a malformed job message is terminated, not redelivered, and the worker goes on
	_, err := h.srv.JS.Publish(context.Background(), "narratoria.jobs.bad.6ba7b810-9dad-11d1-80b4-00c04fd430c8.malformed", []byte("{not json"))
	require.NoError(t, err)
	j := h.publish(t, messages.ToolJob{Skill: "bad", Script: "good"})
	o := h.outcome(t, j.PlanID)
	require.Equal(t, messages.ToolSuccess, o.State)
}

func TestTwoWorkersShareJobs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeSkill(t, h.dir, "shared", map[string]string{"run": "sleep 0.3\n" + doneOK}, "")
	w1 := h.worker(t, Config{Concurrency: 1}, Options{})
	w2 := h.worker(t, Config{Concurrency: 1}, Options{})
	var plans []string
	for range 8 {
		plans = append(plans, h.publish(t, messages.ToolJob{Skill: "shared", Script: "run"}).PlanID)
	}
	by := map[string]int{}
	for _, p := range plans {
		o := h.outcome(t, p)
		require.Equal(t, messages.ToolSuccess, o.State)
		by[o.Worker]++
	}
	require.Greater(t, by[w1.ID()], 0, "worker 1 took jobs: %v", by)
	require.Greater(t, by[w2.ID()], 0, "worker 2 took jobs: %v", by)
}

func TestSkillAddedAndBrokenWhileRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	log, rec := testlog.New(t)
	w := h.worker(t, Config{}, Options{Logger: log})
	require.Empty(t, w.Skills())
	writeSkill(t, h.dir, "late", map[string]string{"run": doneOK}, "")
	require.Eventually(t, func() bool { return len(w.Skills()) == 1 }, testlog.Budget(10*time.Second), 50*time.Millisecond)
	j := h.publish(t, messages.ToolJob{Skill: "late", Script: "run"})
	require.Equal(t, messages.ToolSuccess, h.outcome(t, j.PlanID).State)

	require.NoError(t, os.MkdirAll(filepath.Join(h.dir, "broken"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(h.dir, "broken", "skill.json"), []byte(`{"name":"broken"`), 0o644))
	require.Eventually(t, func() bool { return rec.Contains("skill skipped", "broken/skill.json") }, testlog.Budget(10*time.Second), 50*time.Millisecond)
	require.Equal(t, []string{"late"}, w.Skills())

	require.NoError(t, os.RemoveAll(filepath.Join(h.dir, "late")))
	require.Eventually(t, func() bool { return len(w.Skills()) == 0 }, testlog.Budget(10*time.Second), 50*time.Millisecond)
}

func TestCancelKillsRunningScript(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeSkill(t, h.dir, "long", map[string]string{"run": `echo '{"version":"0","type":"log","level":"info","message":"go"}'
sleep 30`}, "")
	h.worker(t, Config{}, Options{})
	started := make(chan struct{}, 1)
	sub, _ := h.srv.NC.Subscribe("narratoria.events.>", func(*nats.Msg) { started <- struct{}{} })
	defer sub.Unsubscribe()
	j := h.publish(t, messages.ToolJob{Skill: "long", Script: "run"})
	<-started
	require.NoError(t, h.srv.NC.Publish("narratoria.cancel."+j.PlanID, nil))
	o := h.outcome(t, j.PlanID)
	require.Equal(t, messages.CategoryCancelled, o.Error.Category)
}

func TestGracefulStopHandsJobBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeSkill(t, h.dir, "long", map[string]string{"run": `echo '{"version":"0","type":"log","level":"info","message":"go"}'
sleep 2
` + doneOK}, "")
	w1 := h.worker(t, Config{ShutdownGrace: 200 * time.Millisecond}, Options{})
	started := make(chan struct{}, 4)
	sub, _ := h.srv.NC.Subscribe("narratoria.events.>", func(*nats.Msg) { started <- struct{}{} })
	defer sub.Unsubscribe()
	j := h.publish(t, messages.ToolJob{Skill: "long", Script: "run"})
	<-started
	w1.Stop() // grace too short: the script is ended and the job naked
	w2 := h.worker(t, Config{}, Options{})
	o := h.outcome(t, j.PlanID)
	require.Equal(t, messages.ToolSuccess, o.State, "%+v", o.Error)
	require.Equal(t, w2.ID(), o.Worker)
	require.EqualValues(t, 2, o.Deliveries)
}

func TestInProcessRunnerWorker(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeSkill(t, h.dir, "fast", map[string]string{"run": doneOK}, "")
	ip := runner.NewInProcess()
	ip.Register("fast", "run", func(_ context.Context, in messages.ScriptInput, emit func(messages.Event) error) error {
		return emit(&messages.DoneEvent{OK: true, Output: json.RawMessage(`{"tool":"` + in.ToolID + `"}`)})
	})
	h.worker(t, Config{}, Options{Runner: ip})
	j := h.publish(t, messages.ToolJob{Skill: "fast", Script: "run", ToolID: "x9"})
	o := h.outcome(t, j.PlanID)
	require.JSONEq(t, `{"tool":"x9"}`, string(o.Output))
}

// TestKillNineMidScript runs a worker as a real process, kills it with
// SIGKILL while its script runs, and checks another worker finishes the job
// and reports the redelivery.
func TestKillNineMidScript(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the skillworker binary")
	}
	h := newHarness(t)
	writeSkill(t, h.dir, "long", map[string]string{"run": `echo '{"version":"0","type":"log","level":"info","message":"go"}'
sleep 1
` + doneOK}, "")
	bin := natstest.Build(t, "../../cmd/skillworker")
	cmd := exec.Command(bin, "--nats-url", h.srv.URL(), "--skills-dir", h.dir, "--concurrency", "1")
	cmd.Env = append(os.Environ(), "NARRATORIA_WORKER_ACKWAIT=2s")
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	var once sync.Once
	kill := func() { once.Do(func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() }) }
	t.Cleanup(kill)

	started := make(chan string, 4)
	sub, _ := h.srv.NC.Subscribe("narratoria.events.>", func(m *nats.Msg) { started <- m.Header.Get("Narratoria-Worker") })
	defer sub.Unsubscribe()
	// wait until the subprocess worker has registered
	kv, err := h.srv.JS.KeyValue(context.Background(), messages.BucketSkills)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e, err := kv.Get(context.Background(), "long")
		return err == nil && strings.Contains(string(e.Value()), `"workers":{"`)
	}, testlog.Budget(30*time.Second), 50*time.Millisecond)

	j := h.publish(t, messages.ToolJob{Skill: "long", Script: "run"})
	first := <-started
	kill()
	w2 := h.worker(t, Config{AckWait: 2 * time.Second}, Options{})
	require.NotEqual(t, w2.ID(), first)
	o := h.outcome(t, j.PlanID)
	require.Equal(t, messages.ToolSuccess, o.State, "%+v", o.Error)
	require.Equal(t, w2.ID(), o.Worker)
	require.GreaterOrEqual(t, o.Deliveries, uint64(2), "the outcome reports the redelivery")
}

// TestScriptGetsTraceParent: a job that arrives with a traceparent header
// runs its script with TRACEPARENT in the environment, in the same trace,
// and the outcome carries the trace on.
func TestScriptGetsTraceParent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeSkill(t, h.dir, "traced", map[string]string{"run": `cat > /dev/null
printf '{"version":"0","type":"done","ok":true,"output":{"tp":"%s"}}\n' "$TRACEPARENT"`}, "")
	h.worker(t, Config{}, Options{})
	heads := make(chan nats.Header, 1)
	sub, err := h.srv.NC.Subscribe("narratoria.outcomes.>", func(m *nats.Msg) { heads <- m.Header })
	require.NoError(t, err)
	defer sub.Unsubscribe()
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	j := messages.ToolJob{PlanID: uuid.NewString(), SessionID: "s1", ToolID: "t1", Skill: "traced", Script: "run", Attempt: 1, Input: json.RawMessage(`{}`)}
	b, _ := json.Marshal(j)
	m := nats.NewMsg("narratoria.jobs.traced." + j.PlanID + ".t1")
	m.Data = b
	m.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	_, err = h.srv.JS.PublishMsg(context.Background(), m)
	require.NoError(t, err)
	o := h.outcome(t, j.PlanID)
	var out struct {
		TP string `json:"tp"`
	}
	require.NoError(t, json.Unmarshal(o.Output, &out))
	require.Regexp(t, "^00-"+traceID+"-[0-9a-f]{16}-01$", out.TP, "the script sees TRACEPARENT in the job's trace")
	select {
	case h := <-heads:
		require.Contains(t, h.Get("traceparent"), traceID, "the outcome carries the trace")
	case <-time.After(5 * time.Second):
		t.Fatal("no outcome header")
	}
}

// TestQueueDepthMetric: jobs waiting for a busy worker show in
// narratoria_skillworker_queue_depth{skill}.
func TestQueueDepthMetric(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeSkill(t, h.dir, "busy", map[string]string{"run": "sleep 2\n" + doneOK}, "")
	reg := prometheus.NewRegistry()
	h.worker(t, Config{Concurrency: 1}, Options{Registerer: reg})
	for range 3 {
		h.publish(t, messages.ToolJob{Skill: "busy", Script: "run"})
	}
	require.Eventually(t, func() bool {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "narratoria_skillworker_queue_depth" {
				for _, m := range mf.GetMetric() {
					if m.GetLabel()[0].GetValue() == "busy" && m.GetGauge().GetValue() >= 1 {
						return true
					}
				}
			}
		}
		return false
	}, testlog.Budget(5*time.Second), 50*time.Millisecond)
}

// TestQueueDepthCountedOncePerSkill (issue 47): with two workers serving
// one skill, each reports the skill's backlog, and the Grafana
// dashboard's query of the queue-depth panel, applied to what both
// report, gives the backlog once — the consumer's own count — not once
// per worker.
func TestQueueDepthCountedOncePerSkill(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeSkill(t, h.dir, "busy", map[string]string{"run": "sleep 30\n" + doneOK}, "")
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	for _, reg := range regs {
		h.worker(t, Config{Concurrency: 1, ShutdownGrace: time.Millisecond}, Options{Registerer: reg})
	}
	for range 6 {
		h.publish(t, messages.ToolJob{Skill: "busy", Script: "run"})
	}
	// The dashboard's aggregation over workers.
	b, err := os.ReadFile("../../deploy/grafana/narratoria-dashboard.json")
	require.NoError(t, err)
	agg := regexp.MustCompile(`"expr": "(\w+) by \(skill\) \(narratoria_skillworker_queue_depth\)"`).FindSubmatch(b)
	require.NotNil(t, agg, "the dashboard queries narratoria_skillworker_queue_depth by skill")
	apply := map[string]func(a, b float64) float64{"max": math.Max, "sum": func(a, b float64) float64 { return a + b }}[string(agg[1])]
	require.NotNil(t, apply, "aggregation %s", agg[1])
	depth := func(reg *prometheus.Registry) float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if mf.GetName() == "narratoria_skillworker_queue_depth" && m.GetLabel()[0].GetValue() == "busy" {
					return m.GetGauge().GetValue()
				}
			}
		}
		return -1
	}
	cons, err := h.srv.JS.Consumer(t.Context(), messages.StreamJobs, "skill-busy")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(t.Context())
		return err == nil && info.NumAckPending == 2 && info.NumPending == 4
	}, testlog.Budget(10*time.Second), 20*time.Millisecond, "two jobs running, four waiting")
	a, b2 := depth(regs[0]), depth(regs[1])
	require.Equal(t, 4.0, a, "each worker reports the skill's backlog")
	require.Equal(t, 4.0, b2)
	require.Equal(t, 4.0, apply(a, b2), "the dashboard shows the backlog once, not once per worker")
}

// TestDataFolderOnFirstUse (§6.1): a skill's data/ folder is there when its
// script runs for the first time.
func TestDataFolderOnFirstUse(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeSkill(t, h.dir, "keeper", map[string]string{"run": `cat > /dev/null
if [ -d data ]; then echo '{"version":"0","type":"done","ok":true,"output":{"data":true}}'; else echo '{"version":"0","type":"done","ok":true,"output":{"data":false}}'; fi`}, "")
	_, err := os.Stat(filepath.Join(h.dir, "keeper", "data"))
	require.True(t, os.IsNotExist(err))
	h.worker(t, Config{}, Options{})
	j := h.publish(t, messages.ToolJob{Skill: "keeper", Script: "run"})
	o := h.outcome(t, j.PlanID)
	require.JSONEq(t, `{"data":true}`, string(o.Output))
}

// TestStopWhileJobsArrive: a worker stopped between fetching a job and
// starting it neither loses the job nor races its own job count (the race
// detector saw Stop wait for jobs while a puller added one). The jobs the
// stopped worker did not finish are run by the next worker.
func TestStopWhileJobsArrive(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeSkill(t, h.dir, "quick", map[string]string{"run": doneOK}, "")
	w := h.worker(t, Config{Concurrency: 4}, Options{pullerPause: 300 * time.Millisecond})
	var plans []string
	for range 3 {
		plans = append(plans, h.publish(t, messages.ToolJob{Skill: "quick", Script: "run"}).PlanID)
	}
	// No synchronisation with the puller on purpose: by now it has taken
	// the first job (a fetch takes a millisecond) and pauses after it.
	time.Sleep(100 * time.Millisecond)
	w.Stop()
	h.worker(t, Config{Concurrency: 4}, Options{})
	for _, p := range plans {
		h.outcome(t, p)
	}
}

// TestRemovedSkillLeavesTheRegistry (issue 47): a skill whose folder is
// removed stays listed, without workers, for the removal grace, then
// leaves the registry with its durable consumer; one that another live
// worker still serves stays.
func TestRemovedSkillLeavesTheRegistry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeSkill(t, h.dir, "gone", map[string]string{"run": doneOK}, "")
	writeSkill(t, h.dir, "shared", map[string]string{"run": doneOK}, "")
	const grace = 600 * time.Millisecond
	h.worker(t, Config{SkillRemovalGrace: grace}, Options{})
	// Another worker, on a folder of its own, serves "shared" too.
	other := testlog.OpenTempDir(t)
	writeSkill(t, other, "shared", map[string]string{"run": doneOK}, "")
	w2, err := New(h.srv.Connect(t), Config{SkillsDir: other, WatchInterval: -1}, Options{Bus: h.srv.Bus})
	require.NoError(t, err)
	require.NoError(t, w2.Start(context.Background()))
	t.Cleanup(w2.Stop)
	kv, err := h.srv.JS.KeyValue(t.Context(), messages.BucketSkills)
	require.NoError(t, err)
	entry := func(name string) (*messages.RegistryEntry, bool) {
		e, err := kv.Get(t.Context(), name)
		if err != nil {
			return nil, false
		}
		var re messages.RegistryEntry
		require.NoError(t, json.Unmarshal(e.Value(), &re))
		return &re, true
	}
	require.Eventually(t, func() bool {
		re, ok := entry("shared")
		return ok && len(re.Workers) == 2
	}, testlog.Budget(10*time.Second), 20*time.Millisecond)
	_, ok := entry("gone")
	require.True(t, ok)

	removedAt := time.Now()
	require.NoError(t, os.RemoveAll(filepath.Join(h.dir, "gone")))
	require.NoError(t, os.RemoveAll(filepath.Join(h.dir, "shared")))
	require.Eventually(t, func() bool {
		re, ok := entry("gone")
		return ok && len(re.Workers) == 0
	}, testlog.Budget(10*time.Second), 20*time.Millisecond, "listed without workers during the grace")
	require.Eventually(t, func() bool { _, ok := entry("gone"); return !ok }, testlog.Budget(10*time.Second), 20*time.Millisecond,
		"gone from the registry after the grace")
	require.GreaterOrEqual(t, time.Since(removedAt), grace)
	// The entry goes first, then the consumer (forget.go): a moment apart.
	require.Eventually(t, func() bool {
		_, err := h.srv.JS.Consumer(t.Context(), messages.StreamJobs, "skill-gone")
		return errors.Is(err, jetstream.ErrConsumerNotFound)
	}, testlog.Budget(5*time.Second), 20*time.Millisecond, "its durable consumer too")
	time.Sleep(2 * grace)
	re, ok := entry("shared")
	require.True(t, ok, "a skill another worker serves stays")
	require.Len(t, re.Workers, 1)
	_, err = h.srv.JS.Consumer(t.Context(), messages.StreamJobs, "skill-shared")
	require.NoError(t, err)
}
