package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/plancheck"
	"github.com/narratoria/runtime/pkg/dag"
	"github.com/narratoria/runtime/pkg/health"
	"github.com/narratoria/runtime/pkg/messages"
)

// Messages a plan actor receives.
type (
	outcomeMsg struct {
		out messages.Outcome
		msg jetstream.Msg
	}
	retryDue struct {
		idx, attempt int
	}
	lostDue struct {
		idx, attempt int
	}
	approvalMsg struct {
		tool     string
		approval messages.Approval
		reply    func(error)
	}
	approvalTimeout struct {
		idx int
	}
	dispatchFailed struct {
		idx, attempt int
		err          error
	}
	deadlineDue struct{}
	stopActor   struct{}
)

// actor runs one plan. Only its goroutine touches its fields; everything
// else talks to it through its mailbox.
type actor struct {
	s        *Scheduler
	id       string
	session  string
	plan     *messages.Plan
	graph    *dag.Graph
	tr       *dag.Tracker
	scripts  []plancheck.Script
	tools    []*toolRecord
	index    map[string]int
	accepted time.Time
	deadline time.Time
	log      *slog.Logger
	mb       *mailbox
	done     chan struct{}

	active    int  // tools dispatched (running or waiting to retry)
	exclusive bool // an async:false tool of a parallel plan is in flight
	timedOut  bool
	finished  bool
	lastWrite jetstream.PubAckFuture
	lost      map[int]*time.Timer
	approval  map[int]*time.Timer
	planTimer *time.Timer
}

func newActor(s *Scheduler, c *plancheck.Checked, session string, accepted, deadline time.Time) *actor {
	n := len(c.Plan.Tools)
	a := &actor{
		s: s, id: c.Plan.RequestID, session: session, plan: c.Plan, graph: c.Graph, scripts: c.Scripts,
		tools: make([]*toolRecord, n), index: make(map[string]int, n), accepted: accepted, deadline: deadline,
		log:  s.log.With(slog.String("planId", c.Plan.RequestID), slog.String("sessionId", session)),
		mb:   newMailbox(),
		done: make(chan struct{}),
		lost: map[int]*time.Timer{}, approval: map[int]*time.Timer{},
	}
	for i := range c.Plan.Tools {
		a.index[c.Plan.Tools[i].ToolID] = i
		a.tools[i] = &toolRecord{State: messages.ToolPending, Skill: c.Scripts[i].Skill}
	}
	return a
}

// run is the actor's goroutine. recovered says whether the plan was loaded
// from KV after a restart or failover.
func (a *actor) run(ctx context.Context, recovered bool) {
	defer close(a.done)
	defer a.stopTimers()
	a.planTimer = time.AfterFunc(time.Until(a.deadline), func() { a.mb.put(deadlineDue{}) })
	if recovered {
		a.resume(ctx)
	} else {
		a.progress("", messages.PlanStarted, 0, "")
	}
	a.pump(ctx)
	for !a.finished {
		select {
		case <-ctx.Done():
			return
		case <-a.mb.signal:
		}
		for _, m := range a.mb.take() {
			if _, ok := m.(stopActor); ok {
				return
			}
			a.handle(ctx, m)
		}
		a.pump(ctx)
	}
}

func (a *actor) handle(ctx context.Context, m any) {
	if a.finished {
		if o, ok := m.(outcomeMsg); ok {
			_ = o.msg.Ack()
		}
		return
	}
	switch m := m.(type) {
	case outcomeMsg:
		a.onOutcome(ctx, m)
	case retryDue:
		t := a.tools[m.idx]
		if t.State == messages.ToolRetrying && t.Attempt == m.attempt {
			a.dispatch(ctx, m.idx)
		}
	case lostDue:
		t := a.tools[m.idx]
		if t.State == messages.ToolRunning && t.Attempt == m.attempt {
			a.log.Warn("scheduler: no outcome in time; attempt given up as lost", slog.String("toolId", a.plan.Tools[m.idx].ToolID), slog.Int("attempt", m.attempt))
			a.onAttemptFailed(ctx, m.idx, nil, &messages.ToolError{Code: "no_outcome", Category: messages.CategoryLostWorker,
				Message: fmt.Sprintf("no worker reported attempt %d in time", m.attempt)}, 0)
		}
	case dispatchFailed:
		t := a.tools[m.idx]
		if t.State == messages.ToolRunning && t.Attempt == m.attempt {
			a.log.Error("scheduler: job not stored; attempt fails", slog.String("toolId", a.plan.Tools[m.idx].ToolID), slog.Any("error", m.err))
			a.onAttemptFailed(ctx, m.idx, nil, &messages.ToolError{Code: "dispatch_failed", Category: messages.CategoryProcessError, Message: m.err.Error()}, 0)
		}
	case approvalMsg:
		a.onApproval(ctx, m)
	case approvalTimeout:
		t := a.tools[m.idx]
		if t.State == messages.ToolAwaitingApproval {
			a.deny(ctx, m.idx, "approval_timeout", fmt.Sprintf("no approval decision within %s", a.s.cfg.ApprovalTimeout))
		}
	case deadlineDue:
		a.onDeadline(ctx)
	}
}

