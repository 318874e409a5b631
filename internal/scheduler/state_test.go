package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/partition"
	"github.com/narratoria/runtime/internal/planfsm"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

func TestConcurrentPatchesLoseNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Concurrency: 8})
	mk := func(prefix string) *messages.Plan {
		var tools []messages.Tool
		for i := range 100 {
			id := fmt.Sprintf("%s%d", prefix, i)
			tools = append(tools, tool(id, nil, stepInput{Patch: map[string]any{"counts": map[string]any{id: i}, "last": prefix}},
				func(tl *messages.Tool) { tl.Async = true }))
		}
		p := plan(tools...)
		p.Parallel = true
		return p
	}
	a, b := e.startPlan(t, "shared", mk("a")), e.startPlan(t, "shared", mk("b"))
	for _, r := range []*messages.ExecutionResult{<-a, <-b} {
		require.NotNil(t, r, "no result")
		require.True(t, r.Success, r.Message)
	}
	var state struct {
		Counts map[string]int `json:"counts"`
	}
	require.NoError(t, json.Unmarshal(sessionState(t, e, "shared"), &state))
	require.Len(t, state.Counts, 200, "no update of either plan was lost")
}

// checkOnePatchPerPlan: 100 one-tool plans at once, each patching its own
// key of one session: every patch is in the state.
func checkOnePatchPerPlan(t *testing.T, e *env) {
	var done []<-chan *messages.ExecutionResult
	for i := range 100 {
		done = append(done, e.startPlan(t, "one", plan(tool("p", nil, stepInput{Patch: map[string]any{"k": map[string]any{fmt.Sprint(i): i}}}))))
	}
	for _, d := range done {
		r := <-d
		require.NotNil(t, r, "no result")
		require.True(t, r.Success, r.Message)
	}
	var state struct {
		K map[string]int `json:"k"`
	}
	require.NoError(t, json.Unmarshal(sessionState(t, e, "one"), &state))
	require.Len(t, state.K, 100, "every plan's patch is in the state")
	require.False(t, e.rec.Contains("state patch not applied"))
}

// TestHundredPlansPatchOneSession (R1).
func TestHundredPlansPatchOneSession(t *testing.T) {
	t.Parallel()
	checkOnePatchPerPlan(t, newEnv(t, Config{}))
}

// TestHundredPlansPatchOneSessionR3: the same on a 3-node cluster with R3
// streams and buckets, where a partition's fenced writes must go one at a
// time (partition.Writer).
func TestHundredPlansPatchOneSessionR3(t *testing.T) {
	t.Parallel()
	// make test-long: a race-instrumented 3-node cluster takes 10–20 s
	// here; make test keeps R3 coverage in internal/partition's writer
	// tests, which run the same fenced writes on R3.
	testlog.Long(t, "a soak or chaos test")
	// The product's lease (3 s), not the tests' 1 s: a race-instrumented
	// 3-node cluster on a busy machine renews slower than 1 s at times.
	checkOnePatchPerPlan(t, newEnvOn(t, natstest.StartCluster(t, 3).Server(t, 3), Config{LeaseTTL: LeaseTTLDefault}))
}

func TestDependentsSeePatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p := plan(tool("w", nil, stepInput{Patch: map[string]any{"door": map[string]any{"open": true}}}), tool("r", []string{"w"}, stepInput{}))
	res := e.runPlan(t, "s9", p)
	require.True(t, res.Success)
	require.Equal(t, map[string]any{"door": map[string]any{"open": true}}, e.log.of("r")[0].state)
	require.JSONEq(t, `{"door":{"open":true}}`, string(res.AggregatedState))
}

func healthOf(t *testing.T, e *env, key string) string {
	kv, err := e.srv.JS.KeyValue(context.Background(), messages.BucketHealth)
	require.NoError(t, err)
	entry, err := kv.Get(context.Background(), key)
	if err != nil {
		return "healthy"
	}
	var st struct {
		State string `json:"state"`
	}
	require.NoError(t, json.Unmarshal(entry.Value(), &st))
	return st.State
}

func TestHealthThroughRealFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	transitions := make(chan messages.HealthTransition, 20)
	sub, err := e.srv.NC.Subscribe("narratoria.health.>", func(m *nats.Msg) {
		var tr messages.HealthTransition
		if json.Unmarshal(m.Data, &tr) == nil {
			transitions <- tr
		}
	})
	require.NoError(t, err)
	defer sub.Unsubscribe()

	// a timeout: healthy -> temporaryFailure, then its retries are spent -> permanentFailure
	res := e.runPlan(t, "h1", plan(tool("slow", nil, stepInput{Hang: true}, func(tl *messages.Tool) { tl.TimeoutMs = 200 })))
	require.False(t, res.Success)
	require.Equal(t, "permanentFailure", healthOf(t, e, "h1.test"))
	require.Contains(t, res.DisabledSkills, "test")
	got := []string{(<-transitions).To, (<-transitions).To}
	require.Equal(t, []string{"temporaryFailure", "permanentFailure"}, got)

	// three failures: healthy -> degraded
	res = e.runPlan(t, "h2", plan(tool("bad", nil, stepInput{FailTimes: 3}, func(tl *messages.Tool) {
		tl.RetryPolicy = messages.RetryPolicy{MaxRetries: 2, BackoffMs: 10}
	})))
	require.False(t, res.Success)
	require.Equal(t, "degraded", healthOf(t, e, "h2.test"))
	tr := <-transitions
	require.Equal(t, "h2", tr.SessionID)
	require.Equal(t, "healthy", tr.From)
	require.Equal(t, "degraded", tr.To)
	require.Contains(t, tr.Reason, "3 consecutive failures")

	// a session reset heals every skill; clearState empties the state
	kv, _ := e.srv.JS.KeyValue(context.Background(), messages.BucketSessions)
	_, err = kv.Put(context.Background(), "h1", []byte(`{"x":1}`))
	require.NoError(t, err)
	msg, err := e.srv.NC.Request("narratoria.sessions.h1.reset", []byte(`{"clearState":true}`), 5*time.Second)
	require.NoError(t, err)
	require.JSONEq(t, `{"ok":true,"changedSkills":1,"clearedState":true}`, string(msg.Data))
	require.Equal(t, "healthy", healthOf(t, e, "h1.test"))
	entry, err := kv.Get(context.Background(), "h1")
	require.NoError(t, err)
	require.JSONEq(t, `{}`, string(entry.Value()))
	msg, err = e.srv.NC.Request("narratoria.sessions.h1.reset", []byte(`not json`), 5*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(msg.Data), "invalid session reset: body is not a JSON session reset object")
}

