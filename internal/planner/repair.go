package planner

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/narratoria/runtime/pkg/messages"
)

// planKeys are the names small models give the Plan's keys, by the
// schema's name: a key missing under its own name is taken from the first
// of these present.
var planKeys = map[string][]string{
	"tools":     {"steps", "actions", "tool_calls", "toolCalls", "calls", "plan"},
	"narrative": {"narration", "story", "description", "text"},
}

// toolKeys are the names small models give a tool's keys.
var toolKeys = map[string][]string{
	"toolId":       {"id", "tool_id", "toolID", "stepId", "step_id"},
	"toolPath":     {"tool", "tool_path", "toolpath", "path", "script", "function"},
	"input":        {"inputs", "args", "arguments", "params", "parameters"},
	"dependencies": {"depends_on", "dependsOn", "deps", "after", "requires"},
}

// repairPlan fixes what small models often get wrong but is trivially
// fixable, before the plan is validated: keys named otherwise (steps for
// tools, tool_path or tool for toolPath, args for input, depends_on for
// dependencies…; renamed reports it), a missing or malformed requestId, a
// missing tools list, a tool without a toolId or dependencies, a
// dependency given as one string. Of an answer cut off (truncated), the
// tools left without a toolPath are the one it was cut in: they are
// dropped. Anything else is left for validation to refuse. b is the JSON
// object of the answer (llm.ExtractJSON).
func repairPlan(b []byte, truncated bool) (doc []byte, renamed bool) {
	var plan map[string]any
	if json.Unmarshal(b, &plan) != nil || plan == nil {
		return b, false
	}
	renamed = rename(plan, planKeys)
	if id, _ := plan["requestId"].(string); messages.CheckPlanID(id) != nil {
		plan["requestId"] = uuid.NewString()
	}
	if _, ok := plan["tools"]; !ok {
		plan["tools"] = []any{}
	}
	if tools, ok := plan["tools"].([]any); ok {
		kept := tools[:0]
		for i, t := range tools {
			if m, ok := t.(map[string]any); ok {
				renamed = repairTool(m, i) || renamed
				if _, whole := m["toolPath"]; truncated && !whole {
					continue
				}
			}
			kept = append(kept, t)
		}
		plan["tools"] = kept
	}
	out, err := json.Marshal(plan)
	if err != nil {
		return b, false
	}
	return out, renamed
}

// repairTool repairs one tool of a plan (the i-th) in place and reports
// whether a key was renamed.
func repairTool(m map[string]any, i int) bool {
	renamed := false
	if _, ok := m["toolPath"]; !ok {
		// {"skill": "dice-roller", "script": "roll-dice"}: one toolPath.
		skill, _ := m["skill"].(string)
		script, _ := m["script"].(string)
		if script == "" {
			script, _ = m["operation"].(string)
		}
		if skill != "" && script != "" && !strings.Contains(skill, "/") {
			m["toolPath"], renamed = skill+"/"+script, true
			delete(m, "skill")
			delete(m, "script")
			delete(m, "operation")
		}
	}
	renamed = rename(m, toolKeys) || renamed
	if id, ok := m["toolId"].(string); !ok || !messages.ValidToken(id) {
		m["toolId"] = fmt.Sprintf("t%d", i+1)
	}
	switch d := m["dependencies"].(type) {
	case nil:
		m["dependencies"] = []any{}
	case string:
		m["dependencies"] = []any{d}
	}
	return renamed
}

// rename moves each key of doc found under another name of names to its
// own name, when its own is missing, and reports whether it moved any.
func rename(doc map[string]any, names map[string][]string) bool {
	renamed := false
	for key, others := range names {
		if _, ok := doc[key]; ok {
			continue
		}
		for _, o := range others {
			if v, ok := doc[o]; ok {
				doc[key] = v
				delete(doc, o)
				renamed = true
				break
			}
		}
	}
	return renamed
}
