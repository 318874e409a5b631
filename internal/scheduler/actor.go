package scheduler

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/narratoria/runtime/pkg/codec"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/narratoria/runtime/internal/fairshare"
	"github.com/narratoria/runtime/internal/partition"
	"github.com/narratoria/runtime/internal/planfsm"
	"github.com/narratoria/runtime/internal/tracing"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// Messages a plan actor receives.
type (
	outcomeMsg struct {
		out messages.Outcome
		msg outcomeDelivery
	}
	approvalMsg struct {
		tool     string
		approval messages.Approval
		storedAt time.Time // read back from the approvals stream; zero when live
		reply    func(error)
	}
	statusMsg struct{ reply chan messages.PlanStatus }
	// checkMsg asks whether a decision on a tool can be taken now
	// (planfsm.Machine.CheckDecision), with the plan's status.
	checkMsg struct {
		tool  string
		reply chan checkAnswer
	}
	cancelMsg struct {
		reason string
		reply  func(error)
	}
	// eventMsg carries a machine event made by the shell itself (a timer,
	// a dispatch failure, a probe answer, a publication's end).
	eventMsg  struct{ ev planfsm.Event }
	stopActor struct{}
)

// actor is the shell around one plan's state machine: it owns the
// mailbox, the timers and the I/O, and carries out the machine's effects
// in order. Only its goroutine touches its fields.
type actor struct {
	s *Scheduler
	m *planfsm.Machine
	// part is the ownership of the plan's partition this actor runs
	// under: its fence stamps every state write.
	part    *ownedPartition
	session string // fixed: readable from any goroutine
	log     *slog.Logger
	mb      *mailbox
	done    chan struct{}
	timers  map[planfsm.TimerKey]*time.Timer
	// lastWrite is the newest pending state write; the partition's
	// Writer is ordered, so it stands for all of them — but for a write
	// the store refused for good, which writeRefused records.
	lastWrite *partition.Write
	// writeRefused is set, and refusal says the store's words, once the
	// store refused one of the plan's state writes: by the writer's
	// goroutine (stateRefused), before any later write of it settles, and
	// the only fields another goroutine writes.
	writeRefused atomic.Bool
	refusal      string
	// pend gathers tool records for the plan's tool log (toollog.go).
	pend pendingLog
	// kept: the step kept its outcome for later (planfsm.KeepOutcome).
	kept   bool
	purged bool
	// resultStored: recovered with its result found stored (planfsm.Recovered).
	resultStored bool
	// legacyKeys: recovered with tool records of an earlier version (one
	// key per tool), which its purge removes too.
	legacyKeys bool
	// span is the plan's span in this process (a plan taken over gets a
	// new one in the same trace); tools are its tools' attempt spans.
	span  oteltrace.Span
	tools map[string]oteltrace.Span
}

func newActor(s *Scheduler, m *planfsm.Machine, op *ownedPartition) *actor {
	return &actor{s: s, m: m, part: op, session: m.Session(), mb: newMailbox(), done: make(chan struct{}), timers: map[planfsm.TimerKey]*time.Timer{},
		log: op.Log.With(slog.String("planId", m.ID()), slog.String("sessionId", m.Session()))}
}

// run is the actor's goroutine. recovered says whether the plan was loaded
// from KV after a restart or failover.
func (a *actor) run(ctx context.Context, recovered bool) {
	defer close(a.done)
	defer a.s.gate.releasePlan(a.m.ID()) // its held jobs go (the next owner probes for them), its places free
	defer a.stopTimers()
	tctx, span := tracing.Tracer("scheduler").Start(tracing.FromCarrier(context.Background(), a.m.Record().Trace), "scheduler.plan",
		oteltrace.WithSpanKind(oteltrace.SpanKindConsumer), oteltrace.WithAttributes(attribute.String("narratoria.plan", a.m.ID()),
			attribute.String("narratoria.session", a.session), attribute.Int("narratoria.tools", a.m.Len()),
			attribute.Bool("narratoria.recovered", recovered), attribute.String("narratoria.scheduler", a.s.cfg.ID)))
	a.span, a.tools = span, map[string]oteltrace.Span{}
	ctx = tracing.Link(ctx, tctx)
	defer func() {
		for _, ts := range a.tools {
			ts.End()
		}
		span.End()
	}()
	var first planfsm.Event = planfsm.Started{Now: time.Now()}
	if recovered {
		first = planfsm.Recovered{Now: time.Now(), ResultStored: a.resultStored}
	}
	a.step(ctx, first)
	a.flush()
	for !a.purged {
		select {
		case <-ctx.Done():
			return
		case <-a.mb.signal:
		}
		for _, m := range a.mb.take() {
			if _, ok := m.(stopActor); ok {
				a.flush()
				return
			}
			a.handle(ctx, m)
		}
		a.flush()
	}
}

