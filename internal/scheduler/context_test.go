package scheduler

import (
	"encoding/json"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// planner serves context requests of a session with answer; it counts the
// requests and keeps the last one.
type planner struct {
	requests atomic.Int32
	last     atomic.Pointer[messages.ContextRequest]
}

func servePlanner(t *testing.T, e *env, session string, answer func(req *messages.ContextRequest) any) *planner {
	t.Helper()
	pl := &planner{}
	sub, err := e.srv.NC.Subscribe("narratoria.context."+session, func(m *nats.Msg) {
		var req messages.ContextRequest
		if json.Unmarshal(m.Data, &req) != nil {
			return
		}
		pl.requests.Add(1)
		pl.last.Store(&req)
		a := answer(&req)
		if a == nil {
			return // no answer
		}
		b, _ := json.Marshal(a)
		_ = m.Respond(b)
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return pl
}

func rawTools(js ...string) messages.ContextReply {
	r := messages.ContextReply{}
	for _, s := range js {
		r.Tools = append(r.Tools, json.RawMessage(s))
	}
	return r
}

// TestContextReplanning (§9.1): a tool asks for more context; the planner's
// steps join the plan as _rp1_ tools that depend on the asking tool and
// read its output; the new tool asks again → _rp2_; a third request is
// past the limit and only noted.
func TestContextReplanning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{ContextTimeout: 3 * time.Second})
	var versions atomic.Pointer[[]messages.PlanVersion]
	pl := servePlanner(t, e, "ctx", func(req *messages.ContextRequest) any {
		if req.Iteration == 2 {
			// While the plan waits: its status shows each version.
			if st := control(t, e, "narratoria.control.status."+req.PlanID, ""); st.Status != nil {
				versions.Store(&st.Status.Versions)
			}
		}
		return rawTools(`{"toolId":"recall","toolPath":"test/step","dependencies":["` + req.ToolID + `"],
			"input":{"from":"$` + req.ToolID + `.tool","needContext":"and before that?"}}`)
	})
	p := plan(tool("ask", nil, stepInput{NeedContext: "what happened before?"}))
	res := e.runPlan(t, "ctx", p)
	require.True(t, res.Success, res.Message)
	require.Equal(t, 2, res.RePlanIterations)
	require.EqualValues(t, 2, pl.requests.Load())
	ids := []string{}
	for _, tr := range res.ToolResults {
		ids = append(ids, tr.ToolID)
		require.Equal(t, messages.ToolSuccess, tr.State, tr.ToolID)
	}
	require.Equal(t, []string{"ask", "_rp1_recall", "_rp2_recall"}, ids)
	require.Len(t, res.OriginalPlan.Tools, 1)
	require.Len(t, res.FinalPlan.Tools, 3)
	require.Equal(t, []string{"_rp1_recall"}, res.FinalPlan.Tools[2].Dependencies)
	require.Equal(t, "ask", e.log.of("_rp1_recall")[0].input["from"], "the new tool read the asking tool's output")
	require.Equal(t, "_rp1_recall", e.log.of("_rp2_recall")[0].input["from"])
	require.Len(t, res.RePlanNotes, 1)
	require.Contains(t, res.RePlanNotes[0], "the limit")
	last := pl.last.Load()
	require.Equal(t, 2, last.Iteration)
	require.Equal(t, "_rp2_", last.Prefix)
	require.Equal(t, "and before that?", last.Suggestion)
	require.Len(t, last.Completed, 2)
	v := versions.Load()
	require.NotNil(t, v, "status answered during the pause")
	require.Len(t, *v, 3)
	require.Equal(t, messages.PlanVersion{Version: 0, State: "original", ToolIDs: []string{"ask"}}, (*v)[0])
	require.Equal(t, "merged", (*v)[1].State)
	require.Equal(t, []string{"_rp1_recall"}, (*v)[1].ToolIDs)
	require.Equal(t, "asked", (*v)[2].State)
	require.Equal(t, "_rp1_recall", (*v)[2].AskedBy)
	require.Equal(t, "and before that?", (*v)[2].Suggestion)
}

// TestContextReplanningCarriesOn: no planner, an error, a cycle, an unknown
// skill — each time the plan completes without more steps and says why.
func TestContextReplanningCarriesOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{ContextTimeout: 500 * time.Millisecond})
	cases := []struct {
		session string
		answer  any
		want    string
	}{
		{"none", nil, "answer"}, // the timer or the request, whichever ends first
		{"err", messages.ContextReply{Error: "model unavailable"}, "model unavailable"},
		{"cycle", rawTools(`{"toolId":"a","toolPath":"test/step","dependencies":["b"]}`, `{"toolId":"b","toolPath":"test/step","dependencies":["a"]}`), "cycle"},
		{"unknown", rawTools(`{"toolId":"a","toolPath":"nosuch/step"}`), "nosuch"},
		{"empty", messages.ContextReply{}, "no steps to add"},
	}
	for _, c := range cases {
		answer := c.answer
		servePlanner(t, e, c.session, func(*messages.ContextRequest) any { return answer })
		res := e.runPlan(t, c.session, plan(tool("ask", nil, stepInput{NeedContext: "more?"}), tool("then", []string{"ask"}, stepInput{})))
		require.True(t, res.Success, "%s: %s", c.session, res.Message)
		require.Equal(t, 1, res.RePlanIterations, c.session)
		require.Len(t, res.ToolResults, 2, c.session)
		require.Len(t, res.RePlanNotes, 1, c.session)
		require.Contains(t, res.RePlanNotes[0], c.want, c.session)
	}
}

// TestContextReplanningSurvivesKill: the active scheduler is killed with
// SIGKILL while the plan waits for the planner; the standby finishes the
// plan with the same iteration count, never asks again, and no tool runs
// twice.
func TestContextReplanningSurvivesKill(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the scheduler binary")
	}
	e := newEnv(t, Config{})
	active, standby := binaryActive(t, e, Config{LeaseTTL: time.Second, ContextTimeout: time.Second})
	session := sessionOf(standby, "ctxk")
	asked := make(chan struct{}, 4)
	pl := servePlanner(t, e, session, func(*messages.ContextRequest) any {
		asked <- struct{}{}
		return nil // the answer would go to the process about to die
	})
	p := plan(tool("ask", nil, stepInput{NeedContext: "more?"}), tool("then", []string{"ask"}, stepInput{}))
	done := e.startPlan(t, session, p)
	select {
	case <-asked:
	case <-time.After(30 * time.Second):
		t.Fatal("the planner was never asked")
	}
	require.NoError(t, active.Process.Signal(syscall.SIGKILL))
	_, _ = active.Process.Wait()
	res := <-done
	require.NotNil(t, res, "no result")
	require.Eventually(t, func() bool { return standby.Owns(session) }, testlog.Budget(10*time.Second), 20*time.Millisecond)
	require.True(t, res.Success, res.Message)
	require.Equal(t, 1, res.RePlanIterations)
	require.EqualValues(t, 1, pl.requests.Load(), "the iteration was asked once")
	require.Len(t, e.log.of("ask"), 1)
	require.Len(t, e.log.of("then"), 1)
}
