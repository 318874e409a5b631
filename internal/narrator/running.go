package narrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/narratoria/runtime/internal/partition"
	"github.com/narratoria/runtime/internal/promptfsm"
	"github.com/narratoria/runtime/internal/tracing"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// Running an attempt's plan: the prompt machine decides (promptfsm:
// LookupResult, CheckPlan, SendPlan, Await) and the shell carries each
// step out. From the first of them to the end of the wait the shell
// listens on the plan's result subject, so a result that comes in between
// is not missed; one that came while the connection was down is found in
// the results stream when the wait ends.

// following is the subscription to the result of the plan being run, and
// the attempt's span (the plan sent carries it: the scheduler's plan span
// is its child).
type following struct {
	plan    string
	subject string
	sub     *nats.Subscription
	ctx     context.Context
	span    oteltrace.Span
}

// follow listens for the result of rec's plan and starts the attempt's
// span (once per plan; a new plan ends the last one).
func (sh *promptShell) follow(rec *messages.PromptAttempt) (*following, error) {
	if f := sh.following; f != nil && f.plan == rec.PlanID {
		return f, nil
	}
	sh.unfollow(nil)
	subj, err := sh.n.subj.Results(sh.p.SessionID, rec.PlanID)
	if err != nil {
		return nil, err
	}
	sub, err := sh.n.js.Conn().SubscribeSync(subj)
	if err != nil {
		return nil, fmt.Errorf("subscribe to result: %w", err)
	}
	var skills []string
	if plan, err := sh.plan(rec); err == nil {
		skills = planSkills(plan)
	}
	actx, span := tracing.Tracer("narrator").Start(sh.ctx, "narrator.attempt", oteltrace.WithAttributes(
		attribute.Int("narratoria.attempt", rec.Attempt), attribute.String("narratoria.plan", rec.PlanID),
		attribute.String("narratoria.planner", sh.n.planner.Name()), attribute.StringSlice("narratoria.skills", skills),
		attribute.Bool("narratoria.resumed", sh.resumed)))
	sh.following = &following{plan: rec.PlanID, subject: subj, sub: sub, ctx: actx, span: span}
	sh.resumed = false // the attempts after a taken-over one are this narrator's own
	return sh.following, nil
}

// unfollow ends the result subscription and the attempt's span (with
// err), if any.
func (sh *promptShell) unfollow(err error) {
	if f := sh.following; f != nil {
		_ = f.sub.Unsubscribe()
		tracing.End(f.span, err)
		sh.following = nil
	}
}

// lookupResult answers LookupResult: the result stored for a taken-over
// attempt's plan (it may have come while no narrator was alive).
func (sh *promptShell) lookupResult(e promptfsm.LookupResult) (promptfsm.Event, error) {
	f, err := sh.follow(e.Record)
	if err != nil {
		return sh.failed(err)
	}
	res, err := sh.n.attempts.storedResult(sh.ctx, f.subject)
	if err != nil {
		return sh.failed(err)
	}
	return promptfsm.ResultLooked{Result: res}, nil
}

// checkPlan answers CheckPlan: whether a taken-over attempt's plan waits
// in the plans stream (its narrator published it, and no scheduler took
// it yet).
func (sh *promptShell) checkPlan(e promptfsm.CheckPlan) (promptfsm.Event, error) {
	if _, err := sh.follow(e.Record); err != nil {
		return sh.failed(err)
	}
	planSubj, err := sh.n.subj.Plans(sh.p.SessionID)
	if err != nil {
		return sh.failed(err)
	}
	s := sh.n.attempts
	waiting, err := s.planStored(sh.ctx, sh.n.subj.Stored(planSubj, sh.p.SessionID, s.partitions), e.Record.PlanID, e.Record.StartedAt)
	if err != nil {
		return sh.failed(err)
	}
	return promptfsm.PlanChecked{Waiting: waiting}, nil
}