func (a *actor) handle(ctx context.Context, m any) {
	switch m := m.(type) {
	case outcomeMsg: // from a worker, or a reused one (msg nil)
		if i, ok := a.m.Index(m.out.ToolID); ok {
			t := a.m.Tool(i)
			if !m.out.StartedAt.IsZero() && !t.DispatchedAt.IsZero() && m.out.Attempt == t.Attempt {
				if d := m.out.StartedAt.Sub(t.DispatchedAt); d >= 0 {
					a.s.m.dispatch.Observe(d.Seconds())
					skill, tenant := a.m.Script(i).Skill, messages.TenantOf(a.session).String()
					a.s.m.jobWait.WithLabelValues(tenant, skill).Observe(d.Seconds())
					a.s.gate.observeWait(skill, tenant, d)
				}
			}
		}
		ev := planfsm.OutcomeArrived{Now: time.Now(), Outcome: &m.out}
		if ref := m.out.EventsRef; ref != nil {
			events, err := a.s.readEvents(ctx, ref, a.s.keys.token(m.out.PlanID, m.out.ToolID, m.out.Skill, ref.Attempt))
			if err != nil {
				// Never apply an outcome without its events (its state
				// patches among them): try again on redelivery.
				a.log.Warn("scheduler: events of a big outcome not readable; outcome will be redelivered",
					slog.String("toolId", m.out.ToolID), slog.Any("error", err))
				_ = m.msg.NakWithDelay(time.Second)
				return
			}
			ev.Events = events
		}
		a.kept = false
		a.step(ctx, ev)
		if a.kept {
			// Not taken yet (planfsm.KeepOutcome): it comes again, from
			// the stream (an outcome sent as a request is answered "-",
			// and its worker stores it there).
			if m.msg != nil {
				_ = m.msg.NakWithDelay(keptRedelivery)
			}
			return
		}
		a.ackLater(m.msg)
	case approvalMsg:
		m.reply(a.step(ctx, planfsm.ApprovalArrived{Now: time.Now(), ToolID: m.tool, Approval: m.approval, StoredAt: m.storedAt}))
	case statusMsg:
		m.reply <- a.m.Status(time.Now())
	case checkMsg:
		m.reply <- checkAnswer{err: a.m.CheckDecision(m.tool), status: a.m.Status(time.Now())}
	case cancelMsg:
		m.reply(a.step(ctx, planfsm.CancelRequested{Now: time.Now(), Reason: m.reason}))
	case eventMsg:
		a.step(ctx, m.ev)
	case contextReplyMsg:
		a.onContextReply(ctx, m)
	}
}

// step feeds one event to the machine and carries out its effects.
func (a *actor) step(ctx context.Context, ev planfsm.Event) error {
	effects, err := a.m.Step(ev)
	for _, e := range effects {
		a.apply(ctx, e)
	}
	if err != nil {
		a.refused(ev, err)
	}
	return err
}

