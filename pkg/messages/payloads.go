package messages

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// PromptTextMax is the longest prompt text accepted, in characters after trimming.
const PromptTextMax = 4000

// Prompt is a player's words, published by the game server (§1).
type Prompt struct {
	// Text is 1..4000 characters after trimming.
	Text string `json:"text"`
	// PromptID makes the prompt idempotent within its session (optional).
	PromptID string `json:"promptId,omitempty"`
	// PlayerID is informational.
	PlayerID string `json:"playerId,omitempty"`
	// SessionID is required on narratoria.narrate; on
	// narratoria.prompts.<session> the subject names the session.
	SessionID string `json:"sessionId,omitempty"`
}

// PromptError lists what is wrong with a prompt.
type PromptError struct {
	// Problems name each field at fault.
	Problems []Problem
}

// Error implements error.
func (e *PromptError) Error() string { return "invalid prompt: " + joinProblems(e.Problems) }

// Unwrap returns ErrInvalidPrompt.
func (e *PromptError) Unwrap() error { return ErrInvalidPrompt }

// promptShape describes a prompt for the problem of a body that is no
// JSON prompt object.
const promptShape = `prompt object {"text": string, "promptId"?: string, "playerId"?: string, "sessionId"?: string}`

// promptFields are the members of a prompt.
var promptFields = []field{{name: "text", kind: kindString, required: true}, {name: "promptId", kind: kindString}, {name: "playerId", kind: kindString}, {name: "sessionId", kind: kindString}}

// DecodePrompt decodes and validates a prompt. subjectSession is the session
// named by the subject ("" on narratoria.narrate, where the body must name
// it); when both are given they must agree. The returned prompt has its text
// trimmed and SessionID set.
//
// Keys are exact (§11): a key spelled like a field in another case, a
// repeated key, or a field of another JSON kind (null included) is refused
// with a problem naming it, as the Prompt schema (SchemaPrompt) reads the
// body; the schema cannot say "after trimming", nor compare with the
// subject.
func DecodePrompt(b []byte, subjectSession string) (*Prompt, error) {
	var p Prompt
	if probs := decodeExact(b, &p, promptShape, promptFields); len(probs) > 0 {
		return nil, &PromptError{Problems: probs}
	}
	var probs []Problem
	p.Text = strings.TrimSpace(p.Text)
	switch n := utf8.RuneCountInString(p.Text); {
	case n == 0:
		probs = append(probs, Problem{Field: "text", Message: "must not be empty"})
	case n > PromptTextMax:
		probs = append(probs, Problem{Field: "text", Message: fmt.Sprintf("is %d characters; the limit is %d", n, PromptTextMax)})
	}
	switch {
	case subjectSession == "" && p.SessionID == "":
		probs = append(probs, Problem{Field: "sessionId", Message: "is required"})
	case subjectSession != "" && p.SessionID != "" && p.SessionID != subjectSession:
		probs = append(probs, Problem{Field: "sessionId", Message: fmt.Sprintf("%q does not match the subject's session %q", truncate(p.SessionID, 64), subjectSession)})
	}
	if p.SessionID == "" {
		p.SessionID = subjectSession
	}
	if p.SessionID != "" && !ValidToken(p.SessionID) {
		probs = append(probs, Problem{Field: "sessionId", Message: (&TokenError{Kind: "sessionId", Value: truncate(p.SessionID, 80)}).Error()})
	}
	if p.PromptID != "" && !ValidToken(p.PromptID) {
		probs = append(probs, Problem{Field: "promptId", Message: (&TokenError{Kind: "promptId", Value: truncate(p.PromptID, 80)}).Error()})
	}
	if len(probs) > 0 {
		return nil, &PromptError{Problems: probs}
	}
	return &p, nil
}

// DecodeTenantPrompt is DecodePrompt for a prompt of tenant (none when
// ""): subjectSession and the payload's sessionId are the tenant's own
// session ID, and the prompt returned names the service's,
// <tenant>.<session>.
func DecodeTenantPrompt(b []byte, tenant Tenant, subjectSession string) (*Prompt, error) {
	p, err := DecodePrompt(b, subjectSession)
	if err != nil || tenant == "" {
		return p, err
	}
	if !ValidToken(string(tenant)) {
		return nil, &PromptError{Problems: []Problem{{Message: (&TokenError{Kind: "tenant", Value: truncate(string(tenant), 80)}).Error()}}}
	}
	p.SessionID = tenant.Qualify(p.SessionID)
	return p, nil
}

