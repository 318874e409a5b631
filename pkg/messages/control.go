package messages

import "time"

// PlanStatus answers a plan status request (§9.4): the plan's tools with
// their state, attempts and timings.
type PlanStatus struct {
	// PlanID and SessionID identify the plan.
	PlanID    string `json:"planId"`
	SessionID string `json:"sessionId"`
	// Phase is running, finished (result being published) or published.
	Phase string `json:"phase"`
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

// ControlNotInFlight is ControlReply.Code for a plan that is not in
// flight: it finished, or was never accepted.
const ControlNotInFlight = "not_in_flight"

// ControlReply is the reply to a control request: OK, or an error that
// names the problem. Status and List carry the answer of those requests.
type ControlReply struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Code names the error for programs: ControlNotInFlight when the plan
	// finished or was never accepted.
	Code   string      `json:"code,omitempty"`
	Status *PlanStatus `json:"status,omitempty"`
	List   *PlanList   `json:"list,omitempty"`
}