// refused accounts for an event the plan machine refused: a request that
// cannot be done (an approval for a tool not waiting, a cancel of a plan
// over), which the caller is told of, or a move of the machine's own that
// its rules forbid — a defect, logged as an error. Both are counted
// (narratoria_scheduler_machine_refusals_total{kind}); none is dropped.
func (a *actor) refused(ev planfsm.Event, err error) {
	kind := "request"
	if errors.Is(err, planfsm.ErrRefusedMove) || errors.Is(err, planfsm.ErrIllegalTransition) {
		kind = "own_move"
	}
	a.s.m.refusals.WithLabelValues(kind).Inc()
	lvl := slog.LevelInfo
	if kind == "own_move" {
		lvl = slog.LevelError
	}
	a.log.Log(context.Background(), lvl, "scheduler: the plan machine refused an event", slog.String("event", fmt.Sprintf("%T", ev)),
		slog.String("kind", kind), slog.Any("error", err))
}

func (a *actor) apply(ctx context.Context, e planfsm.Effect) {
	switch e := e.(type) {
	case planfsm.PersistPlan:
		a.flush() // the store keeps the order of what was written
		w, err := a.s.store.putPlan(a.m.ID(), e.Record, a.part.writer)
		a.persist(w, err)
	case planfsm.PersistTool:
		t := e.Tool
		b, err := planfsm.EncodeTool(&t)
		if err != nil {
			a.log.Error("scheduler: cannot persist plan state", slog.String("toolId", a.m.ToolID(e.Index)), slog.Any("error", err))
			return
		}
		a.addTool(a.m.ToolID(e.Index), b)
	case planfsm.Dispatch:
		a.dispatch(ctx, e)
	case planfsm.Probe:
		// A job held by fair dispatch is not stored yet, but will be: as
		// good as stored (the attempt waits, nothing is sent twice).
		stored := a.s.gate.holds(gateKey{a.m.ID(), a.m.ToolID(e.Index)}) || a.s.probe(ctx, a.m.Session(), a.m.ID(), a.m.ToolID(e.Index), a.m.Script(e.Index).Skill, e.Attempt)
		a.mb.put(eventMsg{planfsm.Probed{Now: time.Now(), Index: e.Index, Attempt: e.Attempt, Stored: stored, Why: e.Why}})
	case planfsm.ArmTimer:
		if old := a.timers[e.Key]; old != nil {
			old.Stop()
		}
		key, attempt := e.Key, e.Attempt
		a.timers[e.Key] = time.AfterFunc(time.Until(e.At), func() {
			a.mb.put(eventMsg{planfsm.TimerFired{Now: time.Now(), Key: key, Attempt: attempt}})
		})
		if key.Kind == planfsm.TimerApproval {
			// The tool waits for a decision (or waited before a crash or a
			// move): one may be stored already.
			a.lookupApproval(ctx, a.m.ToolID(key.Index))
		}
	case planfsm.StopTimer:
		if t := a.timers[e.Key]; t != nil {
			t.Stop()
			delete(a.timers, e.Key)
		}
	case planfsm.CommitState:
		a.commitState(ctx, e)
	case planfsm.FeedHealth:
		if e.Skill == "" {
			return
		}
		// A health change is written only once the outcome's effect is
		// stored under this owner's fence: a scheduler that lost the
		// partition must not count an outcome the next owner counts too.
		if _, err := a.s.health.Apply(ctx, a.m.Session(), e.Skill, e.Input, e.Reason, a.settled); err != nil {
			a.log.Warn("scheduler: health not recorded", slog.String("skill", e.Skill), slog.Any("error", err))
		}
	case planfsm.Progress:
		a.progress(e)
	case planfsm.CancelRunning:
		// Kills the plan's scripts on every worker: only once the plan's
		// new state (cancelled, timed out) is stored under this owner's
		// fence, never from a scheduler that lost the partition.
		if a.settledOrHeld(ctx) != nil {
			return
		}
		if subj, err := a.s.subj.Cancel(a.m.ID()); err == nil {
			_ = a.s.nc.Publish(subj, nil)
		}
	case planfsm.PublishResult:
		err := a.settledOrHeld(ctx)
		if err == nil {
			err = a.publishResult(ctx)
		}
		done := planfsm.PublishDone{Now: time.Now()}
		if err != nil {
			done.Err = err.Error()
			if done.Refused = client.Refused(err); done.Refused {
				a.s.m.refused.WithLabelValues("result", messages.TenantOf(a.session).String()).Inc()
			}
		}
		a.mb.put(eventMsg{done})
	case planfsm.RequestContext:
		a.requestContext(ctx, e)
	case planfsm.Purge:
		a.flush()
		a.purged = true
		a.s.purgeLater(a.m.ID(), a.legacyKeys, a.lastWrite, a.part, a.log)
	case planfsm.KeepOutcome:
		a.kept = true
	case planfsm.Log:
		a.log.LogAttrs(ctx, e.Level, e.Msg, e.Attrs...)
	}
}

