package planner

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/narratoria/runtime/pkg/messages"
)

// LLMConfig configures the OpenAI-compatible chat-completions planner.
type LLMConfig struct {
	// BaseURL of the API, e.g. http://127.0.0.1:8080/v1 (llama-server) or
	// http://127.0.0.1:11434/v1 (Ollama). Required with planner: llm.
	BaseURL string `yaml:"baseURL"`
	// Model name, e.g. phi-3.5-mini-instruct. Required with planner: llm.
	Model string `yaml:"model"`
	// APIKeyEnv names the environment variable holding the API key. Default
	// NARRATORIA_LLM_API_KEY (may be unset for local servers).
	APIKeyEnv string `yaml:"apiKeyEnv"`
	// Temperature of sampling. Default 0.2.
	Temperature float64 `yaml:"temperature"`
	// StructuredOutput says how the Plan schema is sent for constrained
	// decoding: response_format (llama.cpp llama-server, vLLM, OpenAI),
	// format (Ollama), both, or none. Default response_format.
	StructuredOutput string `yaml:"structuredOutput"`
}

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
	// Format is Ollama's structured output: the JSON Schema itself.
	Format json.RawMessage `json:"format,omitempty"`
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
	content, err := l.complete(ctx, systemPrompt(req), req.Text, json.RawMessage(schema))
	if err != nil {
		return nil, err
	}
	plan, err := messages.DecodePlan(repairPlan([]byte(content)), messages.PlanLimits{})
	if err != nil {
		var perr *messages.PlanError
		if errors.As(err, &perr) && perr.Reason == messages.ReasonInvalidJSON {
			return nil, &LLMError{Kind: "json", Err: err}
		}
		return nil, err
	}
	return plan, nil
}