// Narration is the narrator's answer to a prompt (§1, §8.4).
type Narration struct {
	// SessionID and PromptID identify the prompt; Text is the plan narrative and
	// each successful tool's output.narration; Attempts counts plans tried;
	// Fallback marks a template narration; Choices come from narrative_choice
	// ui events; State is the session state after the plan; Trace lists every attempt.
	SessionID string `json:"sessionId"`
	PromptID  string `json:"promptId"`
	// Prompt is the player's words the narration answers (our extension).
	Prompt         string            `json:"prompt,omitempty"`
	Text           string            `json:"text"`
	PlanID         string            `json:"planId"`
	Attempts       int               `json:"attempts"`
	Fallback       bool              `json:"fallback"`
	Choices        []json.RawMessage `json:"choices"`
	Assets         []Asset           `json:"assets"`
	UIEvents       []UIEventRecord   `json:"uiEvents"`
	State          json.RawMessage   `json:"state"`
	DisabledSkills []string          `json:"disabledSkills"`
	DurationMs     int64             `json:"durationMs"`
	Trace          []AttemptTrace    `json:"trace"`
	// Cancelled says the prompt's plan was cancelled (§9.4): the narration
	// is the template one and the plan was not replanned.
	Cancelled bool `json:"cancelled,omitempty"`
	// Refused says the prompt was not narrated, and why: its tenant was
	// over its prompt rate. Text is empty; sending it again later works.
	Refused string `json:"refused,omitempty"`
	// Prose is "llm" when a model wrote Text (docs/spec.md §13; it streamed
	// on <prefix>.prose.<session> first); absent for the template prose.
	Prose string `json:"prose,omitempty"`
}

// AttemptTrace summarises one plan attempt of a narration.
type AttemptTrace struct {
	// PlanID is the attempt's plan; the other fields come from its result.
	PlanID         string   `json:"planId"`
	Success        bool     `json:"success"`
	FailedTools    []string `json:"failedTools"`
	DisabledSkills []string `json:"disabledSkills"`
	FailureReason  string   `json:"failureReason,omitempty"`
}

// Asset is an asset event as listed in a result, with the tool that made it.
type Asset struct {
	// ToolID is the tool that made the asset; the other fields are its asset event's.
	ToolID    string         `json:"toolId"`
	AssetID   string         `json:"assetId"`
	Kind      string         `json:"kind"`
	MediaType string         `json:"mediaType"`
	Path      string         `json:"path"`
	Metadata  map[string]any `json:"metadata,omitempty"`
	// Root is the skill folder the asset was found in, SHA256 (hex) and
	// Size its content when the worker listed it: a reader opens Path
	// beneath Root without following links out of it, and checks the
	// content is still what was listed (client.ReadAsset does both).
	Root   string `json:"root,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size,omitempty"`
	// Object is the asset's object in the BucketAssets object store
	// (AssetObjectName of SHA256), stored by the worker when the tool
	// ended; empty when it could not be stored (the worker logs why).
	// client.Asset and `nats object get narratoria_assets <object>`
	// fetch it from any host.
	Object string `json:"object,omitempty"`
}