// commitState commits the plan's state patches to its session, once its
// own state is stored under this owner's fence, and tells the machine.
func (a *actor) commitState(ctx context.Context, e planfsm.CommitState) {
	done := planfsm.CommitDone{Now: time.Now()}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := a.settled(cctx); err != nil {
		// A refused plan state: the plan a successor would resume from the
		// store may end otherwise, so the session state is not committed.
		done.Err, done.Refused = err.Error(), errors.Is(err, errStateRefused)
	} else if err := a.s.sessions.Commit(cctx, a.session, a.m.ID(), e.Patches); err != nil {
		a.log.Error("scheduler: state not committed", slog.Any("error", err))
		done.Err = err.Error()
		if done.Refused = client.Refused(err) || errors.Is(err, errStateTooLarge); done.Refused {
			a.s.m.refused.WithLabelValues("state", messages.TenantOf(a.session).String()).Inc()
		}
	}
	a.mb.put(eventMsg{done})
}

// keptRedelivery is how long an outcome the machine kept for later
// (planfsm.KeepOutcome) waits before it comes again: the outcomes of its
// tool's dependencies, sent before the same recovery, are on their way.
const keptRedelivery = 250 * time.Millisecond

// dispatch sends one attempt to the skill's workers, with the session
// state as it is now.
func (a *actor) dispatch(ctx context.Context, d planfsm.Dispatch) {
	if a.writeRefused.Load() {
		// The attempt is in no record the store holds: no job goes out
		// (the machine ends the plan on the refusal; a successor's probe
		// finds no job).
		a.log.Debug("scheduler: job not sent: the plan's state was refused", slog.String("toolId", a.m.ToolID(d.Index)))
		return
	}
	if d.AfterWrites {
		// A merged tool: the plan record that defines it is stored first.
		if err := a.settled(ctx); errors.Is(err, errStateRefused) {
			return // as above
		} else if err != nil {
			a.mb.put(eventMsg{planfsm.DispatchFailed{Now: time.Now(), Index: d.Index, Attempt: d.Attempt, Err: err.Error()}})
			return
		}
	}
	if a.reuse(ctx, d) {
		return
	}
	state, err := a.s.sessions.Get(ctx, a.m.Session())
	if err != nil {
		a.log.Warn("scheduler: session state unavailable; script sees {}", slog.Any("error", err))
		state = json.RawMessage("{}")
	}
	if len(d.Patches) > 0 {
		// The plan's own view: the session state with the staged patches
		// of the tool's ancestors (§4.8), not committed yet.
		var st map[string]any
		if json.Unmarshal(state, &st) != nil || st == nil {
			st = map[string]any{}
		}
		for _, p := range d.Patches {
			st = messages.DeepMerge(st, p)
		}
		if b, err := json.Marshal(st); err == nil {
			state = b
		}
	}
	sc := a.m.Script(d.Index)
	t := a.m.Tool(d.Index)
	job := messages.ToolJob{
		PlanID: a.m.ID(), SessionID: a.m.Session(), ToolID: a.m.ToolID(d.Index), Skill: sc.Skill, Script: sc.Name,
		Attempt: d.Attempt, Input: d.Input, State: state, TimeoutMs: d.Timeout.Milliseconds(), DispatchedAt: t.DispatchedAt.UTC(),
	}
	job.Token = a.s.keys.token(job.PlanID, job.ToolID, job.Skill, job.Attempt)
	job.OutcomeTo = a.s.direct
	idx, attempt := d.Index, d.Attempt
	fail := func(err error) {
		// A refusal (a full jobs stream) is the store's answer; anything
		// else (no answer in time) leaves the job perhaps stored, which the
		// machine looks for before another attempt goes out.
		a.mb.put(eventMsg{planfsm.DispatchFailed{Now: time.Now(), Index: idx, Attempt: attempt, Err: err.Error(), Refused: client.Refused(err)}})
	}
	if old := a.tools[job.ToolID]; old != nil {
		old.End()
	}
	tctx, span := tracing.Start(ctx, "scheduler", "scheduler.tool", func() []oteltrace.SpanStartOption {
		return []oteltrace.SpanStartOption{oteltrace.WithSpanKind(oteltrace.SpanKindProducer),
			oteltrace.WithAttributes(attribute.String("narratoria.tool", job.ToolID), attribute.String("narratoria.skill", sc.Skill),
				attribute.String("narratoria.script", sc.Name), attribute.Int("narratoria.attempt", attempt))}
	})
	if span.IsRecording() {
		a.tools[job.ToolID] = span
	}
	// Fair dispatch admits the job to the work queue when its skill has
	// room and it is the job's turn (fair.go).
	a.s.gate.submit(gateKey{job.PlanID, job.ToolID}, sc.Skill,
		fairshare.Key{Priority: a.m.Plan().PriorityLevel(), Tenant: messages.TenantOf(job.SessionID).String(), Session: job.SessionID},
		func() {
			if err := a.s.publishJob(tctx, &job, a.part, fail); err != nil {
				fail(err)
			}
		})
}