// pump starts every tool the rules of §4 allow now, then finishes the plan
// when nothing is left.
func (a *actor) pump(ctx context.Context) {
	if a.finished {
		return
	}
	if a.tr.Done() {
		a.finish(ctx)
		return
	}
	if a.timedOut {
		return
	}
	for _, id := range a.tr.Ready() {
		i := a.index[id]
		t := a.tools[i]
		tool := &a.plan.Tools[i]
		if t.State == messages.ToolAwaitingApproval {
			if !a.plan.Parallel {
				return // sequential: the waiting tool is the one at a time
			}
			continue
		}
		if tool.RequiresApproval && !t.Approved {
			if !a.plan.Parallel && a.active > 0 {
				return
			}
			a.await(ctx, i)
			if !a.plan.Parallel {
				return
			}
			continue
		}
		if !a.plan.Parallel {
			if a.active > 0 {
				return
			}
			a.dispatch(ctx, i)
			return
		}
		if !tool.Async {
			// An async:false tool runs alone: wait for the others to drain,
			// and start nothing else meanwhile (it is next in line).
			if a.active > 0 {
				return
			}
			a.exclusive = true
			a.dispatch(ctx, i)
			return
		}
		if a.exclusive || a.active >= a.s.cfg.Concurrency {
			return
		}
		a.dispatch(ctx, i)
	}
}

// timeoutOf is the attempt timeout of tool i: the tool's, else the
// script's manifest timeout, else the default.
func (a *actor) timeoutOf(i int) time.Duration {
	if ms := a.plan.Tools[i].TimeoutMs; ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	if d := a.scripts[i].Timeout; d > 0 {
		return d
	}
	return messages.ToolTimeoutDefault
}

// dispatch sends the next attempt of tool i to the workers.
func (a *actor) dispatch(ctx context.Context, i int) {
	t := a.tools[i]
	tool := &a.plan.Tools[i]
	first := t.State != messages.ToolRetrying
	if first {
		if err := a.tr.Start(tool.ToolID); err != nil {
			a.log.Error("scheduler: tracker refused start", slog.String("toolId", tool.ToolID), slog.Any("error", err))
			return
		}
		a.active++
	}
	t.Attempt++
	t.State = messages.ToolRunning
	t.DispatchedAt = time.Now().UTC()
	t.RetryAt = time.Time{}
	input, err := messages.ResolveRefs(tool.Input, a.outputOf)
	if err != nil {
		a.onAttemptFailed(ctx, i, nil, &messages.ToolError{Code: "bad_reference", Category: messages.CategoryInvalidInput, Message: err.Error()}, 0)
		return
	}
	state, err := a.s.sessions.Get(ctx, a.session)
	if err != nil {
		a.log.Warn("scheduler: session state unavailable; script sees {}", slog.Any("error", err))
		state = json.RawMessage("{}")
	}
	timeout := a.timeoutOf(i)
	job := messages.ToolJob{
		PlanID: a.id, SessionID: a.session, ToolID: tool.ToolID, Skill: a.scripts[i].Skill, Script: a.scripts[i].Name,
		Attempt: t.Attempt, Input: input, State: state, TimeoutMs: timeout.Milliseconds(), DispatchedAt: t.DispatchedAt,
	}
	if err := a.persist(ctx, i); err != nil {
		a.log.Error("scheduler: cannot persist dispatch", slog.Any("error", err))
	}
	if err := a.s.publishJob(&job, func(err error) { a.mb.put(dispatchFailed{idx: i, attempt: job.Attempt, err: err}) }); err != nil {
		a.log.Error("scheduler: cannot publish job; attempt fails", slog.String("toolId", tool.ToolID), slog.Any("error", err))
		a.onAttemptFailed(ctx, i, nil, &messages.ToolError{Code: "dispatch_failed", Category: messages.CategoryProcessError, Message: err.Error()}, 0)
		return
	}
	a.armLost(i, t.Attempt, timeout)
	a.progress(tool.ToolID, string(messages.ToolRunning), t.Attempt, "")
}