func TestApprovalGate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	gate := func(tl *messages.Tool) { tl.RequiresApproval = true }
	p := plan(tool("ask", nil, stepInput{}, gate), tool("then", []string{"ask"}, stepInput{}))
	progress, err := e.srv.NC.SubscribeSync("narratoria.progress.ap." + p.RequestID)
	require.NoError(t, err)
	done := e.startPlan(t, "ap", p)
	for {
		m, err := progress.NextMsg(10 * time.Second)
		require.NoError(t, err)
		var pr messages.Progress
		require.NoError(t, json.Unmarshal(m.Data, &pr))
		if pr.State == string(messages.ToolAwaitingApproval) {
			break
		}
	}
	require.Empty(t, e.log.all(), "nothing runs before the approval")
	reply, err := e.srv.NC.Request("narratoria.approvals."+p.RequestID+".ask", []byte(`{"approved":true,"by":"gm"}`), 5*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(reply.Data), `"stream":"NARRATORIA_APPROVALS"`, "the decision is stored")
	res := <-done
	require.NotNil(t, res, "no result")
	require.True(t, res.Success, res.Message)

	// A denial sent before the tool is even ready (once the plan is
	// accepted) is kept and applied.
	p = plan(tool("first", nil, stepInput{SleepMs: 300}), tool("ask", []string{"first"}, stepInput{}, gate), tool("then", []string{"ask"}, stepInput{}))
	done = e.startPlan(t, "ap", p)
	require.Eventually(t, func() bool { return control(t, e, "narratoria.control.status."+p.RequestID, "").OK }, testlog.Budget(10*time.Second), 20*time.Millisecond)
	_, err = e.srv.JS.Publish(t.Context(), "narratoria.approvals."+p.RequestID+".ask", []byte(`{"approved":false,"reason":"too risky"}`))
	require.NoError(t, err)
	// A decision on a tool that does not wait for approval is refused.
	_, err = e.srv.JS.Publish(t.Context(), "narratoria.approvals."+p.RequestID+".then", []byte(`{"approved":true}`))
	require.ErrorContains(t, err, "has no tool then that waits for approval")
	res = <-done
	require.NotNil(t, res, "no result")
	require.False(t, res.Success)
	require.Equal(t, "approval_denied", toolResult(t, res, "ask").Error.Code)
	require.Contains(t, toolResult(t, res, "ask").Error.Message, "too risky")
	require.Equal(t, messages.ToolSkipped, toolResult(t, res, "then").State)
}

// TestApprovalDurableAndStrict: a decision without "approved" is an error,
// not a denial; a decision sent while no scheduler runs (the client sending
// it again) is stored and applied by the next one; the approval timeout fires on its own, later than the plan
// timeout (a wait does not run the plan deadline down).
func TestApprovalDurableAndStrict(t *testing.T) {
	t.Parallel()
	// A budget that scales with the machine: on a loaded one, a stop and a
	// restart took longer than 1.5 s, and this test is about a decision
	// stored while no scheduler runs (one stored in time wins even after
	// the deadline: planfsm's TestDecisionStoredInTimeSurvivesARecovery).
	approvalTimeout := testlog.Budget(1500 * time.Millisecond)
	e := newEnv(t, Config{ApprovalTimeout: approvalTimeout, PlanTimeout: 700 * time.Millisecond})
	gate := func(tl *messages.Tool) { tl.RequiresApproval = true }
	waiting := func(plan string) func() bool {
		return func() bool {
			st := control(t, e, "narratoria.control.status."+plan, "")
			return st.OK && st.Status.Tools[0].State == messages.ToolAwaitingApproval
		}
	}
	p := plan(tool("ask", nil, stepInput{}, gate))
	done := e.startPlan(t, "dur", p)
	require.Eventually(t, waiting(p.RequestID), testlog.Budget(10*time.Second), 20*time.Millisecond)
	_, err := e.srv.JS.Publish(t.Context(), "narratoria.approvals."+p.RequestID+".ask", []byte(`{"by":"gm"}`))
	require.ErrorContains(t, err, "invalid approval: approved: is required", "refused, its publisher told why")
	require.True(t, waiting(p.RequestID)(), "a body without approved is not a denial")

	// The only scheduler goes away; the decision is sent meanwhile: the
	// client sends it again until a scheduler takes it, stores it and
	// the plan, recovered, applies it.
	e.sch.Stop()
	c, err := client.New(e.srv.Connect(t))
	require.NoError(t, err)
	sent := make(chan error, 1)
	go func() { sent <- c.Approve(t.Context(), p.RequestID, "ask", "gm", "") }()
	e.scheduler(t, Config{ApprovalTimeout: approvalTimeout, PlanTimeout: 700 * time.Millisecond})
	require.NoError(t, <-sent)
	res := <-done
	require.NotNil(t, res, "no result")
	require.True(t, res.Success, res.Message)

	// Nobody decides: the approval timeout (1.5 s or more) ends the wait,
	// though the plan timeout (0.7 s) passed long before.
	p = plan(tool("ask", nil, stepInput{}, gate))
	res = <-e.startPlan(t, "dur", p)
	require.NotNil(t, res, "no result")
	require.Equal(t, "approval_timeout", toolResult(t, res, "ask").Error.Code)
	require.NotEqual(t, messages.ReasonTimeout, res.FailureReason, "the plan deadline did not fire during the wait")
}

