package skillworker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/narratoria/runtime/internal/runner"
	"github.com/narratoria/runtime/internal/skills"
	"github.com/narratoria/runtime/internal/tracing"
	"github.com/narratoria/runtime/pkg/codec"
	"github.com/narratoria/runtime/pkg/messages"
)

// Outcome publication: an outcome larger than the server's max payload is
// shrunk (events dropped, then output) rather than lost.
const outcomeHeadroom = 4 << 10

// outcomeRetryFor bounds how long a stored outcome's job ack is retried
// (e.g. through a NATS restart); a job delivered again afterwards is
// answered from the worker's memory of the attempt. (The outcome itself is
// sent until it is stored.)
const outcomeRetryFor = time.Minute

// handle runs one job to its outcome. The outcome is published, and stored
// by JetStream, before the job is acknowledged. release frees the job's
// slot; it is called as soon as the script has ended, so the next script
// can start while the outcome is being published.
func (w *Worker) handle(msg jetstream.Msg, release func()) {
	var deliveries uint64 = 1
	if md, err := msg.Metadata(); err == nil {
		deliveries = md.NumDelivered
	}
	var jb messages.ToolJob
	if err := codec.Unmarshal(msg.Data(), &jb); err != nil || jb.PlanID == "" || jb.ToolID == "" || jb.SessionID == "" {
		w.rejectBadJob(msg, jb, err)
		return
	}
	log := lazyAttrs(w.log, slog.String("planId", jb.PlanID), slog.String("sessionId", jb.SessionID),
		slog.String("toolId", jb.ToolID), slog.String("skill", jb.Skill), slog.Int("attempt", jb.Attempt))
	tctx, span := tracing.Start(tracing.Extract(context.Background(), msg.Headers()), "skillworker", "skillworker.job", func() []oteltrace.SpanStartOption {
		return []oteltrace.SpanStartOption{oteltrace.WithSpanKind(oteltrace.SpanKindConsumer), oteltrace.WithAttributes(attribute.String("narratoria.plan", jb.PlanID),
			attribute.String("narratoria.tool", jb.ToolID), attribute.String("narratoria.skill", jb.Skill), attribute.String("narratoria.script", jb.Script),
			attribute.Int("narratoria.attempt", jb.Attempt), attribute.String("narratoria.worker", w.cfg.ID), attribute.Int64("narratoria.deliveries", int64(deliveries)))}
	})
	defer span.End()
	id := attemptID(jb.PlanID, jb.ToolID, jb.Attempt)
	if !w.takeAttempt(msg, &jb, id, deliveries, log) {
		return
	}
	out := messages.Outcome{
		PlanID: jb.PlanID, SessionID: jb.SessionID, ToolID: jb.ToolID, Skill: jb.Skill, Script: jb.Script,
		Attempt: jb.Attempt, Token: jb.Token, Worker: w.cfg.ID, Deliveries: deliveries, ExitCode: -1, StartedAt: time.Now(),
	}
	eventsSubj, err := w.subj.Events(jb.SessionID, jb.PlanID, jb.ToolID)
	if err != nil {
		w.rejectBadJob(msg, jb, err)
		return
	}
	sk, inv, why := w.invocation(&jb, &out)
	if why != "" {
		w.finish(tctx, msg, &jb, &out, log, why)
		return
	}
	a := &attemptRun{msg: msg, jb: &jb, out: &out, sk: sk, log: log, eventsSubj: eventsSubj, evs: &eventWrites{}}
	res, shutdown := w.runAttempt(tctx, a, inv, release)
	if shutdown {
		// Hard stop: the script was ended by shutdown, not by its plan or
		// its own doing. Hand the job back so another worker runs it at once.
		log.Warn("skillworker: script ended by shutdown; job handed back for redelivery")
		w.attempts.forget(id)
		_ = msg.Nak()
		w.m.observe(jb.Skill, "requeued", res.Duration)
		return
	}
	w.complete(tctx, a, res)
}

