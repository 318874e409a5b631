package messages

import (
	"encoding/json"
	"time"
)

// Defaults of the Plan JSON fields (docs/spec.md §3).
const (
	// MaxRetriesDefault is a tool's retryPolicy.maxRetries when absent.
	MaxRetriesDefault = 3
	// BackoffMsDefault is a tool's retryPolicy.backoffMs when absent.
	BackoffMsDefault = 100
	// MaxRetriesLimit is the largest allowed retryPolicy.maxRetries.
	MaxRetriesLimit = 10
	// PlanTimeoutDefault is a plan's timeoutMs when absent.
	PlanTimeoutDefault = 60 * time.Second
	// ToolTimeoutDefault is a tool attempt's timeout when neither the tool nor
	// the script's manifest names one.
	ToolTimeoutDefault = 30 * time.Second
	// ApprovalTimeoutDefault bounds the wait of a requiresApproval tool (§9.3).
	ApprovalTimeoutDefault = 5 * time.Minute
)

// Plan priorities (§12): when a skill's workers are saturated, the jobs of
// a higher priority go first; within a priority, tenants and sessions get
// fair shares. A plan without one has PlanPriorityDefault.
const (
	// PlanPriorityMax is the highest priority; 1 is the lowest (0 names none).
	PlanPriorityMax = 9
	// PlanPriorityBackground is for work nobody waits on (a batch, a world
	// simulation tick).
	PlanPriorityBackground = 2
	// PlanPriorityDefault is a plan's priority when it names none: a plan a
	// game server's planner, the CLI or a tool sent.
	PlanPriorityDefault = 5
	// PlanPriorityInteractive is what the narrator gives the plans of a
	// player's prompt: above every plan that names no priority.
	PlanPriorityInteractive = 7
)

// Plan is a Plan JSON document (docs/spec.md §3): the tools to run and how.
type Plan struct {
	// RequestID is the plan ID, a UUID.
	RequestID string `json:"requestId"`
	// SessionID is the session (our extension; the subject names it too).
	SessionID string `json:"sessionId,omitempty"`
	// Narrative is the planner's own line of narration.
	Narrative string `json:"narrative,omitempty"`
	// Tools are the script invocations.
	Tools []Tool `json:"tools"`
	// Parallel lets ready async tools run concurrently. Default false.
	Parallel bool `json:"parallel"`
	// DisabledSkills no tool of this plan may use.
	DisabledSkills []string `json:"disabledSkills"`
	// Metadata carries the replan lineage.
	Metadata PlanMetadata `json:"metadata"`
	// TimeoutMs bounds the whole plan. Default 60000 (0 also means the default).
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// Priority orders the plan's jobs before fair shares when a skill is
	// saturated (§12): 1..9, higher first; 0 (absent) means
	// PlanPriorityDefault (5).
	Priority int `json:"priority,omitempty"`
}

// PriorityLevel is the plan's priority, PlanPriorityDefault when it names none.
func (p *Plan) PriorityLevel() int {
	if p.Priority <= 0 {
		return PlanPriorityDefault
	}
	return min(p.Priority, PlanPriorityMax)
}

// PlanMetadata is the lineage of a plan in the replan loop (§8.2).
type PlanMetadata struct {
	// GenerationAttempt is 1 for the first plan of a prompt. Default 1.
	GenerationAttempt int `json:"generationAttempt"`
	// ParentPlanID is the previous attempt's plan ID, or nil.
	ParentPlanID *string `json:"parentPlanId"`
}

// RetryPolicy says how often and how patiently a failed tool is retried.
type RetryPolicy struct {
	// MaxRetries is 0..10. Default 3.
	MaxRetries int `json:"maxRetries"`
	// BackoffMs is the base delay, ≥ 0. Default 100.
	BackoffMs int64 `json:"backoffMs"`
}

// Tool is one script invocation in a plan.
type Tool struct {
	// ToolID is plan-unique and a subject token.
	ToolID string `json:"toolId"`
	// ToolPath names a registered script (§3), never a path to execute.
	ToolPath string `json:"toolPath"`
	// Description is free text.
	Description string `json:"description,omitempty"`
	// Input is a JSON object; strings "$toolId[.path]" are references (§9.2).
	Input json.RawMessage `json:"input"`
	// Dependencies are tool IDs that must finish first.
	Dependencies []string `json:"dependencies"`
	// Required makes the plan fail when this tool fails. Default true.
	Required bool `json:"required"`
	// Async lets the tool run concurrently with others in a parallel plan.
	Async bool `json:"async"`
	// RetryPolicy defaults to 3 retries, 100 ms base backoff.
	RetryPolicy RetryPolicy `json:"retryPolicy"`
	// TimeoutMs bounds one attempt; 0 means the script's manifest timeout.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// RequiresApproval makes the tool wait for a decision (§9.3).
	RequiresApproval bool `json:"requiresApproval,omitempty"`
}

