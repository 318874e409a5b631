package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/codec"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/lifecycle"
	"github.com/narratoria/runtime/internal/partition"
	"github.com/narratoria/runtime/internal/plancheck"
	"github.com/narratoria/runtime/internal/planfsm"
	"github.com/narratoria/runtime/internal/tracing"
	"github.com/narratoria/runtime/pkg/health"
	"github.com/narratoria/runtime/pkg/messages"
)

// sessionCacheIdle is how long a session's state and health stay cached
// after its last plan ends.
const sessionCacheIdle = 30 * time.Second

// Durable consumer names, one of each per partition (see partitions.go).
const (
	plansConsumer    = "scheduler-plans"
	outcomesConsumer = "scheduler-outcomes"
)

// Options are the scheduler's collaborators; every field is optional.
type Options struct {
	// Logger receives structured logs. Default: discard.
	Logger *slog.Logger
	// Registerer receives the Prometheus collectors. Default: none.
	Registerer prometheus.Registerer
	// Bus names the subject prefix and stream sizing.
	Bus bus.Config
	// Version is reported by the micro service, as bus.ServiceVersion
	// makes it (default bus.VersionDefault; not SemVer: 0.0.0-dev+…).
	Version string
}

// Scheduler takes plans and runs them. Create it with New, Start it, Stop it.
type Scheduler struct {
	// guard keeps the streams and buckets this component needs there.
	guard *bus.Guard
	cfg   Config
	bus   bus.Config
	subj  messages.Subjects
	nc    *nats.Conn
	js    jetstream.JetStream
	log   *slog.Logger
	m     *metrics
	opts  Options

	store    *store
	sessions *sessionStore
	keys     *keys
	health   *healthStore
	registry *registry
	reuse    *reuseStore
	resolver plancheck.Resolver

	// parts shares the partitions with the other schedulers; owned holds
	// the ones this scheduler owns now (partitions.go).
	parts  *partition.Manager
	owners jetstream.KeyValue

	mu     sync.Mutex
	actors map[string]*actor
	bySess map[string]int
	owned  *partition.Holdings[*ownedPartition]
	// retiring are the plan-state writers of partitions this scheduler
	// gave up, still landing their writes (closed when they are done).
	retiring map[int]chan struct{}
	// idleSince: sessions whose last plan ended, for the cache sweeper.
	idleSince map[string]time.Time
	// direct is the subject this scheduler takes outcomes on as requests
	// (direct.go).
	direct string
	// decisionSlots bound the approval decisions checked at once; gates
	// remembers the plans they named (decisions.go).
	decisionSlots chan struct{}
	gates         gates

	// recoveries batches the plan-state scans of partitions taken over
	// together (partitions.go).
	recoveries chan recoveryRequest

	// life starts and stops the scheduler; ctx is its work context
	// (life.Context()), cancelled by Stop, and every goroutine the
	// scheduler starts runs under life.Go, so Stop waits for it.
	life *lifecycle.Service
	ctx  context.Context
}

// New checks the configuration and builds a scheduler on an open connection.
func New(nc *nats.Conn, cfg Config, opts Options) (*Scheduler, error) {
	cfg.LeaseTTL = partition.LeaseTTL(cfg.LeaseTTL, opts.Bus.Replicas)
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	bc, err := bus.NewClient("scheduler", nc, opts.Bus, opts.Logger)
	if err != nil {
		return nil, err
	}
	b, js, log := bc.Config, bc.JS, bc.Log
	opts.Version = bus.ServiceVersion(opts.Version)
	life := lifecycle.New("scheduler")
	m := newMetrics(opts.Registerer)
	return &Scheduler{life: life, ctx: life.Context(), cfg: cfg, bus: b, subj: b.Subjects(), direct: directSubject(b.Subjects().Prefix), decisionSlots: make(chan struct{}, decisionsMax), gates: gates{plans: map[string]gate{}}, nc: nc, js: js, log: log.With(slog.String("scheduler", cfg.ID)),
		m: m, opts: opts, actors: map[string]*actor{}, bySess: map[string]int{}, idleSince: map[string]time.Time{},
		owned: partition.NewHoldings[*ownedPartition](b.Partitions, m.partitions), retiring: map[int]chan struct{}{}, recoveries: make(chan recoveryRequest)}, nil
}

