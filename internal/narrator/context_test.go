package narrator

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/planner"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// contextSkills: a narration skill that asks for lore when its context has
// none, and a lore skill the rule-based planner finds by keyword.
var contextSkills = []skillDef{
	{name: "teller", script: "narrate", caps: []string{"narration"}, fn: func(_ context.Context, in messages.ScriptInput, emit func(messages.Event) error) error {
		var input struct {
			Context map[string]map[string]any `json:"context"`
		}
		_ = json.Unmarshal(in.Input, &input)
		for _, v := range input.Context {
			if facts, ok := v["facts"]; ok {
				b, _ := json.Marshal(map[string]string{"narration": "The teller recalls: " + facts.(string)})
				return emit(&messages.DoneEvent{OK: true, Output: b})
			}
		}
		return emit(&messages.DoneEvent{OK: true, Output: json.RawMessage(`{"narration":""}`), NeedsMoreContext: true,
			ContextSuggestion: "the lore of this place"})
	}},
	{name: "lore", script: "tell", keywords: []string{"lore", "history"}, fn: func(_ context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
		return emit(&messages.DoneEvent{OK: true, Output: json.RawMessage(`{"facts":"a dragon slept here"}`)})
	}},
	{name: "slow", script: "wait", keywords: []string{"wait"}, fn: func(ctx context.Context, _ messages.ScriptInput, emit func(messages.Event) error) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Second):
		}
		return emit(&messages.DoneEvent{OK: true})
	}},
}

// results collects the execution results of a session.
func results(t *testing.T, e *env, session string) func() []messages.ExecutionResult {
	t.Helper()
	ch := make(chan *nats.Msg, 64)
	sub, err := e.srv.NC.ChanSubscribe("narratoria.results."+session+".*", ch)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, e.srv.NC.Flush())
	return func() []messages.ExecutionResult {
		var out []messages.ExecutionResult
		for {
			select {
			case m := <-ch:
				var r messages.ExecutionResult
				require.NoError(t, json.Unmarshal(m.Data, &r))
				out = append(out, r)
			default:
				return out
			}
		}
	}
}

func finalIDs(r messages.ExecutionResult) []string {
	var ids []string
	for _, t := range r.FinalPlan.Tools {
		ids = append(ids, t.ToolID)
	}
	return ids
}

// TestContextRulePlanner: the teller asks for more context; the narrator's
// rule-based planner answers with the lore skill (matched from the
// suggestion) and the teller again with the lore in its context.
func TestContextRulePlanner(t *testing.T) {
	t.Parallel()
	e := newPipeline(t, contextSkills)
	e.nar = e.startNarrator(t, Config{}, nil)
	got := results(t, e, "c1")
	n, _ := e.narrate(t, `{"sessionId":"c1","text":"I look around"}`)
	require.False(t, n.Fallback)
	require.Contains(t, n.Text, "The teller recalls: a dragon slept here")
	rs := waitResults(t, got, 1)
	require.Equal(t, 1, rs[0].RePlanIterations)
	require.Equal(t, []string{"narrate", "_rp1_c1-lore", "_rp1_retell"}, finalIDs(rs[0]))
	require.Len(t, rs[0].OriginalPlan.Tools, 1)
	require.True(t, e.rec.Contains("answered a request for more context", "_rp1_") || e.rec.Contains("answered a request for more context", "c1-lore"))
}

func waitResults(t *testing.T, got func() []messages.ExecutionResult, n int) []messages.ExecutionResult {
	t.Helper()
	var all []messages.ExecutionResult
	require.Eventually(t, func() bool {
		all = append(all, got()...)
		return len(all) >= n
	}, testlog.Budget(10*time.Second), 10*time.Millisecond)
	return all
}

