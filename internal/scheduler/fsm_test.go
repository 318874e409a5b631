package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/embedded"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/planfsm"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// planKeys lists the keys of KV narratoria_plans but the partitions' fences.
func planKeys(t *testing.T, e *env) []string {
	t.Helper()
	kv, err := e.srv.JS.KeyValue(context.Background(), messages.BucketPlans)
	require.NoError(t, err)
	// Keys reads the bucket through a watcher that can wait forever for
	// its initial values when they are purged while it reads: bound it,
	// and count a timeout as "not known yet".
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	keys, err := kv.Keys(ctx)
	switch {
	case errors.Is(err, jetstream.ErrNoKeysFound):
		return nil
	case err != nil:
		t.Logf("plan keys not read: %v", err)
		return []string{"(unknown)"}
	}
	var out []string
	for _, k := range keys {
		if !strings.HasPrefix(k, "fence.") {
			out = append(out, k)
		}
	}
	return out
}

// TestFinishedPlansLeaveNothing: once results are out, narratoria_plans
// holds no plan key, and a scheduler that starts afterwards resumes and
// republishes nothing.
func TestFinishedPlansLeaveNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	var done []<-chan *messages.ExecutionResult
	for range 20 {
		done = append(done, e.startPlan(t, "fin", plan(tool("a", nil, stepInput{}), tool("b", []string{"a"}, stepInput{}))))
	}
	for _, d := range done {
		res := <-d
		require.NotNil(t, res, "no result")
		require.True(t, res.Success, res.Message)
	}
	// A purge waits (up to 30 s) for the plan's last state write to be
	// acknowledged first; under a loaded CI run that wait reached 20 s once.
	require.Eventually(t, func() bool { return len(planKeys(t, e)) == 0 }, testlog.Budget(45*time.Second), 50*time.Millisecond,
		"finished plans are purged from narratoria_plans")

	results, err := e.srv.NC.SubscribeSync("narratoria.results.>")
	require.NoError(t, err)
	e.sch.Stop()
	next := e.scheduler(t, Config{})
	require.Eventually(t, next.OwnsAll, testlog.Budget(10*time.Second), 10*time.Millisecond)
	require.Equal(t, 0, next.InFlight(), "nothing resumed")
	_, err = results.NextMsg(time.Second)
	require.ErrorIs(t, err, nats.ErrTimeout, "no result republished")
	require.Len(t, e.log.all(), 40, "every tool ran once")
}

// TestPurgeMarkersLastAMinute: the purge markers a finished plan leaves on
// its keys expire after a minute (an hour filled the default bucket at a
// modest sustained rate: docs/decisions/).
func TestPurgeMarkersLastAMinute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p := plan(tool("a", nil, stepInput{}))
	require.True(t, e.runPlan(t, "markers", p).Success)
	st, err := e.srv.JS.Stream(context.Background(), "KV_"+messages.BucketPlans)
	require.NoError(t, err)
	for _, key := range []string{planKey(p.RequestID), toolLogKey(p.RequestID)} {
		var m *jetstream.RawStreamMsg
		require.Eventually(t, func() bool {
			m, err = st.GetLastMsgForSubject(context.Background(), "$KV."+messages.BucketPlans+"."+key)
			return err == nil && m.Header.Get("KV-Operation") == "PURGE"
		}, testlog.Budget(30*time.Second), 20*time.Millisecond, "%s is purged", key)
		ttl, err := time.ParseDuration(m.Header.Get("Nats-TTL"))
		require.NoError(t, err, "%s: the marker has a TTL", key)
		require.Equal(t, time.Minute, ttl, key)
	}
}

// TestInputSchemaViolationFailsOnce: a tool whose input breaks its
// script's inputSchema fails at once (no retry), with an error naming the
// field, and the skill's health does not change.
func TestInputSchemaViolationFailsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p := plan(tool("bad", nil, stepInput{}, func(tl *messages.Tool) {
		tl.ToolPath = "test/typed"
		tl.Input = json.RawMessage(`{"n":"three"}`)
		tl.RetryPolicy = messages.RetryPolicy{MaxRetries: 3, BackoffMs: 10}
	}))
	res := e.runPlan(t, "schema", p)
	require.False(t, res.Success)
	tr := toolResult(t, res, "bad")
	require.Equal(t, messages.ToolFailed, tr.State)
	require.Equal(t, 0, tr.RetryCount, "a terminal failure is not retried")
	require.Equal(t, messages.CategoryInvalidInput, tr.Error.Category)
	require.Contains(t, tr.Error.Message, "input.n")
	require.Empty(t, e.log.all(), "the script never ran")
	require.Equal(t, "healthy", healthOf(t, e, "schema.test"))
	kv, err := e.srv.JS.KeyValue(context.Background(), messages.BucketHealth)
	require.NoError(t, err)
	_, err = kv.Get(context.Background(), "schema.test")
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "health was never written: the input was the planner's fault")
}

