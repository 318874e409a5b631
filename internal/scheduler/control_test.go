package scheduler

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/planfsm"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

func control(t *testing.T, e *env, subject string, body string) messages.ControlReply {
	t.Helper()
	m, err := e.srv.NC.Request(subject, []byte(body), 5*time.Second)
	require.NoError(t, err)
	var r messages.ControlReply
	require.NoError(t, json.Unmarshal(m.Data, &r), string(m.Data))
	return r
}

// TestPlanControl: status and list of a plan in flight, then cancel while
// its script runs: the script is stopped, every unfinished tool ends
// cancelled, the result says cancelled and not to replan, once.
func TestPlanControl(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p := plan(tool("a", nil, stepInput{Hang: true}), tool("b", []string{"a"}, stepInput{}), tool("c", nil, stepInput{}))
	results, err := e.srv.NC.SubscribeSync("narratoria.results.ctl." + p.RequestID)
	require.NoError(t, err)
	progress, err := e.srv.NC.SubscribeSync("narratoria.progress.ctl." + p.RequestID)
	require.NoError(t, err)
	b, _ := json.Marshal(p)
	_, err = e.srv.JS.Publish(t.Context(), "narratoria.plans.ctl", b)
	require.NoError(t, err)
	for {
		m, err := progress.NextMsg(10 * time.Second)
		require.NoError(t, err)
		var pr messages.Progress
		require.NoError(t, json.Unmarshal(m.Data, &pr))
		if pr.ToolID == "a" && pr.State == string(messages.ToolRunning) {
			break
		}
	}

	require.Eventually(t, func() bool { return e.log.started(p.RequestID, "a") }, testlog.Budget(10*time.Second), 10*time.Millisecond)

	st := control(t, e, "narratoria.control.status."+p.RequestID, "")
	require.True(t, st.OK, st.Error)
	require.Equal(t, "ctl", st.Status.SessionID)
	require.Len(t, st.Status.Tools, 3)
	require.Equal(t, messages.ToolRunning, st.Status.Tools[0].State)
	require.Equal(t, 1, st.Status.Tools[0].Attempt)
	require.Equal(t, messages.ToolPending, st.Status.Tools[1].State)

	ls := control(t, e, "narratoria.control.list", `{"sessionId":"ctl"}`)
	require.True(t, ls.OK, ls.Error)
	require.Equal(t, []messages.PlanSummary{{PlanID: p.RequestID, SessionID: "ctl"}}, ls.List.Plans)
	ls = control(t, e, "narratoria.control.list", `{"sessionId":"other"}`)
	require.Empty(t, ls.List.Plans)

	c := control(t, e, "narratoria.control.cancel."+p.RequestID, `{"by":"gm","reason":"player left"}`)
	require.True(t, c.OK, c.Error)
	m, err := results.NextMsg(10 * time.Second)
	require.NoError(t, err)
	var res messages.ExecutionResult
	require.NoError(t, json.Unmarshal(m.Data, &res))
	require.False(t, res.Success)
	require.False(t, res.CanReplan, "a cancelled plan is not replanned")
	require.Equal(t, messages.ReasonCancelled, res.FailureReason)
	require.Contains(t, res.Message, "player left")
	for _, id := range []string{"a", "b", "c"} {
		require.Equal(t, messages.ToolCancelled, toolResult(t, &res, id).State, id)
	}
	require.Eventually(t, func() bool { return len(e.log.of("a")) == 1 }, testlog.Budget(5*time.Second), 10*time.Millisecond,
		"the running script was stopped")
	require.Empty(t, e.log.of("b"))
	_, err = results.NextMsg(300 * time.Millisecond)
	require.Error(t, err, "the result is published once")

	again := control(t, e, "narratoria.control.cancel."+p.RequestID, "")
	require.False(t, again.OK)
	require.Equal(t, messages.ControlPlanFinished, again.Code, again.Error)
	require.Contains(t, again.Error, "already finished: cancelled")
	unknown := control(t, e, "narratoria.control.status."+uuid.NewString(), "")
	require.Equal(t, messages.ControlUnknownPlan, unknown.Code, unknown.Error)
	require.Contains(t, unknown.Error, "unknown plan")
	bad := control(t, e, "narratoria.control.cancel.not-a-uuid", "")
	require.Contains(t, bad.Error, "must be a UUID")
}