// UIEventRecord is a ui_event with the tool that emitted it.
type UIEventRecord struct {
	// ToolID is the tool that emitted the event; Event and Payload are the event's.
	ToolID  string          `json:"toolId"`
	Event   string          `json:"event"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Failure reasons of an Execution Result (§4.10).
const (
	ReasonToolFailure        = "tool_failure"
	ReasonCircularDependency = "circular_dependency"
	ReasonInvalidPlan        = "invalid_plan"
	ReasonTimeout            = "timeout"
	ReasonInvalidJSON        = "invalid_json"
	ReasonProcessError       = "process_error"
	ReasonUnknownSkill       = "unknown_skill"
	// ReasonCancelled: the plan was cancelled (§9.4); such a plan is never
	// replanned (canReplan false).
	ReasonCancelled = "cancelled"
	// ReasonStorageRefused: the store refused, for good, a write the plan
	// needed — its session state over scheduler.maxStateBytes, a stream or
	// bucket full, its result over the maximum payload (then a short
	// result says so). It is not replanned.
	ReasonStorageRefused = "storage_refused"
	// ReasonRecoveryFailed: after a restart the scheduler found the plan's
	// persisted state unreadable or inconsistent and could not run it on.
	// It is not replanned: some of its tools may have run.
	ReasonRecoveryFailed = "recovery_failed"
)

// ExecutionResult is what the scheduler publishes when a plan ends (§4.10).
type ExecutionResult struct {
	// The fields of §4.10; Message, Problems, UIEvents and Narrative are extensions.
	PlanID        string `json:"planId"`
	SessionID     string `json:"sessionId"`
	Success       bool   `json:"success"`
	CanReplan     bool   `json:"canReplan"`
	FailureReason string `json:"failureReason,omitempty"`
	// Message names the problem when the plan failed (our extension).
	Message string `json:"message,omitempty"`
	// Problems lists every validation problem of an invalid plan (our extension).
	Problems         []Problem       `json:"problems,omitempty"`
	FailedTools      []string        `json:"failedTools"`
	DisabledSkills   []string        `json:"disabledSkills"`
	ToolResults      []ToolResult    `json:"toolResults"`
	AggregatedState  json.RawMessage `json:"aggregatedState"`
	AggregatedAssets []Asset         `json:"aggregatedAssets"`
	UIEvents         []UIEventRecord `json:"uiEvents,omitempty"`
	ExecutionTimeMs  int64           `json:"executionTimeMs"`
	AttemptNumber    int             `json:"attemptNumber"`
	RePlanIterations int             `json:"rePlanIterations"`
	// StatePatches are the state patches the plan's tools made, by tool, in
	// topological order (our extension). They take effect together, once,
	// when the plan succeeds (StateCommitted); a plan that fails lists the
	// patches it would have made and changes nothing.
	StatePatches []ToolPatches `json:"statePatches,omitempty"`
	// StateCommitted says the plan's state patches were committed.
	StateCommitted bool `json:"stateCommitted"`
	// RePlanNotes say why context requests added no steps (no answer, an
	// invalid answer, the iteration limit), in order (our extension).
	RePlanNotes []string `json:"rePlanNotes,omitempty"`
	// OriginalPlan is the plan as submitted (every result of a plan that
	// was accepted; a short result over the payload limit leaves it out),
	// FinalPlan the plan after context re-planning changed it (our
	// extensions): a finished plan can be read and run again.
	OriginalPlan *Plan     `json:"originalPlan,omitempty"`
	FinalPlan    *Plan     `json:"finalPlan,omitempty"`
	Narrative    string    `json:"narrative,omitempty"`
	FinishedAt   time.Time `json:"finishedAt"`
}

// ToolResult is the end state of one tool in a result.
type ToolResult struct {
	// ToolID and Skill identify the tool; the rest is §4.10's tool result.
	ToolID string `json:"toolId"`
	Skill  string `json:"skill"`
	// State is success, failed, skipped or timeout.
	State  ToolState         `json:"state"`
	Output json.RawMessage   `json:"output"`
	Events []json.RawMessage `json:"events"`
	// EventsRefs point at attempts whose events were too big to travel in
	// the outcome; they are on the events stream (our extension). Events
	// then holds the other attempts' events.
	EventsRefs      []EventsRef `json:"eventsRefs,omitempty"`
	ExecutionTimeMs int64       `json:"executionTimeMs"`
	RetryCount      int         `json:"retryCount"`
	// ReusedFrom names the earlier attempt (plan) of the same prompt whose
	// outcome this tool reused instead of running again (our extension).
	ReusedFrom string     `json:"reusedFrom,omitempty"`
	Error      *ToolError `json:"error,omitempty"`
	// Dependencies are the tool's dependencies in the plan, so the result
	// alone can draw the plan's graph (our extension).
	Dependencies []string `json:"dependencies,omitempty"`
	// History is the tool's transitions (at most the last 32), oldest
	// first: when each attempt started running and how it ended, the
	// approval waits and retry delays between, so the result alone draws
	// the plan's timeline (our extension).
	History []ToolTransition `json:"history,omitempty"`
}

// ToolPatches are the state patches one tool made.
type ToolPatches struct {
	ToolID  string           `json:"toolId"`
	Patches []map[string]any `json:"patches"`
}

// Plan lifecycle states in progress events (§4.9).
const (
	PlanStarted   = "started"
	PlanSucceeded = "succeeded"
	PlanFailed    = "failed"
	PlanTimeout   = "timeout"
	// PlanCancelled: the plan was cancelled (§9.4).
	PlanCancelled = "cancelled"
	// PlanPausedForContext: a tool asked for more context; nothing new
	// starts until a planner answers (§9.1).
	PlanPausedForContext = "paused_for_context"
	// PlanResumed: the plan goes on after a context request (with the
	// planner's steps merged, or without: Error says why).
	PlanResumed = "resumed"
)

// Progress is one lifecycle event of a plan or of one of its tools (§4.9).
type Progress struct {
	// PlanID is the plan; ToolID the tool (empty for plan events); State one of
	// the §4.9 states; Attempt the attempt; At the time; Error what went wrong.
	PlanID string `json:"planId"`
	// ToolID is empty for plan-level events.
	ToolID  string    `json:"toolId,omitempty"`
	State   string    `json:"state"`
	Attempt int       `json:"attempt,omitempty"`
	At      time.Time `json:"at"`
	Error   string    `json:"error,omitempty"`
	// Progress is how far a running tool is, 0–100, from its script's
	// ui_event "progress" (§4.9); Message is that event's message.
	Progress *int   `json:"progress,omitempty"`
	Message  string `json:"message,omitempty"`
	// Input is, on a tool's awaiting_approval event, the input it would run
	// with: its references to earlier tools' outputs resolved (§9.2,
	// §9.3), so the request for a decision shows what it approves.
	Input json.RawMessage `json:"input,omitempty"`
}

// HealthTransition is published on narratoria.health.<session>.<skill> for
// each change of a skill's health (§7).
type HealthTransition struct {
	// SessionID and Skill name the skill; From, To, Input, Failures and Reason
	// describe the transition (see pkg/health).
	SessionID string    `json:"sessionId"`
	Skill     string    `json:"skill"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	Input     string    `json:"input"`
	Failures  int       `json:"failures"`
	Reason    string    `json:"reason"`
	At        time.Time `json:"at"`
}

