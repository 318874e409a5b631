package planfsm

import (
	"encoding/json"
	"time"

	"github.com/narratoria/runtime/pkg/codec"
	"github.com/narratoria/runtime/pkg/messages"
)

// The plan and tool records are written on every step, and encoding/json
// was a tenth of the scheduler's CPU in figure 9 (docs/performance-budget.md).
// The fast codec cannot code them as they are: it does not know the
// "omitzero" option their times use. The wire types below are the records
// with each such time a pointer, nil when zero, under "omitempty": the
// same JSON, byte for byte, in the same order (TestWireMatchesRecords), that
// the fast codec can write. Reading still decodes into Record and Tool.

// EncodeTool returns the JSON of a tool record, as encoding/json writes it.
func EncodeTool(t *Tool) ([]byte, error) {
	return codec.Marshal(toolWire{
		State: t.State, Attempt: t.Attempt, Approved: t.Approved, Decision: t.Decision, Denied: t.Denied,
		SkippedFor: t.SkippedFor, DispatchedAt: optTime(t.DispatchedAt), RetryAt: optTime(t.RetryAt),
		WaitSince: optTime(t.WaitSince), WaitUntil: optTime(t.WaitUntil), Patches: t.Patches, Output: t.Output,
		Events: t.Events, EventsRefs: t.EventsRefs, Error: t.Error, ExecMs: t.ExecMs, Assets: t.Assets,
		UIEvents: t.UIEvents, Skill: t.Skill, InputKey: t.InputKey, History: t.History, ReusedFrom: t.ReusedFrom,
	})
}

// EncodeRecord returns the JSON of a plan record, as encoding/json writes
// it.
func EncodeRecord(r *Record) ([]byte, error) {
	w := recordWire{
		Plan: r.Plan, SessionID: r.SessionID, AcceptedAt: r.AcceptedAt, Deadline: r.Deadline, Scripts: r.Scripts,
		Root: r.Root, Phase: r.Phase, TimedOut: r.TimedOut, Cancelled: r.Cancelled, CancelReason: r.CancelReason,
		ContextNotes: r.ContextNotes, Committed: r.Committed, Refused: r.Refused, ShortResult: r.ShortResult,
		FinishedAt: optTime(r.FinishedAt), Trace: r.Trace,
	}
	if r.Iterations != nil {
		w.Iterations = make([]iterationWire, len(r.Iterations))
		for i, it := range r.Iterations {
			w.Iterations[i] = iterationWire{N: it.N, ToolID: it.ToolID, Suggestion: it.Suggestion, State: it.State,
				AskedAt: optTime(it.AskedAt), Tools: it.Tools, Scripts: it.Scripts, Reason: it.Reason}
		}
	}
	return codec.Marshal(w)
}

// optTime is t, or nil when t is zero (what omitzero leaves out).
func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// toolWire is Tool as written: field for field, in its order, with the
// same names.
type toolWire struct {
	State        messages.ToolState        `json:"state"`
	Attempt      int                       `json:"attempt"`
	Approved     bool                      `json:"approved,omitempty"`
	Decision     *messages.Approval        `json:"decision,omitempty"`
	Denied       bool                      `json:"denied,omitempty"`
	SkippedFor   string                    `json:"skippedFor,omitempty"`
	DispatchedAt *time.Time                `json:"dispatchedAt,omitempty"`
	RetryAt      *time.Time                `json:"retryAt,omitempty"`
	WaitSince    *time.Time                `json:"waitSince,omitempty"`
	WaitUntil    *time.Time                `json:"waitUntil,omitempty"`
	Patches      []map[string]any          `json:"patches,omitempty"`
	Output       json.RawMessage           `json:"output,omitempty"`
	Events       []json.RawMessage         `json:"events,omitempty"`
	EventsRefs   []messages.EventsRef      `json:"eventsRefs,omitempty"`
	Error        *messages.ToolError       `json:"error,omitempty"`
	ExecMs       int64                     `json:"execMs,omitempty"`
	Assets       []messages.Asset          `json:"assets,omitempty"`
	UIEvents     []messages.UIEventRecord  `json:"uiEvents,omitempty"`
	Skill        string                    `json:"skill,omitempty"`
	InputKey     string                    `json:"inputKey,omitempty"`
	History      []messages.ToolTransition `json:"history,omitempty"`
	ReusedFrom   string                    `json:"reusedFrom,omitempty"`
}

// recordWire is Record as written.
type recordWire struct {
	Plan         json.RawMessage   `json:"plan"`
	SessionID    string            `json:"sessionId"`
	AcceptedAt   time.Time         `json:"acceptedAt"`
	Deadline     time.Time         `json:"deadline"`
	Scripts      []Script          `json:"scripts,omitempty"`
	Root         string            `json:"root,omitempty"`
	Phase        Phase             `json:"phase,omitempty"`
	TimedOut     bool              `json:"timedOut,omitempty"`
	Cancelled    bool              `json:"cancelled,omitempty"`
	CancelReason string            `json:"cancelReason,omitempty"`
	Iterations   []iterationWire   `json:"iterations,omitempty"`
	ContextNotes []string          `json:"contextNotes,omitempty"`
	Committed    bool              `json:"committed,omitempty"`
	Refused      string            `json:"refused,omitempty"`
	ShortResult  bool              `json:"shortResult,omitempty"`
	FinishedAt   *time.Time        `json:"finishedAt,omitempty"`
	Trace        map[string]string `json:"trace,omitempty"`
}

// iterationWire is Iteration as written.
type iterationWire struct {
	N          int             `json:"n"`
	ToolID     string          `json:"toolId"`
	Suggestion string          `json:"suggestion,omitempty"`
	State      IterationState  `json:"state"`
	AskedAt    *time.Time      `json:"askedAt,omitempty"`
	Tools      []messages.Tool `json:"tools,omitempty"`
	Scripts    []Script        `json:"scripts,omitempty"`
	Reason     string          `json:"reason,omitempty"`
}
