package planner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/narratoria/runtime/internal/llm"
	"github.com/narratoria/runtime/pkg/messages"
)

// LLMConfig configures the model server of the LLM planner and of the
// prose (the narrator.llm section of the configuration).
type LLMConfig = llm.Config

// LLMError is a failure of a model call, classified for metrics and logs
// (Kind: http, rate_limited, server_error, timeout, cut, json, budget).
type LLMError = llm.Error

// LLMPlanner asks an OpenAI-compatible chat-completions endpoint
// (llama.cpp llama-server, Ollama, vLLM…) for a Plan JSON, giving it the
// skills' prompt.md texts and the catalogue in the system context and the
// Plan JSON Schema as the response format. It repairs the form of what
// small models answer (a fence, words around the JSON, a cut-off answer,
// keys named otherwise) and counts each repair on its client's meter.
type LLMPlanner struct {
	c *llm.Client
}

// NewLLMPlanner builds the planner; client may be nil (http.DefaultClient).
// Its calls are neither counted nor budgeted: see NewLLMPlannerOn.
func NewLLMPlanner(cfg LLMConfig, client *http.Client) *LLMPlanner {
	return &LLMPlanner{c: llm.New(cfg, llm.Options{HTTP: client})}
}

// NewLLMPlannerOn builds the planner on a client, whose meter counts its
// calls and whose budget may refuse them.
func NewLLMPlannerOn(c *llm.Client) *LLMPlanner { return &LLMPlanner{c: c} }

// Name implements Planner.
func (*LLMPlanner) Name() string { return "llm" }

// Plan implements Planner.
func (l *LLMPlanner) Plan(ctx context.Context, req Request) (*messages.Plan, error) {
	schema, err := messages.Schemas.ReadFile("schemas/" + messages.SchemaPlan)
	if err != nil {
		return nil, &LLMError{Kind: llm.KindJSON, Err: err}
	}
	content, truncated, err := l.complete(ctx, messages.TenantOf(req.SessionID), systemPrompt(req), req.Text, json.RawMessage(schema))
	if err != nil {
		return nil, err
	}
	doc, renamed := repairPlan([]byte(content), truncated)
	if renamed {
		l.c.Meter().Repaired(llm.ComponentPlanner, llm.RepairKeys)
	}
	plan, err := messages.DecodePlan(doc, messages.PlanLimits{})
	if err != nil {
		var perr *messages.PlanError
		if errors.As(err, &perr) && perr.Reason == messages.ReasonInvalidJSON {
			l.c.Meter().Failed(llm.ComponentPlanner, llm.KindJSON)
			return nil, &LLMError{Kind: llm.KindJSON, Err: err}
		}
		return nil, err
	}
	if truncated && len(plan.Tools) == 0 {
		// Cut off before its first tool: the rule planner does better.
		l.c.Meter().Failed(llm.ComponentPlanner, llm.KindJSON)
		return nil, &LLMError{Kind: llm.KindJSON, Err: errors.New("the answer was cut off before its first tool")}
	}
	return plan, nil
}

// complete sends one chat completion (a system and a user message) and
// returns the JSON object of its answer, its form repaired (ExtractJSON;
// each repair counted), and whether it was cut off and closed.
func (l *LLMPlanner) complete(ctx context.Context, tenant messages.Tenant, system, user string, schema json.RawMessage) (string, bool, error) {
	req := llm.Request{Component: llm.ComponentPlanner, Tenant: tenant, System: system, User: user}
	// Constrained decoding where the server supports it.
	mode := cmp.Or(l.c.Config().StructuredOutput, "response_format")
	if mode == "response_format" || mode == "both" {
		req.ResponseFormat, _ = json.Marshal(map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "answer", "schema": schema}})
	}
	if mode == "format" || mode == "both" {
		req.Format = schema
	}
	a, err := l.c.Complete(ctx, req)
	if err != nil {
		return "", false, err
	}
	text, repairs := llm.ExtractJSON(a.Content)
	truncated := false
	for _, r := range repairs {
		l.c.Meter().Repaired(llm.ComponentPlanner, r)
		truncated = truncated || r == llm.RepairTruncated
	}
	return text, truncated, nil
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
		return nil, &LLMError{Kind: llm.KindJSON, Err: errors.New("context request without a plan")}
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
	content, _, err := l.complete(ctx, messages.TenantOf(r.SessionID), sys, user, json.RawMessage(`{"type":"object","required":["tools"],"properties":{"tools":{"type":"array","items":{"type":"object"}}}}`))
	if err != nil {
		return nil, err
	}
	var answer struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal([]byte(content), &answer); err != nil {
		l.c.Meter().Failed(llm.ComponentPlanner, llm.KindJSON)
		return nil, &LLMError{Kind: llm.KindJSON, Err: fmt.Errorf("not a {\"tools\": [...]} answer: %w", err)}
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