func (a *actor) armLost(i, attempt int, timeout time.Duration) {
	if old := a.lost[i]; old != nil {
		old.Stop()
	}
	a.lost[i] = time.AfterFunc(2*timeout+a.s.cfg.LostGrace, func() { a.mb.put(lostDue{idx: i, attempt: attempt}) })
}

func (a *actor) outputOf(id string) (json.RawMessage, bool) {
	i, ok := a.index[id]
	if !ok {
		return nil, false
	}
	t := a.tools[i]
	if t.State != messages.ToolSuccess {
		return nil, false
	}
	return t.Output, true
}

func (a *actor) onOutcome(ctx context.Context, m outcomeMsg) {
	o := &m.out
	i, ok := a.index[o.ToolID]
	if !ok {
		_ = m.msg.Ack()
		return
	}
	t := a.tools[i]
	if t.State != messages.ToolRunning || o.Attempt != t.Attempt {
		// A duplicate (redelivery) or a late outcome of an attempt given up.
		a.s.log.Debug("scheduler: outcome ignored", slog.String("planId", a.id), slog.String("toolId", o.ToolID),
			slog.Int("attempt", o.Attempt), slog.String("state", string(t.State)))
		_ = m.msg.Ack()
		return
	}
	if tm := a.lost[i]; tm != nil {
		tm.Stop()
		delete(a.lost, i)
	}
	if !o.StartedAt.IsZero() && !t.DispatchedAt.IsZero() {
		if d := o.StartedAt.Sub(t.DispatchedAt); d >= 0 {
			a.s.m.dispatch.Observe(d.Seconds())
		}
	}
	t.Events = append(t.Events, o.Events...)
	t.ExecMs += o.ExecutionTimeMs
	if o.State == messages.ToolSuccess {
		a.onSuccess(ctx, i, o)
		a.ackAfterWrites(m.msg)
		return
	}
	errInfo := o.Error
	if errInfo == nil {
		errInfo = &messages.ToolError{Code: "failed", Category: messages.CategoryToolFailure, Message: "the tool failed"}
	}
	a.onAttemptFailed(ctx, i, o, errInfo, o.ExecutionTimeMs)
	a.ackAfterWrites(m.msg)
}

func (a *actor) onSuccess(ctx context.Context, i int, o *messages.Outcome) {
	t := a.tools[i]
	tool := &a.plan.Tools[i]
	var patches []map[string]any
	for _, raw := range o.Events {
		ev, err := messages.DecodeEvent(raw)
		if err != nil {
			continue
		}
		switch e := ev.(type) {
		case *messages.StatePatchEvent:
			patches = append(patches, e.Patch)
		case *messages.UIEvent:
			t.UIEvents = append(t.UIEvents, messages.UIEventRecord{ToolID: tool.ToolID, Event: e.Event, Payload: e.Payload})
		}
	}
	for _, as := range o.Assets {
		as.ToolID = tool.ToolID
		t.Assets = append(t.Assets, as)
	}
	if len(patches) > 0 {
		if _, err := a.s.sessions.Merge(ctx, a.session, patches); err != nil {
			a.log.Error("scheduler: state patch not applied", slog.String("toolId", tool.ToolID), slog.Any("error", err))
		}
	}
	t.State = messages.ToolSuccess
	t.Output = o.Output
	if len(t.Output) == 0 {
		t.Output = json.RawMessage(`{"summary":""}`)
	}
	t.Error = nil
	a.active--
	if !tool.Async {
		a.exclusive = false
	}
	if err := a.persist(ctx, i); err != nil {
		a.log.Error("scheduler: cannot persist outcome", slog.Any("error", err))
	}
	a.feedHealth(ctx, i, health.Success, "attempt succeeded")
	a.complete(ctx, i, dag.Succeeded)
	a.progress(tool.ToolID, string(messages.ToolSuccess), t.Attempt, "")
}

