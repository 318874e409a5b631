package planfsm

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/narratoria/runtime/pkg/health"
	"github.com/narratoria/runtime/pkg/messages"
)

// Config holds the scheduler-wide rules a plan runs under.
type Config struct {
	// Concurrency bounds the tools of a parallel plan running at once
	// (§4.3). Default: 4.
	Concurrency int
	// ApprovalTimeout bounds an approval wait (§9.3). Default: 5 min.
	ApprovalTimeout time.Duration
	// LostGrace is added to twice an attempt's timeout before an attempt
	// with no outcome is given up as lost. Default: 5 s.
	LostGrace time.Duration
	// MaxContextIterations bounds context re-planning per plan (§9.1).
	// Default: 2.
	MaxContextIterations int
	// ContextTimeout bounds the wait for a planner's answer (§9.1).
	// Default: 5 s.
	ContextTimeout time.Duration
	// PublishBackoff is the first wait before a failed result publication
	// is tried again; it doubles up to 30 s. Default: 200 ms.
	PublishBackoff time.Duration
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.ApprovalTimeout <= 0 {
		c.ApprovalTimeout = 5 * time.Minute
	}
	if c.LostGrace <= 0 {
		c.LostGrace = 5 * time.Second
	}
	if c.MaxContextIterations <= 0 {
		c.MaxContextIterations = 2
	}
	if c.ContextTimeout <= 0 {
		c.ContextTimeout = 5 * time.Second
	}
	if c.PublishBackoff <= 0 {
		c.PublishBackoff = 200 * time.Millisecond
	}
	return c
}

// Script is a tool's resolved script. It is persisted with the plan, so a
// recovered plan keeps the manifest timeout without asking the registry.
type Script struct {
	// Skill and Name identify the script ("<skill>/<name>").
	Skill string `json:"skill"`
	Name  string `json:"name"`
	// TimeoutMs is the attempt timeout the scheduler decided: the tool's
	// timeoutMs, else the script's manifest timeout, else 30 s (§3).
	TimeoutMs int64 `json:"timeoutMs"`
	// NoReuse: a replan must run the script again (manifest "reuse": false).
	NoReuse bool `json:"noReuse,omitempty"`
}

// Timeout returns the attempt timeout.
func (s Script) Timeout() time.Duration { return time.Duration(s.TimeoutMs) * time.Millisecond }

// Phase is where a plan is in its life.
type Phase string

// The phases of a plan. Each is persisted before the plan moves on.
const (
	// PhaseRunning: tools are being run.
	PhaseRunning Phase = "running"
	// PhaseFinished: every tool ended (or the plan timed out); the result
	// is being published.
	PhaseFinished Phase = "finished"
	// PhasePublished: the result is stored; only the plan's keys remain,
	// to be purged.
	PhasePublished Phase = "published"
)

