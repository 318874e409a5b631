package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/planfsm"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// storedResults counts the results of a session in NARRATORIA_RESULTS, by
// plan.
func storedResults(t *testing.T, e *env, session string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := e.srv.JS.OrderedConsumer(ctx, messages.StreamResults, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"narratoria.results." + session + ".>"}})
	require.NoError(t, err)
	out := map[string]int{}
	for {
		batch, err := c.FetchNoWait(100)
		require.NoError(t, err)
		n := 0
		for m := range batch.Messages() {
			n++
			var r messages.ExecutionResult
			require.NoError(t, json.Unmarshal(m.Data(), &r))
			out[r.PlanID]++
		}
		if n == 0 {
			return out
		}
	}
}

// TestNATSRestartMidPlans restarts the NATS server while 40 plans run:
// every plan's result is stored once, every tool ran once, the plans'
// state is purged, and a scheduler started afterwards resumes nothing.
func TestNATSRestartMidPlans(t *testing.T) {
	testlog.Long(t, "40 plans across a nats-server restart (TestServerKillForgetsNothing kills one in make test)")
	e := newEnv(t, Config{Concurrency: 4})
	var plans []*messages.Plan
	for i := range 40 {
		p := chainPlan(3, 150)
		p.Narrative = fmt.Sprint(i)
		plans = append(plans, p)
		b, _ := json.Marshal(p)
		_, err := e.srv.JS.Publish(context.Background(), "narratoria.plans.rs", b)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return len(e.log.all()) >= 20 }, testlog.Budget(30*time.Second), 10*time.Millisecond)

	e.srv.Restart(t)

	require.Eventually(t, func() bool { return len(storedResults(t, e, "rs")) == len(plans) }, testlog.Budget(60*time.Second), 200*time.Millisecond,
		"every plan has a result")
	for id, n := range storedResults(t, e, "rs") {
		require.Equal(t, 1, n, "plan %s has one result", id)
	}
	runs := map[string]int{}
	for _, r := range e.log.all() {
		runs[r.plan+"/"+r.tool]++
	}
	require.Len(t, runs, 3*len(plans), "every tool ran")
	for k, n := range runs {
		require.Equal(t, 1, n, "%s ran once", k)
	}
	require.Eventually(t, func() bool { return len(planKeys(t, e)) == 0 }, testlog.Budget(60*time.Second), 200*time.Millisecond,
		"narratoria_plans is empty once no plan is in flight")
	e.sch.Stop()
	next := e.scheduler(t, Config{})
	require.Eventually(t, next.OwnsAll, testlog.Budget(10*time.Second), 10*time.Millisecond)
	require.Equal(t, 0, next.InFlight(), "nothing resumed")
	time.Sleep(500 * time.Millisecond) // give a wrongly resumed plan the time to publish
	for id, n := range storedResults(t, e, "rs") {
		require.Equal(t, 1, n, "plan %s still has one result", id)
	}
}

// TestSamePlanPublishedAgainAfterItFinished: a game server publishes a
// plan a second time (a retry after a publish timeout) once the first ran
// and its keys were purged. The second message is fresh and a first
// delivery, and the acceptance's message ID is a duplicate of a record that
// is gone: its stored result says the plan finished, so it does not run
// again.
func TestSamePlanPublishedAgainAfterItFinished(t *testing.T) {
	e := newEnv(t, Config{})
	p := plan(tool("once", nil, stepInput{}))
	require.True(t, e.runPlan(t, "twice", p).Success)
	purgedKeys(t, e, p.RequestID)
	body, _ := json.Marshal(p)
	_, err := e.srv.JS.Publish(context.Background(), "narratoria.plans.twice", body)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return e.rec.Contains("delivered again after its plan finished") || len(e.log.of("once")) > 1
	}, testlog.Budget(10*time.Second), 10*time.Millisecond, "the second message is recognised as the finished plan's")
	time.Sleep(200 * time.Millisecond)
	require.Len(t, e.log.of("once"), 1, "the finished plan's tool did not run again")
}

