package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/pkg/messages"
)

// finish builds and publishes the Execution Result, then forgets the plan.
func (a *actor) finish(ctx context.Context) {
	if a.finished {
		return
	}
	a.finished = true
	res := a.result(ctx)
	if err := a.s.publishResult(ctx, res); err != nil {
		// Leave the plan in KV: the next active scheduler publishes it.
		a.log.Error("scheduler: result not published; plan kept for recovery", slog.Any("error", err))
		return
	}
	last := a.lastWrite
	go func(id string) { // off the actor's path: the result is out
		pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if last != nil { // let the plan's last writes land before removing them
			select {
			case <-last.Ok():
			case <-last.Err():
			case <-pctx.Done():
			}
		}
		if err := a.s.store.purge(pctx, id); err != nil {
			a.log.Warn("scheduler: plan state not purged", slog.Any("error", err))
		}
	}(a.id)
	state := messages.PlanSucceeded
	outcome := "succeeded"
	switch {
	case a.timedOut:
		state, outcome = messages.PlanTimeout, "timeout"
	case !res.Success:
		state, outcome = messages.PlanFailed, "failed"
	}
	a.s.m.plans.WithLabelValues(outcome).Inc()
	a.s.m.planDuration.Observe(time.Since(a.accepted).Seconds())
	for _, tr := range res.ToolResults {
		a.s.m.tools.WithLabelValues(string(tr.State)).Inc()
	}
	a.progress("", state, 0, res.Message)
	a.log.Info("scheduler: plan finished", slog.Bool("success", res.Success), slog.String("failureReason", res.FailureReason),
		slog.Any("failedTools", res.FailedTools), slog.Any("disabledSkills", res.DisabledSkills), slog.Int64("ms", res.ExecutionTimeMs))
}

func (a *actor) result(ctx context.Context) *messages.ExecutionResult {
	res := &messages.ExecutionResult{
		PlanID: a.id, SessionID: a.session, Success: true, FailedTools: []string{}, DisabledSkills: []string{},
		ToolResults: make([]messages.ToolResult, 0, len(a.tools)), AggregatedAssets: []messages.Asset{},
		AttemptNumber: a.plan.Metadata.GenerationAttempt, Narrative: a.plan.Narrative,
	}
	var firstFailure *messages.ToolError
	var failedSkills []string
	for _, i := range a.orderIdx() {
		t := a.tools[i]
		tool := &a.plan.Tools[i]
		tr := messages.ToolResult{ToolID: tool.ToolID, Skill: t.Skill, State: t.State, Events: t.Events,
			ExecutionTimeMs: t.ExecMs, Error: t.Error, Output: json.RawMessage("null")}
		if tr.Events == nil {
			tr.Events = []json.RawMessage{}
		}
		if t.Attempt > 1 {
			tr.RetryCount = t.Attempt - 1
		}
		if t.State == messages.ToolSuccess {
			tr.Output = t.Output
			res.AggregatedAssets = append(res.AggregatedAssets, t.Assets...)
			res.UIEvents = append(res.UIEvents, t.UIEvents...)
		} else {
			if tool.Required {
				res.Success = false
			}
			if failedItself(t) {
				res.FailedTools = append(res.FailedTools, tool.ToolID)
				if tool.Required {
					if firstFailure == nil {
						firstFailure = t.Error
					}
					failedSkills = append(failedSkills, t.Skill)
				}
			}
		}
		res.ToolResults = append(res.ToolResults, tr)
	}
	// The skills of failed required tools, plus those of the plan in
	// permanentFailure in this session.
	var planSkills []string
	for _, t := range a.tools {
		planSkills = append(planSkills, t.Skill)
	}
	failedSkills = append(failedSkills, a.s.health.Disabled(ctx, a.session, uniq(planSkills))...)
	res.DisabledSkills = uniq(failedSkills)
	if !res.Success {
		res.CanReplan = true
		res.FailureReason, res.Message = failureReason(a.timedOut, firstFailure)
	}
	if st, err := a.s.sessions.Get(ctx, a.session); err == nil {
		res.AggregatedState = st
	} else {
		res.AggregatedState = json.RawMessage("{}")
	}
	res.ExecutionTimeMs = time.Since(a.accepted).Milliseconds()
	res.FinishedAt = time.Now().UTC()
	return res
}

// failedItself reports whether a tool that did not succeed failed on its
// own account (ran and failed, timed out, or was denied approval), rather
// than being skipped because of another tool or the plan's timeout.
func failedItself(t *toolRecord) bool {
	switch t.State {
	case messages.ToolFailed, messages.ToolTimeout:
		return true
	case messages.ToolSkipped:
		return t.Error != nil && (t.Error.Code == "approval_denied" || t.Error.Code == "approval_timeout")
	}
	return false
}

// orderIdx lists tool indexes in topological order (ties in plan order).
func (a *actor) orderIdx() []int {
	order := a.graph.Order()
	out := make([]int, len(order))
	for k, id := range order {
		out[k] = a.index[id]
	}
	return out
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
	case messages.CategoryProcessError:
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

// publishResult stores the result on NARRATORIA_RESULTS. The plan ID as
// message ID makes a republish after failover a duplicate JetStream drops.
// A result too large for one message loses its events first (they are on
// the events stream), then its outputs.
func (s *Scheduler) publishResult(ctx context.Context, res *messages.ExecutionResult) error {
	subj, err := s.subj.Results(res.SessionID, res.PlanID)
	if err != nil {
		return err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	limit := int(s.nc.MaxPayload()) - 4096
	if len(b) > limit {
		for i := range res.ToolResults {
			res.ToolResults[i].Events = []json.RawMessage{}
		}
		b, _ = json.Marshal(res)
	}
	if len(b) > limit {
		for i := range res.ToolResults {
			res.ToolResults[i].Output = json.RawMessage("null")
		}
		res.Message = "result too large for one message: events and outputs left out"
		b, _ = json.Marshal(res)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.js.Publish(pctx, subj, b, jetstream.WithMsgID("result."+res.PlanID)); err != nil {
		return fmt.Errorf("publish result of plan %s: %w", res.PlanID, err)
	}
	return nil
}

// invalidResult is the result of a plan rejected at intake.
func invalidResult(planID, session string, attempt int, perr *messages.PlanError) *messages.ExecutionResult {
	msg := perr.Error()
	if len(msg) > 4000 {
		msg = msg[:4000] + "…"
	}
	return &messages.ExecutionResult{
		PlanID: planID, SessionID: session, Success: false, CanReplan: true, FailureReason: perr.Reason,
		Message: msg, Problems: perr.Problems, FailedTools: []string{}, DisabledSkills: []string{},
		ToolResults: []messages.ToolResult{}, AggregatedState: json.RawMessage("{}"), AggregatedAssets: []messages.Asset{},
		AttemptNumber: max(attempt, 1), FinishedAt: time.Now().UTC(),
	}
}
