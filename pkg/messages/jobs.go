package messages

import (
	"encoding/json"
	"time"
)

// ScriptInput is the JSON object a skill worker writes on a script's stdin
// before closing it (docs/spec.md §5).
type ScriptInput struct {
	// RequestID is the plan ID.
	RequestID string `json:"requestId"`
	// SessionID is the session the plan runs in.
	SessionID string `json:"sessionId"`
	// ToolID is the plan-unique tool ID.
	ToolID string `json:"toolId"`
	// Tool is "<skill>/<script>".
	Tool string `json:"tool"`
	// Operation is the script name.
	Operation string `json:"operation"`
	// Attempt is 1 for the first run, 2 for the first retry, and so on.
	Attempt int `json:"attempt"`
	// RunKey is the same for every run of this tool in this plan
	// ("<plan>.<tool>": every attempt, and a run of one attempt a second
	// worker may make when the first fell silent): a script makes its
	// external effects idempotent with it (docs/writing-skills.md, "When a
	// script can run twice").
	RunKey string `json:"runKey"`
	// Input is the tool's input with every "$ref" resolved.
	Input json.RawMessage `json:"input"`
	// State is the session state when the tool started.
	State json.RawMessage `json:"state"`
	// Config is the skill's settings (config.json after ${VAR} substitution).
	Config json.RawMessage `json:"config"`
}

// ToolJob is one attempt of one tool, sent by the scheduler to the skill
// workers serving the tool's skill (an internal subject, see docs/subjects.md).
type ToolJob struct {
	// PlanID is the plan the tool belongs to.
	PlanID string `json:"planId"`
	// SessionID is the plan's session.
	SessionID string `json:"sessionId"`
	// ToolID is the plan-unique tool ID.
	ToolID string `json:"toolId"`
	// Skill is the skill name.
	Skill string `json:"skill"`
	// Script is the script name in the skill's manifest.
	Script string `json:"script"`
	// Attempt is 1-based.
	Attempt int `json:"attempt"`
	// Input is the tool input, references already resolved.
	Input json.RawMessage `json:"input"`
	// State is the session state the script sees.
	State json.RawMessage `json:"state"`
	// TimeoutMs bounds this attempt; 0 means the script's manifest timeout.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// DispatchedAt is when the scheduler sent the job.
	DispatchedAt time.Time `json:"dispatchedAt"`
	// Token binds the attempt's outcome to this job: the worker copies it
	// into the outcome, and the scheduler accepts no outcome of the attempt
	// without it. It is a MAC of the attempt under a key only schedulers
	// hold, so a worker that never received the job cannot make it.
	Token string `json:"token,omitempty"`
	// OutcomeTo, when set, is where the scheduler that sent the job takes
	// its outcome as a request: it answers "+" once the outcome's effects
	// are stored, and the worker then need not store the outcome on the
	// outcomes stream. Any other answer, or none, and the worker stores it
	// there as it would without the field.
	OutcomeTo string `json:"outcomeTo,omitempty"`
}

// ToolState is the state of a tool in progress events and results (§4.9, §4.10).
type ToolState string

// Tool states. Results use success, failed, skipped, timeout and cancelled.
const (
	ToolPending          ToolState = "pending"
	ToolRunning          ToolState = "running"
	ToolRetrying         ToolState = "retrying"
	ToolSuccess          ToolState = "success"
	ToolFailed           ToolState = "failed"
	ToolSkipped          ToolState = "skipped"
	ToolTimeout          ToolState = "timeout"
	ToolAwaitingApproval ToolState = "awaiting_approval"
	// ToolCancelled: the plan was cancelled (§9.4) before the tool ended;
	// a running script was killed.
	ToolCancelled ToolState = "cancelled"
)

// Error categories of a ToolError. They double as failure reasons where §4.10
// has one of the same name.
const (
	// CategoryToolFailure: the script ran and reported failure (done ok:false,
	// exit code ≠ 0, or no done).
	CategoryToolFailure = "tool_failure"
	// CategoryTimeout: the attempt ran past its deadline and was killed.
	CategoryTimeout = "timeout"
	// CategoryInvalidJSON: the script broke the protocol (§5).
	CategoryInvalidJSON = "invalid_json"
	// CategoryProcessError: the script could not be started, or went over a
	// resource limit.
	CategoryProcessError = "process_error"
	// CategoryUnknownSkill: no worker serves the skill or script.
	CategoryUnknownSkill = "unknown_skill"
	// CategoryInvalidInput: the input failed the script's inputSchema.
	CategoryInvalidInput = "invalid_input"
	// CategoryLostWorker: the worker running the attempt went away.
	CategoryLostWorker = "lost_worker"
	// CategoryCancelled: the plan was cancelled (plan timeout or shutdown).
	CategoryCancelled = "cancelled"
	// CategoryInfrastructure: the runtime failed, not the skill (e.g. the
	// scheduler could not store a job). Retried; not counted against the
	// skill's health.
	CategoryInfrastructure = "infrastructure"
)

