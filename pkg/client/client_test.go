package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/narratoria/runtime/internal/narrator"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/runner"
	"github.com/narratoria/runtime/internal/scheduler"
	"github.com/narratoria/runtime/internal/skillworker"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/internal/testskills"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testlog.UpstreamLeaks()...) }

// pipeline starts a server, a worker with in-process skills (teller: a
// narration; slow: waits until cancelled; step: succeeds at once), a
// scheduler and a narrator, and returns a client.
func pipeline(t *testing.T) (*natstest.Server, *client.Client) {
	t.Helper()
	srv, c, startNarrator := pipelineWithout(t)
	startNarrator()
	return srv, c
}

// pipelineWithout is pipeline without the narrator: it returns the
// function that starts it.
func pipelineWithout(t *testing.T) (*natstest.Server, *client.Client, func()) {
	t.Helper()
	srv := natstest.Start(t)
	log, _ := testlog.New(t)
	dir := t.TempDir()
	skills := map[string]runner.Func{
		"teller": func(_ context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			return emit(&messages.DoneEvent{OK: true, Output: json.RawMessage(`{"narration":"The teller speaks."}`)})
		},
		"slow": func(ctx context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			_ = emit(&messages.UIEvent{Event: "progress", Payload: json.RawMessage(`{"percent":40,"message":"digging"}`)})
			<-ctx.Done()
			return ctx.Err()
		},
		"step": func(_ context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
			return emit(&messages.DoneEvent{OK: true, Output: json.RawMessage(`{}`)})
		},
	}
	ip := testskills.WriteMap(t, dir, "teller", skills)
	wk, err := skillworker.New(srv.Connect(t), skillworker.Config{SkillsDir: dir, Concurrency: 8, WatchInterval: -1},
		skillworker.Options{Logger: log, Runner: ip, Bus: srv.Bus})
	require.NoError(t, err)
	require.NoError(t, wk.Start(context.Background()))
	t.Cleanup(wk.Stop)
	sch, err := scheduler.New(srv.Connect(t), scheduler.Config{LeaseTTL: time.Second}, scheduler.Options{Logger: log, Bus: srv.Bus})
	require.NoError(t, err)
	require.NoError(t, sch.Start(context.Background()))
	t.Cleanup(sch.Stop)
	require.Eventually(t, sch.OwnsAll, testlog.Budget(10*time.Second), 10*time.Millisecond)
	c, err := client.New(srv.Connect(t))
	require.NoError(t, err)
	return srv, c, func() {
		nar, err := narrator.New(srv.Connect(t), narrator.Config{PlanTimeoutMs: 20_000}, narrator.Options{Logger: log, Bus: srv.Bus})
		require.NoError(t, err)
		require.NoError(t, nar.Start(context.Background()))
		t.Cleanup(nar.Stop)
	}
}

// TestNarrateRetriesUntilANarratorAnswers: Narrate sent while no narrator
// runs keeps trying and gets the narration once one starts.
func TestNarrateRetriesUntilANarratorAnswers(t *testing.T) {
	t.Parallel()
	_, c, startNarrator := pipelineWithout(t)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n, err := c.Narrate(ctx, messages.Prompt{SessionID: "r1", Text: "I wait for the narrator"})
		if err == nil && n.Text == "" {
			err = errors.New("empty narration")
		}
		done <- err
	}()
	time.Sleep(700 * time.Millisecond)
	startNarrator()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Narrate did not return")
	}
}

// publishPlan publishes a plan of these tools on the session.
func publishPlan(t *testing.T, srv *natstest.Server, session string, tools ...map[string]any) string {
	t.Helper()
	id := uuid.NewString()
	b, err := json.Marshal(map[string]any{"requestId": id, "tools": tools})
	require.NoError(t, err)
	_, err = srv.JS.Publish(t.Context(), "narratoria.plans."+session, b)
	require.NoError(t, err)
	return id
}

func tool(id, path string, approval bool, deps ...string) map[string]any {
	return map[string]any{"toolId": id, "toolPath": path, "requiresApproval": approval, "dependencies": append([]string{}, deps...)}
}