func (a *actor) progress(p planfsm.Progress) {
	attempt := p.Attempt
	if p.ToolID == "" {
		switch p.State {
		case messages.PlanCancelled:
			a.s.m.plans.WithLabelValues(p.State).Inc()
		case messages.PlanSucceeded, messages.PlanFailed, messages.PlanTimeout:
			a.s.m.plans.WithLabelValues(p.State).Inc()
			a.s.m.planDuration.Observe(time.Since(a.m.Record().AcceptedAt).Seconds())
		}
	} else if p.State == string(messages.ToolRetrying) {
		if i, ok := a.m.Index(p.ToolID); ok {
			a.s.m.retries.WithLabelValues(a.m.Script(i).Skill).Inc()
		}
	}
	if p.ToolID != "" {
		switch messages.ToolState(p.State) {
		case messages.ToolSuccess, messages.ToolFailed, messages.ToolTimeout, messages.ToolRetrying, messages.ToolSkipped, messages.ToolCancelled:
			// The attempt is over: its place in the work queue goes to
			// the next job of its skill (or, still held, it never goes).
			a.s.gate.release(gateKey{a.m.ID(), p.ToolID})
		case messages.ToolPending, messages.ToolRunning, messages.ToolAwaitingApproval:
		}
	}
	if span := a.tools[p.ToolID]; span != nil && p.ToolID != "" {
		switch messages.ToolState(p.State) {
		case messages.ToolSuccess, messages.ToolFailed, messages.ToolTimeout, messages.ToolRetrying, messages.ToolSkipped, messages.ToolCancelled:
			span.SetAttributes(attribute.String("narratoria.state", p.State))
			var err error
			if p.Error != "" {
				err = errors.New(p.Error)
			}
			tracing.End(span, err)
			delete(a.tools, p.ToolID)
		case messages.ToolPending, messages.ToolRunning, messages.ToolAwaitingApproval:
			// the span goes on
		}
	}
	a.s.publishProgress(a.m.Session(), messages.Progress{PlanID: a.m.ID(), ToolID: p.ToolID, State: p.State, Attempt: attempt,
		At: time.Now().UTC(), Error: p.Error, Input: p.Input})
}

