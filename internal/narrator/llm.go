package narrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/narratoria/runtime/pkg/messages"
)

// LLMError is a failure of the LLM planner, classified for metrics and logs.
type LLMError struct {
	// Kind is http, timeout or json.
	Kind string
	// Err is the cause.
	Err error
}

// Error implements error.
func (e *LLMError) Error() string { return "llm planner (" + e.Kind + "): " + e.Err.Error() }

// Unwrap returns the cause.
func (e *LLMError) Unwrap() error { return e.Err }

// maxLLMResponse bounds the body read from the model server.
const maxLLMResponse = 4 << 20

// LLMPlanner asks an OpenAI-compatible chat-completions endpoint
// (llama.cpp llama-server, Ollama, vLLM…) for a Plan JSON, giving it the
// skills' prompt.md texts and the catalogue in the system context and the
// Plan JSON Schema as the response format.
type LLMPlanner struct {
	cfg    LLMConfig
	client *http.Client
}

// NewLLMPlanner builds the planner; client may be nil (http.DefaultClient).
func NewLLMPlanner(cfg LLMConfig, client *http.Client) *LLMPlanner {
	if client == nil {
		client = http.DefaultClient
	}
	return &LLMPlanner{cfg: cfg, client: client}
}

// Name implements Planner.
func (*LLMPlanner) Name() string { return "llm" }

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model          string          `json:"model"`
	Messages       []chatMessage   `json:"messages"`
	Temperature    float64         `json:"temperature"`
	ResponseFormat json.RawMessage `json:"response_format,omitempty"`
}

type chatResponse struct {
	Choices []struct {
		Message chatMessage `json:"message"`
	} `json:"choices"`
}

// Plan implements Planner.
func (l *LLMPlanner) Plan(ctx context.Context, req Request) (*messages.Plan, error) {
	schema, err := messages.Schemas.ReadFile("schemas/" + messages.SchemaPlan)
	if err != nil {
		return nil, &LLMError{Kind: "json", Err: err}
	}
	format, _ := json.Marshal(map[string]any{
		"type":        "json_schema",
		"json_schema": map[string]any{"name": "plan", "schema": json.RawMessage(schema)},
	})
	body, _ := json.Marshal(chatRequest{
		Model: l.cfg.Model, Temperature: l.cfg.Temperature, ResponseFormat: format,
		Messages: []chatMessage{
			{Role: "system", Content: systemPrompt(req)},
			{Role: "user", Content: req.Text},
		},
	})
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(l.cfg.BaseURL, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, &LLMError{Kind: "http", Err: err}
	}
	hreq.Header.Set("Content-Type", "application/json")
	if key := os.Getenv(l.cfg.APIKeyEnv); key != "" {
		hreq.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := l.client.Do(hreq)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return nil, &LLMError{Kind: "timeout", Err: err}
		}
		return nil, &LLMError{Kind: "http", Err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxLLMResponse))
	if err != nil {
		if ctx.Err() != nil {
			return nil, &LLMError{Kind: "timeout", Err: err}
		}
		return nil, &LLMError{Kind: "http", Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &LLMError{Kind: "http", Err: fmt.Errorf("status %d: %s", resp.StatusCode, clip(string(raw), 200))}
	}
	var cr chatResponse
	if err := json.Unmarshal(raw, &cr); err != nil || len(cr.Choices) == 0 {
		return nil, &LLMError{Kind: "json", Err: fmt.Errorf("not a chat completion: %s", clip(string(raw), 200))}
	}
	content := stripFences(cr.Choices[0].Message.Content)
	plan, err := messages.DecodePlan([]byte(content), messages.PlanLimits{})
	if err != nil {
		var perr *messages.PlanError
		if errors.As(err, &perr) && perr.Reason == messages.ReasonInvalidJSON {
			return nil, &LLMError{Kind: "json", Err: err}
		}
		return nil, err
	}
	return plan, nil
}

// stripFences removes a ```json fence some models wrap their answer in.
func stripFences(s string) string {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "```") {
		s = strings.TrimPrefix(s, "```json")
		s = strings.TrimPrefix(s, "```")
		s = strings.TrimSuffix(strings.TrimSpace(s), "```")
	}
	return strings.TrimSpace(s)
}

// systemPrompt gives the model the rules of a plan, each skill's prompt.md
// and the catalogue of scripts with their input schemas.
func systemPrompt(req Request) string {
	var b strings.Builder
	b.WriteString(`You are the narrator of an interactive story. Turn the player's words into a Plan JSON that runs skill scripts.
Answer with one JSON object only, matching the Plan schema:
- "requestId": a new UUID; "narrative": one vivid sentence of your own; "tools": the scripts to run.
- Each tool: "toolId" (letters, digits, - or _), "toolPath" "<skill>/<script>" from the catalogue below, "input" (an object
  matching the script's inputSchema), "dependencies" (toolIds that must finish first; no cycles).
- A string "$toolId" or "$toolId.field" in an input is replaced by that earlier tool's output; a tool may only reference its
  dependencies' (or their ancestors') outputs. Write "$$" for a literal "$".
- Use only the skills listed. Never use a disabled skill.
`)
	if len(req.DisabledSkills) > 0 {
		fmt.Fprintf(&b, "Disabled skills (never use): %s\n", strings.Join(req.DisabledSkills, ", "))
	}
	if req.Catalogue != nil {
		b.WriteString("\n# Skills\n")
		for _, cs := range req.Catalogue.Skills {
			e := cs.Entry
			fmt.Fprintf(&b, "\n## %s (priority %d, health %s)\n%s\n", e.Name, cs.Priority, cs.Health, e.Description)
			if p := strings.TrimSpace(e.Prompt); p != "" {
				b.WriteString(clip(p, 4000))
				b.WriteString("\n")
			}
			for _, s := range e.Scripts {
				fmt.Fprintf(&b, "- toolPath %s/%s: %s", e.Name, s.Name, s.Description)
				if len(s.InputSchema) > 0 {
					fmt.Fprintf(&b, " inputSchema: %s", clip(string(s.InputSchema), 2000))
				}
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}