// TestResetChecksTheSession: a reset of an invalid session ID is refused
// with the reason, and nothing is written.
func TestResetChecksTheSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	long := strings.Repeat("s", 200)
	for _, id := range []string{long, "a=b"} {
		m, err := e.srv.NC.Request("narratoria.sessions."+id+".reset", []byte(`{"clearState":true}`), 5*time.Second)
		require.NoError(t, err)
		require.Contains(t, string(m.Data), "sessionId", id)
		kv, err := e.srv.JS.KeyValue(t.Context(), messages.BucketSessions)
		require.NoError(t, err)
		_, err = kv.Get(t.Context(), id)
		require.Error(t, err, "nothing written for %q", id)
	}
}

// TestStatusOfAPlanJustFinished: between a plan's actor ending and its
// record's last write (published) landing, a status request finds a
// finished record and no actor. The owner waits for an actor then (one may
// be starting), but reads the record again meanwhile: once it says
// published, the answer comes at once, not after the whole 5 s wait.
func TestStatusOfAPlanJustFinished(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	kv, err := e.srv.JS.KeyValue(t.Context(), messages.BucketPlans)
	require.NoError(t, err)
	plan := uuid.NewString()
	rec := func(phase planfsm.Phase) []byte {
		b, _ := json.Marshal(planfsm.Record{SessionID: "done", Phase: phase})
		return b
	}
	_, err = kv.Put(t.Context(), planKey(plan), rec(planfsm.PhaseFinished))
	require.NoError(t, err)
	time.AfterFunc(200*time.Millisecond, func() { _, _ = kv.Put(t.Context(), planKey(plan), rec(planfsm.PhasePublished)) })
	start := time.Now()
	r := control(t, e, "narratoria.control.status."+plan, "")
	require.Equal(t, messages.ControlUnknownPlan, r.Code, "no result of it is stored: %s", r.Error)
	require.Less(t, time.Since(start), testlog.Budget(3*time.Second), "answered once the record said published")
}