// publishResult completes the machine's result with what needs I/O (the
// session state, the plan's skills in permanentFailure) and stores it.
func (a *actor) publishResult(ctx context.Context) error {
	res := a.m.Result()
	if !res.Success && res.CanReplan && a.s.reuse != nil {
		// A replan of this prompt will reuse what this attempt did: record
		// it before the result that triggers the replan is out.
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := a.s.reuse.record(rctx, a.m)
		cancel()
		if err != nil {
			return fmt.Errorf("record reusable outcomes: %w", err)
		}
	}
	planfsm.AddDisabled(res, a.s.health.Disabled(ctx, a.m.Session(), a.m.Skills()))
	if st, err := a.s.sessions.Get(ctx, a.m.Session()); err == nil {
		res.AggregatedState = st
	}
	if err := a.s.publishResult(ctx, res); err != nil {
		return err
	}
	for _, tr := range res.ToolResults {
		a.s.m.tools.WithLabelValues(string(tr.State)).Inc()
	}
	a.log.Info("scheduler: plan finished", slog.Bool("success", res.Success), slog.String("failureReason", res.FailureReason),
		slog.Any("failedTools", res.FailedTools), slog.Any("disabledSkills", res.DisabledSkills), slog.Int64("ms", res.ExecutionTimeMs))
	return nil
}

func (a *actor) persist(w *partition.Write, err error) {
	if err != nil {
		a.log.Error("scheduler: cannot persist plan state", slog.Any("error", err))
		return
	}
	a.lastWrite = w
}

// settled waits until every state write sent so far is stored. It fails
// when one was not (the effect that needs it is retried later), and gives
// the partition up when the fence refused one: that write, and whatever
// depends on it, belongs to the partition's new owner.
func (a *actor) settled(ctx context.Context) error {
	a.flush()
	if !a.part.Term.Held() {
		a.part.Lapsed("a plan state write")
		return errNotOwner
	}
	w := a.lastWrite
	if w == nil {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := w.Wait(wctx)
	if partition.Refused(err) {
		a.part.Lose("plan state")
		return errNotOwner
	}
	if a.writeRefused.Load() {
		return fmt.Errorf("%w: %s", errStateRefused, a.refusal)
	}
	if err != nil {
		return fmt.Errorf("plan state not stored: %w", err)
	}
	return nil
}

// errStateRefused is settled's error once the store refused one of the
// plan's state writes for good: that write never lands, so nothing that
// waits for it may go out — but for the plan's result and the kill of its
// scripts (settledOrHeld).
var errStateRefused = errors.New("scheduler: the store refused the plan's state (the plans bucket is full)")

// settledOrHeld is settled for the effects that may go out without the
// plan's state once the store refused it: the result (deduplicated by
// plan ID, and what a recovery trusts over any record) and the kill of the
// plan's scripts. They go out while this scheduler holds the partition's
// term; a scheduler paused past its lease does not.
func (a *actor) settledOrHeld(ctx context.Context) error {
	err := a.settled(ctx)
	if errors.Is(err, errStateRefused) && a.part.Term.Held() {
		return nil
	}
	return err
}

// stateRefused is the OnRefused of op's plan-state writer: the store
// refused a write of a plan's record or tool log for good (a full plans
// bucket). The plan's actor under op is told at once (its settled fails
// from now on) and its machine ends the plan (planfsm.StateRefused); a
// writer of an earlier term of the partition speaks for no actor of this
// one. A plan's first record is intake's, which handles its refusal
// itself.
func (s *Scheduler) stateRefused(op *ownedPartition, m *nats.Msg, err error) {
	a := s.actor(s.store.planOf(m.Subject))
	if a == nil || a.part != op || a.writeRefused.Load() {
		return // (the plan's writes are refused one by one, by one writer)
	}
	a.refusal = err.Error()
	a.writeRefused.Store(true) // after refusal: whoever sees the flag sees the words
	s.m.refused.WithLabelValues("plan_state", messages.TenantOf(a.session).String()).Inc()
	a.mb.put(eventMsg{planfsm.StateRefused{Now: time.Now(), Err: err.Error()}})
}

// lookupApproval feeds the actor the decision stored for a waiting tool,
// if there is one (decisions are kept in NARRATORIA_APPROVALS, whoever
// owned the partition when they came).
func (a *actor) lookupApproval(ctx context.Context, tool string) {
	plan := a.m.ID()
	a.s.life.Go(func(sctx context.Context) {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		body, at, ok, err := a.s.store.approval(lctx, plan, tool)
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("scheduler: stored approval not readable; waiting for one to arrive", slog.String("toolId", tool), slog.Any("error", err))
			}
			return
		}
		if !ok {
			return
		}
		ap, problem := decodeApproval(body)
		if problem != "" {
			a.s.m.badMessages.WithLabelValues("approval").Inc()
			a.log.Warn("scheduler: approval rejected", slog.String("toolId", tool), slog.String("problem", problem))
			return
		}
		a.mb.put(approvalMsg{tool: tool, approval: ap, storedAt: at, reply: func(err error) {
			if err == nil {
				a.log.Info("scheduler: stored approval decision applied", slog.String("toolId", tool), slog.Bool("approved", ap.Approved), slog.String("by", ap.By))
			}
			// An error means the decision was applied already (it came live
			// too) or the tool no longer waits: nothing to do.
		}})
	})
}