// repairPlan fixes what small models often get wrong but is trivially
// fixable, before the plan is validated: text around the JSON object, a
// missing or malformed requestId, a missing tools list, a tool without
// dependencies. Anything else is left for validation to refuse.
func repairPlan(b []byte) []byte {
	s := strings.TrimSpace(string(b))
	if i, j := strings.IndexByte(s, '{'), strings.LastIndexByte(s, '}'); i > 0 || (j >= 0 && j < len(s)-1) {
		if i >= 0 && j > i {
			s = s[i : j+1]
		}
	}
	var doc map[string]any
	if json.Unmarshal([]byte(s), &doc) != nil || doc == nil {
		return []byte(s)
	}
	if id, _ := doc["requestId"].(string); messages.CheckPlanID(id) != nil {
		doc["requestId"] = uuid.NewString()
	}
	if _, ok := doc["tools"]; !ok {
		doc["tools"] = []any{}
	}
	if tools, ok := doc["tools"].([]any); ok {
		for _, t := range tools {
			if m, ok := t.(map[string]any); ok && m["dependencies"] == nil {
				m["dependencies"] = []any{}
			}
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return []byte(s)
	}
	return out
}

// complete sends one chat completion (a system and a user message) and
// returns the answer's content without code fences.
func (l *LLMPlanner) complete(ctx context.Context, system, user string, schema json.RawMessage) (string, error) {
	req := chatRequest{Model: l.cfg.Model, Temperature: l.cfg.Temperature}
	// Constrained decoding where the server supports it.
	mode := cmp.Or(l.cfg.StructuredOutput, "response_format")
	if mode == "response_format" || mode == "both" {
		req.ResponseFormat, _ = json.Marshal(map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "answer", "schema": schema}})
	}
	if mode == "format" || mode == "both" {
		req.Format = schema
	}
	body, _ := json.Marshal(chatRequest{
		Model: req.Model, Temperature: req.Temperature, ResponseFormat: req.ResponseFormat, Format: req.Format,
		Messages: []chatMessage{
			{Role: "system", Content: system},
			{Role: "user", Content: user},
		},
	})
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(l.cfg.BaseURL, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return "", &LLMError{Kind: "http", Err: err}
	}
	hreq.Header.Set("Content-Type", "application/json")
	if key := os.Getenv(l.cfg.APIKeyEnv); key != "" {
		hreq.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := l.client.Do(hreq)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return "", &LLMError{Kind: "timeout", Err: err}
		}
		return "", &LLMError{Kind: "http", Err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxLLMResponse))
	if err != nil {
		if ctx.Err() != nil {
			return "", &LLMError{Kind: "timeout", Err: err}
		}
		return "", &LLMError{Kind: "http", Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		return "", &LLMError{Kind: "http", Err: fmt.Errorf("status %d: %s", resp.StatusCode, clip(string(raw), 200))}
	}
	var cr chatResponse
	if err := json.Unmarshal(raw, &cr); err != nil || len(cr.Choices) == 0 {
		return "", &LLMError{Kind: "json", Err: fmt.Errorf("not a chat completion: %s", clip(string(raw), 200))}
	}
	return stripFences(cr.Choices[0].Message.Content), nil
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
			if shots := examplesOf(e, 5); len(shots) > 0 {
				fmt.Fprintf(&b, "Players say things like: %s\n", strings.Join(shots, " | "))
			}
			for _, s := range e.Scripts {
				fmt.Fprintf(&b, "- toolPath %s/%s: %s", e.Name, s.Name, s.Description)
				if len(s.Examples) > 0 {
					fmt.Fprintf(&b, " (e.g. %q)", s.Examples[0])
				}
				if len(s.InputSchema) > 0 {
					fmt.Fprintf(&b, " inputSchema: %s", clip(string(s.InputSchema), 2000))
				}
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}

// MoreSteps implements ContextPlanner: it gives the model the same rules
// and catalogue as for a plan, the plan as it runs, the completed tools'
// outputs, the failed ones and the suggestion, and asks for the tools to
// add only ({"tools": [...]}).
func (l *LLMPlanner) MoreSteps(ctx context.Context, req ContextRequest) ([]messages.Tool, error) {
	r := req.Request
	if r == nil || r.Plan == nil {
		return nil, &LLMError{Kind: "json", Err: errors.New("context request without a plan")}
	}
	sys := systemPrompt(Request{SessionID: r.SessionID, DisabledSkills: r.Plan.DisabledSkills, Catalogue: req.Catalogue})
	sys += `
# More context
A plan is running and one of its tools asked for more context. Answer with one JSON object {"tools": [...]} holding only
the tools to ADD (possibly none). They may depend on the plan's completed tools and read their outputs with "$toolId";
never repeat a tool that already ran.
`
	plan, _ := json.Marshal(r.Plan)
	completed, _ := json.Marshal(r.Completed)
	failed, _ := json.Marshal(r.Failed)
	user := fmt.Sprintf("Running plan: %s\nCompleted tools and their outputs: %s\nFailed tools: %s\nTool %q asked for more context; its suggestion: %q",
		clip(string(plan), 8000), clip(string(completed), 8000), clip(string(failed), 2000), r.ToolID, r.Suggestion)
	content, err := l.complete(ctx, sys, user, json.RawMessage(`{"type":"object","required":["tools"],"properties":{"tools":{"type":"array","items":{"type":"object"}}}}`))
	if err != nil {
		return nil, err
	}
	var answer struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal([]byte(content), &answer); err != nil {
		return nil, &LLMError{Kind: "json", Err: fmt.Errorf("not a {\"tools\": [...]} answer: %w", err)}
	}
	if len(answer.Tools) == 0 {
		return []messages.Tool{}, nil
	}
	// Decode the tools as a plan's, so they get the schema's defaults and
	// its checks.
	doc, _ := json.Marshal(map[string]any{"requestId": r.PlanID, "tools": answer.Tools})
	p, err := messages.DecodePlan(doc, messages.PlanLimits{})
	if err != nil {
		return nil, err
	}
	return p.Tools, nil
}

// examplesOf returns up to n of a skill's example utterances (skill-wide
// first, then its scripts').
func examplesOf(e *messages.RegistryEntry, n int) []string {
	out := slices.Clone(e.Examples)
	for _, s := range e.Scripts {
		out = append(out, s.Examples...)
	}
	return out[:min(n, len(out))]
}