// TestApprovalsShowAndRefuse (issue 47): a tool waiting for approval shows
// the input it would run with, its reference to an earlier tool's output
// resolved, in its status and in its awaiting_approval progress event; an
// approval check accepts it and refuses an unknown tool, a tool that takes
// no decision and an unknown plan, each with its code. Once the plan has
// finished, its status comes from its stored result (exit 0 for the CLI),
// and approvals and cancels of it are refused as plan_finished. The
// endpoints are listed by the scheduler's micro service.
func TestApprovalsShowAndRefuse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	gate := tool("gate", []string{"roll"}, stepInput{}, func(tl *messages.Tool) {
		tl.RequiresApproval = true
		tl.Input = json.RawMessage(`{"total":"$roll.total","note":"gm decides"}`)
	})
	p := plan(tool("roll", nil, stepInput{Output: map[string]any{"total": 17}}), gate)
	progress, err := e.srv.NC.SubscribeSync("narratoria.progress.show." + p.RequestID)
	require.NoError(t, err)
	done := e.startPlan(t, "show", p)
	var waiting messages.Progress
	for waiting.State != string(messages.ToolAwaitingApproval) {
		m, err := progress.NextMsg(10 * time.Second)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(m.Data, &waiting))
	}
	require.JSONEq(t, `{"total":17,"note":"gm decides"}`, string(waiting.Input), "the request for a decision shows what it approves")

	st := control(t, e, "narratoria.control.status."+p.RequestID, "")
	require.True(t, st.OK, st.Error)
	require.Equal(t, messages.ToolAwaitingApproval, st.Status.Tools[1].State)
	require.True(t, st.Status.Tools[1].RequiresApproval)
	require.JSONEq(t, `{"total":17,"note":"gm decides"}`, string(st.Status.Tools[1].Input))
	require.Empty(t, st.Status.Tools[0].Input, "only a waiting tool's input is shown")

	ok := control(t, e, "narratoria.control.approval."+p.RequestID+".gate", "")
	require.True(t, ok.OK, ok.Error)
	require.JSONEq(t, `{"total":17,"note":"gm decides"}`, string(ok.Approval.Tool.Input))
	for _, c := range []struct{ subject, code, says string }{
		{"narratoria.control.approval." + p.RequestID + ".nosuch", messages.ControlUnknownTool, `has no tool "nosuch"`},
		{"narratoria.control.approval." + p.RequestID + ".roll", messages.ControlNotAwaitingApproval, `tool "roll"`},
		{"narratoria.control.approval." + uuid.NewString() + ".gate", messages.ControlUnknownPlan, "unknown plan"},
	} {
		r := control(t, e, c.subject, "")
		require.False(t, r.OK, c.subject)
		require.Equal(t, c.code, r.Code, r.Error)
		require.Contains(t, r.Error, c.says)
	}

	_, err = e.srv.JS.Publish(t.Context(), "narratoria.approvals."+p.RequestID+".gate", []byte(`{"approved":true,"by":"gm"}`))
	require.NoError(t, err)
	res := <-done
	require.NotNil(t, res)
	require.True(t, res.Success, res.Message)

	// Finished: answered from the result, by whichever scheduler.
	require.Eventually(t, func() bool {
		st = control(t, e, "narratoria.control.status."+p.RequestID, "")
		return st.OK && st.Status.Result != nil
	}, testlog.Budget(10*time.Second), 20*time.Millisecond)
	require.Equal(t, "published", st.Status.Phase)
	require.Equal(t, messages.PlanSucceeded, st.Status.Result.State)
	require.Equal(t, messages.ToolSuccess, st.Status.Tools[1].State)
	require.Equal(t, 1, st.Status.Tools[1].Attempt)
	for _, c := range []struct{ subject, code string }{
		{"narratoria.control.approval." + p.RequestID + ".gate", messages.ControlPlanFinished},
		{"narratoria.control.approval." + p.RequestID + ".nosuch", messages.ControlUnknownTool},
		{"narratoria.control.cancel." + p.RequestID, messages.ControlPlanFinished},
	} {
		r := control(t, e, c.subject, "")
		require.False(t, r.OK, c.subject)
		require.Equal(t, c.code, r.Code, r.Error)
	}

	// History and skills, as a tenant's client would page them.
	var h messages.ControlReply
	require.Eventually(t, func() bool {
		h = control(t, e, "narratoria.control.history", `{"sessionId":"show"}`)
		return h.OK && h.History.Total == 1
	}, testlog.Budget(10*time.Second), 20*time.Millisecond)
	require.Equal(t, p.RequestID, h.History.Plans[0].PlanID)
	require.Equal(t, messages.PlanSucceeded, h.History.Plans[0].State)
	sk := control(t, e, "narratoria.control.skills", `{"sessionId":"show"}`)
	require.True(t, sk.OK, sk.Error)
	require.NotEmpty(t, sk.Skills)
	require.Equal(t, "healthy", sk.Skills[0].Health)

	// Every public request is an endpoint of the micro service.
	m, err := e.srv.NC.Request("$SRV.INFO."+ServiceName, nil, 5*time.Second)
	require.NoError(t, err)
	for _, name := range []string{"plan-status", "plan-cancel", "plan-list", "approval-check", "plan-history", "skills", "session-reset"} {
		require.Contains(t, string(m.Data), `"name":"`+name+`"`)
	}
}