func (a *actor) stopTimers() {
	for k, t := range a.timers {
		t.Stop()
		delete(a.timers, k)
	}
}

// publishProgress publishes a progress event (core NATS: cheap, live).
func (s *Scheduler) publishProgress(session string, p messages.Progress) {
	subj, err := s.subj.Progress(session, p.PlanID)
	if err != nil {
		return
	}
	b, _ := codec.Marshal(p)
	_ = s.nc.Publish(subj, b)
}

// publishJob sends a job to the skill's work queue without waiting for the
// server; onFail runs if JetStream does not store it. Its message ID makes a
// resend of the same attempt a duplicate JetStream drops, its subject (one
// per tool) lets a partition's next owner find it (probe), and the
// partition's jobs Writer stamps its fence, so the stream refuses it once
// another scheduler owns the partition — so a scheduler paused past its lease cannot start an
// attempt its successor does not know of.
func (s *Scheduler) publishJob(tctx context.Context, j *messages.ToolJob, op *ownedPartition, onFail func(error)) error {
	subj, err := s.subj.Job(j.Skill, j.PlanID, j.ToolID)
	if err != nil {
		return err
	}
	b, err := codec.Marshal(j)
	if err != nil {
		return fmt.Errorf("encode job: %w", err)
	}
	m := nats.NewMsg(subj)
	m.Data = b
	tracing.Inject(tctx, m)
	// The message ID is a header, not a publish option, so the jobs
	// writer can send jobs together in one atomic batch (R3).
	m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s.%s.%d", j.PlanID, j.ToolID, j.Attempt))
	x := op.jobs.Publish(m)
	s.life.Go(func(ctx context.Context) {
		// Through a stream leader election or a server restart the job is
		// sent again (same message ID) with backoff before the attempt is
		// given up; only a job that cannot be stored for
		// jobPublishRetryFor fails the attempt.
		_, err := op.jobs.WaitStored(ctx, x, jobPublishRetryFor)
		if err == nil || ctx.Err() != nil {
			return
		}
		switch {
		case partition.Refused(err):
			op.Lose("job " + j.PlanID + "/" + j.ToolID)
			return
		case errors.Is(err, partition.ErrWriterClosed):
			return // the partition is given up: its next owner probes for the job
		}
		onFail(fmt.Errorf("publish job %s/%s: %w", j.PlanID, j.ToolID, err))
	})
	return nil
}

// jobPublishRetryFor bounds how long a job that JetStream did not store is
// sent again before its attempt fails (as an infrastructure failure).
const jobPublishRetryFor = 20 * time.Second