// TestRecoveredPlanKeepsManifestTimeout: the attempt timeout is decided
// at intake (here the manifest's 10 s, not the 30 s default) and
// persisted, so the attempt a new scheduler sends after recovery has it.
func TestRecoveredPlanKeepsManifestTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	jobs, err := e.srv.NC.SubscribeSync("narratoria.jobs.test.>")
	require.NoError(t, err)
	// The first attempt fails; the retry waits 1.5 s, long enough to swap
	// schedulers in between.
	p := plan(tool("slow", nil, stepInput{FailTimes: 1}, func(tl *messages.Tool) {
		tl.RetryPolicy = messages.RetryPolicy{MaxRetries: 1, BackoffMs: 1500}
	}))
	done := e.startPlan(t, "tmo", p)
	first, err := jobs.NextMsg(10 * time.Second)
	require.NoError(t, err)
	var j messages.ToolJob
	require.NoError(t, json.Unmarshal(first.Data, &j))
	require.Equal(t, int64(10_000), j.TimeoutMs)

	kv, err := e.srv.JS.KeyValue(context.Background(), messages.BucketPlans)
	require.NoError(t, err)
	entry, err := kv.Get(context.Background(), planKey(p.RequestID))
	require.NoError(t, err)
	var rec planfsm.Record
	require.NoError(t, json.Unmarshal(entry.Value(), &rec))
	require.Len(t, rec.Scripts, 1)
	require.Equal(t, int64(10_000), rec.Scripts[0].TimeoutMs, "the decided timeout is persisted with the plan")

	require.Eventually(t, func() bool { return len(e.log.all()) == 1 }, testlog.Budget(10*time.Second), 10*time.Millisecond)
	e.sch.Stop()
	next := e.scheduler(t, Config{SkipRegistryCheck: true})
	require.Eventually(t, next.OwnsAll, testlog.Budget(10*time.Second), 10*time.Millisecond)
	second, err := jobs.NextMsg(20 * time.Second)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(second.Data, &j))
	require.Equal(t, 2, j.Attempt)
	require.Equal(t, int64(10_000), j.TimeoutMs, "the recovered plan keeps the manifest timeout")
	res := <-done
	require.NotNil(t, res, "no result")
	require.True(t, res.Success, res.Message)
}

// TestBigOutcomeKeepsEvents: a tool whose events (1.5 MB of log lines,
// 2× more once escaped, and a state patch) cannot travel in one outcome
// message: the worker leaves them on the events stream and says where;
// the scheduler reads them back, applies the state patch and lists the
// reference in the trace.
func TestBigOutcomeKeepsEvents(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, natstest.StartWith(t, embedded.Options{MaxPayload: 1 << 20}), Config{})
	// 1.5 MB of log lines take seconds under the race detector on a busy
	// machine (10 s ran out with two CPU hogs beside make test): the
	// attempt's timeout scales with the machine; the test is about where
	// the events go.
	roomy := func(tl *messages.Tool) { tl.TimeoutMs = testlog.Budget(30 * time.Second).Milliseconds() }
	res := e.runPlan(t, "big", plan(tool("loud", nil, stepInput{Noise: 24, Patch: map[string]any{"heard": true}}, roomy)))
	require.True(t, res.Success, res.Message)
	tr := toolResult(t, res, "loud")
	require.Len(t, tr.EventsRefs, 1, "the attempt's events are referenced")
	ref := tr.EventsRefs[0]
	require.Equal(t, messages.StreamEvents, ref.Stream)
	require.GreaterOrEqual(t, ref.Count, 25, "24 log events, the state patch and the done")
	require.JSONEq(t, `{"heard":true}`, string(res.AggregatedState), "the state patch was applied")
	events, err := e.sch.readEvents(t.Context(), &ref, e.sch.keys.token(res.PlanID, "loud", tr.Skill, ref.Attempt))
	require.NoError(t, err)
	require.Len(t, events, ref.Count)
	// Events without the attempt's token (what another holder of worker
	// credentials could publish on the subject) are never taken.
	_, err = e.sch.readEvents(t.Context(), &ref, "forged")
	require.ErrorContains(t, err, fmt.Sprintf("0 of %d found", ref.Count))
	require.Equal(t, float64(ref.Count), testutil.ToFloat64(e.sch.m.unverified.WithLabelValues("event")))
}

