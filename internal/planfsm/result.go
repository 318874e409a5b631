package planfsm

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/narratoria/runtime/pkg/messages"
)

// Result builds the plan's Execution Result (§4.10) from its tools. The
// shell adds what needs I/O: AggregatedState (the session state now) and
// the plan's skills in permanentFailure (AddDisabled).
func (m *Machine) Result() *messages.ExecutionResult {
	res := &messages.ExecutionResult{
		PlanID: m.plan.RequestID, SessionID: m.rec.SessionID, Success: true, FailedTools: []string{}, DisabledSkills: []string{},
		ToolResults: make([]messages.ToolResult, 0, len(m.tools)), AggregatedAssets: []messages.Asset{},
		AttemptNumber: max(m.plan.Metadata.GenerationAttempt, 1), Narrative: m.plan.Narrative,
		AggregatedState: json.RawMessage("{}"), FinishedAt: m.rec.FinishedAt,
		ExecutionTimeMs: m.rec.FinishedAt.Sub(m.rec.AcceptedAt).Milliseconds(),
	}
	for _, it := range m.rec.Iterations {
		if it.State != IterationPending {
			res.RePlanIterations++
		}
		if it.Reason != "" {
			res.RePlanNotes = append(res.RePlanNotes, it.Reason)
		}
	}
	res.RePlanNotes = append(res.RePlanNotes, m.rec.ContextNotes...)
	// The plan as submitted travels with every result, so a finished plan
	// can be read, debugged (its tools' inputs) and run again; the final
	// plan only when context re-planning changed it.
	res.OriginalPlan = m.original
	if len(m.rec.Iterations) > 0 {
		res.FinalPlan = m.plan
	}
	var firstFailure *messages.ToolError
	var failedSkills []string
	for _, id := range m.graph.Order() {
		i := m.index[id]
		t := &m.tools[i]
		spec := &m.plan.Tools[i]
		tr := messages.ToolResult{ToolID: id, Skill: t.Skill, State: t.State, Events: t.Events, EventsRefs: t.EventsRefs,
			ExecutionTimeMs: t.ExecMs, Error: t.Error, Output: json.RawMessage("null"), History: slices.Clone(t.History)}
		if tr.Events == nil {
			tr.Events = []json.RawMessage{}
		}
		if t.Attempt > 1 {
			tr.RetryCount = t.Attempt - 1
		}
		tr.ReusedFrom = t.ReusedFrom
		if len(spec.Dependencies) > 0 {
			tr.Dependencies = spec.Dependencies
		}
		if len(t.Patches) > 0 && t.State == messages.ToolSuccess {
			res.StatePatches = append(res.StatePatches, messages.ToolPatches{ToolID: id, Patches: t.Patches})
		}
		if t.State == messages.ToolSuccess {
			tr.Output = t.Output
			res.AggregatedAssets = append(res.AggregatedAssets, t.Assets...)
			res.UIEvents = append(res.UIEvents, t.UIEvents...)
		} else {
			if spec.Required {
				res.Success = false
			}
			if failedItself(t) {
				res.FailedTools = append(res.FailedTools, id)
				if spec.Required {
					if firstFailure == nil {
						firstFailure = t.Error
					}
					if skillsFault(t) {
						failedSkills = append(failedSkills, t.Skill)
					}
				}
			}
		}
		res.ToolResults = append(res.ToolResults, tr)
	}
	res.DisabledSkills = uniq(failedSkills)
	res.StateCommitted = m.rec.Committed
	switch {
	case m.rec.Cancelled:
		res.Success, res.CanReplan, res.FailureReason = false, false, messages.ReasonCancelled
		res.Message = "the plan was cancelled"
		if m.rec.CancelReason != "" {
			res.Message += ": " + m.rec.CancelReason
		}
	case m.rec.Refused != "":
		// No other plan would fare better against a full store or an
		// oversized state: it is not replanned.
		res.Success, res.CanReplan, res.FailureReason, res.Message = false, false, messages.ReasonStorageRefused, m.rec.Refused
	case !res.Success && firstFailure != nil && firstFailure.Code == CodeStorageRefused && !m.rec.TimedOut:
		// A full jobs stream: no other plan would fare better.
		res.CanReplan, res.FailureReason, res.Message = false, messages.ReasonStorageRefused, firstFailure.Message
	case !res.Success:
		res.CanReplan = true
		res.FailureReason, res.Message = failureReason(m.rec.TimedOut, firstFailure)
	}
	if m.rec.ShortResult {
		shorten(res)
	}
	return res
}

// shorten leaves out of a result what makes it large: tool events, outputs
// and patches, assets, UI events, the plans. What remains says what
// happened to each tool.
func shorten(res *messages.ExecutionResult) {
	res.Message += " (this short result leaves out tool events, outputs and state; they are on the events stream)"
	for i := range res.ToolResults {
		tr := &res.ToolResults[i]
		tr.Events, tr.EventsRefs, tr.Output = []json.RawMessage{}, nil, json.RawMessage("null")
	}
	res.StatePatches, res.UIEvents, res.OriginalPlan, res.FinalPlan = nil, nil, nil, nil
	res.AggregatedAssets = []messages.Asset{}
}