// probe reports whether attempt's job or its outcome is stored, so a new
// leader resends only what never reached the server. When it cannot tell,
// it says stored: the attempt's lost timer then decides, and nothing runs
// twice.
func (s *Scheduler) probe(ctx context.Context, session, plan, tool, skill string, attempt int) bool {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	found := func(stream, subj string, attemptOf func([]byte) int) (bool, bool) {
		st, err := s.js.Stream(pctx, stream)
		if err != nil {
			return false, false
		}
		msg, err := st.GetLastMsgForSubject(pctx, subj)
		s.log.Debug("scheduler: probe", slog.String("subject", subj), slog.Any("error", err))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, true
		}
		if err != nil {
			return false, false
		}
		return attemptOf(msg.Data) == attempt, true
	}
	attemptOf := func(b []byte) int {
		var v struct {
			Attempt int `json:"attempt"`
		}
		_ = json.Unmarshal(b, &v)
		return v.Attempt
	}
	osubj, err1 := s.subj.Outcomes(session, plan, tool)
	jsubj, err2 := s.subj.Job(skill, plan, tool)
	if err1 != nil || err2 != nil {
		return true
	}
	outcomeOf := func(b []byte) int { return s.keys.outcomeAttempt(b, plan, tool) }
	// Outcomes are stored with their session's partition in the subject.
	if ok, sure := found(messages.StreamOutcomes, s.subj.Stored(osubj, session, s.bus.Partitions), outcomeOf); ok || !sure {
		return true
	}
	ok, sure := found(messages.StreamJobs, jsubj, attemptOf)
	return ok || !sure
}

// purgeLater removes a finished plan's keys (legacy: with the tool keys
// of an earlier version, store.purge) once its last writes landed, retrying with backoff until done or the
// scheduler stops (the plan is then marked published, and the next leader
// purges it).
func (s *Scheduler) purgeLater(plan string, legacy bool, last *partition.Write, op *ownedPartition, log *slog.Logger) {
	s.life.Go(func(ctx context.Context) {
		if last != nil {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := last.Wait(wctx)
			cancel()
			if partition.Refused(err) {
				op.Lose("plan state before purge")
				return
			}
		}
		wait := 100 * time.Millisecond
		for attempt := 1; ; attempt++ {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := s.store.purge(pctx, plan, legacy)
			cancel()
			if err == nil {
				s.m.purged.Inc()
				return
			}
			if ctx.Err() != nil {
				return
			}
			log.Warn("scheduler: plan state not purged; retrying", slog.Int("attempt", attempt), slog.Any("error", err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 10*time.Second)
		}
	})
}

// readEvents reads back the events an outcome left on the events stream:
// the messages of ref.Subject from ref.FirstSeq to ref.LastSeq of attempt
// ref.Attempt that carry the attempt's token, in order; all ref.Count of
// them, or an error. A message without the token is not the worker's
// (another holder of worker credentials may publish on any events
// subject): it is skipped and counted, never applied.
func (s *Scheduler) readEvents(ctx context.Context, ref *messages.EventsRef, token string) ([]json.RawMessage, error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := s.js.OrderedConsumer(rctx, ref.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{ref.Subject},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: ref.FirstSeq})
	if err != nil {
		return nil, fmt.Errorf("read events %s: %w", ref.Subject, err)
	}
	attempt := fmt.Sprint(ref.Attempt)
	var out []json.RawMessage
	for {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			return nil, fmt.Errorf("read events %s: %d of %d read: %w", ref.Subject, len(out), ref.Count, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return nil, fmt.Errorf("read events %s: %w", ref.Subject, err)
		}
		if md.Sequence.Stream > ref.LastSeq {
			break
		}
		if m.Headers().Get(messages.HeaderAttempt) == attempt {
			if hmac.Equal([]byte(m.Headers().Get(messages.HeaderToken)), []byte(token)) {
				out = append(out, json.RawMessage(m.Data()))
			} else {
				s.m.unverified.WithLabelValues("event").Inc()
				s.log.Error("scheduler: event refused: its token is not the attempt's (not from the worker that took the job)",
					slog.String("subject", ref.Subject), slog.Uint64("seq", md.Sequence.Stream))
			}
		}
		if md.Sequence.Stream == ref.LastSeq {
			break
		}
	}
	if len(out) != ref.Count {
		return nil, fmt.Errorf("read events %s: %d of %d found", ref.Subject, len(out), ref.Count)
	}
	return out, nil
}