// TestStateCommitsOnlyOnSuccess: a plan's state patches take effect
// together when it succeeds; a failed plan leaves the session state byte
// for byte as it was and lists the patches it would have made; a plan
// whose only failure is not required commits its other patches.
func TestStateCommitsOnlyOnSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	kv, err := e.srv.JS.KeyValue(t.Context(), messages.BucketSessions)
	require.NoError(t, err)
	before := []byte(`{"gold": 3, "note": "kept as is"}`)
	_, err = kv.Put(t.Context(), "st", before)
	require.NoError(t, err)

	failing := plan(tool("a", nil, stepInput{Patch: map[string]any{"gold": 4}}),
		tool("b", []string{"a"}, stepInput{FailTimes: 1, Patch: map[string]any{"gold": 5}}))
	res := e.runPlan(t, "st", failing)
	require.False(t, res.Success)
	require.False(t, res.StateCommitted)
	require.Equal(t, []messages.ToolPatches{{ToolID: "a", Patches: []map[string]any{{"gold": float64(4)}}}}, res.StatePatches,
		"the result lists what the plan would have changed")
	entry, err := kv.Get(t.Context(), "st")
	require.NoError(t, err)
	require.Equal(t, string(before), string(entry.Value()), "a failed plan changes nothing")
	require.Equal(t, float64(4), e.log.of("b")[0].state["gold"], "b saw a's staged patch")

	optional := plan(tool("a", nil, stepInput{Patch: map[string]any{"gold": 6}}),
		tool("b", nil, stepInput{FailTimes: 1, Patch: map[string]any{"lost": true}}, func(tl *messages.Tool) { tl.Required = false }))
	res = e.runPlan(t, "st", optional)
	require.True(t, res.Success, res.Message)
	require.True(t, res.StateCommitted)
	require.JSONEq(t, `{"gold": 6, "note": "kept as is"}`, string(res.AggregatedState), "the successful tool's patch is committed")
}

// TestCommitIsOnce: a plan's commit repeated (a scheduler that crashed
// after committing and before recording it commits again on recovery)
// does not write the state again.
func TestCommitIsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	s := e.sch.sessions
	ctx := t.Context()
	require.NoError(t, s.Commit(ctx, "once", "plan-1", []map[string]any{{"n": 1}}))
	kv, err := e.srv.JS.KeyValue(ctx, messages.BucketSessions)
	require.NoError(t, err)
	first, err := kv.Get(ctx, "once")
	require.NoError(t, err)
	require.NoError(t, s.Commit(ctx, "once", "plan-2", []map[string]any{{"m": 2}}))
	require.NoError(t, s.Commit(ctx, "once", "plan-1", []map[string]any{{"n": 1}}))
	last, err := kv.Get(ctx, "once")
	require.NoError(t, err)
	require.Equal(t, first.Revision()+1, last.Revision(), "plan-1's second commit wrote nothing")
	require.JSONEq(t, `{"n":1,"m":2}`, string(last.Value()))
}

// TestReplanReusesOutcomes (one action, one effect): attempt 1 counts a
// coin and fails on the lock; attempt 2 (a replan of the same prompt,
// parentPlanId = attempt 1) plans the same count: its outcome is reused,
// the script ran once, and the state shows one coin. A script whose
// manifest says "reuse": false runs again, and the state still shows one
// coin (the failed attempt committed nothing). Reuse never crosses
// prompts: a new prompt counts again.
func TestReplanReusesOutcomes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	for _, c := range []struct {
		script string
		runs   int
		reused bool
	}{{"counter", 1, true}, {"counter-noreuse", 2, false}} {
		session := "coins-" + c.script
		count := func(tl *messages.Tool) { tl.ToolPath = "test/" + c.script }
		first := plan(tool("count", nil, stepInput{Increment: "coins"}, count), tool("lock", nil, stepInput{FailTimes: 5}))
		res := e.runPlan(t, session, first)
		require.False(t, res.Success)
		second := plan(tool("tally", nil, stepInput{Increment: "coins"}, count))
		second.Metadata = messages.PlanMetadata{GenerationAttempt: 2, ParentPlanID: &first.RequestID}
		res = e.runPlan(t, session, second)
		require.True(t, res.Success, res.Message)
		require.JSONEq(t, `{"coins":1}`, string(res.AggregatedState), "%s: one action, one coin", c.script)
		tr := toolResult(t, res, "tally")
		if c.reused {
			require.Equal(t, first.RequestID, tr.ReusedFrom, "the trace names the attempt it came from")
		} else {
			require.Empty(t, tr.ReusedFrom)
		}
		runs := 0
		for _, r := range e.log.all() {
			if r.plan == first.RequestID || r.plan == second.RequestID {
				if r.tool == "count" || r.tool == "tally" {
					runs++
				}
			}
		}
		require.Equal(t, c.runs, runs, c.script)
	}
	// A new prompt (no parent) runs the script again.
	res := e.runPlan(t, "coins-counter", plan(tool("count", nil, stepInput{Increment: "coins"}, func(tl *messages.Tool) { tl.ToolPath = "test/counter" })))
	require.True(t, res.Success)
	require.Empty(t, toolResult(t, res, "count").ReusedFrom)
	require.JSONEq(t, `{"coins":2}`, string(res.AggregatedState))
}
