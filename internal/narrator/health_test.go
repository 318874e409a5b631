package narrator

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/planner"
	"github.com/narratoria/runtime/pkg/health"
	"github.com/narratoria/runtime/pkg/messages"
)

// setHealth stores a skill's health in a session, as the scheduler does.
func setHealth(t *testing.T, e *env, session, skill string, st health.State) {
	t.Helper()
	kv, err := e.srv.JS.KeyValue(context.Background(), messages.BucketHealth)
	require.NoError(t, err)
	b, _ := json.Marshal(health.Status{State: st, Reason: "test"})
	_, err = kv.Put(context.Background(), session+"."+skill, b)
	require.NoError(t, err)
}

// TestHealthInPlanning (§7, through the narrator): a permanentFailure
// skill is never chosen; a degraded one is still chosen when the prompt
// clearly asks for it, with twice its timeout — also in an LLM plan, whose
// model knows nothing of health.
func TestHealthInPlanning(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var asked string
	url := llmServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		asked = string(b)
		mu.Unlock()
		_, _ = w.Write([]byte(completion(`{"requestId":"` + uuid.NewString() + `","narrative":"N.","tools":[{"toolId":"r","toolPath":"dice/roll"}]}`)))
	})
	e := newPipeline(t, testSkills)
	rules := e.startNarrator(t, Config{}, nil)
	_ = rules
	setHealth(t, e, "h1", "dice", health.PermanentFailure)
	setHealth(t, e, "h2", "dice", health.Degraded)
	time.Sleep(200 * time.Millisecond) // the narrator's health mirror catches up

	n, _ := e.narrate(t, `{"sessionId":"h1","text":"I roll"}`)
	require.NotContains(t, n.Text, "The die shows", "a permanentFailure skill is never chosen")
	plans := fetchPlans(t, e, "h1")
	require.NotEmpty(t, plans)
	for _, tl := range plans[len(plans)-1].Tools {
		require.NotEqual(t, "dice/roll", tl.ToolPath)
	}

	n, _ = e.narrate(t, `{"sessionId":"h2","text":"I roll"}`)
	require.Contains(t, n.Text, "The die shows", "a degraded skill the prompt asks for is still chosen")
	plans = fetchPlans(t, e, "h2")
	var dice *messages.Tool
	for i, tl := range plans[len(plans)-1].Tools {
		if tl.ToolPath == "dice/roll" {
			dice = &plans[len(plans)-1].Tools[i]
		}
	}
	require.NotNil(t, dice)
	require.EqualValues(t, 2*messages.ToolTimeoutDefault.Milliseconds(), dice.TimeoutMs, "twice the timeout")

	// The LLM planner's plan gets the doubled timeout too. (The success
	// above made dice healthy again in h2: degrade it in h3.)
	setHealth(t, e, "h3", "dice", health.Degraded)
	e2 := e.startNarrator(t, Config{Planner: "llm", LLM: planner.LLMConfig{BaseURL: url, Model: "m"}}, nil)
	_ = e2
	rules.Stop()
	var m *nats.Msg
	for range 5 { // the stopped narrator may still get one request: retried, as a client would
		if n, m = e.narrate(t, `{"sessionId":"h3","promptId":"again","text":"I roll again"}`); n != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NotNil(t, n, "%v %s", m.Header, m.Data)
	require.Contains(t, n.Text, "N.")
	plans = fetchPlans(t, e, "h3")
	last := plans[len(plans)-1]
	require.Equal(t, "dice/roll", last.Tools[0].ToolPath)
	require.EqualValues(t, 2*messages.ToolTimeoutDefault.Milliseconds(), last.Tools[0].TimeoutMs, "an LLM plan gets the degraded skill's doubled timeout")
	mu.Lock()
	require.Contains(t, asked, `"json_schema"`, "the plan schema is sent for constrained decoding")
	mu.Unlock()
}
