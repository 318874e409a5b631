package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/partition"
	"github.com/narratoria/runtime/internal/plancheck"
	"github.com/narratoria/runtime/internal/planfsm"
	"github.com/narratoria/runtime/internal/tracing"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// intake is one plan message on its way in: the facts planfsm.DecideIntake
// has asked for so far, and what the moves to come need of what the
// earlier ones made (the checked plan, its machine, its record).
type intake struct {
	msg     jetstream.Msg
	op      *ownedPartition
	session string
	facts   planfsm.IntakeFacts

	planID  string // once the check found a usable one
	machine *planfsm.Machine
	rec     planfsm.Record
	encoded []byte
	invalid *messages.PlanError
}

// onPlanMsg takes one plan from its partition's consumer. The rules are
// planfsm.DecideIntake's; this shell gathers the facts it asks for, one
// move at a time, and settles the message as it says.
func (s *Scheduler) onPlanMsg(ctx context.Context, op *ownedPartition, msg jetstream.Msg) {
	// <prefix>.plans.<partition>.<session>, the session two tokens with
	// tenants.
	session := s.subj.SessionAt(msg.Subject(), s.subj.KindToken()+2)
	if session == "" {
		s.m.badMessages.WithLabelValues("plan").Inc()
		s.log.Error("scheduler: plan on a subject without a valid session; dropped", slog.String("subject", msg.Subject()))
		_ = msg.Term()
		return
	}
	for s.InFlight() >= s.cfg.MaxPlans && ctx.Err() == nil {
		_ = msg.InProgress()
		bus.Sleep(ctx, 50*time.Millisecond)
	}
	in := &intake{msg: msg, op: op, session: session}
	for {
		d := planfsm.DecideIntake(in.facts)
		if d.Move.Settles() {
			s.m.intake.WithLabelValues(d.Move.String(), d.Why).Inc()
			s.settleIntake(ctx, in, d)
			return
		}
		s.gatherIntake(ctx, in, d)
	}
}

// gatherIntake carries out one move that is not a settlement and writes
// what it learnt into the intake's facts.
func (s *Scheduler) gatherIntake(ctx context.Context, in *intake, d planfsm.IntakeDecision) {
	f := &in.facts
	switch d.Move {
	case planfsm.MoveCheck:
		s.checkIntake(ctx, in)
	case planfsm.MoveReadOwner:
		f.OwnerRead, f.Owner = true, in.op.Term.Held()
	case planfsm.MoveReadActor:
		f.ActorRead, f.Running = true, s.actor(in.planID) != nil
	case planfsm.MoveReadResult:
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		done, err := s.store.resultStored(rctx, in.session, in.planID)
		cancel()
		f.Result = s.intakeRead(in, "result", done, err)
	case planfsm.MoveReadRecord:
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.store.planAbsent(rctx, in.planID)
		cancel()
		if errors.Is(err, jetstream.ErrKeyExists) {
			f.Record = planfsm.Present
		} else {
			f.Record = s.intakeRead(in, "record", false, err)
		}
	case planfsm.MoveMeasure:
		f.Measured = true
		in.encoded, f.TooLarge = planfsm.EncodeRecord(&in.rec)
		if f.TooLarge == nil {
			f.TooLarge = s.store.recordFits(len(in.encoded), s.nc.MaxPayload())
		}
	case planfsm.MoveAdmit:
		f.Admitted = true
		f.NoRoom = s.store.room.admit(ctx, len(in.msg.Data())+msgOverhead, s.life.Go)
	case planfsm.MoveReject:
		f.Answered = outcomeOf(s.rejectPlan(ctx, in))
	case planfsm.MoveRefuse:
		f.Answered = outcomeOf(s.refusePlan(ctx, in, d.Refusal, d.Cause))
	case planfsm.MoveRecover:
		s.log.Warn("scheduler: plan record stored but no plan runs it; recovering the partition's plans", slog.String("planId", in.planID))
		err := s.recoverPartition(ctx, in.op)
		if err != nil {
			s.log.Warn("scheduler: recovery failed; the plan message will be redelivered", slog.String("planId", in.planID), slog.Any("error", err))
		}
		f.Recovered = outcomeOf(err)
	case planfsm.MoveWrite, planfsm.MoveWriteAgain:
		s.writeIntake(ctx, in, d.Move == planfsm.MoveWrite)
	default:
		// DecideIntake asked for a move this shell does not know: a defect.
		panic(fmt.Sprintf("scheduler: intake move %s not carried out", d.Move))
	}
}

