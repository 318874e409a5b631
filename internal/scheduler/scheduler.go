package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	// gate admits jobs to the work queue by fair share (fair.go).
	gate     *fairGate
	weights  *tenantWeights
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

	// hist indexes finished plans for history requests (control.go).
	hist historyIndex

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
	healthKV, skillsKV, err := s.openStores(ctx)
	if err != nil {
		return err
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
	if s.cfg.FairDispatch == nil || *s.cfg.FairDispatch {
		s.weights = newTenantWeights()
		s.gate = newFairGate(s.registry.capacity, s.weights, s.m)
		if s.bus.Tenants {
			s.life.Go(func(ctx context.Context) { s.weights.run(ctx, s.js, s.log) })
		}
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

// openStores opens the buckets and streams the scheduler reads and writes,
// and its partition manager.
func (s *Scheduler) openStores(ctx context.Context) (healthKV, skillsKV jetstream.KeyValue, err error) {
	kv := func(name string) (jetstream.KeyValue, error) {
		b, err := s.js.KeyValue(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("scheduler: open bucket %s: %w", name, err)
		}
		return b, nil
	}
	plans, err := kv(messages.BucketPlans)
	if err != nil {
		return nil, nil, err
	}
	stream, err := s.js.Stream(ctx, bus.KVStream(messages.BucketPlans))
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler: plan state stream: %w", err)
	}
	sessions, err := kv(messages.BucketSessions)
	if err != nil {
		return nil, nil, err
	}
	healthKV, err = kv(messages.BucketHealth)
	if err != nil {
		return nil, nil, err
	}
	skillsKV, err = kv(messages.BucketSkills)
	if err != nil {
		return nil, nil, err
	}
	reuseKV, err := kv(messages.BucketReuse)
	if err != nil {
		return nil, nil, err
	}
	if s.owners, err = kv(messages.BucketOwners); err != nil {
		return nil, nil, err
	}
	s.parts, err = partition.New(s.owners, partition.Config{ID: s.cfg.ID, Group: partitionGroup, Count: s.bus.Partitions,
		TTL: s.cfg.LeaseTTL, Logger: s.log}, s.own)
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler: %w", err)
	}
	approvals, err := s.js.Stream(ctx, messages.StreamApprovals)
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler: approvals stream: %w", err)
	}
	results, err := s.js.Stream(ctx, messages.StreamResults)
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler: results stream: %w", err)
	}
	s.reuse = &reuseStore{kv: reuseKV}
	s.store = &store{js: s.js, kv: plans, stream: stream, approvals: approvals, results: results, subj: s.subj, room: newRoom(stream),
		valueMax: stream.CachedInfo().Config.MaxMsgSize, headroom: RecordHeadroom(s.cfg.MaxContextIterations)}
	sessionsStream, err := s.js.Stream(ctx, bus.KVStream(messages.BucketSessions))
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler: session state stream: %w", err)
	}
	s.sessions = newSessionStore(sessions, s.js, sessionsStream, s.cfg.MaxStateBytes)
	if s.bus.Tenants {
		s.sessions.subj = &s.subj
	}
	return healthKV, skillsKV, nil
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
	end := func() {
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
func (s *Scheduler) checkOutcome(msg outcomeDelivery) (o messages.Outcome, ok bool) {
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
