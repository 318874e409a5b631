package planner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/narratoria/runtime/pkg/messages"
)

// ContextRequest is what a planner answers a request for more context
// from (§9.1): the scheduler's request and the session's catalogue, with
// the plan's disabled skills left out.
type ContextRequest struct {
	// Request is the scheduler's request (plan, completed and failed tools,
	// suggestion, state).
	Request *messages.ContextRequest
	// Catalogue is what may be used.
	Catalogue *Catalogue
}

// ContextPlanner is a Planner that can also add steps to a running plan
// (§9.1). Both shipped planners implement it; a Planner that does not gets
// its context requests answered by the rule-based planner.
type ContextPlanner interface {
	// MoreSteps returns the tools to add (possibly none). Their IDs need
	// not carry the iteration's prefix: the scheduler adds it and rewrites
	// dependencies and $refs between them. They may depend on the plan's
	// completed tools and read their outputs with "$toolId".
	MoreSteps(ctx context.Context, req ContextRequest) ([]messages.Tool, error)
}

// CheckContextTools decodes the tools a ContextPlanner added as a plan's
// (schema, unique IDs): what the scheduler will check again, with the
// registry and the plan.
func CheckContextTools(req *messages.ContextRequest, tools []messages.Tool) error {
	doc, err := json.Marshal(map[string]any{"requestId": req.PlanID, "tools": tools})
	if err != nil {
		return err
	}
	_, err = messages.DecodePlan(doc, messages.PlanLimits{})
	return err
}

// MoreSteps implements ContextPlanner. It reads the suggestion (or, with
// none, the asking tool's input) like a prompt: the skills it matches that
// did not run yet (a memory recall when it asks what happened before) run
// first, then — when the asking tool belongs to a narration skill — that
// tool runs again with the new tools' outputs added to its "context", so
// its prose uses what they found. With nothing matched, nothing is added.
func (RulePlanner) MoreSteps(_ context.Context, req ContextRequest) ([]messages.Tool, error) {
	r := req.Request
	if r == nil || r.Plan == nil || req.Catalogue == nil {
		return []messages.Tool{}, nil
	}
	asker := -1
	for i := range r.Plan.Tools {
		if r.Plan.Tools[i].ToolID == r.ToolID {
			asker = i
		}
	}
	text := strings.TrimSpace(r.Suggestion)
	if text == "" && asker >= 0 {
		var in struct {
			Prompt string `json:"prompt"`
		}
		_ = json.Unmarshal(r.Plan.Tools[asker].Input, &in)
		text = in.Prompt
	}
	if text == "" {
		return []messages.Tool{}, nil
	}
	ran := map[string]bool{}
	for _, t := range r.Plan.Tools {
		if ref, err := messages.ParseToolPath(t.ToolPath); err == nil {
			ran[ref.Skill] = true
		}
	}
	var tools []messages.Tool
	refs := map[string]any{}
	var deps []string
	for _, sc := range scoreSkills(req.Catalogue, text, r.Plan.DisabledSkills) {
		if !sc.Chosen || ran[sc.Skill] {
			continue
		}
		cs, _ := req.Catalogue.Skill(sc.Skill)
		i := slices.IndexFunc(cs.Entry.Scripts, func(s messages.RegistryScript) bool { return s.Name == sc.Script })
		script := &cs.Entry.Scripts[max(i, 0)]
		name := sc.Skill
		id := fmt.Sprintf("c%d-%s", len(tools)+1, name)
		if len(id) > 48 {
			id = id[:48]
		}
		tools = append(tools, messages.Tool{
			ToolID: id, ToolPath: name + "/" + script.Name, Description: script.Description,
			Input: Inputs(script, text), Dependencies: []string{}, Required: true, Async: true,
			RetryPolicy: messages.RetryPolicy{MaxRetries: messages.MaxRetriesDefault, BackoffMs: messages.BackoffMsDefault},
			TimeoutMs:   ScaleTimeout(script.TimeoutMs, cs.TimeoutFactor),
		})
		refs[name] = "$" + id
		deps = append(deps, id)
	}
	if len(tools) == 0 || asker < 0 {
		return nonNilTools(tools), nil
	}
	at := r.Plan.Tools[asker]
	ref, err := messages.ParseToolPath(at.ToolPath)
	if err != nil {
		return tools, nil
	}
	cs, ok := req.Catalogue.Skill(ref.Skill)
	if !ok || !slices.Contains(cs.Entry.Capabilities, narrationCapability) {
		return tools, nil
	}
	again, err := withContext(at.Input, refs)
	if err != nil {
		return tools, nil
	}
	retell := at
	retell.ToolID = "retell"
	retell.Input = again
	retell.Dependencies = append(deps, r.ToolID)
	retell.RequiresApproval = false
	return append(tools, retell), nil
}

// withContext adds refs to the "context" object of a narration tool's input.
func withContext(input json.RawMessage, refs map[string]any) (json.RawMessage, error) {
	var in map[string]any
	if err := json.Unmarshal(input, &in); err != nil {
		return nil, err
	}
	if in == nil {
		return nil, errors.New("input is not an object")
	}
	c, _ := in["context"].(map[string]any)
	if c == nil {
		c = map[string]any{}
	}
	for k, v := range refs {
		c[k] = v
	}
	in["context"] = c
	return json.Marshal(in)
}

func nonNilTools(t []messages.Tool) []messages.Tool {
	if t == nil {
		return []messages.Tool{}
	}
	return t
}