// wireTool and wirePlan are what the JSON holds, with pointers where §3
// has a default; decoding into them is a single pass over the document.
type wireTool struct {
	ToolID       string          `json:"toolId"`
	ToolPath     string          `json:"toolPath"`
	Description  string          `json:"description"`
	Input        json.RawMessage `json:"input"`
	Dependencies []string        `json:"dependencies"`
	Required     *bool           `json:"required"`
	Async        bool            `json:"async"`
	RetryPolicy  *struct {
		MaxRetries *int   `json:"maxRetries"`
		BackoffMs  *int64 `json:"backoffMs"`
	} `json:"retryPolicy"`
	TimeoutMs        int64 `json:"timeoutMs"`
	RequiresApproval bool  `json:"requiresApproval"`
}

type wirePlan struct {
	RequestID      string     `json:"requestId"`
	SessionID      string     `json:"sessionId"`
	Narrative      string     `json:"narrative"`
	Tools          []wireTool `json:"tools"`
	Parallel       bool       `json:"parallel"`
	DisabledSkills []string   `json:"disabledSkills"`
	Metadata       *struct {
		GenerationAttempt *int    `json:"generationAttempt"`
		ParentPlanID      *string `json:"parentPlanId"`
	} `json:"metadata"`
	TimeoutMs *int64 `json:"timeoutMs"`
	Priority  int    `json:"priority"`
}

func (w *wireTool) tool() Tool {
	t := Tool{ToolID: w.ToolID, ToolPath: w.ToolPath, Description: w.Description, Input: w.Input, Dependencies: w.Dependencies,
		Required: true, Async: w.Async, RetryPolicy: RetryPolicy{MaxRetries: MaxRetriesDefault, BackoffMs: BackoffMsDefault},
		TimeoutMs: w.TimeoutMs, RequiresApproval: w.RequiresApproval}
	if w.Required != nil {
		t.Required = *w.Required
	}
	if rp := w.RetryPolicy; rp != nil {
		if rp.MaxRetries != nil {
			t.RetryPolicy.MaxRetries = *rp.MaxRetries
		}
		if rp.BackoffMs != nil {
			t.RetryPolicy.BackoffMs = *rp.BackoffMs
		}
	}
	if t.Dependencies == nil {
		t.Dependencies = []string{}
	}
	if len(t.Input) == 0 || string(t.Input) == "null" {
		t.Input = json.RawMessage("{}")
	}
	return t
}

// UnmarshalJSON decodes a tool, applying the §3 defaults to absent fields.
func (t *Tool) UnmarshalJSON(b []byte) error {
	var w wireTool
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*t = w.tool()
	return nil
}

// UnmarshalJSON decodes a plan, applying the §3 defaults to absent fields.
func (p *Plan) UnmarshalJSON(b []byte) error {
	var w wirePlan
	err := json.Unmarshal(b, &w) // on a type error the rest is still filled in
	*p = Plan{RequestID: w.RequestID, SessionID: w.SessionID, Narrative: w.Narrative, Parallel: w.Parallel,
		DisabledSkills: w.DisabledSkills, TimeoutMs: PlanTimeoutDefault.Milliseconds(), Metadata: PlanMetadata{GenerationAttempt: 1},
		Tools: make([]Tool, len(w.Tools)), Priority: w.Priority}
	for i := range w.Tools {
		p.Tools[i] = w.Tools[i].tool()
	}
	if w.TimeoutMs != nil {
		p.TimeoutMs = *w.TimeoutMs
	}
	if m := w.Metadata; m != nil {
		if m.GenerationAttempt != nil && *m.GenerationAttempt != 0 {
			p.Metadata.GenerationAttempt = *m.GenerationAttempt
		}
		p.Metadata.ParentPlanID = m.ParentPlanID
	}
	if p.DisabledSkills == nil {
		p.DisabledSkills = []string{}
	}
	return err
}

// Timeout returns the plan timeout as a duration.
func (p *Plan) Timeout() time.Duration {
	if p.TimeoutMs <= 0 {
		return PlanTimeoutDefault
	}
	return time.Duration(p.TimeoutMs) * time.Millisecond
}

// Tool returns the tool with the given ID.
func (p *Plan) Tool(id string) (*Tool, bool) {
	for i := range p.Tools {
		if p.Tools[i].ToolID == id {
			return &p.Tools[i], true
		}
	}
	return nil, false
}