// Skills returns the plan's skills, sorted, once each.
func (m *Machine) Skills() []string {
	var out []string
	for i := range m.tools {
		out = append(out, m.tools[i].Skill)
	}
	return uniq(out)
}

// AddDisabled adds skills (e.g. those in permanentFailure) to a result's
// disabledSkills.
func AddDisabled(res *messages.ExecutionResult, skills []string) {
	res.DisabledSkills = uniq(append(res.DisabledSkills, skills...))
}

// skillsFault reports whether a tool that failed itself failed because of
// its skill (§7): a denial, an approval that timed out, or the plan's
// deadline is nobody's fault in the skill, so the replan keeps the skill.
func skillsFault(t *Tool) bool {
	if t.Denied {
		return false
	}
	// §7: a plan deadline or an infrastructure failure (a job the store
	// refused or never stored) is not the skill's.
	return t.Error == nil || t.Error.Code != codePlanTimeout && t.Error.Category != messages.CategoryInfrastructure
}

// codePlanTimeout is the error code of a tool the plan's deadline ended.
const codePlanTimeout = "plan_timeout"

// failedItself reports whether a tool that did not succeed failed on its
// own account (ran and failed, timed out, or was denied approval), rather
// than being skipped because of another tool or the plan's timeout.
func failedItself(t *Tool) bool {
	switch t.State {
	case messages.ToolFailed, messages.ToolTimeout:
		return true
	case messages.ToolSkipped:
		return t.Denied
	case messages.ToolPending, messages.ToolRunning, messages.ToolRetrying, messages.ToolSuccess, messages.ToolAwaitingApproval, messages.ToolCancelled:
		return false
	}
	return false
}

func failureReason(timedOut bool, e *messages.ToolError) (string, string) {
	if timedOut {
		return messages.ReasonTimeout, "the plan ran past its timeout"
	}
	if e == nil {
		return messages.ReasonToolFailure, "a required tool did not succeed"
	}
	switch e.Category {
	case messages.CategoryTimeout, messages.CategoryLostWorker:
		return messages.ReasonTimeout, e.Message
	case messages.CategoryInvalidJSON:
		return messages.ReasonInvalidJSON, e.Message
	case messages.CategoryProcessError, messages.CategoryInfrastructure:
		return messages.ReasonProcessError, e.Message
	case messages.CategoryUnknownSkill:
		return messages.ReasonUnknownSkill, e.Message
	}
	return messages.ReasonToolFailure, e.Message
}

func uniq(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// Status reports the plan's tools with their state, attempts and timings
// (§9.4).
func (m *Machine) Status(now time.Time) messages.PlanStatus {
	st := messages.PlanStatus{PlanID: m.plan.RequestID, SessionID: m.rec.SessionID, Phase: string(m.rec.Phase),
		AcceptedAt: m.rec.AcceptedAt, Deadline: m.Deadline(now), Parallel: m.plan.Parallel,
		AttemptNumber: max(m.plan.Metadata.GenerationAttempt, 1), TimedOut: m.rec.TimedOut, Cancelled: m.rec.Cancelled,
		Tools: make([]messages.ToolStatus, len(m.tools))}
	for i := range m.tools {
		t := &m.tools[i]
		deps := m.plan.Tools[i].Dependencies
		if deps == nil {
			deps = []string{}
		}
		st.Tools[i] = messages.ToolStatus{ToolID: m.plan.Tools[i].ToolID, Skill: t.Skill, State: t.State, Attempt: t.Attempt,
			Dependencies: deps, DispatchedAt: t.DispatchedAt, RetryAt: t.RetryAt, WaitUntil: t.WaitUntil, ExecMs: t.ExecMs, Error: t.Error,
			History: slices.Clone(t.History), RequiresApproval: m.plan.Tools[i].RequiresApproval}
		if t.State == messages.ToolAwaitingApproval {
			st.Tools[i].Input = m.pendingInput(i)
		}
	}
	orig := messages.PlanVersion{Version: 0, State: "original", ToolIDs: make([]string, len(m.original.Tools))}
	for i := range m.original.Tools {
		orig.ToolIDs[i] = m.original.Tools[i].ToolID
	}
	st.Versions = append(st.Versions, orig)
	for _, it := range m.rec.Iterations {
		v := messages.PlanVersion{Version: it.N, State: string(it.State), ToolIDs: make([]string, len(it.Tools)), AskedBy: it.ToolID,
			Suggestion: it.Suggestion, Reason: it.Reason, AskedAt: it.AskedAt}
		for i := range it.Tools {
			v.ToolIDs[i] = it.Tools[i].ToolID
		}
		st.Versions = append(st.Versions, v)
	}
	return st
}
