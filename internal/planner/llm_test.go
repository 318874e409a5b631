package planner

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/pkg/messages"
)

// llmServer answers chat completions with the given handler: an
// OpenAI-compatible endpoint in the test.
func llmServer(t *testing.T, h func(w http.ResponseWriter, r *http.Request)) string {
	srv := httptest.NewServer(http.HandlerFunc(h))
	t.Cleanup(srv.Close)
	return srv.URL
}

// completion is a chat completion answering content.
func completion(content string) string {
	b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": content}}}})
	return string(b)
}

// TestLLMRequestAndRepair: the request carries the Plan schema (as
// response_format, or as Ollama's format) and each skill's examples as
// shots; a fenced answer without a requestId is repaired and used.
func TestLLMRequestAndRepair(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var body map[string]any
	url := llmServer(t, func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		mu.Lock()
		body = m
		mu.Unlock()
		_, _ = w.Write([]byte(completion("Here is the plan:\n```json\n{\"narrative\":\"Fixed.\",\"tools\":[{\"toolId\":\"r\",\"toolPath\":\"dice-roller/roll-dice\",\"input\":{\"formula\":\"1d20\"}}]}\n```")))
	})
	cat, _ := CatalogueFromDir("../../skills")
	for _, mode := range []string{"response_format", "format"} {
		pl := NewLLMPlanner(LLMConfig{BaseURL: url, Model: "m", StructuredOutput: mode}, nil)
		p, err := pl.Plan(context.Background(), Request{SessionID: "s", Text: "I swing my axe", Catalogue: cat})
		require.NoError(t, err, mode)
		require.Equal(t, "Fixed.", p.Narrative)
		require.NoError(t, messages.CheckPlanID(p.RequestID), "a requestId was given")
		mu.Lock()
		msgs := body["messages"].([]any)
		system := msgs[0].(map[string]any)["content"].(string)
		require.Contains(t, system, "Players say things like:", mode)
		require.Contains(t, system, "I swing my hammer at the guard", "the skills' examples are shots")
		if mode == "format" {
			require.Contains(t, body["format"], "$id", "Ollama's format carries the schema")
			require.Nil(t, body["response_format"])
		} else {
			rf, _ := json.Marshal(body["response_format"])
			require.True(t, strings.Contains(string(rf), "plan.schema.json"), "response_format carries the Plan schema: %s", rf)
		}
		mu.Unlock()
	}
}

// TestLLMErrorKinds: the LLM planner classifies what goes wrong — an answer
// that is not JSON, a server error, a server too slow for the deadline — and
// hands a plan that is JSON but breaks the schema to the caller as a plan
// error.
func TestLLMErrorKinds(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	mode := ""
	url := llmServer(t, func(w http.ResponseWriter, r *http.Request) {
		// Read the body, so that the server notices the client going away.
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		m := mode
		mu.Unlock()
		switch m {
		case "malformed":
			_, _ = w.Write([]byte(completion(`{"requestId": oops`)))
		case "not a completion":
			_, _ = w.Write([]byte(`{"choices":[]}`))
		case "no toolPath":
			_, _ = w.Write([]byte(completion(`{"tools":[{"toolId":"a"}]}`)))
		case "slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		default:
			http.Error(w, "model exploded", http.StatusInternalServerError)
		}
	})
	pl := NewLLMPlanner(LLMConfig{BaseURL: url, Model: "m"}, nil)
	for _, c := range []struct{ mode, kind string }{{"malformed", "json"}, {"not a completion", "json"}, {"500", "server_error"}, {"slow", "timeout"}} {
		mu.Lock()
		mode = c.mode
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := pl.Plan(ctx, Request{SessionID: "s", Text: "I roll"})
		cancel()
		var le *LLMError
		require.ErrorAs(t, err, &le, c.mode)
		require.Equal(t, c.kind, le.Kind, c.mode)
	}
	mu.Lock()
	mode = "no toolPath"
	mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := pl.Plan(ctx, Request{SessionID: "s", Text: "I roll"})
	var perr *messages.PlanError
	require.ErrorAs(t, err, &perr, "a tool without a toolPath is a plan error")
}

// TestLLMMoreSteps: asked for more context, the LLM planner sends the
// running plan, the completed outputs and the suggestion, and returns the
// tools of a {"tools": [...]} answer decoded as a plan's (with the schema's
// defaults); another answer is an error.
func TestLLMMoreSteps(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var asked string
	answer := `{"tools":[{"toolId":"l","toolPath":"lore/tell","input":{}}]}`
	url := llmServer(t, func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		defer mu.Unlock()
		asked = body.Messages[1].Content
		_, _ = w.Write([]byte(completion(answer)))
	})
	pl := NewLLMPlanner(LLMConfig{BaseURL: url, Model: "m"}, nil)
	req := ContextRequest{Request: &messages.ContextRequest{PlanID: "11111111-1111-4111-8111-111111111111", ToolID: "tell",
		Suggestion: "the lore of this place", Plan: &messages.Plan{Tools: []messages.Tool{{ToolID: "tell", ToolPath: "teller/narrate"}}}}}
	tools, err := pl.MoreSteps(context.Background(), req)
	require.NoError(t, err)
	require.Len(t, tools, 1)
	require.Equal(t, "lore/tell", tools[0].ToolPath)
	require.Equal(t, []string{}, tools[0].Dependencies, "decoded as a plan's tools")
	mu.Lock()
	require.Contains(t, asked, "the lore of this place")
	require.Contains(t, asked, `"toolId":"tell"`)
	answer = `{"tools": "nope"}`
	mu.Unlock()
	_, err = pl.MoreSteps(context.Background(), req)
	var le *LLMError
	require.ErrorAs(t, err, &le)
	_, err = pl.MoreSteps(context.Background(), ContextRequest{})
	require.ErrorAs(t, err, &le, "a request without a plan")
}