// intakeRead turns a read of the idempotence rule into its fact.
func (s *Scheduler) intakeRead(in *intake, what string, there bool, err error) planfsm.Read {
	switch {
	case err != nil:
		s.log.Warn("scheduler: cannot read the plan's "+what+"; the plan message will be redelivered", slog.String("planId", in.planID), slog.Any("error", err))
		return planfsm.ReadFailed
	case there:
		return planfsm.Present
	default:
		return planfsm.Absent
	}
}

// outcomeOf is a step's outcome from its error.
func outcomeOf(err error) planfsm.Outcome {
	if err != nil {
		return planfsm.Failed
	}
	return planfsm.Done
}

// checkIntake checks the plan (its limits, its skills, its session against
// the subject's), and makes its machine and the record it would be stored
// as.
func (s *Scheduler) checkIntake(ctx context.Context, in *intake) {
	f := &in.facts
	f.Checked = true
	lc := &liveCheck{Resolver: s.resolver}
	checked, err := plancheck.Check(in.msg.Data(), s.cfg.limits(), lc)
	if err == nil && checked.Plan.SessionID != "" && checked.Plan.SessionID != in.session &&
		messages.TenantOf(in.session).Qualify(checked.Plan.SessionID) != in.session {
		err = &messages.PlanError{PlanID: checked.Plan.RequestID, Reason: messages.ReasonInvalidPlan, Problems: []messages.Problem{{
			Field: "sessionId", Message: fmt.Sprintf("%q does not match the subject's session %q", checked.Plan.SessionID, in.session)}}}
	}
	if err == nil {
		in.planID = checked.Plan.RequestID
		in.rec = s.recordOf(ctx, in, checked)
		in.machine, err = planfsm.New(s.cfg.machine(), in.rec, checked.Plan, checked.Graph)
	}
	if md, mdErr := in.msg.Metadata(); mdErr == nil {
		f.Deliveries, f.Age = md.NumDelivered, time.Since(md.Timestamp)
	}
	f.Republished = in.msg.Headers().Get(messages.HeaderRepublished) != ""
	if err == nil {
		return
	}
	f.Invalid = err
	f.WorkerMayWait = lc.waitsForWorker() && s.workerWaitLeft(in.msg)
	if !errors.As(err, &in.invalid) {
		in.invalid = &messages.PlanError{Reason: messages.ReasonInvalidPlan, Problems: []messages.Problem{{Message: err.Error()}}}
	}
	if in.invalid.PlanID == "" && in.planID != "" {
		in.invalid.PlanID = in.planID
	}
	f.Unaddressable = messages.CheckPlanID(in.invalid.PlanID) != nil
}

// recordOf is the record a checked plan is stored as, its lineage's root
// read (a re-planning round's root is its first attempt's).
func (s *Scheduler) recordOf(ctx context.Context, in *intake, checked *plancheck.Checked) planfsm.Record {
	p := checked.Plan
	timeout := s.cfg.PlanTimeout
	if p.TimeoutMs > 0 { // set by the plan itself (0 means the default)
		timeout = p.Timeout()
	}
	now := time.Now().UTC()
	rec := planfsm.Record{Plan: in.msg.Data(), SessionID: in.session, AcceptedAt: now, Deadline: now.Add(timeout),
		Scripts: resolvedScripts(checked), Phase: planfsm.PhaseRunning, Root: p.RequestID,
		Trace: tracing.Carrier(tracing.Extract(context.Background(), in.msg.Headers()))}
	if parent := p.Metadata.ParentPlanID; parent != nil && *parent != "" {
		rec.Root = s.reuse.root(ctx, *parent)
	}
	return rec
}