// ID returns the scheduler's instance ID.
func (s *Scheduler) ID() string { return s.cfg.ID }

// Start provisions streams and buckets, opens the stores and joins the
// schedulers sharing the partitions; it returns at once. Each partition it
// comes to own has its plans recovered and its intake started. Start
// once: a second Start, or one after Stop, is an error; one that fails
// leaves nothing running but Stop is still to be called.
func (s *Scheduler) Start(ctx context.Context) error {
	return s.life.Start(func(context.Context) error { return s.start(ctx) })
}

// start is Start's work, under s.life: a failure cancels s.ctx and waits
// for the goroutines started so far.
func (s *Scheduler) start(ctx context.Context) error {
	s.guard = bus.NewGuard(s.js, s.bus, schedulerStreams, schedulerBuckets, "scheduler", s.opts.Registerer, s.log)
	if err := s.guard.Ensure(ctx); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	kv := func(name string) (jetstream.KeyValue, error) {
		b, err := s.js.KeyValue(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("scheduler: open bucket %s: %w", name, err)
		}
		return b, nil
	}
	plans, err := kv(messages.BucketPlans)
	if err != nil {
		return err
	}
	stream, err := s.js.Stream(ctx, "KV_"+messages.BucketPlans)
	if err != nil {
		return fmt.Errorf("scheduler: plan state stream: %w", err)
	}
	sessions, err := kv(messages.BucketSessions)
	if err != nil {
		return err
	}
	healthKV, err := kv(messages.BucketHealth)
	if err != nil {
		return err
	}
	skillsKV, err := kv(messages.BucketSkills)
	if err != nil {
		return err
	}
	reuseKV, err := kv(messages.BucketReuse)
	if err != nil {
		return err
	}
	if s.owners, err = kv(messages.BucketOwners); err != nil {
		return err
	}
	s.parts, err = partition.New(s.owners, partition.Config{ID: s.cfg.ID, Group: partitionGroup, Count: s.bus.Partitions,
		TTL: s.cfg.LeaseTTL, Logger: s.log}, s.own)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	approvals, err := s.js.Stream(ctx, messages.StreamApprovals)
	if err != nil {
		return fmt.Errorf("scheduler: approvals stream: %w", err)
	}
	results, err := s.js.Stream(ctx, messages.StreamResults)
	if err != nil {
		return fmt.Errorf("scheduler: results stream: %w", err)
	}
	s.reuse = &reuseStore{kv: reuseKV}
	s.store = &store{js: s.js, kv: plans, stream: stream, approvals: approvals, results: results, subj: s.subj, room: newRoom(stream),
		valueMax: stream.CachedInfo().Config.MaxMsgSize, headroom: RecordHeadroom(s.cfg.MaxContextIterations)}
	sessionsStream, err := s.js.Stream(ctx, "KV_"+messages.BucketSessions)
	if err != nil {
		return fmt.Errorf("scheduler: session state stream: %w", err)
	}
	s.sessions = newSessionStore(sessions, s.js, sessionsStream, s.cfg.MaxStateBytes)
	if s.bus.Tenants {
		s.sessions.subj = &s.subj
	}
	if s.keys, err = loadKeys(ctx, s.js); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	s.health = newHealthStore(healthKV, s.nc, s.subj, health.Policy{Cooldown: max(s.cfg.HealthCooldown, 0)}, s.log, s.m)
	if s.cfg.SkipRegistryCheck {
		s.resolver = lenientResolver{}
	} else {
		s.registry = newRegistry(s.cfg.WorkerTTL, s.log)
		s.registry.sight = bus.NewSight(s.nc, s.cfg.WorkerTTL)
		if err := s.registry.run(s.ctx, skillsKV); err != nil {
			return fmt.Errorf("scheduler: %w", err)
		}
		s.resolver = s.registry
	}
	if err := s.startService(); err != nil {
		return err
	}
	subs, err := s.subscribe()
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	context.AfterFunc(s.ctx, func() {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	})
	s.life.Go(s.recoverLoop)
	s.life.Go(s.parts.Run)
	s.life.Go(s.sweep)
	// Make sure the server has every subscription before Start returns,
	// so a request sent right after reaches the service.
	if err := s.nc.FlushTimeout(5 * time.Second); err != nil {
		return fmt.Errorf("scheduler: flush: %w", err)
	}
	s.log.Info("scheduler: started", slog.Int("concurrency", s.cfg.Concurrency))
	s.guard.Start()
	return nil
}

