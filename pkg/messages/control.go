package messages

import (
	"encoding/json"
	"time"
)

// PlanStatus answers a plan status request (§9.4): the plan's tools with
// their state, attempts and timings. A plan that finished is answered
// from its stored Execution Result (StatusOfResult): phase published, and
// Result says how it ended.
type PlanStatus struct {
	// PlanID and SessionID identify the plan.
	PlanID    string `json:"planId"`
	SessionID string `json:"sessionId"`
	// Phase is running, finished (result being published) or published
	// (the result is stored: Result is set).
	Phase string `json:"phase"`
	// Result is how a finished plan ended (phase published), read from
	// its stored Execution Result; nil while it runs.
	Result *PlanEnd `json:"result,omitempty"`
	// AcceptedAt is when the scheduler accepted the plan; Deadline when it
	// times out (pushed back by approval waits).
	AcceptedAt time.Time `json:"acceptedAt"`
	Deadline   time.Time `json:"deadline"`
	// Parallel and AttemptNumber are the plan's.
	Parallel      bool `json:"parallel"`
	AttemptNumber int  `json:"attemptNumber"`
	// TimedOut and Cancelled say how a finished plan ended.
	TimedOut  bool `json:"timedOut,omitempty"`
	Cancelled bool `json:"cancelled,omitempty"`
	// Tools are the plan's tools in plan order (the original plan's, then
	// each context re-planning's).
	Tools []ToolStatus `json:"tools"`
	// Versions is the plan's lifecycle: version 0 is the plan as
	// published, each later version one context re-planning round (§9.1)
	// with the tools it added or why it added none.
	Versions []PlanVersion `json:"versions"`
}