// onAttemptFailed retries the tool if its policy and the plan deadline
// allow, else ends it as failed (or timeout).
func (a *actor) onAttemptFailed(ctx context.Context, i int, o *messages.Outcome, e *messages.ToolError, _ int64) {
	t := a.tools[i]
	tool := &a.plan.Tools[i]
	if tm := a.lost[i]; tm != nil {
		tm.Stop()
		delete(a.lost, i)
	}
	t.Error = e
	in := health.Failure
	if e.Transient() {
		in = health.Transient
	}
	a.feedHealth(ctx, i, in, e.Message)
	retries := t.Attempt - 1
	if retries < tool.RetryPolicy.MaxRetries {
		delay := messages.RetryDelay(tool.RetryPolicy.BackoffMs, retries+1)
		at := time.Now().Add(delay)
		if at.Before(a.deadline) {
			t.State = messages.ToolRetrying
			t.RetryAt = at.UTC()
			if err := a.persist(ctx, i); err != nil {
				a.log.Error("scheduler: cannot persist retry", slog.Any("error", err))
			}
			attempt := t.Attempt
			time.AfterFunc(delay, func() { a.mb.put(retryDue{idx: i, attempt: attempt}) })
			a.s.m.retries.WithLabelValues(t.Skill).Inc()
			a.progress(tool.ToolID, string(messages.ToolRetrying), t.Attempt, e.Message)
			a.log.Info("scheduler: tool attempt failed; retrying", slog.String("toolId", tool.ToolID), slog.String("skill", t.Skill),
				slog.Int("attempt", t.Attempt), slog.Duration("backoff", delay), slog.String("error", e.Message))
			return
		}
	}
	final := messages.ToolFailed
	if e.Category == messages.CategoryTimeout {
		final = messages.ToolTimeout
	}
	t.State = final
	a.active--
	if !tool.Async {
		a.exclusive = false
	}
	if err := a.persist(ctx, i); err != nil {
		a.log.Error("scheduler: cannot persist failure", slog.Any("error", err))
	}
	if retries >= tool.RetryPolicy.MaxRetries {
		a.feedHealth(ctx, i, health.Exhausted, fmt.Sprintf("%d attempts failed", t.Attempt))
	}
	a.log.Warn("scheduler: tool failed", slog.String("toolId", tool.ToolID), slog.String("skill", t.Skill),
		slog.Int("attempts", t.Attempt), slog.String("category", e.Category), slog.String("error", e.Message))
	outcome := dag.Failed
	if !tool.Required {
		outcome = dag.FailedOptional
	}
	a.complete(ctx, i, outcome)
	a.progress(tool.ToolID, string(final), t.Attempt, e.Message)
}

// complete records a tool's end in the tracker and skips what depends on a
// failed required tool.
func (a *actor) complete(ctx context.Context, i int, o dag.Outcome) {
	_, skipped, err := a.tr.Finish(a.plan.Tools[i].ToolID, o)
	if err != nil {
		a.log.Error("scheduler: tracker refused finish", slog.String("toolId", a.plan.Tools[i].ToolID), slog.Any("error", err))
		return
	}
	for _, id := range skipped {
		j := a.index[id]
		t := a.tools[j]
		t.State = messages.ToolSkipped
		t.Error = &messages.ToolError{Code: "dependency_failed", Category: messages.CategoryToolFailure,
			Message: fmt.Sprintf("skipped: dependency %q did not succeed", a.plan.Tools[i].ToolID)}
		if err := a.persist(ctx, j); err != nil {
			a.log.Error("scheduler: cannot persist skip", slog.Any("error", err))
		}
		a.progress(id, string(messages.ToolSkipped), 0, t.Error.Message)
	}
}

func (a *actor) await(ctx context.Context, i int) {
	t := a.tools[i]
	t.State = messages.ToolAwaitingApproval
	t.WaitUntil = time.Now().Add(a.s.cfg.ApprovalTimeout).UTC()
	if err := a.persist(ctx, i); err != nil {
		a.log.Error("scheduler: cannot persist approval wait", slog.Any("error", err))
	}
	a.armApproval(i, t.WaitUntil)
	a.progress(a.plan.Tools[i].ToolID, string(messages.ToolAwaitingApproval), 0, "")
}