// TestFinishedPlanMessageAgain: a plan ran and its keys were purged; the
// server restarts (its duplicate memory is rebuilt from what is stored,
// and the purged acceptance is gone), and the same plan message comes
// again, as when a killed server forgot its ack. Its result is stored, so
// it does not run again.
func TestFinishedPlanMessageAgain(t *testing.T) {
	testlog.Long(t, "a soak or chaos test") // a server restart and waits: 8 s
	e := newEnv(t, Config{})
	p := plan(tool("once", nil, stepInput{}))
	require.True(t, e.runPlan(t, "again", p).Success)
	purgedKeys(t, e, p.RequestID)
	e.sch.Stop()
	e.srv.Restart(t)
	body, _ := json.Marshal(p)
	require.Eventually(t, func() bool {
		_, err := e.srv.JS.Publish(context.Background(), "narratoria.plans.again", body)
		return err == nil
	}, testlog.Budget(10*time.Second), 50*time.Millisecond)
	time.Sleep(planfsm.FreshFor + 200*time.Millisecond) // older than a fresh message by the time a scheduler takes it
	e.scheduler(t, Config{})
	require.Eventually(t, func() bool {
		return e.rec.Contains("delivered again after its plan finished") || len(e.log.of("once")) > 1
	}, testlog.Budget(20*time.Second), 20*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	require.Len(t, e.log.of("once"), 1, "the finished plan's tool did not run again")
}

// purgedKeys waits until a finished plan's keys are purged (its plan key
// goes last).
func purgedKeys(t *testing.T, e *env, plan string) {
	t.Helper()
	kv, err := e.srv.JS.KeyValue(context.Background(), messages.BucketPlans)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := kv.Get(context.Background(), "p."+plan)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	}, testlog.Budget(10*time.Second), 5*time.Millisecond, "the finished plan's keys are purged")
}

// TestUnrecoverablePlanFailsLoudly: a plan's tool records make no state a
// run can reach (a tool succeeded behind a skipped dependency: a bug, or
// records edited by hand). The scheduler that recovers it publishes a
// result saying so (recovery_failed, not to be replanned) instead of
// dropping the plan and leaving its narrator to wait for its timeout, and
// purges its keys. The records are written as earlier versions wrote
// them, one key per tool: they are read and purged all the same.
func TestUnrecoverablePlanFailsLoudly(t *testing.T) {
	e := newEnv(t, Config{})
	p := plan(tool("a", nil, stepInput{SleepMs: 2000}), tool("b", []string{"a"}, stepInput{}))
	done := e.startPlan(t, "broken", p)
	require.Eventually(t, func() bool { return e.log.started(p.RequestID, "a") }, testlog.Budget(10*time.Second), 5*time.Millisecond)
	e.sch.Stop()
	kv, err := e.srv.JS.KeyValue(context.Background(), messages.BucketPlans)
	require.NoError(t, err)
	for id, st := range map[string]messages.ToolState{"a": messages.ToolSkipped, "b": messages.ToolSuccess} {
		b, _ := json.Marshal(planfsm.Tool{State: st, Attempt: 1})
		_, err := kv.Put(context.Background(), "t."+p.RequestID+"."+id, b)
		require.NoError(t, err)
	}
	e.scheduler(t, Config{})
	res := <-done
	require.NotNil(t, res, "a result came")
	require.False(t, res.Success)
	require.Equal(t, messages.ReasonRecoveryFailed, res.FailureReason)
	require.False(t, res.CanReplan, "not replanned: some of its tools may have run")
	require.Contains(t, res.Message, "inconsistent")
	purgedKeys(t, e, p.RequestID)
	for _, id := range []string{"a", "b"} { // one key per tool, as earlier versions wrote them: purged too
		_, err := kv.Get(context.Background(), "t."+p.RequestID+"."+id)
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound, id)
	}
	require.True(t, e.rec.Contains("plan cannot be recovered"))
}

// TestRepublishedPlanOfAFinishedPlan: a narrator resuming an attempt
// publishes its plan again when the plan is not waiting in the plans
// stream (messages.HeaderRepublished). The plan may have run and finished
// meanwhile, past every duplicate window: its stored result says so, and
// the new message, a first delivery however fresh, does not run it again
// (planfsm.DecideIntake reads a republished plan's result first). (The
// result is stored here without a first run: no acceptance of it is
// remembered.)
func TestRepublishedPlanOfAFinishedPlan(t *testing.T) {
	e := newEnv(t, Config{})
	p := plan(tool("once", nil, stepInput{}))
	res, _ := json.Marshal(messages.ExecutionResult{PlanID: p.RequestID, Success: true})
	_, err := e.srv.JS.Publish(context.Background(), "narratoria.results.again."+p.RequestID, res)
	require.NoError(t, err)
	body, _ := json.Marshal(p)
	m := nats.NewMsg("narratoria.plans.again")
	m.Data = body
	m.Header.Set(messages.HeaderRepublished, "1")
	_, err = e.srv.JS.PublishMsg(context.Background(), m)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return e.rec.Contains("delivered again after its plan finished") || len(e.log.of("once")) > 0
	}, testlog.Budget(10*time.Second), 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	require.Empty(t, e.log.of("once"), "the finished plan's tool did not run again")
}