// writeIntake stores the plan's record behind the partition's fence (its
// lineage first, which its re-planning rounds read): under its
// acceptance's message ID (MoveWrite), or without it (MoveWriteAgain).
func (s *Scheduler) writeIntake(ctx context.Context, in *intake, withID bool) {
	f := &in.facts
	if withID && in.rec.Root != in.planID {
		if err := s.reuse.setRoot(ctx, in.planID, in.rec.Root); err != nil {
			s.log.Warn("scheduler: plan lineage not recorded; its replans will run everything again", slog.String("planId", in.planID), slog.Any("error", err))
		}
	}
	dup, err := s.store.createPlan(ctx, in.planID, in.encoded, in.op.writer, withID)
	var o planfsm.Outcome
	switch {
	case err == nil && dup:
		o = planfsm.DuplicateID
	case err == nil:
		o = planfsm.Done
	case partition.Refused(err):
		o = planfsm.Fenced
	case client.Refused(err):
		// The store refused the record for good (the bucket full past what
		// the gate counted): the plan fails now, rather than come back
		// until the bucket has room.
		o, f.WriteErr = planfsm.StoreRefused, err
	default:
		s.log.Error("scheduler: cannot persist plan; it will be redelivered", slog.String("planId", in.planID), slog.Any("error", err))
		o = planfsm.Failed
	}
	if withID {
		f.Written = o
	} else {
		f.Rewritten = o
	}
}

// settleIntake carries out the move that ends an intake.
func (s *Scheduler) settleIntake(ctx context.Context, in *intake, d planfsm.IntakeDecision) {
	msg := in.msg
	switch d.Move {
	case planfsm.MoveStart:
		// The ack's goroutine starts first: the newest goroutine runs next
		// on this thread, and the actor (sending the first jobs) should be it.
		s.life.Go(func(context.Context) { s.ackSurely(msg, in.planID) })
		s.spawn(ctx, newActor(s, in.machine, in.op), false)
	case planfsm.MoveAck:
		switch d.Why {
		case planfsm.WhyDuplicate:
			s.log.Info("scheduler: plan already accepted; duplicate ignored", slog.String("planId", in.planID))
		case planfsm.WhyFinished:
			s.log.Warn("scheduler: plan message delivered again after its plan finished (its result is stored); not run again",
				slog.String("planId", in.planID), slog.String("sessionId", in.session))
		case planfsm.WhyRecovered:
			s.log.Info("scheduler: plan recovered from its stored record", slog.String("planId", in.planID))
		}
		_ = msg.Ack()
	case planfsm.MoveNak:
		_ = msg.Nak()
	case planfsm.MoveNakLater:
		_ = msg.NakWithDelay(time.Second)
	case planfsm.MoveWaitForWorker:
		if md, err := msg.Metadata(); err == nil && md.NumDelivered == 1 {
			s.log.Info("scheduler: no live worker serves a skill of the plan yet; waiting for one", slog.String("subject", msg.Subject()))
		}
		_ = msg.NakWithDelay(workerWaitStep)
	case planfsm.MoveTerm:
		_ = msg.Term()
	case planfsm.MoveLeave:
		if in.facts.Written == planfsm.Fenced {
			in.op.Lose("plan " + in.planID)
		}
		// Otherwise paused past the lease: the next owner takes the plan,
		// judged on its own view (this one's registry may be as old as the
		// pause, every worker looking gone).
	default:
		panic(fmt.Sprintf("scheduler: intake settled by %s", d.Move))
	}
}

// workerWaitStep is how often a plan waiting for a live worker is looked
// at again.
const workerWaitStep = 500 * time.Millisecond