// PlanVersion is one version of a running plan (see PlanStatus.Versions).
type PlanVersion struct {
	// Version is 0 for the plan as published, n for re-planning round n.
	Version int `json:"version"`
	// State is "original" for version 0; a round's pending (waiting for
	// running tools), asked, merged or ended (carried on without more
	// steps).
	State string `json:"state"`
	// ToolIDs are the tools the version added.
	ToolIDs []string `json:"toolIds"`
	// AskedBy and Suggestion are the tool whose done asked for the round
	// and its contextSuggestion; Reason says why a round added nothing.
	AskedBy    string    `json:"askedBy,omitempty"`
	Suggestion string    `json:"suggestion,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	AskedAt    time.Time `json:"askedAt,omitzero"`
}

// PlanEnd is how a finished plan ended (PlanStatus.Result), from its
// Execution Result.
type PlanEnd struct {
	// State is succeeded, failed, timeout or cancelled (ResultState).
	State string `json:"state"`
	// Success, FailureReason, Message, FailedTools and DisabledSkills are
	// the result's.
	Success        bool     `json:"success"`
	FailureReason  string   `json:"failureReason,omitempty"`
	Message        string   `json:"message,omitempty"`
	FailedTools    []string `json:"failedTools"`
	DisabledSkills []string `json:"disabledSkills"`
	// FinishedAt is when it ended; ExecutionTimeMs how long it ran.
	FinishedAt      time.Time `json:"finishedAt"`
	ExecutionTimeMs int64     `json:"executionTimeMs"`
}

// StatusOfResult is the status of a finished plan, read from its
// Execution Result: phase published, each tool's end state, run time,
// error and transitions, and Result. What the result does not keep (when
// the plan was accepted, its deadline) is derived: accepted its run time
// before it finished, the deadline when it finished.
func StatusOfResult(res *ExecutionResult) PlanStatus {
	st := PlanStatus{PlanID: res.PlanID, SessionID: res.SessionID, Phase: "published",
		AcceptedAt: res.FinishedAt.Add(-time.Duration(res.ExecutionTimeMs) * time.Millisecond), Deadline: res.FinishedAt,
		AttemptNumber: max(res.AttemptNumber, 1), Cancelled: res.FailureReason == ReasonCancelled, TimedOut: res.FailureReason == ReasonTimeout,
		Tools: []ToolStatus{}, Versions: []PlanVersion{},
		Result: &PlanEnd{State: ResultState(res), Success: res.Success, FailureReason: res.FailureReason, Message: res.Message,
			FailedTools: nonNil(res.FailedTools), DisabledSkills: nonNil(res.DisabledSkills), FinishedAt: res.FinishedAt, ExecutionTimeMs: res.ExecutionTimeMs}}
	plan := res.FinalPlan
	if plan == nil {
		plan = res.OriginalPlan
	}
	if plan != nil {
		st.Parallel = plan.Parallel
		ids := make([]string, 0, len(plan.Tools))
		for _, t := range plan.Tools {
			ids = append(ids, t.ToolID)
		}
		st.Versions = append(st.Versions, PlanVersion{Version: 0, State: "original", ToolIDs: ids})
	}
	for _, tr := range res.ToolResults {
		st.Tools = append(st.Tools, ToolStatus{ToolID: tr.ToolID, Skill: tr.Skill, State: tr.State, Attempt: attemptsOf(tr),
			Dependencies: nonNil(tr.Dependencies), ExecMs: tr.ExecutionTimeMs, Error: tr.Error, History: tr.History})
	}
	return st
}

// attemptsOf is how many attempts a tool of a result made: its attempts
// as its transitions count them, else its retries and the first attempt
// for a tool that ran, else none.
func attemptsOf(tr ToolResult) int {
	n := 0
	for _, h := range tr.History {
		n = max(n, h.Attempt)
	}
	switch {
	case n > 0:
		return n
	case tr.State == ToolSuccess || tr.State == ToolFailed || tr.State == ToolTimeout || tr.RetryCount > 0:
		return tr.RetryCount + 1
	}
	return 0
}

// nonNil is l, or an empty list for nil (a JSON [] rather than null).
func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

// ToolStatus is one tool in a PlanStatus.
type ToolStatus struct {
	ToolID       string     `json:"toolId"`
	Skill        string     `json:"skill"`
	State        ToolState  `json:"state"`
	Attempt      int        `json:"attempt"`
	Dependencies []string   `json:"dependencies"`
	DispatchedAt time.Time  `json:"dispatchedAt,omitzero"`
	RetryAt      time.Time  `json:"retryAt,omitzero"`
	WaitUntil    time.Time  `json:"waitUntil,omitzero"`
	ExecMs       int64      `json:"executionTimeMs"`
	Error        *ToolError `json:"error,omitempty"`
	// RequiresApproval says the tool waits for a decision before it runs
	// (§9.3).
	RequiresApproval bool `json:"requiresApproval,omitempty"`
	// Input is what a tool waiting for approval would run with: its input
	// with its references to earlier tools' outputs resolved (§9.2), so
	// whoever decides sees what they approve. Set only while it waits.
	Input json.RawMessage `json:"input,omitempty"`
	// History is how the tool got where it is: its last transitions,
	// oldest first.
	History []ToolTransition `json:"history,omitempty"`
}

// ToolTransition is one change of a tool's state: to what, when, in which
// attempt, and why.
type ToolTransition struct {
	State   ToolState `json:"state"`
	At      time.Time `json:"at"`
	Attempt int       `json:"attempt,omitempty"`
	Cause   string    `json:"cause"`
}

// PlanSummary is one entry of a plan list.
type PlanSummary struct {
	PlanID    string `json:"planId"`
	SessionID string `json:"sessionId"`
}

// PlanListRequest asks for the plans in flight, optionally of one session.
type PlanListRequest struct {
	SessionID string `json:"sessionId,omitempty"`
}

// PlanList answers a plan list request.
type PlanList struct {
	Plans []PlanSummary `json:"plans"`
}

// CancelRequest asks to cancel a plan; both fields are optional and kept
// in the result's message.
type CancelRequest struct {
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Control reply codes (ControlReply.Code): why a control request was
// refused, for programs.
const (
	// ControlNotInFlight is the code schedulers before unknown_plan and
	// plan_finished answered for both: the plan finished, or was never
	// accepted. Kept for clients of those schedulers.
	ControlNotInFlight = "not_in_flight"
	// ControlUnknownPlan: no scheduler runs the plan and no result of it
	// is stored (it was never accepted, is older than the history window,
	// or is another tenant's).
	ControlUnknownPlan = "unknown_plan"
	// ControlPlanFinished: the plan ended; its result is stored. It
	// cannot be cancelled, and its tools take no decision.
	ControlPlanFinished = "plan_finished"
	// ControlUnknownTool: the plan has no tool of that ID.
	ControlUnknownTool = "unknown_tool"
	// ControlNotAwaitingApproval: the tool does not wait for a decision
	// (it needs none, or it was decided, or it ended).
	ControlNotAwaitingApproval = "not_awaiting_approval"
)

// ApprovalCheck answers <prefix>.control.approval.<plan>.<tool>: a
// decision on the tool can be taken now (it waits for one, or it will and
// none was taken yet). Tool is its status, with the input it would run
// with once approved (ToolStatus.Input).
type ApprovalCheck struct {
	// SessionID is the plan's session (in a multi-tenant deployment, seen
	// across tenants: <tenant>.<session>, where the decision is stored).
	SessionID string `json:"sessionId"`
	// Tool is the tool's status.
	Tool ToolStatus `json:"tool"`
}

// HistoryRequest asks <prefix>.control.history for a page of finished
// plans, newest first; every field is an optional filter.
type HistoryRequest struct {
	// SessionID, State (succeeded, failed, timeout, cancelled), Skill and
	// FailureReason must match exactly; PlanID is a prefix of the plan ID.
	SessionID     string `json:"sessionId,omitempty"`
	State         string `json:"state,omitempty"`
	Skill         string `json:"skill,omitempty"`
	FailureReason string `json:"failureReason,omitempty"`
	PlanID        string `json:"planId,omitempty"`
	// From and To bound when the plan finished: From included, To not.
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	// Before pages: only plans stored before this sequence (a page's Next).
	Before uint64 `json:"before,omitempty"`
	// Limit is the page's size, 1..100. Default 100.
	Limit int `json:"limit,omitempty"`
}

// HistoryPageMax is the largest (and the default) page of a history
// request.
const HistoryPageMax = 100

// HistoryPage is a page of finished plans, newest first.
type HistoryPage struct {
	Plans []FinishedPlan `json:"plans"`
	// Total is how many plans match, on every page.
	Total int `json:"total"`
	// Next is the Before of the next (older) page; 0 on the last page.
	Next uint64 `json:"next"`
	// Loading says the index has not read the whole results stream yet:
	// older plans may be missing.
	Loading bool `json:"loading"`
}

// FinishedPlan is one plan of a history page: what its result's summary
// headers say (HeaderResult*) and when it was stored.
type FinishedPlan struct {
	PlanID          string    `json:"planId"`
	SessionID       string    `json:"sessionId"`
	State           string    `json:"state"`
	FailureReason   string    `json:"failureReason,omitempty"`
	Skills          []string  `json:"skills"`
	ExecutionTimeMs int64     `json:"executionTimeMs"`
	FinishedAt      time.Time `json:"finishedAt"`
	// Seq is the result's sequence in NARRATORIA_RESULTS.
	Seq uint64 `json:"seq"`
	// Prompt is the player's words the plan answered, when a narration
	// of it says so (plans sent without a narrator have none).
	Prompt string `json:"prompt,omitempty"`
}

// SkillsRequest asks <prefix>.control.skills for the registered skills,
// with each one's health in SessionID when it is set.
type SkillsRequest struct {
	SessionID string `json:"sessionId,omitempty"`
}

// SkillSummary is one skill of a skills reply: what the registry says of
// it, its live workers and its health in the session asked for.
type SkillSummary struct {
	Name        string          `json:"name"`
	Version     string          `json:"version"`
	Description string          `json:"description"`
	Scripts     []ScriptSummary `json:"scripts"`
	Workers     []WorkerSummary `json:"workers"`
	// Health is the skill's state in the session asked for ("" when none
	// was); healthy when it has no record there.
	Health string `json:"health,omitempty"`
}

// ScriptSummary is one script of a SkillSummary.
type ScriptSummary struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// WorkerSummary is one live worker of a SkillSummary.
type WorkerSummary struct {
	ID          string    `json:"id"`
	Concurrency int       `json:"concurrency"`
	Running     int       `json:"running"`
	LastSeen    time.Time `json:"lastSeen"`
}

// ControlReply is the reply to a control request: OK, or an error that
// names the problem. Status and List carry the answer of those requests.
type ControlReply struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Code names the error for programs (the Control* codes); empty for
	// other errors.
	Code   string      `json:"code,omitempty"`
	Status *PlanStatus `json:"status,omitempty"`
	List   *PlanList   `json:"list,omitempty"`
	// Approval answers an approval check; History a history request;
	// Skills a skills request.
	Approval *ApprovalCheck `json:"approval,omitempty"`
	History  *HistoryPage   `json:"history,omitempty"`
	Skills   []SkillSummary `json:"skills,omitempty"`
}
