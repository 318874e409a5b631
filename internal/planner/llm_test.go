package planner

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

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