// Ready reports nil while the scheduler is running and connected (owning
// partitions or not).
func (s *Scheduler) Ready() error {
	if err := bus.Ready(s.life.Ready(), s.nc); err != nil {
		return err
	}
	if s.guard != nil {
		return s.guard.Ready()
	}
	return nil
}

// Stop stops taking plans, stops every plan actor (their state is in KV,
// so the partitions' next owners finish them) and releases its partitions'
// leases so the other schedulers take them over at once. Idempotent, safe
// before Start (the scheduler then never starts) and while Start runs (it
// waits for it).
func (s *Scheduler) Stop() {
	// Cancelling the work context stops the intake, the actors and the
	// partition manager (which releases the leases); life waits for them.
	s.life.Stop(nil, func() {
		if s.guard != nil {
			s.guard.Stop()
		}
		s.log.Info("scheduler: stopped")
	})
}

// InFlight returns the number of plans being run.
func (s *Scheduler) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.actors)
}

// onPlanMsg takes one plan from its partition's consumer: validate,
// persist (fenced), start its actor, ack. A plan seen before (redelivery)
// is acked and ignored.
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
	lc := &liveCheck{Resolver: s.resolver}
	checked, err := plancheck.Check(msg.Data(), s.cfg.limits(), lc)
	if err == nil && checked.Plan.SessionID != "" && checked.Plan.SessionID != session &&
		messages.Qualify(messages.TenantOf(session), checked.Plan.SessionID) != session {
		err = &messages.PlanError{PlanID: checked.Plan.RequestID, Reason: messages.ReasonInvalidPlan, Problems: []messages.Problem{{
			Field: "sessionId", Message: fmt.Sprintf("%q does not match the subject's session %q", checked.Plan.SessionID, session)}}}
	}
	if err != nil && lc.waitsForWorker() && s.waitForWorker(msg) {
		return
	}
	if err != nil {
		s.rejectPlan(ctx, op, msg, session, err)
		return
	}
	p := checked.Plan
	timeout := s.cfg.PlanTimeout
	if p.TimeoutMs > 0 { // set by the plan itself (0 means the default)
		timeout = p.Timeout()
	}
	now := time.Now().UTC()
	rec := planfsm.Record{Plan: msg.Data(), SessionID: session, AcceptedAt: now, Deadline: now.Add(timeout),
		Scripts: resolvedScripts(checked), Phase: planfsm.PhaseRunning, Root: p.RequestID,
		Trace: tracing.Carrier(tracing.Extract(context.Background(), msg.Headers()))}
	if parent := p.Metadata.ParentPlanID; parent != nil && *parent != "" {
		rec.Root = s.reuse.root(ctx, *parent)
	}
	if rec.Root == p.RequestID {
		// A first attempt is its own root: nothing to record.
	} else if err := s.reuse.setRoot(ctx, p.RequestID, rec.Root); err != nil {
		s.log.Warn("scheduler: plan lineage not recorded; its replans will run everything again", slog.String("planId", p.RequestID), slog.Any("error", err))
	}
	m, err := planfsm.New(s.cfg.machine(), rec, p, checked.Graph)
	if err != nil {
		s.rejectPlan(ctx, op, msg, session, err)
		return
	}
	if !op.Term.Held() {
		return // paused past the lease: the next owner takes the plan
	}
	if s.actor(p.RequestID) != nil {
		s.log.Info("scheduler: plan already accepted; duplicate ignored", slog.String("planId", p.RequestID))
		_ = msg.Ack()
		return
	}
	// The message's age and deliveries say what it may be (one read of
	// its metadata): an old one is looked up among the results first, a
	// fresh first delivery is written without reading its key.
	md, mdErr := msg.Metadata()
	// A plan published again (messages.HeaderRepublished) may have finished
	// since its first message, however new this one is.
	old := mdErr == nil && time.Since(md.Timestamp) >= oldPlanMessage || msg.Headers().Get(messages.HeaderRepublished) != ""
	fresh := mdErr == nil && md.NumDelivered == 1 && !old
	if done, err := s.finishedBefore(ctx, old, session, p.RequestID); err != nil {
		s.log.Warn("scheduler: cannot tell whether an old plan message already ran; it will be redelivered", slog.String("planId", p.RequestID), slog.Any("error", err))
		_ = msg.Nak()
		return
	} else if done {
		s.log.Warn("scheduler: plan message delivered again after its plan finished (its result is stored); not run again",
			slog.String("planId", p.RequestID), slog.String("sessionId", session))
		s.m.resurrected.Inc()
		_ = msg.Ack()
		return
	}
	// A record the store can never take is refused now, with its
	// result: its write would be sent again for ever, and the
	// partition's intake would wait behind it.
	encoded, err := planfsm.EncodeRecord(&rec)
	if err == nil {
		err = s.store.recordFits(len(encoded), s.nc.MaxPayload())
	}
	if err != nil {
		if err := s.refusePlan(ctx, op, msg, session, p.RequestID, "record", err); err != nil {
			s.log.Warn("scheduler: plan not refused for its size; it will be redelivered", slog.String("planId", p.RequestID), slog.Any("error", err))
			_ = msg.NakWithDelay(time.Second)
		}
		return
	}
	recBytes := len(msg.Data()) + msgOverhead
	exp := s.store.room.expect(recBytes)
	if full := s.store.room.admit(ctx, exp, s.life.Go); full != nil {
		if err := s.refusePlan(ctx, op, msg, session, p.RequestID, "plan", full); err != nil {
			s.log.Warn("scheduler: plan not refused for want of room; it will be redelivered", slog.String("planId", p.RequestID), slog.Any("error", err))
			_ = msg.NakWithDelay(time.Second)
		}
		return
	}
	// The room held for it goes with its actor, or back now.
	held := true
	defer func() {
		if held {
			s.store.room.done(recBytes, exp, 0, false)
		}
	}()
	if err := s.store.createPlan(ctx, p.RequestID, rec, encoded, op.writer, fresh); err != nil {
		switch {
		case errors.Is(err, errPlanFinished):
			s.log.Warn("scheduler: plan message delivered again after its plan finished (its result is stored); not run again",
				slog.String("planId", p.RequestID), slog.String("sessionId", session))
			s.m.resurrected.Inc()
			_ = msg.Ack()
		case errors.Is(err, jetstream.ErrKeyExists):
			if s.actor(p.RequestID) == nil {
				// Its record is stored but nothing runs it: a term that lost
				// the partition (its fence vanished with a purged bucket, or
				// a newer one was raised) wrote it after the partition's
				// recovery had read the bucket. Recover it now rather than
				// drop the plan as a duplicate.
				s.log.Warn("scheduler: plan record stored but no plan runs it; recovering the partition's plans", slog.String("planId", p.RequestID))
				if err := s.recoverPartition(ctx, op); err != nil {
					s.log.Warn("scheduler: recovery failed; the plan message will be redelivered", slog.String("planId", p.RequestID), slog.Any("error", err))
					_ = msg.NakWithDelay(time.Second)
					return
				}
				s.log.Info("scheduler: plan recovered from its stored record", slog.String("planId", p.RequestID))
				_ = msg.Ack()
				return
			}
			s.log.Info("scheduler: plan already accepted; duplicate ignored", slog.String("planId", p.RequestID))
			_ = msg.Ack()
		case partition.Refused(err):
			op.Lose("plan " + p.RequestID)
		case client.Refused(err):
			// The store refused the record for good (the bucket full past
			// what intake counted): the plan fails now, rather than come
			// back until the bucket has room.
			if err := s.refusePlan(ctx, op, msg, session, p.RequestID, "plan", fmt.Errorf("the plan's record was refused: %w", err)); err != nil {
				s.log.Warn("scheduler: plan not refused for want of room; it will be redelivered", slog.String("planId", p.RequestID), slog.Any("error", err))
				_ = msg.NakWithDelay(time.Second)
			}
		default:
			s.log.Error("scheduler: cannot persist plan; it will be redelivered", slog.String("planId", p.RequestID), slog.Any("error", err))
			_ = msg.Nak()
		}
		return
	}
	// The ack's goroutine starts first: the newest goroutine runs next on
	// this thread, and the actor (sending the first jobs) should be it.
	s.life.Go(func(context.Context) { s.ackSurely(msg, p.RequestID) })
	a := newActor(s, m, op)
	a.expected, held = exp, false
	s.spawn(ctx, a, false)
}