// schedulerBinary returns cmd/scheduler, built once per test process.
func schedulerBinary(t *testing.T) string { return natstest.Build(t, "../../cmd/scheduler") }

func startSchedulerProcess(t *testing.T, bin, url string) *exec.Cmd {
	cmd := exec.Command(bin, "--nats-url", url)
	cmd.Env = append(os.Environ(), "NARRATORIA_SCHEDULER_LEASETTL=1s", "NARRATORIA_LOG_LEVEL=warn")
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) })
	return cmd
}

func chainPlan(n int, sleepMs int) *messages.Plan {
	var tools []messages.Tool
	prev := []string(nil)
	for i := range n {
		id := fmt.Sprintf("c%02d", i)
		tools = append(tools, tool(id, prev, stepInput{SleepMs: sleepMs}))
		prev = []string{id}
	}
	return plan(tools...)
}

// TestKillNineAndRestart kills the scheduler process in the middle of a
// 20-tool plan and restarts it: the plan completes and no tool ran twice.
func TestKillNineAndRestart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the scheduler binary")
	}
	e := newEnv(t, Config{})
	e.sch.Stop() // the in-process scheduler steps aside for the binary
	bin := schedulerBinary(t)
	first := startSchedulerProcess(t, bin, e.srv.URL())
	p := chainPlan(20, 100)
	done := e.startPlan(t, "k9", p)
	require.Eventually(t, func() bool { return len(e.log.all()) >= 5 }, testlog.Budget(30*time.Second), 10*time.Millisecond)
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	_, _ = first.Process.Wait()
	startSchedulerProcess(t, bin, e.srv.URL())
	res := <-done
	require.NotNil(t, res, "no result")
	require.True(t, res.Success, res.Message)
	for _, tr := range res.ToolResults {
		require.Len(t, e.log.of(tr.ToolID), 1, "tool %s ran exactly once", tr.ToolID)
	}
}

// TestFailover kills the active scheduler; the standby finishes the plan
// within 5 s of the kill.
func TestFailover(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the scheduler binary")
	}
	e := newEnv(t, Config{})
	active, standby := binaryActive(t, e, Config{LeaseTTL: time.Second})
	session := sessionOf(standby, "fo")
	p := chainPlan(10, 100)
	done := e.startPlan(t, session, p)
	require.Eventually(t, func() bool { return len(e.log.all()) >= 3 }, testlog.Budget(30*time.Second), 10*time.Millisecond)
	require.False(t, standby.Owns(session), "the binary runs the plan")
	require.NoError(t, active.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	res := <-done
	require.NotNil(t, res, "no result")
	require.True(t, res.Success, res.Message)
	require.Eventually(t, standby.OwnsAll, testlog.Budget(10*time.Second), 20*time.Millisecond, "the standby took the binary's partitions over")
	// The remaining tools take ~0.7 s and the takeover TTL + TTL/3: 5 s on a
	// quiet machine, scaled as every budget is (a loaded machine took 11 s;
	// the takeover's own timing is measured in make bench, not here).
	require.Less(t, time.Since(killed), testlog.Budget(5*time.Second), "the standby finished the plan within 5 s of the kill (scaled)")
}