// takeAttempt decides whether this delivery of a job runs its script: an
// attempt runs at most once on this worker, however often the store hands
// its job back (a job it knows is answered from its memory), and a job
// delivered again is first put to the plan's scheduler, which may no
// longer wait for the attempt. It reports false when the job is settled.
func (w *Worker) takeAttempt(msg jetstream.Msg, jb *messages.ToolJob, id string, deliveries uint64, log *slog.Logger) bool {
	if deliveries > 1 {
		w.m.redelivered.WithLabelValues(jb.Skill).Inc()
		log.Info("skillworker: job redelivered", slog.Uint64("deliveries", deliveries))
	}
	prior, fresh := w.attempts.claim(id)
	if !fresh {
		w.answerKnown(msg, jb, prior, log)
		return false
	}
	if deliveries == 1 {
		return true
	}
	// Another worker may have run it and died before its ack: ask the
	// plan's scheduler whether it still waits for this attempt.
	settled, why := w.attemptSettled(jb)
	if settled {
		w.attempts.forget(id)
		w.m.jobs.WithLabelValues(jb.Skill, "repeated").Inc()
		log.Warn("skillworker: redelivered job of an attempt its scheduler no longer waits for; acked, not run", slog.String("why", why))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = msg.DoubleAck(ctx)
		cancel()
		return false
	}
	// The worker that took it before fell silent past the ack wait (dead,
	// or paused): no one can know whether its script ran, so it runs here,
	// counted; the scheduler takes one outcome of the attempt, whichever
	// comes first.
	w.m.secondRuns.WithLabelValues(jb.Skill, "delivered_again").Inc()
	log.Warn("skillworker: job delivered again while its scheduler still waits for the attempt; running it, perhaps a second time (the worker that took it before is silent)",
		slog.Uint64("deliveries", deliveries), slog.String("scheduler", why))
	return true
}

// invocation is the script run a job asks for. When it cannot run (its
// plan cancelled, its skill or script unknown here, its input invalid),
// out is its failed outcome and why names the job's end (cancelled,
// rejected).
func (w *Worker) invocation(jb *messages.ToolJob, out *messages.Outcome) (*skills.Skill, runner.Invocation, string) {
	fail := func(code, category, msg, why string) (*skills.Skill, runner.Invocation, string) {
		out.State = messages.ToolFailed
		out.Error = &messages.ToolError{Code: code, Category: category, Message: msg}
		return nil, runner.Invocation{}, why
	}
	if w.isCancelled(jb.PlanID) {
		return fail("cancelled", messages.CategoryCancelled, "the plan was cancelled before the script started", "cancelled")
	}
	sk, ok := w.skill(jb.Skill)
	if !ok {
		return fail("unknown_skill", messages.CategoryUnknownSkill, fmt.Sprintf("this worker does not serve skill %q", jb.Skill), "rejected")
	}
	script, ok := sk.Scripts[jb.Script]
	if !ok {
		return fail("unknown_script", messages.CategoryUnknownSkill, fmt.Sprintf("skill %q has no script %q", jb.Skill, jb.Script), "rejected")
	}
	input := jb.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	if err := sk.ValidateInput(jb.Script, input); err != nil {
		return fail("invalid_input", messages.CategoryInvalidInput, fmt.Sprintf("input of %s/%s: %v", jb.Skill, jb.Script, err), "rejected")
	}
	state := jb.State
	if len(state) == 0 {
		state = json.RawMessage("{}")
	}
	timeout := script.Timeout
	if jb.TimeoutMs > 0 {
		timeout = time.Duration(jb.TimeoutMs) * time.Millisecond
	}
	return sk, runner.Invocation{
		Skill: jb.Skill, Script: jb.Script, Dir: sk.Dir, Path: script.Path, Env: sk.Env, Timeout: timeout, Resources: w.attemptLimits(sk, script),
		Input: messages.ScriptInput{
			RequestID: jb.PlanID, SessionID: jb.SessionID, ToolID: jb.ToolID, Tool: jb.Skill + "/" + jb.Script,
			Operation: jb.Script, Attempt: jb.Attempt, RunKey: jb.PlanID + "." + jb.ToolID, Input: input, State: state, Config: sk.Config,
		},
	}, ""
}