// workerWaitStep is how often a plan waiting for a live worker is looked
// at again.
const workerWaitStep = 500 * time.Millisecond

// waitForWorker holds a plan whose skills are registered but have no
// worker proven live now — as after an outage, before their heartbeats
// resume — by asking for it again shortly, for up to twice the worker TTL
// from when it was stored (never past the plan's own timeout). It reports
// false once the wait is over: the plan is then rejected unknown_skill.
func (s *Scheduler) waitForWorker(msg jetstream.Msg) bool {
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
	if time.Since(meta.Timestamp) >= wait {
		return false
	}
	if meta.NumDelivered == 1 {
		s.log.Info("scheduler: no live worker serves a skill of the plan yet; waiting for one", slog.String("subject", msg.Subject()),
			slog.Duration("upTo", wait))
	}
	_ = msg.NakWithDelay(workerWaitStep)
	return true
}

// oldPlanMessage is the age past which a plan message is looked up in
// NARRATORIA_RESULTS before it is accepted.
const oldPlanMessage = time.Second

// finishedBefore reports whether an old plan message (stored more than
// oldPlanMessage ago, by the server's clock against ours) belongs to a plan
// whose result is already stored: a message delivered again after its plan
// finished — its ack forgotten by a killed server, or a redelivery past
// the duplicate window — must not run the plan a second time. A fresh
// message costs nothing: it cannot have finished yet, unless it is a plan
// published again (messages.HeaderRepublished), which counts as old.
func (s *Scheduler) finishedBefore(ctx context.Context, old bool, session, plan string) (bool, error) {
	if !old {
		return false, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return s.store.resultStored(rctx, session, plan)
}

// generationAttempt reads a plan's metadata.generationAttempt from its
// JSON, however broken the rest is (1 when it cannot).
func generationAttempt(plan []byte) int {
	var meta struct {
		Metadata struct {
			GenerationAttempt int `json:"generationAttempt"`
		} `json:"metadata"`
	}
	if json.Unmarshal(plan, &meta) != nil {
		return 1
	}
	return max(meta.Metadata.GenerationAttempt, 1)
}

// ackSurely acknowledges an accepted plan and waits for the server to
// confirm, retrying: a lost ack would redeliver the plan after the ack wait,
// when it may have finished (and its state been purged), and run it again.
func (s *Scheduler) ackSurely(msg jetstream.Msg, plan string) {
	for attempt := 1; attempt <= 5; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := msg.DoubleAck(ctx)
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return
		}
		s.log.Warn("scheduler: plan ack not confirmed; retrying", slog.String("planId", plan), slog.Int("attempt", attempt), slog.Any("error", err))
		time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
	}
}