// Record is what is persisted of a plan (KV key p.<plan>).
//
// A record is one message of the store, however long its plan runs: what
// it gains after it is accepted is bounded — each text it keeps (a cancel
// reason, the store's refusal, a round's suggestion or reason) at
// RecordTextMax bytes
// (ClampText), its context notes at RecordNotesMax — so that a record
// that fits when accepted fits to the end (a round's merged tools are
// checked by the shell when they come).
type Record struct {
	// Plan is the plan document as received.
	Plan json.RawMessage `json:"plan"`
	// SessionID is the session (from the subject).
	SessionID string `json:"sessionId"`
	// AcceptedAt is when the plan was accepted.
	AcceptedAt time.Time `json:"acceptedAt"`
	// Deadline is when the plan times out; approval waits push it back
	// (§9.3: they do not count against the plan deadline).
	Deadline time.Time `json:"deadline"`
	// Scripts are the tools' resolved scripts, by tool index.
	Scripts []Script `json:"scripts,omitempty"`
	// Root is the plan ID of the first attempt of the prompt this plan
	// serves (the plan itself for a first attempt): outcomes are reused
	// within one root, never across prompts.
	Root string `json:"root,omitempty"`
	// Phase is the plan's phase; "" is read as running.
	Phase Phase `json:"phase,omitempty"`
	// TimedOut says the plan ended at its deadline.
	TimedOut bool `json:"timedOut,omitempty"`
	// Cancelled says the plan was cancelled (§9.4); CancelReason says by
	// whom and why.
	Cancelled    bool   `json:"cancelled,omitempty"`
	CancelReason string `json:"cancelReason,omitempty"`
	// Iterations are the plan's context re-planning rounds (§9.1), in
	// order; their merged tools extend the plan.
	Iterations []Iteration `json:"iterations,omitempty"`
	// ContextNotes say why requests for more context were not followed
	// (e.g. the iteration limit).
	ContextNotes []string `json:"contextNotes,omitempty"`
	// Committed says the plan's staged state patches were committed.
	Committed bool `json:"committed,omitempty"`
	// Refused, when set, says the store refused a write the plan needed
	// for good (the session state over its limit, a stream or bucket
	// full, a result over the maximum payload), in the server's words:
	// the plan fails with storage_refused.
	Refused string `json:"refused,omitempty"`
	// ShortResult says the full result was refused: the one published
	// leaves out tool events, outputs and state.
	ShortResult bool `json:"shortResult,omitempty"`
	// FinishedAt is when the plan finished.
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// Trace is the W3C trace context the plan arrived with (traceparent,
	// tracestate), kept so a scheduler taking the plan over continues its
	// trace. The machine only carries it.
	Trace map[string]string `json:"trace,omitempty"`
}

// Bounds of what a record gains after it is accepted.
const (
	// RecordTextMax bounds each text a record keeps (ClampText).
	RecordTextMax = 1 << 10
	// RecordNotesMax bounds a record's context notes; later ones are
	// logged only.
	RecordNotesMax = 16
)