// TestFailoverKeepsLongManifestTimeout (make test-long): a script whose
// manifest timeout is 40 s runs 35 s; the active scheduler is killed with
// SIGKILL mid-run and the standby takes over. The plan succeeds and the
// script ran once: the attempt was neither killed at the 30 s default nor
// sent again.
func TestFailoverKeepsLongManifestTimeout(t *testing.T) {
	t.Parallel()
	testlog.Long(t, "a soak or chaos test")
	e := newEnv(t, Config{})
	active, standby := binaryActive(t, e, Config{LeaseTTL: time.Second})
	session := sessionOf(standby, "long")
	p := plan(tool("long", nil, stepInput{SleepMs: 35_000}, func(tl *messages.Tool) { tl.ToolPath = "test/long" }))
	done := e.startPlan(t, session, p)
	time.Sleep(5 * time.Second) // mid-run
	require.False(t, standby.Owns(session), "the binary runs the plan")
	require.NoError(t, active.Process.Signal(syscall.SIGKILL))
	_, _ = active.Process.Wait()
	require.Eventually(t, func() bool { return standby.Owns(session) }, testlog.Budget(10*time.Second), 50*time.Millisecond)
	res := <-done
	require.NotNil(t, res, "no result")
	require.True(t, res.Success, res.Message)
	require.Len(t, e.log.of("long"), 1, "the script ran once")
}

// sessionState reads a session's state from KV.
func sessionState(t *testing.T, e *env, session string) []byte {
	t.Helper()
	kv, err := e.srv.JS.KeyValue(context.Background(), messages.BucketSessions)
	require.NoError(t, err)
	entry, err := kv.Get(context.Background(), session)
	require.NoError(t, err)
	return entry.Value()
}

// binaryActive replaces the in-process scheduler with the scheduler binary
// as the active one, and starts an in-process standby with cfg.
// binaryActive replaces the test's scheduler with the scheduler binary and
// a second, in-process scheduler, and waits until they share the
// partitions. Tests then run their plans in a session of the binary's
// (sessionOf) and kill it.
func binaryActive(t *testing.T, e *env, cfg Config) (*exec.Cmd, *Scheduler) {
	t.Helper()
	e.sch.Stop()
	active := startSchedulerProcess(t, schedulerBinary(t), e.srv.URL())
	owners, err := e.srv.JS.KeyValue(t.Context(), messages.BucketOwners)
	require.NoError(t, err)
	count := e.srv.Bus.WithDefaults().Partitions
	require.Eventually(t, func() bool {
		m, err := partition.Owners(t.Context(), owners, partitionGroup, count)
		return err == nil && len(m) == count
	}, testlog.Budget(20*time.Second), 20*time.Millisecond, "the binary owns every partition")
	standby := e.scheduler(t, cfg)
	require.Eventually(t, func() bool { return len(standby.Owned()) == count/2 }, testlog.Budget(20*time.Second), 20*time.Millisecond,
		"the two schedulers share the partitions")
	return active, standby
}

// sessionOf returns a session named after base whose partition the other
// scheduler (not s) owns.
func sessionOf(s *Scheduler, base string) string {
	for i := 0; ; i++ {
		session := fmt.Sprintf("%s-%d", base, i)
		if !s.Owns(session) {
			return session
		}
	}
}

// TestRecreatesWhatDisappears (nats.provision auto): the plans stream and
// the session bucket are deleted under a running scheduler; it recreates
// them and runs plans again.
func TestRecreatesWhatDisappears(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	require.True(t, e.runPlan(t, "heal", plan(tool("a", nil, stepInput{}))).Success)
	require.NoError(t, e.srv.JS.DeleteStream(t.Context(), messages.StreamPlans))
	require.NoError(t, e.srv.JS.DeleteKeyValue(t.Context(), messages.BucketSessions))
	require.Eventually(t, func() bool {
		_, err1 := e.srv.JS.Stream(t.Context(), messages.StreamPlans)
		_, err2 := e.srv.JS.KeyValue(t.Context(), messages.BucketSessions)
		return err1 == nil && err2 == nil
	}, testlog.Budget(10*time.Second), 50*time.Millisecond, "recreated")
	require.True(t, e.rec.Contains("recreated a missing stream or bucket", messages.StreamPlans))
	require.True(t, e.runPlan(t, "heal", plan(tool("b", nil, stepInput{}))).Success)
	require.NoError(t, e.sch.Ready())
}