// rejectPlan answers an invalid plan with its Execution Result.
func (s *Scheduler) rejectPlan(ctx context.Context, op *ownedPartition, msg jetstream.Msg, session string, err error) {
	if !op.Term.Held() {
		// Paused past the lease: its view of the registry may be as old as
		// the pause (every worker looks gone). The message is left to the
		// next owner, which judges the plan on its own view.
		return
	}
	var perr *messages.PlanError
	if !errors.As(err, &perr) {
		perr = &messages.PlanError{Reason: messages.ReasonInvalidPlan, Problems: []messages.Problem{{Message: err.Error()}}}
	}
	s.m.plans.WithLabelValues("invalid").Inc()
	s.m.badMessages.WithLabelValues("plan").Inc()
	planID := perr.PlanID
	if messages.CheckPlanID(planID) != nil {
		// No result can be addressed to the plan: it is reported on the
		// session's unaddressed results subject, so its publisher still
		// gets an answer naming the problem.
		s.log.Error("scheduler: invalid plan without a usable requestId; reported on the session's unaddressed results", slog.String("sessionId", session),
			slog.String("problem", perr.Error()))
		if err := s.reportUnaddressed(ctx, msg, session, perr); err != nil {
			s.log.Error("scheduler: unaddressed plan not reported", slog.String("sessionId", session), slog.Any("error", err))
		}
		_ = msg.Term()
		return
	}
	attempt := generationAttempt(msg.Data())
	s.log.Warn("scheduler: plan rejected", slog.String("planId", planID), slog.String("sessionId", session),
		slog.String("reason", perr.Reason), slog.String("problem", perr.Error()))
	if err := s.publishResult(ctx, invalidResult(planID, session, attempt, perr)); err != nil {
		s.log.Error("scheduler: result of rejected plan not published", slog.Any("error", err))
		_ = msg.Nak()
		return
	}
	s.publishProgress(session, messages.Progress{PlanID: planID, State: messages.PlanFailed, At: time.Now().UTC(), Error: perr.Error()})
	_ = msg.Ack()
}