func TestNarrateAndWatch(t *testing.T) {
	t.Parallel()
	_, c := pipeline(t)
	var mu sync.Mutex
	var kinds []string
	w, err := c.Watch("w1", func(u client.Update) {
		mu.Lock()
		defer mu.Unlock()
		kinds = append(kinds, u.Kind)
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, w.Stop()) }()
	n, err := c.Narrate(t.Context(), messages.Prompt{SessionID: "w1", Text: "I step forward"})
	require.NoError(t, err)
	require.Contains(t, n.Text, "The teller speaks.")
	require.NotEmpty(t, n.PromptID, "the client gave the prompt an ID")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return contains(kinds, "narration") && contains(kinds, "progress") && contains(kinds, "event")
	}, testlog.Budget(5*time.Second), 10*time.Millisecond)

	_, err = c.Narrate(t.Context(), messages.Prompt{SessionID: "a b", Text: "x"})
	require.ErrorContains(t, err, "sessionId")
	_, err = c.Narrate(t.Context(), messages.Prompt{SessionID: "w1", Text: "  "})
	require.ErrorContains(t, err, "empty")
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestSubmitOnce: a prompt submitted twice with one ID is stored and
// narrated once; the narration arrives through Watch.
func TestSubmitOnce(t *testing.T) {
	t.Parallel()
	_, c := pipeline(t)
	got := make(chan *messages.Narration, 4)
	w, err := c.Watch("s1", func(u client.Update) {
		if u.Narration != nil {
			got <- u.Narration
		}
	})
	require.NoError(t, err)
	defer func() { _ = w.Stop() }()
	p := messages.Prompt{SessionID: "s1", PromptID: "p-1", Text: "I step forward"}
	id, err := c.Submit(t.Context(), p)
	require.NoError(t, err)
	require.Equal(t, "p-1", id)
	_, err = c.Submit(t.Context(), p)
	require.NoError(t, err)
	select {
	case n := <-got:
		require.Equal(t, "p-1", n.PromptID)
	case <-time.After(20 * time.Second):
		t.Fatal("no narration")
	}
	select {
	case n := <-got:
		t.Fatalf("narrated twice: %+v", n)
	case <-time.After(500 * time.Millisecond):
	}
}

// TestControl: status, list and cancel of a plan in flight; approvals;
// clear errors for unknown plans and bad IDs.
func TestControl(t *testing.T) {
	t.Parallel()
	srv, c := pipeline(t)
	ctx := t.Context()
	results, err := srv.NC.SubscribeSync("narratoria.results.c1.*")
	require.NoError(t, err)

	planID := publishPlan(t, srv, "c1", tool("dig", "slow/run", false), tool("after", "step/run", false, "dig"))
	var st *messages.PlanStatus
	require.Eventually(t, func() bool {
		st, err = c.PlanStatus(ctx, planID)
		return err == nil && st.Tools[0].State == messages.ToolRunning
	}, testlog.Budget(10*time.Second), 20*time.Millisecond)
	require.Equal(t, "c1", st.SessionID)
	require.Equal(t, 0, st.Versions[0].Version)
	plans, err := c.ListPlans(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, []messages.PlanSummary{{PlanID: planID, SessionID: "c1"}}, plans)
	require.NoError(t, c.Cancel(ctx, planID, "test", "enough"))
	res := nextResult(t, results)
	require.Equal(t, messages.ReasonCancelled, res.FailureReason)
	// A finished plan's status comes from its result; it cannot be
	// cancelled again, and an unknown plan is named so.
	require.Eventually(t, func() bool {
		st, err = c.PlanStatus(ctx, planID)
		return err == nil && st.Result != nil
	}, testlog.Budget(5*time.Second), 20*time.Millisecond)
	require.Equal(t, messages.PlanCancelled, st.Result.State)
	require.Equal(t, messages.ToolCancelled, st.Tools[0].State)
	err = c.Cancel(ctx, planID, "test", "again")
	require.ErrorIs(t, err, client.ErrPlanFinished)
	require.ErrorIs(t, err, client.ErrNotInFlight)
	_, err = c.PlanStatus(ctx, uuid.NewString())
	require.ErrorIs(t, err, client.ErrUnknownPlan)
	require.NotErrorIs(t, err, client.ErrPlanFinished)
	require.ErrorContains(t, c.Cancel(ctx, "not a plan id!", "", ""), "plan")

	// Approve and deny a tool that waits, once it waits; what takes no
	// decision is refused, by name.
	awaiting := func(planID string) {
		require.Eventually(t, func() bool {
			st, err := c.PlanStatus(ctx, planID)
			return err == nil && st.Tools[0].State == messages.ToolAwaitingApproval
		}, testlog.Budget(10*time.Second), 20*time.Millisecond)
	}
	planID = publishPlan(t, srv, "c1", tool("gate", "step/run", true), tool("next", "step/run", false, "gate"))
	awaiting(planID)
	require.ErrorIs(t, c.Approve(ctx, planID, "nosuch", "gm", ""), client.ErrUnknownTool)
	require.ErrorIs(t, c.Approve(ctx, planID, "next", "gm", ""), client.ErrNotAwaitingApproval)
	require.ErrorIs(t, c.Approve(ctx, uuid.NewString(), "gate", "gm", ""), client.ErrUnknownPlan)
	d, err := c.Decide(ctx, planID, "gate", messages.Approval{Approved: true, By: "gm", Reason: "fine"})
	require.NoError(t, err)
	require.True(t, d.Checked)
	require.Equal(t, messages.ToolAwaitingApproval, d.Tool.State)
	res = nextResult(t, results)
	require.True(t, res.Success, res.Message)
	var se *client.ServiceError
	err = c.Approve(ctx, planID, "gate", "gm", "again")
	require.ErrorIs(t, err, client.ErrPlanFinished, "a tool of a finished plan takes no decision")
	require.ErrorAs(t, err, &se)
	require.Equal(t, messages.ControlPlanFinished, se.Code)
	planID = publishPlan(t, srv, "c1", tool("gate", "step/run", true), tool("next", "step/run", false, "gate"))
	awaiting(planID)
	require.NoError(t, c.Deny(ctx, planID, "gate", "gm", "no"))
	// The door refuses a decision on a plan not in flight even when it is
	// published without the check (nothing is stored for it).
	js, err := jetstream.New(srv.Connect(t))
	require.NoError(t, err)
	var apiErr *jetstream.APIError
	_, err = js.Publish(ctx, "narratoria.approvals."+uuid.NewString()+".gate", []byte(`{"approved":true,"by":"gm"}`))
	require.ErrorAs(t, err, &apiErr, "a decision on a plan not in flight is refused")
	require.Equal(t, 404, apiErr.Code)
	res = nextResult(t, results)
	require.False(t, res.Success)
	require.Equal(t, messages.ToolSkipped, res.ToolResults[0].State)

	r, err := c.ResetSession(ctx, "c1", true)
	require.NoError(t, err)
	require.True(t, r.ClearedState)
	_, err = c.ResetSession(ctx, "c 1", false)
	require.ErrorContains(t, err, "sessionId")
}