// Approval is a decision on narratoria.approvals.<plan>.<tool> (§9.3).
type Approval struct {
	// Approved lets the tool run; By and Reason are recorded with the decision.
	Approved bool   `json:"approved"`
	By       string `json:"by,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// SessionReset is the request body of narratoria.sessions.<session>.reset.
type SessionReset struct {
	// ClearState also empties the session state.
	ClearState bool `json:"clearState"`
}

func joinProblems(ps []Problem) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.String()
	}
	return strings.Join(parts, "; ")
}

// Headers a result carries on NARRATORIA_RESULTS, a summary of its body
// that a reader can take without the body (a consumer with HeadersOnly,
// `nats stream view`): how the plan ended, why, which skills it used, how
// long it took. The console's history search reads only these.
const (
	// HeaderResultState is succeeded, failed, timeout or cancelled (ResultState).
	HeaderResultState = "Narratoria-Result-State"
	// HeaderResultReason is the failure reason; absent on success.
	HeaderResultReason = "Narratoria-Result-Reason"
	// HeaderResultSkills are the plan's skills, comma-separated, sorted.
	HeaderResultSkills = "Narratoria-Result-Skills"
	// HeaderResultDuration is the plan's execution time in milliseconds.
	HeaderResultDuration = "Narratoria-Result-Ms"
)

// HeaderRepublished marks a plan message published again for a plan that
// was published before (a narrator resuming an attempt whose plan is not
// waiting in NARRATORIA_PLANS): however new the message, its plan may have
// run and finished already, so the scheduler looks up its stored result
// before it accepts it.
const HeaderRepublished = "Narratoria-Republished"

// Narration summary headers, set on every narration stored on
// NARRATORIA_NARRATIONS (NarrationHeaders), so a history reads which
// prompt each plan answered without the bodies.
const (
	// HeaderNarrationPrompt is the player's words, on one line, at most
	// NarrationPromptHeaderMax bytes.
	HeaderNarrationPrompt = "Narratoria-Prompt"
	// HeaderNarrationPlans are the plans of every attempt of the prompt,
	// comma-separated, oldest first.
	HeaderNarrationPlans = "Narratoria-Plans"
)

// NarrationPromptHeaderMax bounds the prompt a narration's header
// carries.
const NarrationPromptHeaderMax = 240

// NarrationHeaders are a narration's summary headers, by name.
func NarrationHeaders(n *Narration) map[string]string {
	h := map[string]string{}
	prompt := strings.Join(strings.Fields(n.Prompt), " ")
	if len(prompt) > NarrationPromptHeaderMax {
		cut := NarrationPromptHeaderMax
		for cut > 0 && !utf8.RuneStart(prompt[cut]) {
			cut--
		}
		prompt = prompt[:cut] + "…"
	}
	if prompt != "" {
		h[HeaderNarrationPrompt] = prompt
	}
	var plans []string
	for _, t := range n.Trace {
		if t.PlanID != "" {
			plans = append(plans, t.PlanID)
		}
	}
	if len(plans) == 0 && n.PlanID != "" {
		plans = append(plans, n.PlanID)
	}
	if len(plans) > 0 {
		h[HeaderNarrationPlans] = strings.Join(plans, ",")
	}
	return h
}

// ResultState says how a plan ended, in one word: succeeded, cancelled,
// timeout or failed.
func ResultState(res *ExecutionResult) string {
	switch {
	case res.Success:
		return PlanSucceeded
	case res.FailureReason == ReasonCancelled:
		return PlanCancelled
	case res.FailureReason == ReasonTimeout:
		return PlanTimeout
	default:
		return PlanFailed
	}
}

// ResultSkills are the distinct skills of a result's tools, sorted.
func ResultSkills(res *ExecutionResult) []string {
	var out []string
	for _, t := range res.ToolResults {
		if t.Skill != "" && !slices.Contains(out, t.Skill) {
			out = append(out, t.Skill)
		}
	}
	slices.Sort(out)
	return out
}