// refusePlan answers a plan the plans bucket has no room for, or whose
// record it could never take (write "record"), with its Execution Result,
// storage_refused, the cause in its message, and acks it. The plan may have been accepted already (its message redelivered
// after a lost ack, or published twice) or have finished: it is refused
// only when neither its record nor its result is stored, so a plan that
// runs never gets a second result (a read each: intake is refusing, not
// racing). It returns an error when it could not tell, or could not
// publish the result; the caller leaves the message for later.
func (s *Scheduler) refusePlan(ctx context.Context, op *ownedPartition, msg jetstream.Msg, session, planID, write string, cause error) error {
	if !op.Term.Held() {
		return nil // the next owner judges it
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.store.planAbsent(rctx, planID); errors.Is(err, jetstream.ErrKeyExists) {
		if s.actor(planID) != nil {
			_ = msg.Ack() // accepted before and running here: a copy
		} else {
			// Its record is stored but nothing here runs it: it comes
			// back, and once there is room intake recovers it as it does
			// any such record.
			_ = msg.NakWithDelay(time.Second)
		}
		return nil
	} else if err != nil {
		return err
	}
	if done, err := s.store.resultStored(rctx, session, planID); err != nil {
		return err
	} else if done {
		_ = msg.Ack()
		return nil
	}
	tenant := messages.TenantOf(session)
	s.m.refused.WithLabelValues(write, tenant).Inc()
	s.m.plans.WithLabelValues(messages.PlanFailed).Inc()
	what := "for want of room in the plans bucket"
	if write == "record" {
		what = "at intake: its record is more than the store takes"
	}
	s.log.Warn("scheduler: plan refused "+what, slog.String("planId", planID), slog.String("sessionId", session),
		slog.Any("error", cause))
	if err := s.publishResult(ctx, failedResult(planID, session, generationAttempt(msg.Data()), messages.ReasonStorageRefused, cause.Error())); err != nil {
		return fmt.Errorf("publish the refusal: %w", err)
	}
	s.publishProgress(session, messages.Progress{PlanID: planID, State: messages.PlanFailed, At: time.Now().UTC(), Error: cause.Error()})
	_ = msg.Ack()
	return nil
}

// reportUnaddressed publishes the Execution Result of a plan without a
// usable requestId on <prefix>.results.<session>.unaddressed (stored in
// NARRATORIA_RESULTS; a redelivery of the same plan message is a
// duplicate), with planId empty and the message naming the problem.
func (s *Scheduler) reportUnaddressed(ctx context.Context, msg jetstream.Msg, session string, perr *messages.PlanError) error {
	subj, err := s.subj.UnaddressedResults(session)
	if err != nil {
		return err
	}
	res := invalidResult("", session, 1, perr)
	res.Message = "the plan has no usable requestId (a UUID is required), so no result can be addressed to it: " + res.Message
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	id := "unaddressed." + session
	if md, err := msg.Metadata(); err == nil {
		id += "." + strconv.FormatUint(md.Sequence.Stream, 10)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = s.js.Publish(pctx, subj, b, jetstream.WithMsgID(id))
	return err
}

// explicitTimeout reports whether the plan document sets timeoutMs itself
// (otherwise the scheduler's configured plan timeout applies).
func explicitTimeout(raw []byte) bool {
	var probe struct {
		TimeoutMs *int64 `json:"timeoutMs"`
	}
	return json.Unmarshal(raw, &probe) == nil && probe.TimeoutMs != nil && *probe.TimeoutMs > 0
}

func lastToken(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}

// spawn registers and starts an actor.
func (s *Scheduler) spawn(ctx context.Context, a *actor, recovered bool) {
	id, session := a.m.ID(), a.m.Session()
	s.mu.Lock()
	s.actors[id] = a
	s.bySess[session]++
	s.mu.Unlock()
	s.m.inFlight.Inc()
	// What it will write counts against the plans bucket's room until it
	// stops (room.go): held by intake's admission, or now.
	recBytes := len(a.m.Record().Plan) + msgOverhead
	if a.expected == 0 { // not admitted by intake: recovered with its partition
		a.expected = s.store.room.expect(recBytes)
		s.store.room.keep(a.expected)
	}
	if !recovered {
		a.wrote = recBytes // its record, written at intake
	}
	end := func() {
		// A recovered plan wrote only part of its state here: it teaches
		// nothing of what a plan writes.
		s.store.room.done(recBytes, a.expected, a.wrote, a.purged && !recovered)
		s.mu.Lock()
		if s.actors[id] == a {
			delete(s.actors, id)
		}
		s.bySess[session]--
		if s.bySess[session] <= 0 {
			delete(s.bySess, session)
			// Keep the session's state and health cached for a while: the
			// next prompt of a session usually follows soon.
			s.idleSince[session] = time.Now()
		}
		s.mu.Unlock()
		s.m.inFlight.Dec()
	}
	if !s.life.Go(func(context.Context) { a.run(ctx, recovered); end() }) {
		end() // stopped: the partition's next owner runs the plan
	}
}

// forgetIdle drops the cached state and health of sessions with no plan
// for sessionCacheIdle; the sweeper calls it.
func (s *Scheduler) forgetIdle(now time.Time) {
	s.mu.Lock()
	var idle []string
	for session, since := range s.idleSince {
		if s.bySess[session] > 0 {
			delete(s.idleSince, session)
			continue
		}
		if now.Sub(since) >= sessionCacheIdle {
			idle = append(idle, session)
			delete(s.idleSince, session)
		}
	}
	s.mu.Unlock()
	for _, session := range idle {
		s.sessions.Forget(session)
		s.health.Forget(session)
	}
}

// sweep forgets idle sessions' caches until the scheduler stops.
func (s *Scheduler) sweep(ctx context.Context) {
	t := time.NewTicker(sessionCacheIdle / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.forgetIdle(now)
		}
	}
}

func (s *Scheduler) actor(plan string) *actor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.actors[plan]
}