// TestProbeFindsStoredOutcomeAndJob: a scheduler taking a plan over asks
// whether an attempt's outcome or job is stored before sending the job
// again. Both are found where they are stored — the outcome under its
// session's partition — a missing attempt is reported missing, and an outcome
// without its attempt's token (forged) does not count.
func TestProbeFindsStoredOutcomeAndJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	plan := "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
	ctx := t.Context()
	require.False(t, e.sch.probe(ctx, "probe", plan, "a", "nobody", 1), "nothing stored")
	// A record of the plan, running, so the scheduler leaves its outcome
	// in the stream (it is not this scheduler's to take) for the probe.
	kv, err := e.srv.JS.KeyValue(ctx, messages.BucketPlans)
	require.NoError(t, err)
	rb, _ := json.Marshal(planfsm.Record{SessionID: "probe", Phase: planfsm.PhaseRunning})
	_, err = kv.Put(ctx, planKey(plan), rb)
	require.NoError(t, err)
	out := fmt.Sprintf(`{"planId":%q,"toolId":"a","skill":"nobody","attempt":1,"token":%q}`, plan, e.sch.keys.token(plan, "a", "nobody", 1))
	_, err = e.srv.JS.Publish(ctx, "narratoria.outcomes.probe."+plan+".a", []byte(out))
	require.NoError(t, err)
	require.True(t, e.sch.probe(ctx, "probe", plan, "a", "nobody", 1), "the stored outcome is found")
	require.False(t, e.sch.probe(ctx, "probe", plan, "a", "nobody", 2), "another attempt's outcome does not count")
	// A forged outcome (any worker credential may publish one) carries no
	// valid token: the probe does not count it, so it does not stop the
	// job from being sent again. (The scheduler's consumer refuses and
	// removes it from the work queue at once, so it is checked here as
	// the probe reads it.)
	forged := fmt.Sprintf(`{"planId":%q,"toolId":"a","skill":"nobody","attempt":1,"token":"forged"}`, plan)
	require.Equal(t, -1, e.sch.keys.outcomeAttempt([]byte(forged), plan, "a"), "a forged outcome does not count")
	require.Equal(t, 1, e.sch.keys.outcomeAttempt([]byte(out), plan, "a"))
	require.Equal(t, -1, e.sch.keys.outcomeAttempt([]byte(out), plan, "b"), "another tool's outcome does not count")
	_, err = e.srv.JS.Publish(ctx, "narratoria.jobs.nobody."+plan+".b", []byte(`{"attempt":3}`))
	require.NoError(t, err)
	require.True(t, e.sch.probe(ctx, "probe", plan, "b", "nobody", 3), "the stored job is found")
}

// TestMachineRefusalsAreCounted (issue 46): an event the plan machine
// refuses is never dropped: a decision for a tool the plan does not have
// is refused by the machine, logged and counted by kind.
func TestMachineRefusalsAreCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p := plan(tool("slow", nil, stepInput{SleepMs: 1500}))
	done := e.startPlan(t, "refuse", p)
	before := testutil.ToFloat64(e.sch.m.refusals.WithLabelValues("request"))
	require.Eventually(t, func() bool {
		// (At the approvals door it would be refused before the machine
		// saw it: sent as a scheduler stores a decision, it reaches the
		// machine.)
		err := e.srv.NC.Publish("narratoria.decisions."+p.RequestID+".nosuch", []byte(`{"approved":true,"by":"gm"}`))
		return err == nil && testutil.ToFloat64(e.sch.m.refusals.WithLabelValues("request")) > before
	}, testlog.Budget(10*time.Second), 100*time.Millisecond, "the machine's refusal is counted")
	require.True(t, e.rec.Contains("the plan machine refused an event"), "and logged")
	require.Zero(t, testutil.ToFloat64(e.sch.m.refusals.WithLabelValues("own_move")), "no move of its own refused")
	res := <-done
	require.NotNil(t, res)
	require.True(t, res.Success, res.Message)
}