// sendPlan answers SendPlan: it publishes the attempt's plan under its
// message ID — through its partition's writer, stamped with the
// narrator's fence, when the prompt runs under a partition's ownership.
func (sh *promptShell) sendPlan(e promptfsm.SendPlan) (promptfsm.Event, error) {
	n, ctx := sh.n, sh.ctx
	f, err := sh.follow(e.Record)
	if err != nil {
		return sh.failed(err)
	}
	planSubj, err := n.subj.Plans(sh.p.SessionID)
	if err != nil {
		return sh.failed(err)
	}
	m := &nats.Msg{Subject: planSubj, Data: e.Record.Plan, Header: nats.Header{}}
	if e.Again {
		sh.log.Info("narrator: the recorded plan has no result and is not waiting in the plans stream; publishing it again under its message ID",
			slog.String("planId", e.Record.PlanID))
		// Its plan may have run and finished since its first publish
		// (past the duplicate window, nothing else says so).
		m.Header.Set(messages.HeaderRepublished, "1")
	}
	tracing.Inject(f.ctx, m)
	m.Header.Set(jetstream.MsgIDHeader, "plan."+e.Record.PlanID)
	if op := sh.op; op != nil {
		// Only the partition's owner starts a plan: one paused past its
		// lease finds out here, and one that lost the partition while
		// publishing is refused by the stream. The message ID is a header,
		// so the partition's plans may go as one atomic batch.
		if !op.Term.Held() {
			op.Lapsed("plan " + e.Record.PlanID)
			return nil, errNotOwner
		}
		_, err = op.plans.WaitStored(ctx, op.plans.Publish(m), client.PublishRetryDefault)
		switch {
		case partition.Refused(err):
			op.Lose("plan " + e.Record.PlanID)
			return nil, errNotOwner
		case errors.Is(err, partition.ErrWriterClosed):
			return nil, errNotOwner
		}
	} else {
		_, err = client.PublishRetry(ctx, n.js, m, client.PublishRetryDefault)
	}
	if err != nil {
		return sh.failed(fmt.Errorf("publish plan: %w", err))
	}
	return promptfsm.PlanSent{}, nil
}

// await answers Await: it waits for the result of the attempt's plan, for
// the plan's timeout and the result margin — from the attempt's start when
// an earlier narrator sent the plan.
func (sh *promptShell) await(e promptfsm.Await) (promptfsm.Event, error) {
	n, ctx, log := sh.n, sh.ctx, sh.log
	plan, err := sh.plan(e.Record)
	if err != nil {
		return promptfsm.Failed{Err: err}, nil
	}
	f, err := sh.follow(e.Record)
	if err != nil {
		return sh.failed(err)
	}
	attempt := e.Record.Attempt
	wait := plan.Timeout() + n.cfg.ResultMargin
	if e.FromStart {
		wait = max(time.Until(e.Record.StartedAt.Add(wait)), n.cfg.ResultMargin)
	}
	res, err := n.attempts.wait(f.ctx, f, wait)
	if res != nil {
		f.span.SetAttributes(attribute.Bool("narratoria.success", res.Success), attribute.String("narratoria.failure_reason", res.FailureReason))
	}
	sh.unfollow(err)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	skills := planSkills(plan)
	switch {
	case errors.Is(err, ErrNoResult):
		log.Warn("narrator: attempt failed without a result", slog.Int("attempt", attempt), slog.String("planId", plan.RequestID),
			slog.Any("skills", skills), slog.Any("error", err))
		return promptfsm.Awaited{}, nil
	case err != nil:
		return sh.failed(fmt.Errorf("attempt %d: %w", attempt, err))
	}
	log.Info("narrator: attempt", slog.Int("attempt", attempt), slog.String("planId", plan.RequestID), slog.Any("skills", skills),
		slog.Bool("success", res.Success), slog.String("failureReason", res.FailureReason), slog.Any("failedTools", res.FailedTools),
		slog.Any("disabledSkills", res.DisabledSkills))
	if !res.Success && !res.CanReplan {
		// A cancelled plan (§9.4) — or any result that says so — is not
		// planned again: the player gets the template narration at once.
		log.Info("narrator: the plan may not be replanned; not trying again", slog.Int("attempt", attempt),
			slog.String("planId", plan.RequestID), slog.String("failureReason", res.FailureReason), slog.String("message", res.Message))
	}
	return promptfsm.Awaited{Result: res}, nil
}

// wait waits up to d for the result f listens for; at the end it looks
// for one stored meanwhile (the connection may have been down).
func (s *attemptStore) wait(ctx context.Context, f *following, d time.Duration) (*messages.ExecutionResult, error) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	msg, err := f.sub.NextMsgWithContext(wctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if res, serr := s.storedResult(ctx, f.subject); serr == nil && res != nil {
			return res, nil
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("wait for the result of plan %s: %w", f.plan, err)
		}
		return nil, fmt.Errorf("%w for plan %s within %s", ErrNoResult, f.plan, d)
	}
	return decodeResult(f.plan, msg.Data)
}