// TestContextLLMPlanner: the LLM planner is asked for the steps only, with
// the completed outputs and the suggestion; an answer it cannot use falls
// back to the rule-based answer.
func TestContextLLMPlanner(t *testing.T) {
	t.Parallel()
	var mode atomic.Value
	mode.Store("good")
	var asked atomic.Value
	url := llmServer(t, func(w http.ResponseWriter, r *http.Request) {
		var req chatRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		if !strings.Contains(req.Messages[0].Content, "# More context") {
			// A plan: the teller alone.
			_, _ = w.Write([]byte(completion(`{"requestId":"` + uuid.NewString() + `","narrative":"N.","tools":[{"toolId":"tell","toolPath":"teller/narrate","input":{"prompt":"x"}}]}`)))
			return
		}
		asked.Store(req.Messages[1].Content)
		switch mode.Load() {
		case "good":
			_, _ = w.Write([]byte(completion(`{"tools":[{"toolId":"l","toolPath":"lore/tell","input":{},"dependencies":["tell"]},` +
				`{"toolId":"again","toolPath":"teller/narrate","input":{"prompt":"x","context":{"lore":"$l"}},"dependencies":["l"]}]}`)))
		default:
			_, _ = w.Write([]byte(completion(`{"tools": "nope"}`)))
		}
	})
	e := newPipeline(t, contextSkills)
	e.nar = e.startNarrator(t, Config{Planner: "llm", LLM: planner.LLMConfig{BaseURL: url, Model: "m"}}, nil)
	got := results(t, e, "c2")
	n, _ := e.narrate(t, `{"sessionId":"c2","text":"I look around"}`)
	require.Contains(t, n.Text, "The teller recalls: a dragon slept here")
	rs := waitResults(t, got, 1)
	require.Equal(t, []string{"tell", "_rp1_l", "_rp1_again"}, finalIDs(rs[0]))
	q, _ := asked.Load().(string)
	require.Contains(t, q, "the lore of this place", "the suggestion is sent")
	require.Contains(t, q, `"toolId":"tell"`, "the completed tools are sent")

	mode.Store("bad")
	got = results(t, e, "c3")
	n, _ = e.narrate(t, `{"sessionId":"c3","text":"I look around"}`)
	require.Contains(t, n.Text, "The teller recalls: a dragon slept here", "the rule-based planner answered")
	rs = waitResults(t, got, 1)
	require.Equal(t, []string{"tell", "_rp1_c1-lore", "_rp1_retell"}, finalIDs(rs[0]))
	require.True(t, e.rec.Contains("could not add steps"))
}

// TestContextBadRequest: a request that is not one gets an error naming
// the problem.
func TestContextBadRequest(t *testing.T) {
	t.Parallel()
	e := newPipeline(t, contextSkills)
	e.nar = e.startNarrator(t, Config{}, nil)
	for _, body := range []string{`{`, `{"planId":"x"}`} {
		m, err := e.srv.NC.Request("narratoria.context.s", []byte(body), 5*time.Second)
		require.NoError(t, err)
		var r messages.ContextReply
		require.NoError(t, json.Unmarshal(m.Data, &r))
		require.NotEmpty(t, r.Error, body)
		require.Empty(t, r.Tools)
	}
}

// TestCancelledPlanNotReplanned: a plan cancelled through the control
// subject is not planned again; the narration says it was cancelled.
func TestCancelledPlanNotReplanned(t *testing.T) {
	t.Parallel()
	e := newPipeline(t, contextSkills)
	e.nar = e.startNarrator(t, Config{}, nil)
	plans := make(chan *nats.Msg, 8)
	sub, err := e.srv.NC.ChanSubscribe("narratoria.plans.c4", plans)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, e.srv.NC.Flush())
	go func() {
		m := <-plans
		var p messages.Plan
		_ = json.Unmarshal(m.Data, &p)
		time.Sleep(300 * time.Millisecond)
		_, _ = e.srv.NC.Request("narratoria.control.cancel."+p.RequestID, []byte(`{"by":"test","reason":"enough"}`), 5*time.Second)
	}()
	n, _ := e.narrate(t, `{"sessionId":"c4","text":"I wait"}`)
	require.True(t, n.Cancelled)
	require.True(t, n.Fallback)
	require.Equal(t, 1, n.Attempts, "a cancelled plan is not replanned")
	require.Len(t, plans, 0, "no second plan")
	require.True(t, e.rec.Contains("may not be replanned"))
}