// attemptRun is one attempt being run: its job, its outcome as it fills
// and its events' pending stores.
type attemptRun struct {
	msg        jetstream.Msg
	jb         *messages.ToolJob
	out        *messages.Outcome
	sk         *skills.Skill
	log        *slog.Logger
	eventsSubj string
	evs        *eventWrites
}

// runAttempt runs the script, its events published live as they come,
// and frees the job's slot (release) once it has ended. shutdown reports
// that the worker's shutdown ended it (not its plan, not itself).
func (w *Worker) runAttempt(tctx context.Context, a *attemptRun, inv runner.Invocation, release func()) (res runner.Result, shutdown bool) {
	// The script continues the trace if it wants: TRACEPARENT is the
	// script run's span.
	sctx, sspan := tracing.Start(tctx, "skillworker", "script.run", func() []oteltrace.SpanStartOption {
		return []oteltrace.SpanStartOption{oteltrace.WithAttributes(
			attribute.String("narratoria.script", a.jb.Skill+"/"+a.jb.Script), attribute.String("narratoria.path", inv.Path))}
	})
	if tp := tracing.TraceParent(sctx); tp != "" {
		inv.Env = maps.Clone(inv.Env)
		if inv.Env == nil {
			inv.Env = map[string]string{}
		}
		inv.Env["TRACEPARENT"] = tp
	}
	ctx, cancel := context.WithCancelCause(w.workCtx)
	defer cancel(nil)
	untrack := w.track(a.jb.PlanID, &job{cancel: cancel})
	defer untrack()
	progressDone := w.keepAlive(a.msg)
	defer progressDone()

	w.inFlight.Add(1)
	w.m.inFlight.Inc()
	res = w.run.Run(ctx, inv, func(ev messages.Event, raw json.RawMessage) { w.onEvent(a, ev, raw) })
	if sspan.IsRecording() {
		sspan.SetAttributes(attribute.Int("narratoria.exit_code", res.ExitCode), attribute.String("narratoria.state", string(res.State)))
		if res.Error != nil {
			sspan.SetStatus(codes.Error, res.Error.Message)
		}
	}
	sspan.End()
	w.inFlight.Add(-1)
	w.m.inFlight.Dec()
	release()
	w.m.startLatency.Observe(res.StartLatency.Seconds())
	return res, w.workCtx.Err() != nil && !errors.Is(context.Cause(ctx), errCancelled)
}

// onEvent takes one event of a running script: logs and progress where
// they go, assets checked, and every event published live on the
// attempt's events subject (its store not awaited: the events precede the
// outcome on this connection, and the outcome carries them all anyway).
func (w *Worker) onEvent(a *attemptRun, ev messages.Event, raw json.RawMessage) {
	switch e := ev.(type) {
	case *messages.LogEvent: // §4.7: log events go to the logs
		lvl := map[string]slog.Level{messages.LogDebug: slog.LevelDebug, messages.LogWarn: slog.LevelWarn, messages.LogError: slog.LevelError}[e.Level]
		a.log.Log(context.Background(), lvl, "skillworker: script log", slog.String("message", e.Message), slog.Any("fields", e.Fields))
	case *messages.ErrorEvent:
		a.log.Warn("skillworker: script error event", slog.String("errorCode", e.ErrorCode), slog.String("errorMessage", e.ErrorMessage))
	case *messages.UIEvent:
		if e.Event == messages.UIEventProgress {
			w.publishProgress(a.jb, e.Payload)
		}
	case *messages.AssetEvent:
		if asset, ok := checkAsset(a.sk.Dir, e); ok {
			a.out.Assets = append(a.out.Assets, asset)
		} else {
			a.log.Warn("skillworker: asset refused: no such file inside the skill folder", slog.String("assetId", e.AssetID), slog.String("path", e.Path))
		}
	}
	m := nats.NewMsg(a.eventsSubj)
	m.Data = raw
	m.Header.Set(messages.HeaderAttempt, strconv.Itoa(a.jb.Attempt))
	m.Header.Set(messages.HeaderWorker, w.cfg.ID)
	m.Header.Set(messages.HeaderToken, a.jb.Token)
	f, err := w.js.PublishMsgAsync(m)
	if err != nil {
		a.log.Warn("skillworker: event not published", slog.Any("error", err))
	}
	a.evs.add(f)
}