func (a *actor) armApproval(i int, until time.Time) {
	a.approval[i] = time.AfterFunc(time.Until(until), func() { a.mb.put(approvalTimeout{idx: i}) })
}

func (a *actor) onApproval(ctx context.Context, m approvalMsg) {
	i, ok := a.index[m.tool]
	if !ok || a.tools[i].State != messages.ToolAwaitingApproval {
		m.reply(fmt.Errorf("tool %q of plan %s is not awaiting approval", m.tool, a.id))
		return
	}
	if tm := a.approval[i]; tm != nil {
		tm.Stop()
		delete(a.approval, i)
	}
	m.reply(nil)
	if !m.approval.Approved {
		reason := "approval denied"
		if m.approval.By != "" {
			reason += " by " + m.approval.By
		}
		if m.approval.Reason != "" {
			reason += ": " + m.approval.Reason
		}
		a.deny(ctx, i, "approval_denied", reason)
		return
	}
	t := a.tools[i]
	t.Approved = true
	t.State = messages.ToolPending
	if err := a.persist(ctx, i); err != nil {
		a.log.Error("scheduler: cannot persist approval", slog.Any("error", err))
	}
	a.log.Info("scheduler: tool approved", slog.String("toolId", m.tool), slog.String("by", m.approval.By))
}

// deny ends a tool that waited for approval as skipped; for its dependents
// it counts as a failure.
func (a *actor) deny(ctx context.Context, i int, code, msg string) {
	t := a.tools[i]
	tool := &a.plan.Tools[i]
	t.State = messages.ToolSkipped
	t.Error = &messages.ToolError{Code: code, Category: messages.CategoryToolFailure, Message: msg}
	if err := a.persist(ctx, i); err != nil {
		a.log.Error("scheduler: cannot persist denial", slog.Any("error", err))
	}
	outcome := dag.Failed
	if !tool.Required {
		outcome = dag.FailedOptional
	}
	a.complete(ctx, i, outcome)
	a.progress(tool.ToolID, string(messages.ToolSkipped), 0, msg)
}

// onDeadline ends the plan at its timeout: running tools are cancelled and
// end as timeout, unstarted ones as skipped; the result is still published.
func (a *actor) onDeadline(ctx context.Context) {
	a.timedOut = true
	a.log.Warn("scheduler: plan timed out", slog.Duration("timeout", a.deadline.Sub(a.accepted)))
	if subj, err := a.s.subj.Cancel(a.id); err == nil {
		_ = a.s.nc.Publish(subj, nil)
	}
	for i, t := range a.tools {
		id := a.plan.Tools[i].ToolID
		switch t.State {
		case messages.ToolRunning, messages.ToolRetrying:
			t.State = messages.ToolTimeout
			t.Error = &messages.ToolError{Code: "plan_timeout", Category: messages.CategoryTimeout, Message: "the plan timed out while the tool ran"}
			a.feedHealth(ctx, i, health.Transient, "plan timed out")
		case messages.ToolPending, messages.ToolAwaitingApproval:
			t.State = messages.ToolSkipped
			t.Error = &messages.ToolError{Code: "plan_timeout", Category: messages.CategoryTimeout, Message: "the plan timed out before the tool started"}
		default:
			continue
		}
		a.progress(id, string(t.State), t.Attempt, t.Error.Message)
	}
	a.finish(ctx)
}

func (a *actor) feedHealth(ctx context.Context, i int, in health.Input, reason string) {
	skill := a.tools[i].Skill
	if skill == "" {
		return
	}
	if _, err := a.s.health.Apply(ctx, a.session, skill, in, reason); err != nil {
		a.log.Warn("scheduler: health not recorded", slog.String("skill", skill), slog.Any("error", err))
	}
}

// persist writes tool i's record asynchronously; lastWrite is the newest
// pending write (writes complete in order on the connection).
func (a *actor) persist(_ context.Context, i int) error {
	f, err := a.s.store.putToolAsync(a.id, a.plan.Tools[i].ToolID, a.tools[i])
	if err != nil {
		return err
	}
	a.lastWrite = f
	return nil
}