// ToolError describes why an attempt or a tool failed.
type ToolError struct {
	// Code is a short machine-readable code, e.g. "exit_code" or "no_done".
	Code string `json:"code"`
	// Message is a human-readable sentence naming the problem.
	Message string `json:"message"`
	// Category is one of the Category constants.
	Category string `json:"category"`
	// Details carries extras such as "exitCode" or "stderrTail".
	Details map[string]any `json:"details,omitempty"`
}

// Error implements error so a ToolError can travel as one.
func (e *ToolError) Error() string { return e.Category + "/" + e.Code + ": " + e.Message }

// Transient reports whether the failure is transient for skill health (§7):
// a timeout or a lost worker.
func (e *ToolError) Transient() bool {
	return e != nil && (e.Category == CategoryTimeout || e.Category == CategoryLostWorker)
}

// EventsRef points at one attempt's events on the events stream: the
// messages of Subject with stream sequences FirstSeq..LastSeq whose
// Narratoria-Attempt header is Attempt, Count of them, in order.
type EventsRef struct {
	Stream   string `json:"stream"`
	Subject  string `json:"subject"`
	Attempt  int    `json:"attempt"`
	FirstSeq uint64 `json:"firstSeq"`
	LastSeq  uint64 `json:"lastSeq"`
	Count    int    `json:"count"`
}

// Outcome is the result of one attempt of one tool, published by the skill
// worker (and acknowledged by JetStream) before it acknowledges the job.
type Outcome struct {
	// PlanID, SessionID, ToolID, Skill and Script identify the job.
	PlanID    string `json:"planId"`
	SessionID string `json:"sessionId"`
	ToolID    string `json:"toolId"`
	Skill     string `json:"skill"`
	Script    string `json:"script"`
	// Attempt is the job's attempt number.
	Attempt int `json:"attempt"`
	// Token is the job's token (ToolJob.Token), copied by the worker.
	Token string `json:"token,omitempty"`
	// State is success, failed or timeout.
	State ToolState `json:"state"`
	// Output is what "$toolId" resolves to (§5); set on success.
	Output json.RawMessage `json:"output,omitempty"`
	// Done is the done event, if the script emitted one.
	Done *DoneEvent `json:"done,omitempty"`
	// Events are every valid event the script emitted, in order.
	Events []json.RawMessage `json:"events,omitempty"`
	// EventsRef is set instead of Events when the events did not fit in
	// the outcome: they are on the events stream, and this says where.
	EventsRef *EventsRef `json:"eventsRef,omitempty"`
	// Assets are the asset events whose file the worker found on disk, with
	// the path made absolute; asset events naming a missing file are left
	// out (and logged by the worker). ToolID is left empty.
	Assets []Asset `json:"assets,omitempty"`
	// Error is set unless State is success.
	Error *ToolError `json:"error,omitempty"`
	// ExitCode is the process exit code (-1 if killed by a signal or never started).
	ExitCode int `json:"exitCode"`
	// ExecutionTimeMs is how long the attempt ran.
	ExecutionTimeMs int64 `json:"executionTimeMs"`
	// StartedAt is when the script started.
	StartedAt time.Time `json:"startedAt"`
	// Worker is the ID of the worker that ran the attempt.
	Worker string `json:"worker"`
	// ReusedFrom is set when no script ran: the scheduler reused the
	// outcome of the same script with the same input from this earlier
	// attempt (plan) of the same prompt.
	ReusedFrom string `json:"reusedFrom,omitempty"`
	// Deliveries is how many times JetStream delivered the job (1 normally;
	// more means the job was redelivered, e.g. after a worker died).
	Deliveries uint64 `json:"deliveries"`
}

// Headers a skill worker puts on what it sends about one attempt of a tool,
// so a scheduler can tell it from what another holder of worker
// credentials made up (docs/architecture.md, "Who may write what").
const (
	// HeaderAttempt is the attempt's number, on each event message.
	HeaderAttempt = "Narratoria-Attempt"
	// HeaderWorker is the worker's registry ID, on each event message.
	HeaderWorker = "Narratoria-Worker"
	// HeaderToken is the attempt's token (ToolJob.Token), on each event
	// message and each progress report: only the workers of the job's
	// skill, which may read its job, know it.
	HeaderToken = "Narratoria-Token"
	// HeaderSkill is the attempt's skill, on a progress report.
	HeaderSkill = "Narratoria-Skill"
	// HeaderKind says what a message sent to a scheduler's outcomeTo is
	// when it is not an outcome: KindProgress.
	HeaderKind = "Narratoria-Kind"
	// KindProgress is a running tool's progress report (a Progress) sent to
	// the scheduler, which publishes it on the plan's progress subject once
	// its token checks.
	KindProgress = "progress"
)
