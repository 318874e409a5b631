package messages

import "encoding/json"

// ContextRequest asks a planner for more steps for a running plan (§9.1):
// a tool's done said needsMoreContext. It is sent on
// <prefix>.context.<session> (request/reply); any planner may serve it (the
// narrator does, for every session, in queue group "narratoria-narrator").
type ContextRequest struct {
	// PlanID and SessionID identify the plan.
	PlanID    string `json:"planId"`
	SessionID string `json:"sessionId"`
	// Iteration is 1 for the first re-planning of the plan, 2 for the second.
	Iteration int `json:"iteration"`
	// Prefix is what the scheduler puts before the answer's tool IDs
	// ("_rp<iteration>_"); the answer may use it already or not.
	Prefix string `json:"prefix"`
	// ToolID is the tool whose done asked for context; Suggestion is its
	// contextSuggestion.
	ToolID     string `json:"toolId"`
	Suggestion string `json:"suggestion,omitempty"`
	// Plan is the plan as it runs now (original tools and earlier
	// iterations' tools).
	Plan *Plan `json:"plan"`
	// Completed lists the tools that succeeded, with their outputs; Failed
	// those that failed, with their errors.
	Completed []ContextTool `json:"completed"`
	Failed    []ContextTool `json:"failed"`
	// State is the session state now.
	State json.RawMessage `json:"state"`
}

// ContextTool is one tool of a ContextRequest.
type ContextTool struct {
	ToolID string          `json:"toolId"`
	Skill  string          `json:"skill"`
	State  ToolState       `json:"state"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  *ToolError      `json:"error,omitempty"`
}

// ContextReply answers a ContextRequest: the tools to add, or an error
// (then the plan carries on without more steps). Tools follow the Plan
// schema's tool; they may depend on the plan's completed tools and on each
// other, and refer to completed tools' outputs with "$toolId". An empty
// list means the planner has nothing to add.
type ContextReply struct {
	Tools []json.RawMessage `json:"tools"`
	Error string            `json:"error,omitempty"`
}