// ackAfterWrites acks an outcome once the writes it caused are stored, so
// a crash before then means redelivery of the outcome, not its loss.
func (a *actor) ackAfterWrites(msg jetstream.Msg) {
	f := a.lastWrite
	if f == nil {
		_ = msg.Ack()
		return
	}
	go func() {
		select {
		case <-f.Ok():
			_ = msg.Ack()
		case err := <-f.Err():
			a.log.Warn("scheduler: state write failed; outcome will be redelivered", slog.Any("error", err))
			_ = msg.Nak()
		case <-time.After(30 * time.Second):
			_ = msg.Nak()
		}
	}()
}

func (a *actor) progress(tool, state string, attempt int, errMsg string) {
	a.s.publishProgress(a.session, messages.Progress{PlanID: a.id, ToolID: tool, State: state, Attempt: attempt,
		At: time.Now().UTC(), Error: errMsg})
}

func (a *actor) stopTimers() {
	if a.planTimer != nil {
		a.planTimer.Stop()
	}
	for _, t := range a.lost {
		t.Stop()
	}
	for _, t := range a.approval {
		t.Stop()
	}
}

// resume rebuilds in-flight work after a restart or failover: attempts
// that were running are sent again (the job's message ID makes the resend
// a no-op when the first send was stored), waits are re-armed.
func (a *actor) resume(ctx context.Context) {
	for i, t := range a.tools {
		tool := &a.plan.Tools[i]
		switch t.State {
		case messages.ToolRunning:
			a.active++
			if !tool.Async && a.plan.Parallel {
				a.exclusive = true
			}
			t.State = messages.ToolRetrying // dispatch sends the same attempt number again
			t.Attempt--
			a.dispatch(ctx, i)
		case messages.ToolRetrying:
			a.active++
			if !tool.Async && a.plan.Parallel {
				a.exclusive = true
			}
			attempt := t.Attempt
			idx := i
			time.AfterFunc(time.Until(t.RetryAt), func() { a.mb.put(retryDue{idx: idx, attempt: attempt}) })
		case messages.ToolAwaitingApproval:
			a.armApproval(i, t.WaitUntil)
		}
	}
	a.log.Info("scheduler: plan resumed", slog.Int("tools", len(a.tools)))
}

// publishProgress publishes a progress event (core NATS: cheap, live).
func (s *Scheduler) publishProgress(session string, p messages.Progress) {
	subj, err := s.subj.Progress(session, p.PlanID)
	if err != nil {
		return
	}
	b, _ := json.Marshal(p)
	_ = s.nc.Publish(subj, b)
}

// publishJob sends a job to the skill's work queue without waiting for the
// server; onFail runs if JetStream does not store it. Its message ID makes a
// resend of the same attempt a duplicate JetStream drops.
func (s *Scheduler) publishJob(j *messages.ToolJob, onFail func(error)) error {
	subj, err := s.subj.Jobs(j.Skill)
	if err != nil {
		return err
	}
	b, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("encode job: %w", err)
	}
	m := nats.NewMsg(subj)
	m.Data = b
	f, err := s.js.PublishMsgAsync(m, jetstream.WithMsgID(fmt.Sprintf("%s.%s.%d", j.PlanID, j.ToolID, j.Attempt)))
	if err != nil {
		return fmt.Errorf("publish job %s/%s: %w", j.PlanID, j.ToolID, err)
	}
	go func() {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			onFail(fmt.Errorf("publish job %s/%s: %w", j.PlanID, j.ToolID, err))
		}
	}()
	return nil
}

// trackerState maps a persisted tool state to the tracker's.
func trackerState(t *toolRecord, required bool) dag.NodeState {
	switch t.State {
	case messages.ToolRunning, messages.ToolRetrying:
		return dag.Running
	case messages.ToolSuccess:
		return dag.StateSucceeded
	case messages.ToolFailed, messages.ToolTimeout:
		if required {
			return dag.StateFailed
		}
		return dag.StateFailedOptional
	case messages.ToolSkipped:
		if !required && t.Error != nil && (t.Error.Code == "approval_denied" || t.Error.Code == "approval_timeout") {
			return dag.StateFailedOptional
		}
		return dag.StateSkipped
	}
	return dag.Pending
}