// complete fills the attempt's outcome from the script's result, stores
// its assets, and sends it: whole, or — when its events make it more than
// one message — pointing at its events on the events stream, once every
// one of them is stored.
func (w *Worker) complete(tctx context.Context, a *attemptRun, res runner.Result) {
	out := a.out
	out.State = res.State
	out.Done = res.Done
	out.Events = res.Events
	out.Error = res.Error
	out.ExitCode = res.ExitCode
	out.ExecutionTimeMs = res.Duration.Milliseconds()
	if res.State == messages.ToolSuccess && res.Done != nil {
		out.Output = res.Done.ToolOutput()
	}
	if out.Error != nil && out.Error.Category == messages.CategoryInvalidJSON {
		w.m.protocolErrors.WithLabelValues("protocol").Inc()
	} else if out.Error != nil && out.Error.Category == messages.CategoryProcessError {
		w.m.protocolErrors.WithLabelValues(out.Error.Code).Inc()
	}
	outcome := string(res.State)
	if out.Error != nil && out.Error.Category == messages.CategoryCancelled {
		outcome = "cancelled"
	}
	if out.ExecutionTimeMs == 0 {
		out.ExecutionTimeMs = time.Since(out.StartedAt).Milliseconds()
	}
	w.storeAssets(out.Assets, a.log)
	encoded := encodeJSON(out)
	if len(encoded) > int(w.nc.MaxPayload())-outcomeHeadroom {
		encoded = nil
		ref, err := a.evs.ref(messages.StreamEvents, a.eventsSubj, a.jb.Attempt)
		if err != nil {
			out.State, out.Output, out.Done = messages.ToolFailed, nil, nil
			out.Error = &messages.ToolError{Code: "events_not_stored", Category: messages.CategoryInfrastructure,
				Message: "the attempt's events are too big for its outcome and not all could be stored on the events stream: " + err.Error()}
		} else {
			out.EventsRef = ref
		}
		out.Events = nil
	}
	w.finishEncoded(tctx, a.msg, a.jb, out, a.log, outcome, encoded)
}

// eventWrites are the pending stores of one attempt's events, in order.
type eventWrites struct {
	fs   []jetstream.PubAckFuture
	lost int
}

func (e *eventWrites) add(f jetstream.PubAckFuture) {
	if f == nil {
		e.lost++
		return
	}
	e.fs = append(e.fs, f)
}

// ref waits (bounded) until every event is stored and says where they are.
func (e *eventWrites) ref(stream, subject string, attempt int) (*messages.EventsRef, error) {
	if e.lost > 0 {
		return nil, fmt.Errorf("%d events could not be sent", e.lost)
	}
	r := &messages.EventsRef{Stream: stream, Subject: subject, Attempt: attempt}
	timeout := time.After(30 * time.Second)
	for _, f := range e.fs {
		select {
		case ack := <-f.Ok():
			if r.FirstSeq == 0 || ack.Sequence < r.FirstSeq {
				r.FirstSeq = ack.Sequence
			}
			r.LastSeq = max(r.LastSeq, ack.Sequence)
			r.Count++
		case err := <-f.Err():
			return nil, err
		case <-timeout:
			return nil, errors.New("events not confirmed within 30s")
		}
	}
	return r, nil
}