// stopActors stops the actors of partition p and waits for them; it
// returns the last pending state write of each.
func (s *Scheduler) stopActors(p int) []*partition.Write {
	s.mu.Lock()
	list := make([]*actor, 0, len(s.actors))
	for _, a := range s.actors {
		if a.part.P == p {
			list = append(list, a)
		}
	}
	s.mu.Unlock()
	for _, a := range list {
		a.mb.put(stopActor{})
	}
	var writes []*partition.Write
	for _, a := range list {
		<-a.done
		if a.lastWrite != nil {
			writes = append(writes, a.lastWrite)
		}
	}
	return writes
}

// onOutcomeMsg routes an outcome from its partition's consumer to its
// plan's actor, which acks it once its effect is persisted. Outcomes of
// unknown (finished) plans are acked.
func (s *Scheduler) onOutcomeMsg(ctx context.Context, _ *ownedPartition, msg jetstream.Msg) {
	o, ok := s.checkOutcome(msg)
	if !ok {
		return
	}
	a := s.actor(o.PlanID)
	if a == nil {
		s.unknownOutcome(ctx, msg, &o)
		return
	}
	a.mb.put(outcomeMsg{out: o, msg: msg})
}

// checkOutcome decodes an outcome and checks its token; an outcome that
// fails either is terminated, logged and counted, and ok is false.
func (s *Scheduler) checkOutcome(msg jetstream.Msg) (o messages.Outcome, ok bool) {
	if err := codec.Unmarshal(msg.Data(), &o); err != nil {
		s.m.badMessages.WithLabelValues("outcome").Inc()
		s.log.Error("scheduler: malformed outcome dropped", slog.String("subject", msg.Subject()), slog.Any("error", err))
		_ = msg.Term()
		return o, false
	}
	if !s.keys.valid(&o) {
		// Not from the worker that took the attempt: made up by another
		// holder of worker credentials, or replayed onto another attempt.
		s.m.forged.Inc()
		s.log.Error("scheduler: outcome refused: its token is not the attempt's (not from the worker that took the job)",
			slog.String("planId", o.PlanID), slog.String("toolId", o.ToolID), slog.Int("attempt", o.Attempt), slog.String("worker", o.Worker),
			slog.String("subject", msg.Subject()))
		_ = msg.Term()
		return o, false
	}
	return o, true
}