func nextResult(t *testing.T, sub *nats.Subscription) messages.ExecutionResult {
	t.Helper()
	m, err := sub.NextMsg(20 * time.Second)
	require.NoError(t, err)
	var r messages.ExecutionResult
	require.NoError(t, json.Unmarshal(m.Data, &r))
	return r
}

// TestNoResponders: with nothing serving, control requests say so at once;
// Narrate keeps trying until its deadline and names the last error.
func TestNoResponders(t *testing.T) {
	srv := natstest.Start(t)
	c, err := client.New(srv.Connect(t), client.WithPrefix("other"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err = c.Narrate(ctx, messages.Prompt{SessionID: "s", Text: "hi"})
	require.ErrorIs(t, err, context.DeadlineExceeded, "Narrate kept trying until its deadline")
	require.ErrorContains(t, err, "no responders", "and says why")
	_, err = c.ListPlans(t.Context(), "")
	require.True(t, errors.Is(err, client.ErrNoResponders), "%v", err)
	_, err = client.New(srv.Connect(t), client.WithPrefix("a.b"))
	require.Error(t, err)
}

// TestDecisionRefusedWhileNoSchedulerRuns (§9.3, issues 45 and 47): with
// no scheduler to check it, a decision is sent until ctx ends, then
// refused naming why, and nothing is stored: no client writes the
// approvals stream itself.
func TestDecisionRefusedWhileNoSchedulerRuns(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c, err := client.New(srv.Connect(t))
	require.NoError(t, err)
	plan := uuid.NewString()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err = c.Decide(ctx, plan, "gate", messages.Approval{Approved: true, By: "gm"})
	require.ErrorIs(t, err, context.DeadlineExceeded, "sent until ctx ended")
	require.ErrorIs(t, err, client.ErrNoResponders, "and says no scheduler took it")
	require.ErrorContains(t, err, "nothing was stored")
	st, err := srv.JS.Stream(t.Context(), messages.StreamApprovals)
	require.NoError(t, err)
	info, err := st.Info(t.Context())
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "nothing stored")
}