// checkAsset resolves an asset's path (relative to the skill folder) and
// reports whether it names a file inside the skill folder (its data/
// included), symlinks resolved: "/etc/shadow", "../../etc/passwd" or a
// link out of the folder are refused. The file is then read through an
// os.Root of the folder (which follows no link out of it, whatever the
// script swaps in meanwhile) to record its SHA-256 and size, so a reader
// can tell a file swapped after it was listed (client.ReadAsset).
func checkAsset(dir string, a *messages.AssetEvent) (messages.Asset, bool) {
	p := a.Path
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return messages.Asset{}, false
	}
	rootDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return messages.Asset{}, false
	}
	rel, err := filepath.Rel(rootDir, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return messages.Asset{}, false
	}
	sum, size, err := hashBeneath(rootDir, rel)
	if err != nil {
		return messages.Asset{}, false
	}
	return messages.Asset{AssetID: a.AssetID, Kind: a.Kind, MediaType: a.MediaType, Path: real, Metadata: a.Metadata,
		Root: rootDir, SHA256: sum, Size: size}, true
}

// hashBeneath reads rel beneath root (no link followed out of root) and
// returns its SHA-256 (hex) and size; a folder is an error.
func hashBeneath(root, rel string) (string, int64, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return "", 0, err
	}
	defer r.Close()
	f, err := r.Open(rel)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.IsDir() {
		return "", 0, fmt.Errorf("asset %s: not a file", rel)
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// keepAlive tells JetStream the job is still being worked on, so it is not
// redelivered while a long script runs.
// It is a timer, not a goroutine: most scripts end before it first fires.
func (w *Worker) keepAlive(msg jetstream.Msg) func() {
	every := w.cfg.AckWait / 3
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		_ = msg.InProgress()
		t.Reset(every)
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// finish publishes the outcome and then acknowledges the job. If the
// outcome cannot be stored the job is not acknowledged, so it is redelivered.
func (w *Worker) finish(tctx context.Context, msg jetstream.Msg, jb *messages.ToolJob, out *messages.Outcome, log *slog.Logger, outcome string) {
	w.finishEncoded(tctx, msg, jb, out, log, outcome, nil)
}

// finishEncoded is finish with the outcome already encoded (nil: not
// yet), so a script's outcome is encoded once.
func (w *Worker) finishEncoded(tctx context.Context, msg jetstream.Msg, jb *messages.ToolJob, out *messages.Outcome, log *slog.Logger, outcome string, encoded []byte) {
	span := oteltrace.SpanFromContext(tctx)
	span.SetAttributes(attribute.String("narratoria.state", string(out.State)))
	if out.Error != nil {
		span.SetStatus(codes.Error, out.Error.Message)
	}
	d := time.Since(out.StartedAt)
	if ms := d.Milliseconds(); out.ExecutionTimeMs == 0 && ms != 0 {
		out.ExecutionTimeMs = ms
		encoded = nil // it changed
	}
	subj, err := w.subj.Outcomes(out.SessionID, out.PlanID, out.ToolID)
	if err != nil {
		log.Error("skillworker: job has invalid IDs; terminated", slog.Any("error", err))
		_ = msg.TermWithReason(err.Error())
		w.m.badJobs.Inc()
		return
	}
	data := encoded
	if data == nil {
		data = w.fitOutcome(out, log)
	}
	// The message ID makes a republished outcome of the same attempt a
	// duplicate JetStream drops (e.g. when the ack below was lost).
	id := attemptID(out.PlanID, out.ToolID, out.Attempt)
	// The script ran: its outcome is the attempt's answer from now on. It
	// is remembered at once (a job of this attempt delivered here again,
	// even during an outage, is answered with it, never run again) and
	// sent until it is stored, however long the store is away: through a
	// NATS restart, a leader election or an outage longer than every
	// window. Only a stopping worker gives up (its memory goes with it:
	// the job is then delivered again to another worker, which runs it).
	w.attempts.finish(id, subj, data)
	deadline := time.Now().Add(outcomeRetryFor)
	wait := 100 * time.Millisecond
	taken := w.sendDirect(tctx, jb.OutcomeTo, data)
	for attempt := 1; !taken; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		om := &nats.Msg{Subject: subj, Data: data}
		tracing.Inject(tctx, om)
		_, err := w.js.PublishMsg(ctx, om, jetstream.WithMsgID(id))
		cancel()
		if err == nil {
			break
		}
		if w.workCtx.Err() != nil && attempt > 3 {
			log.Error("skillworker: stopping with an outcome not stored; its job will be delivered again to another worker, which runs it", slog.Any("error", err))
			return
		}
		if attempt == 1 || attempt%30 == 0 {
			log.Warn("skillworker: outcome not stored yet; retrying until it is", slog.Int("attempt", attempt), slog.Any("error", err))
		}
		_ = msg.InProgress()
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
	if w.opts.afterOutcome != nil {
		w.opts.afterOutcome()
	}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := msg.DoubleAck(ctx)
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			break
		}
		if w.nc.IsClosed() || time.Now().After(deadline) { // a closed connection does not come back; a delivery again is answered from memory
			log.Warn("skillworker: ack not confirmed; job may be redelivered (its outcome is stored: a rerun's is dropped as a duplicate)", slog.Any("error", err))
			break
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
	w.m.observe(out.Skill, outcome, d)
	lvl := slog.LevelInfo
	if out.State != messages.ToolSuccess {
		lvl = slog.LevelWarn
	}
	attrs := []slog.Attr{slog.String("state", string(out.State)), slog.Int64("ms", out.ExecutionTimeMs), slog.Int("exitCode", out.ExitCode)}
	if out.Error != nil {
		attrs = append(attrs, slog.String("error", out.Error.Message), slog.String("category", out.Error.Category))
	}
	log.LogAttrs(context.Background(), lvl, "skillworker: job done", attrs...)
}

// attemptSettled asks the plan's scheduler (plan status, §9.4) whether the
// job's attempt is settled: the plan is not in flight any more, or the
// tool is not running that attempt (its outcome came, from the worker that
// ran it first). Without an answer it says no, and the job runs as
// before: the scheduler ignores an outcome of an attempt it closed.
func (w *Worker) attemptSettled(jb *messages.ToolJob) (bool, string) {
	subj, err := w.subj.ForSession(jb.SessionID).PlanStatusSubject(jb.PlanID)
	if err != nil {
		return false, ""
	}
	ctx, cancel := context.WithTimeout(w.workCtx, 3*time.Second)
	defer cancel()
	m, err := w.nc.RequestWithContext(ctx, subj, nil)
	if err != nil {
		return false, ""
	}
	var r messages.ControlReply
	if json.Unmarshal(m.Data, &r) != nil {
		return false, ""
	}
	if !r.OK || r.Status == nil {
		return r.Code == messages.ControlNotInFlight, r.Error
	}
	for _, t := range r.Status.Tools {
		if t.ToolID == jb.ToolID {
			if t.State == messages.ToolRunning && t.Attempt == jb.Attempt {
				return false, ""
			}
			return true, fmt.Sprintf("the tool is %s at attempt %d", t.State, t.Attempt)
		}
	}
	return false, ""
}

// answerKnown handles a job for an attempt this worker already took. One
// still running here is left alone: its own run acks the job. One that
// finished here is answered from its outcome, published again under the
// same message ID (the scheduler ignores an attempt it already closed), and
// the job is acked: the script does not run a second time.
func (w *Worker) answerKnown(msg jetstream.Msg, jb *messages.ToolJob, prior *finished, log *slog.Logger) {
	w.m.jobs.WithLabelValues(jb.Skill, "repeated").Inc()
	if prior == nil {
		log.Warn("skillworker: job delivered again while its attempt runs here; left to that run")
		return
	}
	log.Warn("skillworker: job of an attempt already run here; answered from its outcome, not run again")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.js.PublishMsg(ctx, &nats.Msg{Subject: prior.subject, Data: prior.data}, jetstream.WithMsgID(prior.id)); err != nil {
		log.Warn("skillworker: outcome not published again; the job stays for redelivery", slog.Any("error", err))
		_ = msg.Nak()
		return
	}
	_ = msg.DoubleAck(ctx)
}

// fitOutcome encodes the outcome so it fits the server's max payload:
// first the events are dropped (they are on the events stream anyway), then
// the output, which turns the outcome into a failure.
func (w *Worker) fitOutcome(out *messages.Outcome, log *slog.Logger) []byte {
	limit := int(w.nc.MaxPayload()) - outcomeHeadroom
	data := encodeJSON(out)
	if len(data) <= limit {
		return data
	}
	log.Warn("skillworker: outcome too large; events left out (they are on the events stream)", slog.Int("bytes", len(data)))
	out.Events = nil
	data = encodeJSON(out)
	if len(data) <= limit {
		return data
	}
	out.Output = nil
	out.Done = nil
	out.State = messages.ToolFailed
	out.Error = &messages.ToolError{Code: "output_too_large", Category: messages.CategoryProcessError,
		Message: fmt.Sprintf("the tool's output does not fit in one NATS message (%d bytes max)", limit)}
	return encodeJSON(out)
}

// rejectBadJob handles a job message that cannot be decoded: it is logged,
// counted and terminated so it is not redelivered forever. When the IDs can
// be read, the scheduler still gets a failed outcome.
func (w *Worker) rejectBadJob(msg jetstream.Msg, jb messages.ToolJob, err error) {
	w.m.badJobs.Inc()
	reason := "job is not a valid ToolJob"
	if err != nil {
		reason += ": " + err.Error()
	} else {
		reason += ": planId, sessionId and toolId are required"
	}
	w.log.Error("skillworker: bad job terminated", slog.String("subject", msg.Subject()), slog.String("problem", reason))
	if subj, serr := w.subj.Outcomes(jb.SessionID, jb.PlanID, jb.ToolID); serr == nil {
		out := messages.Outcome{PlanID: jb.PlanID, SessionID: jb.SessionID, ToolID: jb.ToolID, Skill: jb.Skill,
			Attempt: jb.Attempt, Token: jb.Token, Worker: w.cfg.ID, State: messages.ToolFailed, ExitCode: -1,
			Error: &messages.ToolError{Code: "bad_job", Category: messages.CategoryProcessError, Message: reason}}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = w.js.Publish(ctx, subj, encodeJSON(out))
		cancel()
	}
	_ = msg.TermWithReason(reason)
}

// publishProgress forwards a script's ui_event "progress" ({"percent": n,
// "message"?}) as the running tool's progress (§4.9), live, to the
// scheduler that sent the job (its outcomeTo), with the attempt's token:
// the scheduler publishes it on the plan's progress subject. Worker
// credentials may not publish progress themselves (they could for any
// session). A payload without a number is ignored, and so is progress
// of a job that names no scheduler to send it to.
func (w *Worker) publishProgress(jb *messages.ToolJob, payload json.RawMessage) {
	var p struct {
		Percent *float64 `json:"percent"`
		Message string   `json:"message"`
	}
	if json.Unmarshal(payload, &p) != nil || p.Percent == nil || jb.OutcomeTo == "" {
		return
	}
	n := int(min(max(*p.Percent, 0), 100))
	b, _ := json.Marshal(messages.Progress{PlanID: jb.PlanID, ToolID: jb.ToolID, State: string(messages.ToolRunning), Attempt: jb.Attempt,
		At: time.Now().UTC(), Progress: &n, Message: p.Message})
	m := nats.NewMsg(jb.OutcomeTo)
	m.Data = b
	m.Header.Set(messages.HeaderKind, messages.KindProgress)
	m.Header.Set(messages.HeaderSkill, jb.Skill)
	m.Header.Set(messages.HeaderToken, jb.Token)
	_ = w.nc.PublishMsg(m)
}