// unknownOutcome handles an outcome of a plan this scheduler has no actor
// for. It is acked (dropped) only when the plan is known to be over: no
// record, or a published one. While stepping down, or when the record
// cannot be read, it is left unacked, so the next leader gets it; an
// outcome dropped here while its plan still runs would stall that plan.
func (s *Scheduler) unknownOutcome(ctx context.Context, msg jetstream.Msg, o *messages.Outcome) {
	if ctx.Err() != nil {
		return
	}
	rec, err := s.store.getPlan(ctx, o.PlanID)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		s.log.Warn("scheduler: outcome of a plan not in flight here; left for redelivery", slog.String("planId", o.PlanID), slog.Any("error", err))
		return
	case rec.Phase != planfsm.PhasePublished:
		// In flight, but not (yet or any more) on this scheduler.
		return
	}
	_ = msg.Ack()
}

// planCheckLenient rebuilds a persisted plan's graph without the registry
// (it was checked against it at intake).
func planCheckLenient(p *messages.Plan) (*plancheck.Checked, error) {
	return plancheck.CheckPlan(p, lenientResolver{})
}

// resolvedScripts decides each tool's attempt timeout once, at intake: the
// tool's timeoutMs, else the script's manifest timeout, else 30 s (§3).
// It is persisted with the plan, so a recovered plan keeps it.
func resolvedScripts(c *plancheck.Checked) []planfsm.Script {
	out := make([]planfsm.Script, len(c.Plan.Tools))
	for i := range c.Plan.Tools {
		t := &c.Plan.Tools[i]
		var sc plancheck.Script
		if i < len(c.Scripts) {
			sc = c.Scripts[i]
		}
		if sc.Skill == "" {
			if ref, err := messages.ParseToolPath(t.ToolPath); err == nil {
				sc.Skill, sc.Name = ref.Skill, ref.Script
			}
		}
		timeout := messages.ToolTimeoutDefault
		switch {
		case t.TimeoutMs > 0:
			timeout = time.Duration(t.TimeoutMs) * time.Millisecond
		case sc.Timeout > 0:
			timeout = sc.Timeout
		}
		out[i] = planfsm.Script{Skill: sc.Skill, Name: sc.Name, TimeoutMs: timeout.Milliseconds(), NoReuse: sc.NoReuse}
	}
	return out
}

// What the scheduler needs in JetStream (see bus.Guard).
var (
	schedulerStreams = []string{messages.StreamPlans, messages.StreamOutcomes, messages.StreamApprovals, messages.StreamJobs,
		messages.StreamResults, messages.StreamEvents}
	schedulerBuckets = []string{messages.BucketSessions, messages.BucketHealth, messages.BucketPlans, messages.BucketReuse,
		messages.BucketSkills, messages.BucketKeys}
)