// ClampText returns s cut to RecordTextMax bytes (on a character
// boundary, with "…" to say so).
func ClampText(s string) string {
	if len(s) <= RecordTextMax {
		return s
	}
	i := RecordTextMax - len("…")
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// Iteration is one context re-planning round (§9.1).
type Iteration struct {
	// N is 1 for the first round.
	N int `json:"n"`
	// ToolID is the tool whose done asked; Suggestion its contextSuggestion.
	ToolID     string `json:"toolId"`
	Suggestion string `json:"suggestion,omitempty"`
	// State is pending (waiting for running tools), asked, merged, or
	// ended (carried on without more steps: Reason says why).
	State IterationState `json:"state"`
	// AskedAt is when the planner was asked.
	AskedAt time.Time `json:"askedAt,omitzero"`
	// Tools and Scripts are what was merged (IDs prefixed).
	Tools   []messages.Tool `json:"tools,omitempty"`
	Scripts []Script        `json:"scripts,omitempty"`
	// Reason says why the plan carried on without more steps.
	Reason string `json:"reason,omitempty"`
}

// IterationState is where a context re-planning round is.
type IterationState string

// The states of an Iteration.
const (
	IterationPending IterationState = "pending"
	IterationAsked   IterationState = "asked"
	IterationMerged  IterationState = "merged"
	IterationEnded   IterationState = "ended"
)

// Prefix is the ID prefix of the tools iteration n adds: "_rp<n>_".
func Prefix(n int) string { return "_rp" + strconv.Itoa(n) + "_" }

// Tool is one tool's state, persisted after each transition (KV key
// t.<plan>.<tool>).
type Tool struct {
	// State is the tool's state; only Machine.move changes it.
	State messages.ToolState `json:"state"`
	// Attempt is the number of the latest attempt (0 before the first).
	Attempt int `json:"attempt"`
	// Approved says an approval was granted (§9.3).
	Approved bool `json:"approved,omitempty"`
	// Decision is an approval decision that came before the tool waited
	// for one; it is applied when the tool becomes ready (§9.3).
	Decision *messages.Approval `json:"decision,omitempty"`
	// Denied says the tool was skipped because its approval was denied or
	// timed out: for its dependents that is a failure (§9.3).
	Denied bool `json:"denied,omitempty"`
	// SkippedFor is, for a tool skipped because a dependency did not
	// succeed, the tool whose end skipped it (the first that failed): a
	// restore that finds that tool unfinished knows its end was lost.
	SkippedFor string `json:"skippedFor,omitempty"`
	// DispatchedAt is when the latest attempt was sent.
	DispatchedAt time.Time `json:"dispatchedAt,omitzero"`
	// RetryAt is when the next attempt is due (state retrying).
	RetryAt time.Time `json:"retryAt,omitzero"`
	// WaitSince and WaitUntil bound an approval wait.
	WaitSince time.Time `json:"waitSince,omitzero"`
	WaitUntil time.Time `json:"waitUntil,omitzero"`
	// Patches are the state patches of the successful attempt, staged
	// until the plan commits them (one action, one effect).
	Patches []map[string]any `json:"patches,omitempty"`
	// Output is what "$toolId" resolves to (state success).
	Output json.RawMessage `json:"output,omitempty"`
	// Events are every event of every attempt, in order (§4.7), but those
	// of attempts in EventsRefs.
	Events []json.RawMessage `json:"events,omitempty"`
	// EventsRefs point at attempts whose events stay on the events stream
	// (too big for an outcome, and for this record).
	EventsRefs []messages.EventsRef `json:"eventsRefs,omitempty"`
	// Error is the latest attempt's error.
	Error *messages.ToolError `json:"error,omitempty"`
	// ExecMs adds up the attempts' run times.
	ExecMs int64 `json:"execMs,omitempty"`
	// Assets and UIEvents come from the successful attempt.
	Assets   []messages.Asset         `json:"assets,omitempty"`
	UIEvents []messages.UIEventRecord `json:"uiEvents,omitempty"`
	// Skill is the tool's skill.
	Skill string `json:"skill,omitempty"`
	// InputKey identifies the script and the resolved input of the
	// latest attempt (a hash): the same key in a later attempt of the same
	// prompt may reuse this tool's outcome.
	InputKey string `json:"inputKey,omitempty"`
	// History is the tool's last transitions (at most HistoryMax), oldest
	// first: state, time, attempt and cause, as plan status shows them.
	History []messages.ToolTransition `json:"history,omitempty"`
	// ReusedFrom is the plan (an earlier attempt of the same prompt)
	// whose outcome this tool reused instead of running its script.
	ReusedFrom string `json:"reusedFrom,omitempty"`
}

// ProbeReason is why the machine looks for an attempt's job or outcome.
type ProbeReason uint8

// Why a Probe is made.
const (
	// ProbeRecovery: a recovery restored the attempt running; a job that
	// is not stored is sent.
	ProbeRecovery ProbeReason = iota
	// ProbeOverdue: no outcome by the lost timer. The attempt is given up
	// only if neither its job nor its outcome is stored: a job still in the
	// work queue is held by a worker (paused perhaps) or waits to be
	// delivered again, and its outcome may still come.
	ProbeOverdue
	// ProbeUnanswered: the store gave no answer to the job's write in
	// time. The attempt fails (and is sent again) only if the job is not
	// stored: a write can land without its answer.
	ProbeUnanswered
)

// TimerKind names what a timer is for.
type TimerKind uint8

// The timers a plan arms.
const (
	// TimerRetry: the next attempt of a retrying tool is due (§4.4).
	TimerRetry TimerKind = iota + 1
	// TimerLost: an attempt had no outcome in 2× its timeout plus grace.
	TimerLost
	// TimerApproval: an approval wait ran out (§9.3).
	TimerApproval
	// TimerDeadline: the plan deadline (§4.5).
	TimerDeadline
	// TimerPublish: try publishing the result again.
	TimerPublish
	// TimerContext: a planner did not answer a context request in time.
	TimerContext
	// TimerCommit: try committing the state again.
	TimerCommit
)

// String names the timer kind.
func (k TimerKind) String() string {
	switch k {
	case TimerRetry:
		return "retry"
	case TimerLost:
		return "lost"
	case TimerApproval:
		return "approval"
	case TimerDeadline:
		return "deadline"
	case TimerPublish:
		return "publish"
	case TimerContext:
		return "context"
	case TimerCommit:
		return "commit"
	}
	return "unknown"
}

// TimerKey identifies a timer: re-arming a key replaces its timer.
type TimerKey struct {
	// Kind is what the timer is for.
	Kind TimerKind
	// Index is the tool (-1 for plan timers).
	Index int
}

// Event is an input of Machine.Step.
type Event interface{ at() time.Time }

// Effect is an output of Machine.Step, for the shell to carry out in order.
type Effect interface{ effect() }

// Events.
type (
	// Started: the plan was accepted and persisted; start it.
	Started struct{ Now time.Time }
	// Recovered: the plan was rebuilt from persisted records (Restore);
	// re-arm its timers and check its running attempts. ResultStored says
	// the shell found the plan's Execution Result stored: the plan
	// finished, whatever its records say (a store that forgot a purge
	// brought them back), and is only purged.
	Recovered struct {
		Now          time.Time
		ResultStored bool
	}
	// OutcomeArrived: a worker reported an attempt.
	OutcomeArrived struct {
		Now     time.Time
		Outcome *messages.Outcome
		// Events are the attempt's events the shell read back from the
		// events stream when the outcome has an EventsRef (they are used,
		// not kept: the record keeps the reference).
		Events []json.RawMessage
	}
	// TimerFired: a timer armed by ArmTimer fired.
	TimerFired struct {
		Now time.Time
		Key TimerKey
		// Attempt is the attempt the timer was armed for.
		Attempt int
	}
	// DispatchFailed: the shell could not store an attempt's job: the
	// store refused it (Refused: a full jobs stream, a job too large) or
	// gave no answer in time (it may have stored it all the same).
	DispatchFailed struct {
		Now     time.Time
		Index   int
		Attempt int
		Err     string
		Refused bool
	}
	// Probed answers a Probe: whether the attempt's job or outcome is
	// stored (then it needs no resend, and it is not lost), and the
	// probe's Why.
	Probed struct {
		Now     time.Time
		Index   int
		Attempt int
		Stored  bool
		Why     ProbeReason
	}
	// ApprovalArrived: a decision on an awaiting tool (§9.3).
	ApprovalArrived struct {
		Now      time.Time
		ToolID   string
		Approval messages.Approval
		// StoredAt is when the server stored the decision (a decision read
		// back from NARRATORIA_APPROVALS after a recovery); zero for one
		// that arrives live, which counts at Now. A decision stored after
		// the wait's deadline is too late, whenever it is read.
		StoredAt time.Time
	}
	// CancelRequested: someone asked to cancel the plan (§9.4).
	CancelRequested struct {
		Now    time.Time
		Reason string
	}
	// ContextAnswered: a planner answered context request N (§9.1) with
	// tools to merge (IDs already prefixed, validated by the shell), or
	// Err says why there is nothing to merge.
	ContextAnswered struct {
		Now     time.Time
		N       int
		Tools   []messages.Tool
		Scripts []Script
		Err     string
	}
	// CommitDone: the state commit ended (Err "" = committed, or found
	// committed before).
	CommitDone struct {
		Now time.Time
		Err string
		// Refused says the store refused the commit for good (sending it
		// again changes nothing).
		Refused bool
	}
	// StateRefused: the store refused one of the plan's state writes for
	// good (a full plans bucket: the writer does not send it again). Err is
	// the store's refusal.
	StateRefused struct {
		Now time.Time
		Err string
	}
	// PublishDone: the result publication ended (Err "" = stored).
	PublishDone struct {
		Now time.Time
		Err string
		// Refused says the store refused the result for good.
		Refused bool
	}
)

func (e Started) at() time.Time         { return e.Now }
func (e Recovered) at() time.Time       { return e.Now }
func (e OutcomeArrived) at() time.Time  { return e.Now }
func (e TimerFired) at() time.Time      { return e.Now }
func (e DispatchFailed) at() time.Time  { return e.Now }
func (e Probed) at() time.Time          { return e.Now }
func (e ApprovalArrived) at() time.Time { return e.Now }
func (e PublishDone) at() time.Time     { return e.Now }
func (e CancelRequested) at() time.Time { return e.Now }
func (e ContextAnswered) at() time.Time { return e.Now }
func (e CommitDone) at() time.Time      { return e.Now }
func (e StateRefused) at() time.Time    { return e.Now }

// Effects.
type (
	// PersistPlan: write the plan record as it was when the effect was
	// made.
	PersistPlan struct{ Record Record }
	// PersistTool: write tool Index's record as it was when the effect
	// was made.
	PersistTool struct {
		Index int
		Tool  Tool
	}
	// Dispatch: send attempt Attempt of tool Index with this input and
	// timeout. The job's message ID (plan, tool, attempt) makes a resend
	// of the same attempt a duplicate.
	Dispatch struct {
		Index   int
		Attempt int
		Input   json.RawMessage
		Timeout time.Duration
		// InputKey identifies the script and resolved input (Tool.InputKey).
		InputKey string
		// Patches are the staged patches of the tool's ancestors, in
		// topological order: the script sees the session state with these
		// merged (§4.8), though nothing is committed before the plan ends.
		Patches []map[string]any
		// AfterWrites: the job goes out only once every write before it is
		// stored. Set for a tool context re-planning merged (§9.1): the
		// plan record that defines it must not be lost while its job runs.
		AfterWrites bool
	}
	// Probe: find out whether a running attempt's job or outcome is
	// stored; answer with Probed (Why copied).
	Probe struct {
		Index, Attempt int
		Why            ProbeReason
	}
	// ArmTimer: fire TimerFired{Key, Attempt} at At (replacing the key's
	// timer).
	ArmTimer struct {
		Key     TimerKey
		Attempt int
		At      time.Time
	}
	// StopTimer: cancel the key's timer.
	StopTimer struct{ Key TimerKey }
	// CommitState: deep-merge the plan's staged patches, in order, into
	// the session state, once (the shell keeps a commit mark with the
	// state, so a repeated commit of one plan is a no-op); answer with
	// CommitDone.
	CommitState struct {
		Patches []map[string]any
	}
	// FeedHealth: one health input for a skill in the session (§7).
	FeedHealth struct {
		Skill  string
		Input  health.Input
		Reason string
	}
	// Progress: publish a progress event (§4.9); ToolID "" is the plan.
	Progress struct {
		ToolID  string
		State   string
		Attempt int
		Error   string
		// Input is, for a tool that starts to wait for approval, what it
		// would run with (its references resolved).
		Input json.RawMessage
	}
	// CancelRunning: tell workers to kill the plan's running scripts.
	CancelRunning struct{}
	// PublishResult: build the result (Machine.Result) and publish it;
	// answer with PublishDone.
	PublishResult struct{}
	// RequestContext: ask a planner for more steps (§9.1); answer with
	// ContextAnswered. It is made once per iteration, ever.
	RequestContext struct {
		N          int
		ToolID     string
		Suggestion string
	}
	// Purge: remove the plan's keys (retrying until done).
	Purge struct{}
	// KeepOutcome: the outcome the step was given cannot be taken yet and
	// must come again later: do not acknowledge it. It is the outcome of
	// an attempt sent before a recovery, of a tool whose dependencies the
	// recovered plan has not seen end yet (their outcomes are on their
	// way); acknowledged and dropped, it would be lost, and the tool run
	// again.
	KeepOutcome struct {
		ToolID  string
		Attempt int
	}
	// Log: a log line about the plan.
	Log struct {
		Level slog.Level
		Msg   string
		Attrs []slog.Attr
	}
)

func (PersistPlan) effect()    {}
func (PersistTool) effect()    {}
func (Dispatch) effect()       {}
func (Probe) effect()          {}
func (ArmTimer) effect()       {}
func (StopTimer) effect()      {}
func (CommitState) effect()    {}
func (FeedHealth) effect()     {}
func (Progress) effect()       {}
func (CancelRunning) effect()  {}
func (PublishResult) effect()  {}
func (Purge) effect()          {}
func (KeepOutcome) effect()    {}
func (RequestContext) effect() {}
func (Log) effect()            {}