// workerWaitLeft says whether a plan whose skills have no live worker yet
// may still wait for one: for twice the workers' registry TTL from its
// message's storing, and never past the plan's own timeout.
func (s *Scheduler) workerWaitLeft(msg jetstream.Msg) bool {
	meta, err := msg.Metadata()
	if err != nil {
		return false
	}
	wait := 2 * s.cfg.WorkerTTL
	if explicitTimeout(msg.Data()) {
		var p struct {
			TimeoutMs int64 `json:"timeoutMs"`
		}
		if json.Unmarshal(msg.Data(), &p) == nil && p.TimeoutMs > 0 {
			wait = min(wait, time.Duration(p.TimeoutMs)*time.Millisecond)
		}
	} else {
		wait = min(wait, s.cfg.PlanTimeout)
	}
	return time.Since(meta.Timestamp) < wait
}

// rejectPlan answers an invalid plan with its Execution Result — or, when
// it has no usable ID, on its session's unaddressed results subject, so
// its publisher still gets an answer naming the problem.
func (s *Scheduler) rejectPlan(ctx context.Context, in *intake) error {
	perr := in.invalid
	s.m.plans.WithLabelValues("invalid").Inc()
	s.m.badMessages.WithLabelValues("plan").Inc()
	if in.facts.Unaddressable {
		s.log.Error("scheduler: invalid plan without a usable requestId; reported on the session's unaddressed results", slog.String("sessionId", in.session),
			slog.String("problem", perr.Error()))
		err := s.reportUnaddressed(ctx, in.msg, in.session, perr)
		if err != nil {
			s.log.Error("scheduler: unaddressed plan not reported", slog.String("sessionId", in.session), slog.Any("error", err))
		}
		return err
	}
	s.log.Warn("scheduler: plan rejected", slog.String("planId", perr.PlanID), slog.String("sessionId", in.session),
		slog.String("reason", perr.Reason), slog.String("problem", perr.Error()))
	if err := s.publishResult(ctx, invalidResult(perr.PlanID, in.session, generationAttempt(in.msg.Data()), perr)); err != nil {
		s.log.Error("scheduler: result of rejected plan not published", slog.Any("error", err))
		return err
	}
	s.publishProgress(in.session, messages.Progress{PlanID: perr.PlanID, State: messages.PlanFailed, At: time.Now().UTC(), Error: perr.Error()})
	return nil
}

// refusePlan answers a plan the store cannot or will not take — its
// record more than the store takes in one message (write "record"), or
// the plans bucket without room for it (write "plan") — with its
// Execution Result, storage_refused, the cause in its message. Intake
// refuses only a plan neither stored nor finished (the reads of the
// idempotence rule came first), so no plan gets a second result.
func (s *Scheduler) refusePlan(ctx context.Context, in *intake, write string, cause error) error {
	tenant := messages.TenantOf(in.session).String()
	what := "for want of room in the plans bucket"
	if write == "record" {
		what = "at intake: its record is more than the store takes"
	}
	s.log.Warn("scheduler: plan refused "+what, slog.String("planId", in.planID), slog.String("sessionId", in.session),
		slog.Any("error", cause))
	// Counted before the result goes out, so whoever sees the result sees
	// the count (a refusal whose result is not stored comes back, and
	// counts again).
	s.m.refused.WithLabelValues(write, tenant).Inc()
	s.m.plans.WithLabelValues(messages.PlanFailed).Inc()
	if err := s.publishResult(ctx, failedResult(in.planID, in.session, generationAttempt(in.msg.Data()), messages.ReasonStorageRefused, cause.Error())); err != nil {
		s.log.Warn("scheduler: plan not refused; it will be redelivered", slog.String("planId", in.planID), slog.Any("error", err))
		return fmt.Errorf("publish the refusal: %w", err)
	}
	s.publishProgress(in.session, messages.Progress{PlanID: in.planID, State: messages.PlanFailed, At: time.Now().UTC(), Error: cause.Error()})
	return nil
}
