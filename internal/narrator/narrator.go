package narrator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/lifecycle"
	"github.com/narratoria/runtime/internal/llm"
	"github.com/narratoria/runtime/internal/partition"
	"github.com/narratoria/runtime/internal/planner"
	"github.com/narratoria/runtime/internal/promptfsm"
	"github.com/narratoria/runtime/internal/tracing"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// ServiceName is the narrator's NATS micro service name.
const ServiceName = "narratoria-narrator"

// promptsConsumer names the durable prompt consumers, one per partition
// (narrator-prompts-<p>).
const promptsConsumer = "narrator-prompts"

// Options are the narrator's collaborators; every field is optional.
type Options struct {
	// Logger receives structured logs. Default: discard.
	Logger *slog.Logger
	// Registerer receives the Prometheus collectors. Default: none.
	Registerer prometheus.Registerer
	// Bus names the subject prefix and stream sizing.
	Bus bus.Config
	// Planner replaces the configured planner (tests, embedding).
	Planner planner.Planner
	// Version is reported by the micro service, as bus.ServiceVersion
	// makes it (default bus.VersionDefault; not SemVer: 0.0.0-dev+…).
	Version string
}

// Narrator turns prompts into narrations. Create it with New, Start it, Stop it.
type Narrator struct {
	// guard keeps the streams and buckets this component needs there.
	guard *bus.Guard
	cfg   Config
	bus   bus.Config
	subj  messages.Subjects
	// quota is each tenant's prompt rate (nil: none).
	quota *tenantQuota
	// shares are the tenants' shares of the prompts stream, checked at
	// intake (intake.go); intakeLog spaces out the logs of its refusals.
	shares    *promptShares
	intakeLog *reportLimiter
	nc        *nats.Conn
	js        jetstream.JetStream
	log       *slog.Logger
	m         *metrics
	opts      Options
	planner   planner.Planner
	rules     planner.RulePlanner
	// model is the model server's client, meter and budget; prose writes
	// successful narrations' prose through it (nil: the template's).
	model *model
	prose *proseWriter
	// dry bounds the plan requests answered at once (dryplan.go).
	dry      chan struct{}
	cat      *catalogueSource
	dedupe   jetstream.KeyValue
	attempts *attemptStore

	sem chan struct{}
	// parts shares the partitions with the other narrators.
	parts *partition.Manager
	// owned are the partitions this narrator owns now.
	owned *partition.Holdings[*ownedPartition]
	// rooms are the owned partitions' rooms (rooms.go): each owns its
	// session queues and its prompts in progress. roomsMu guards the map,
	// and orders a room's making against Stop's look at them.
	roomsMu sync.Mutex
	rooms   map[int]*room
	// inflight counts the prompts with an ID queued or being narrated.
	inflight atomic.Int64
	// fwdMu guards fwdClosed, set once Stop has begun: no request is
	// forwarded after it, so Stop's wait on forwarding cannot race an Add.
	fwdMu     sync.Mutex
	fwdClosed bool

	// life starts and stops the narrator: no prompt starts once its
	// Stopping is closed. ctx is its work context (life.Context()):
	// narrations run under it; Stop cancels it after the grace. The
	// partition manager and the model fitting run under life.Go.
	// fetchCtx, its child, ends intake first.
	life        *lifecycle.Service
	ctx         context.Context
	fetchCtx    context.Context
	fetchCancel context.CancelFunc
	forwarding  sync.WaitGroup // requests handed to another narrator
	svc         micro.Service
}

// New checks the configuration and builds a narrator on an open connection.
func New(nc *nats.Conn, cfg Config, opts Options) (*Narrator, error) {
	cfg.LeaseTTL = partition.LeaseTTL(cfg.LeaseTTL, opts.Bus.Replicas)
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	bc, err := bus.NewClient("narrator", nc, opts.Bus, opts.Logger)
	if err != nil {
		return nil, err
	}
	b, js, log := bc.Config, bc.JS, bc.Log
	opts.Version = bus.ServiceVersion(opts.Version)
	n := &Narrator{cfg: cfg, bus: b, subj: b.Subjects(), quota: newTenantQuota(cfg.TenantPromptRate, cfg.TenantPromptBurst), nc: nc, js: js, log: log, m: newMetrics(opts.Registerer),
		opts: opts, sem: make(chan struct{}, cfg.Sessions), rooms: map[int]*room{},
		life: lifecycle.New("narrator"), cat: newCatalogueSource(cfg.WorkerTTL, log)}
	n.ctx = n.life.Context()
	n.owned = partition.NewHoldings[*ownedPartition](b.Partitions, n.m.partitions)
	n.fetchCtx, n.fetchCancel = context.WithCancel(n.ctx)
	n.cat.sight = bus.NewSight(nc, cfg.WorkerTTL)
	n.model, n.dry = newModel(cfg.LLM, js, opts.Registerer, log), make(chan struct{}, dryPlans)
	switch {
	case opts.Planner != nil:
		n.planner = opts.Planner
	case cfg.Planner == "llm":
		n.planner = planner.NewLLMPlannerOn(n.model.client)
	default:
		n.planner = n.rules
	}
	if cfg.Prose == "llm" {
		n.prose = &proseWriter{client: n.model.client, nc: nc, subj: n.subj}
	}
	return n, nil
}

// Start provisions streams and buckets, follows the registry and health,
// and joins the narrators sharing the partitions: for each one it comes to
// own, the prompts a previous owner left unacknowledged come back at once
// (see partitions.go) and its prompts are narrated. Start once: a second
// Start, or one after Stop, is an error; one that fails leaves nothing
// running but Stop is still to be called.
func (n *Narrator) Start(ctx context.Context) error {
	return n.life.Start(func(context.Context) error { return n.start(ctx) })
}

// start is Start's work, under n.life: a failure cancels n.ctx and waits
// for the goroutines started so far.
func (n *Narrator) start(ctx context.Context) error {
	n.guard = bus.NewGuard(n.js, n.bus, narratorStreams, narratorBuckets, "narrator", n.opts.Registerer, n.log)
	if err := n.guard.Ensure(ctx); err != nil {
		return fmt.Errorf("narrator: %w", err)
	}
	kv := func(name string) (jetstream.KeyValue, error) {
		b, err := n.js.KeyValue(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("narrator: open bucket %s: %w", name, err)
		}
		return b, nil
	}
	skillsKV, err := kv(messages.BucketSkills)
	if err != nil {
		return err
	}
	healthKV, err := kv(messages.BucketHealth)
	if err != nil {
		return err
	}
	if n.dedupe, err = kv(messages.BucketPrompts); err != nil {
		return err
	}
	inflight, err := kv(messages.BucketInflight)
	if err != nil {
		return err
	}
	results, err := n.js.Stream(ctx, messages.StreamResults)
	if err != nil {
		return fmt.Errorf("narrator: open stream %s: %w", messages.StreamResults, err)
	}
	n.attempts = &attemptStore{kv: inflight, js: n.js, results: results, partitions: n.bus.Partitions}
	owners, err := kv(messages.BucketOwners)
	if err != nil {
		return err
	}
	n.parts, err = partition.New(owners, partition.Config{ID: n.cfg.ID, Group: partitionGroup, Count: n.bus.Partitions,
		TTL: n.cfg.LeaseTTL, Logger: n.log}, n.own)
	if err != nil {
		return fmt.Errorf("narrator: %w", err)
	}
	if err := n.cat.run(n.ctx, skillsKV, healthKV); err != nil {
		return fmt.Errorf("narrator: %w", err)
	}
	if err := n.startService(); err != nil {
		return err
	}
	if err := n.startIntake(); err != nil {
		return err
	}
	n.life.Go(func(ctx context.Context) {
		n.cat.warm(ctx, func(d time.Duration) {
			n.m.modelFits.Observe(d.Seconds())
			n.log.Info("narrator: rule planner's model fitted to the live skills", slog.Duration("took", d))
		})
	})
	n.life.Go(n.parts.Run) // ends after the grace, when Stop cancels the work context
	// Make sure the server has every subscription before Start returns,
	// so a request sent right after reaches the service.
	if err := n.nc.FlushTimeout(5 * time.Second); err != nil {
		return fmt.Errorf("narrator: flush: %w", err)
	}
	n.log.Info("narrator: started", slog.String("planner", n.planner.Name()))
	n.guard.Start()
	return nil
}

// Ready reports nil while the narrator runs and is connected.
func (n *Narrator) Ready() error {
	if err := bus.Ready(n.life.Ready(), n.nc); err != nil {
		return err
	}
	if n.guard != nil {
		return n.guard.Ready()
	}
	return nil
}

// Stop stops taking prompts (requests and the stream), lets the prompts
// being narrated finish for up to the shutdown grace, then cancels the
// rest. A prompt not narrated is never acknowledged: it is redelivered and
// the next narrator resumes it from its durable attempt record, waiting for
// the plan already running. A request not answered gets ErrStopping.
// Idempotent, safe before Start (the narrator then never starts) and while
// Start runs (it waits for it).
func (n *Narrator) Stop() {
	n.life.Stop(n.drainAll, func() {
		if n.guard != nil {
			n.guard.Stop()
		}
		n.log.Info("narrator: stopped")
	})
}

// drainAll is Stop's first step, with life.Stopping closed and the work
// context still live: the intake ends, and the prompts being narrated get
// the grace; then life cancels the work context (which hands the
// partitions over) and waits for the session queues.
func (n *Narrator) drainAll() {
	n.log.Info("narrator: stopping", slog.Int("inFlight", n.inFlight()))
	n.fwdMu.Lock()
	n.fwdClosed = true
	n.fwdMu.Unlock()
	if n.svc != nil {
		_ = n.svc.Stop()
	}
	n.fetchCancel() // the partitions' consumers stop; their leases are kept during the grace
	n.forwarding.Wait()
	// The grace waits for the prompts being narrated.
	rooms := n.stopRooms()
	grace := time.NewTimer(n.cfg.ShutdownGrace)
	defer grace.Stop()
	for _, r := range rooms {
		select {
		case <-r.idle:
		case <-r.ended:
		case <-grace.C:
			n.log.Warn("narrator: grace period over; prompts still being narrated are left to the next narrator",
				slog.Int("inFlight", n.inFlight()))
			return
		}
	}
}

// stopRooms makes every room stop taking prompts (a room made from now on
// takes none: Stopping is closed) and returns them.
func (n *Narrator) stopRooms() []*room {
	n.roomsMu.Lock()
	rooms := slices.Collect(maps.Values(n.rooms))
	n.roomsMu.Unlock()
	for _, r := range rooms {
		r.do(func() { r.stop(ErrStopping) })
	}
	return rooms
}

// stopping reports whether Stop has begun: no prompt starts then.
func (n *Narrator) stopping() bool {
	select {
	case <-n.life.Stopping():
		return true
	default:
		return false
	}
}

// inFlight is the number of prompts with an ID queued or being narrated.
func (n *Narrator) inFlight() int { return int(n.inflight.Load()) }

func (n *Narrator) startService() error {
	svc, err := micro.AddService(n.nc, micro.Config{
		Name:         ServiceName,
		Version:      n.opts.Version,
		Description:  "Turns prompts into narrations by planning and running skills",
		Metadata:     map[string]string{"narrator": n.cfg.ID},
		StatsHandler: func(*micro.Endpoint) any { return n.Status() },
	})
	if err != nil {
		return fmt.Errorf("narrator: micro service: %w", err)
	}
	err = svc.AddEndpoint("narrate", micro.HandlerFunc(n.onNarrate), micro.WithEndpointSubject(n.subj.In("*").Narrate()))
	if err == nil {
		err = svc.AddEndpoint("context", micro.HandlerFunc(n.onContext), micro.WithEndpointSubject(n.subj.All("context")),
			micro.WithEndpointQueueGroup(contextQueueGroup))
	}
	if err == nil {
		err = svc.AddEndpoint("plan", micro.HandlerFunc(n.onPlanRequest), micro.WithEndpointSubject(n.subj.PlannerPlan()),
			micro.WithEndpointQueueGroup(contextQueueGroup))
	}
	if err != nil {
		_ = svc.Stop()
		return fmt.Errorf("narrator: micro endpoint: %w", err)
	}
	n.svc = svc
	return nil
}

// refuse answers a stream prompt over its tenant's quota with a refusal
// on its narration subject, then drops it; a refusal that cannot be
// published leaves the prompt to be delivered again.
func (n *Narrator) refuse(msg jetstream.Msg, p *messages.Prompt, why error, report int) {
	n.refused(messages.TenantOf(p.SessionID), why, report)
	nar := &messages.Narration{SessionID: p.SessionID, PromptID: p.PromptID, Refused: why.Error()}
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	if _, err := n.publishNarration(ctx, p.SessionID, "", nar, false); err != nil {
		n.log.Warn("narrator: refusal not published; the prompt will come again", slog.Any("error", err))
		_ = msg.NakWithDelay(time.Second)
		return
	}
	_ = msg.Ack()
}

// charge spends one prompt of tenant's quota, unless the prompt (key) is
// already queued or being narrated in op's room: a retry joins it for free.
func (n *Narrator) charge(op *ownedPartition, tenant messages.Tenant, key string) (int, error) {
	if n.quota == nil || tenant == "" {
		return 0, nil // no quota: nothing to look up on the prompt path
	}
	if key != "" && op.room.has(key) {
		return 0, nil
	}
	return n.quota.take(tenant, time.Now())
}

// refused counts a prompt refused for its tenant's quota, and logs the
// refusals at most once a second per tenant (report of them since the
// last line).
func (n *Narrator) refused(tenant messages.Tenant, why error, report int) {
	n.m.overQuota.WithLabelValues(tenant.String()).Inc()
	if report > 0 {
		n.log.Warn("narrator: prompts refused", slog.String("tenant", tenant.String()), slog.Int("refused", report), slog.String("problem", why.Error()))
	}
}

// onPromptMsg validates a stream prompt of an owned partition and queues
// it; the message is acked once its narration is published, and left
// unacknowledged when the narrator stops or loses the partition first.
func (n *Narrator) onPromptMsg(op *ownedPartition, msg jetstream.Msg) {
	// <prefix>.prompts.<partition>.<session>, the session two tokens with
	// tenants.
	session := n.subj.SessionAt(msg.Subject(), n.subj.KindToken()+2)
	p, err := messages.DecodeTenantPrompt(msg.Data(), messages.TenantOf(session), messages.LocalSession(session))
	if err == nil && session == "" {
		err = fmt.Errorf("subject %q names no valid session", msg.Subject())
	}
	if err != nil {
		n.m.prompts.WithLabelValues("invalid").Inc()
		n.log.Warn("narrator: invalid prompt acknowledged and dropped", slog.String("subject", msg.Subject()), slog.String("problem", err.Error()))
		_ = msg.Term()
		return
	}
	if report, err := n.charge(op, messages.TenantOf(p.SessionID), promptKey(p, "")); err != nil {
		n.refuse(msg, p, err, report)
		return
	}
	implicitID := ""
	var seq uint64
	if md, err := msg.Metadata(); err == nil {
		seq = md.Sequence.Stream
		implicitID = fmt.Sprintf("seq-%d", seq)
	}
	stopKeepAlive := keepAlive(msg, n.cfg.AckWait/3)
	op.room.enqueue(tracing.Extract(context.Background(), msg.Headers()), p, implicitID, seq, func(_ *messages.Narration, err error) {
		stopKeepAlive()
		switch {
		case err == nil:
			_ = msg.Ack()
		case errors.Is(err, ErrStopping) || errors.Is(err, context.Canceled) || errors.Is(err, errNotOwner):
			// Left for the partition's next owner, which rewinds the consumer.
		default: // try again soon, from the attempt record
			_ = msg.NakWithDelay(time.Second)
		}
	})
}

func keepAlive(msg jetstream.Msg, every time.Duration) func() {
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(stop) }) }
}

// job is one prompt to narrate and everyone waiting for its narration.
type job struct {
	// part is the ownership the prompt is narrated under.
	part       *ownedPartition
	prompt     *messages.Prompt
	implicitID string
	key        string // dedupe key; "" for a request without a promptId
	seq        uint64 // stream sequence; 0 for a request
	at         time.Time
	done       []func(*messages.Narration, error)
	// trace holds the trace context the prompt came with (headers).
	trace context.Context
}

// promptKey is the prompt's dedupe key, "" when it has no ID.
func promptKey(p *messages.Prompt, implicitID string) string {
	if id := cmp.Or(p.PromptID, implicitID); id != "" {
		return dedupeKey(p.SessionID, id)
	}
	return ""
}

// narrateQueued narrates a queued prompt once a narration slot is free
// (cfg.Sessions at once), unless the narrator stops or the partition is
// given up first.
func (n *Narrator) narrateQueued(j *job) (*messages.Narration, error) {
	select {
	case n.sem <- struct{}{}:
	case <-n.life.Stopping():
		return nil, ErrStopping
	case <-j.part.Context().Done():
		return nil, errNotOwner
	}
	defer func() { <-n.sem }()
	if j.part.Context().Err() != nil {
		return nil, errNotOwner
	}
	nar, err := n.narrateJob(j)
	if err == nil {
		n.m.latency.Observe(time.Since(j.at).Seconds())
	}
	return nar, err
}

// narrateJob narrates j. A stream prompt that fails (NATS trouble: its
// attempt record, plan or narration could not be written) is tried again in
// place, with backoff, so its session's later prompts keep waiting for it;
// a request gets the error and may be retried by its sender.
func (n *Narrator) narrateJob(j *job) (*messages.Narration, error) {
	backoff := 250 * time.Millisecond
	ctx := tracing.Link(j.part.Context(), j.trace)
	for {
		nar, err := n.narrate(ctx, j.part, j.prompt, j.implicitID)
		if err == nil || j.seq == 0 || ctx.Err() != nil || errors.Is(err, errNotOwner) {
			return nar, err
		}
		n.log.Warn("narrator: narration failed; trying again", slog.String("sessionId", j.prompt.SessionID),
			slog.String("key", j.key), slog.Duration("in", backoff), slog.Any("error", err))
		select {
		case <-n.life.Stopping():
			return nil, ErrStopping
		case <-ctx.Done():
			return nil, errNotOwner
		case <-time.After(backoff):
		}
		// At most a second: a write refused while a stream elects a
		// leader fails at once and costs nothing to try again, and a
		// longer wait only adds to the prompt's stall once it is back.
		backoff = min(2*backoff, time.Second)
	}
}

// dedupeKey is the bucket key of a prompt's narration and of its attempt record.
func dedupeKey(session, id string) string { return session + "." + id }

// Narrate runs the replan loop for one prompt and publishes its narration.
// implicitID stands for the promptId of a stream prompt without one. A
// prompt with an ID is narrated once: one already narrated is answered from
// the dedupe bucket, and one whose attempt is recorded as running (another
// narrator took it, or one that died did) is carried on from that attempt.
// The prompt's life is a promptfsm.Machine; Narrate is its shell: it
// performs each effect the machine asks for and feeds back what it found.
func (n *Narrator) Narrate(ctx context.Context, p *messages.Prompt, implicitID string) (*messages.Narration, error) {
	return n.narrate(ctx, nil, p, implicitID)
}

// narrate is Narrate under op, the ownership of the session's partition
// (nil: none, a direct call).
func (n *Narrator) narrate(ctx context.Context, op *ownedPartition, p *messages.Prompt, implicitID string) (nar *messages.Narration, err error) {
	ctx, span := tracing.Tracer("narrator").Start(ctx, "narrator.prompt", oteltrace.WithSpanKind(oteltrace.SpanKindConsumer),
		oteltrace.WithAttributes(attribute.String("narratoria.session", p.SessionID), attribute.String("narratoria.prompt", p.PromptID)))
	defer func() {
		if nar != nil {
			span.SetAttributes(attribute.Int("narratoria.attempts", nar.Attempts), attribute.Bool("narratoria.fallback", nar.Fallback),
				attribute.String("narratoria.plan", nar.PlanID))
		}
		tracing.End(span, err)
	}()
	sh := &promptShell{n: n, p: p, key: promptKey(p, implicitID), ctx: ctx, op: op,
		log: n.log.With(slog.String("sessionId", p.SessionID), slog.String("promptId", p.PromptID))}
	defer sh.unfollow(nil)
	m := promptfsm.New(promptfsm.Config{MaxAttempts: n.cfg.MaxAttempts}, promptfsm.Prompt{Key: sh.key, ReceivedAt: time.Now()})
	effs, err := m.Step(time.Now(), promptfsm.Begin{})
	for err == nil && len(effs) > 0 {
		e := effs[0]
		effs = effs[1:]
		var ev promptfsm.Event
		switch e := e.(type) {
		case promptfsm.Finish:
			return sh.finish(e), nil
		case promptfsm.Abort:
			if sh.ctx.Err() == nil && !errors.Is(e.Err, errNotOwner) {
				n.m.prompts.WithLabelValues("error").Inc()
			}
			return nil, e.Err
		default:
			if ev, err = sh.perform(e); err != nil {
				break
			}
		}
		if ev == nil {
			continue
		}
		var more []promptfsm.Effect
		more, err = m.Step(time.Now(), ev)
		effs = append(effs, more...)
	}
	if err == nil {
		err = fmt.Errorf("narrator: the prompt's machine stopped in phase %s with nothing to do", m.Phase())
	}
	if errors.Is(err, promptfsm.ErrUnexpected) || errors.Is(err, promptfsm.ErrRefusedMove) {
		n.log.Error("narrator: the prompt's machine refused a move", slog.String("sessionId", p.SessionID), slog.Any("error", err))
	}
	return nil, err
}

// publishNarration publishes a narration (message ID narration.<key>). With
// ifMissing it first looks for the prompt's narration among the session's
// stored narrations and publishes only when none is there, so live
// subscribers do not see it twice; the one it found is returned, the
// prompt's answer (a narrator whose store refused it may have built the
// template while another published the real narration).
func (n *Narrator) publishNarration(ctx context.Context, session, key string, nar *messages.Narration, ifMissing bool) (*messages.Narration, error) {
	subj, err := n.subj.Narrations(session)
	if err != nil {
		return nil, err
	}
	earlierOut := func() *messages.Narration {
		since := time.Now().Add(-time.Duration(nar.DurationMs)*time.Millisecond - planLookback)
		var earlier *messages.Narration
		serr := bus.ScanSubject(ctx, n.nc, messages.StreamNarrations, subj, since, func(data []byte) bool {
			var other messages.Narration
			if json.Unmarshal(data, &other) == nil && other.PromptID == nar.PromptID {
				earlier = &other
			}
			return earlier == nil
		})
		if serr != nil {
			return nil
		}
		return earlier
	}
	if ifMissing {
		if earlier := earlierOut(); earlier != nil {
			return earlier, nil
		}
	}
	data, _ := json.Marshal(nar)
	var pubOpts []jetstream.PublishOpt
	if key != "" {
		pubOpts = append(pubOpts, jetstream.WithMsgID("narration."+key))
	}
	m := &nats.Msg{Subject: subj, Data: data}
	m.Header = nats.Header{}
	for k, v := range messages.NarrationHeaders(nar) {
		m.Header.Set(k, v)
	}
	tracing.Inject(ctx, m)
	ack, err := client.PublishRetry(ctx, n.js, m, client.PublishRetryDefault, pubOpts...)
	if err != nil {
		return nil, fmt.Errorf("publish narration: %w", err)
	}
	if ack != nil && ack.Duplicate && key != "" {
		// The stream knew the message ID: the prompt's narration is out
		// already (a narrator whose claim the dedupe store refused
		// published its own). That one is the answer.
		// (A retry of this publish whose first answer was lost finds its
		// own narration: that is no other's.)
		if earlier := earlierOut(); earlier != nil && !sameNarration(earlier, nar) {
			return earlier, nil
		}
	}
	return nil, nil
}

// sameNarration says whether two narrations of a prompt are one: the same
// attempt's plan, narrated alike.
func sameNarration(a, b *messages.Narration) bool {
	return a.PlanID == b.PlanID && a.Attempts == b.Attempts && a.Fallback == b.Fallback && a.Cancelled == b.Cancelled &&
		a.Text == b.Text
}

// narrated returns the stored narration of a prompt, nil when there is none.
func (n *Narrator) narrated(ctx context.Context, key string) (*messages.Narration, error) {
	e, err := n.dedupe.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read narration %s: %w", key, err)
	}
	var nar messages.Narration
	if json.Unmarshal(e.Value(), &nar) != nil {
		return nil, nil
	}
	return &nar, nil
}

// promptShell performs the effects of one prompt's machine.
type promptShell struct {
	n   *Narrator
	p   *messages.Prompt
	key string
	// ctx is the prompt's context; once its narration is built it no
	// longer ends with the partition: claimed or not, it is published.
	ctx context.Context
	log *slog.Logger
	// refusal is the last write the store refused for good.
	refusal error
	// op is the ownership of the session's partition the prompt runs
	// under (nil for a direct call of Narrate): only its holder records
	// attempts and sends plans.
	op *ownedPartition
	// following listens for the result of the plan being run (running.go).
	following *following
	// resumed: the prompt's running attempt was taken over.
	resumed bool
	// decoded is the plan of the attempt being run, as generated here or
	// decoded once from its record (plan).
	decoded *messages.Plan
}

// plan returns rec's plan: the one generated or decoded last when it is
// rec's, else decoded from the record (and kept).
func (sh *promptShell) plan(rec *messages.PromptAttempt) (*messages.Plan, error) {
	if p := sh.decoded; p != nil && p.RequestID == rec.PlanID {
		return p, nil
	}
	p, err := decodeRecordedPlan(rec)
	if err != nil {
		return nil, err
	}
	sh.decoded = p
	return p, nil
}

// failed answers an effect that failed: the prompt's machine hears of it
// (Refused when the store refused a write for good), unless the prompt's
// context ended or its partition was lost, which end the prompt at once.
func (sh *promptShell) failed(err error) (promptfsm.Event, error) {
	if sh.ctx.Err() != nil {
		return nil, sh.ctx.Err()
	}
	if errors.Is(err, errNotOwner) {
		return nil, err
	}
	refused := client.Refused(err)
	if refused {
		sh.refusal = err
	}
	return promptfsm.Failed{Err: err, Refused: refused}, nil
}

// perform does one effect and returns the event that answers it (nil for
// effects without an answer). An error aborts the prompt at once (the
// partition was lost, or the narrator stops).
func (sh *promptShell) perform(e promptfsm.Effect) (promptfsm.Event, error) {
	n, ctx, log := sh.n, sh.ctx, sh.log
	failed := sh.failed
	switch e := e.(type) {
	case promptfsm.LoadAttempt:
		rec, rev, err := n.attempts.load(ctx, e.Key, log)
		if err != nil {
			return failed(err)
		}
		broken := false
		if rec != nil {
			if _, err := sh.plan(rec); err != nil {
				log.Error("narrator: recorded attempt unreadable; planning it anew", slog.Int("attempt", rec.Attempt), slog.Any("error", err))
				broken = true
			}
		}
		return promptfsm.AttemptLoaded{Record: rec, Revision: rev, Broken: broken}, nil
	case promptfsm.LookupNarration:
		nar, err := n.narrated(ctx, e.Key)
		if err != nil {
			return failed(err)
		}
		if nar != nil {
			log.Info("narrator: prompt already narrated; returning the earlier narration")
		}
		return promptfsm.NarrationFound{Narration: nar}, nil
	case promptfsm.Resumed:
		sh.resumed = true
		n.m.resumed.Inc()
		log.Info("narrator: taking over the running attempt", slog.Int("attempt", e.Record.Attempt), slog.String("planId", e.Record.PlanID))
		return nil, nil
	case promptfsm.Generate:
		cat := n.cat.Catalogue(sh.p.SessionID, e.Disabled)
		plan := n.generate(ctx, planner.Request{SessionID: sh.p.SessionID, Text: sh.p.Text, Attempt: e.Attempt, ParentPlanID: e.Parent,
			DisabledSkills: e.Disabled, Catalogue: cat}, log)
		raw, err := json.Marshal(plan)
		if err != nil {
			return nil, fmt.Errorf("encode plan %s: %w", plan.RequestID, err)
		}
		sh.decoded = plan // encoded once, for the record and the plans stream; never decoded again here
		return promptfsm.Generated{PlanID: plan.RequestID, Plan: raw}, nil
	case promptfsm.SaveAttempt:
		if op := sh.op; op != nil && !op.Term.Held() {
			op.Lapsed("attempt record")
			return nil, errNotOwner
		}
		rev, err := n.attempts.save(ctx, e.Key, e.Record, e.Revision)
		if bus.IsConflict(err) {
			return promptfsm.AttemptConflict{}, nil
		}
		if err != nil {
			return failed(err)
		}
		return promptfsm.AttemptSaved{Revision: rev}, nil
	case promptfsm.LookupResult:
		return sh.lookupResult(e)
	case promptfsm.CheckPlan:
		return sh.checkPlan(e)
	case promptfsm.SendPlan:
		return sh.sendPlan(e)
	case promptfsm.Await:
		return sh.await(e)
	case promptfsm.Build:
		return promptfsm.Built{Narration: sh.build(e)}, nil
	case promptfsm.Claim:
		data, _ := json.Marshal(e.Narration)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := n.dedupe.Create(cctx, e.Key, data)
		cancel()
		switch {
		case bus.IsConflict(err):
			// Another narrator following the same attempt claimed it first.
			earlier, rerr := n.narrated(ctx, e.Key)
			if rerr != nil {
				log.Warn("narrator: another narrator's narration could not be read", slog.Any("error", rerr))
			}
			return promptfsm.ClaimConflict{Earlier: earlier}, nil
		case err != nil:
			log.Warn("narrator: prompt not remembered for dedupe", slog.Any("error", err))
			return failed(err)
		}
		return promptfsm.Claimed{}, nil
	case promptfsm.Publish:
		earlier, err := n.publishNarration(ctx, sh.p.SessionID, sh.key, e.Narration, e.IfMissing)
		if err != nil {
			return failed(err)
		}
		return promptfsm.Published{Earlier: earlier}, nil
	case promptfsm.Forget:
		n.attempts.forget(ctx, e.Key, log)
		return nil, nil
	}
	return nil, fmt.Errorf("narrator: the prompt's machine asked for %T, which the shell does not know", e)
}

// generationDeadline bounds plan generation (§8.1).
const generationDeadline = 5 * time.Second

// generate asks the planner, falling back to the rule-based planner when it
// fails, times out or returns an invalid plan.
func (n *Narrator) generate(ctx context.Context, req planner.Request, log *slog.Logger) *messages.Plan {
	gctx, cancel := context.WithTimeout(ctx, generationDeadline)
	defer cancel()
	t0 := time.Now()
	plan, err := n.planner.Plan(gctx, req)
	n.m.plannerLatency.WithLabelValues(n.planner.Name()).Observe(time.Since(t0).Seconds())
	if err == nil {
		err = n.checkPlan(plan, req)
	}
	if err == nil {
		if n.planner.Name() != n.rules.Name() {
			stretchTimeouts(plan, req.Catalogue)
		} else {
			n.unreadLanguage(req, log)
		}
		return plan
	}
	var kind string
	var le *planner.LLMError
	var perr *messages.PlanError
	switch {
	case errors.As(err, &le):
		kind = le.Kind
	case errors.Is(err, context.DeadlineExceeded):
		kind = "timeout"
	case errors.As(err, &perr):
		kind = "invalid_plan"
	default:
		kind = "http"
	}
	if n.planner.Name() == "llm" {
		n.m.llmErrors.WithLabelValues(kind).Inc()
		if kind == "invalid_plan" { // the model's other failures are counted by its client
			n.model.meter.Failed(llm.ComponentPlanner, kind)
		}
	}
	log.Warn("narrator: planner failed; using the rule-based planner for this attempt", slog.String("planner", n.planner.Name()),
		slog.String("kind", kind), slog.Any("error", err))
	plan, _ = n.rules.Plan(ctx, req)
	n.unreadLanguage(req, log)
	return plan
}

// unreadLanguage logs and counts, on a prompt's first attempt, a prompt in
// a language the rule planner does not read (it planned it
// storyteller-only), and one it read through a gloss.
func (n *Narrator) unreadLanguage(req planner.Request, log *slog.Logger) {
	if req.Attempt > 1 {
		return
	}
	switch unread, lang, glossed := planner.PromptLanguage(req.Text); {
	case unread != "":
		n.m.unreadLanguage.WithLabelValues(unread).Inc()
		log.Info("narrator: the rule planner does not read the prompt's language; the storyteller answers alone", slog.String("language", unread))
	case lang != "":
		n.m.glossed.WithLabelValues(lang).Inc()
		log.Debug("narrator: the rule planner read the prompt through a gloss", slog.String("language", lang), slog.String("gloss", glossed))
	}
}

// stretchTimeouts gives the tools of a degraded skill TimeoutFactor times
// their script's timeout (§7), whatever the planner wrote: the rule-based
// planner does so itself; a model does not know the skill's health.
func stretchTimeouts(p *messages.Plan, cat *planner.Catalogue) {
	if cat == nil {
		return
	}
	for i := range p.Tools {
		t := &p.Tools[i]
		ref, err := messages.ParseToolPath(t.ToolPath)
		if err != nil {
			continue
		}
		cs, ok := cat.Skill(ref.Skill)
		if !ok || cs.TimeoutFactor <= 1 {
			continue
		}
		base := t.TimeoutMs
		for _, sc := range cs.Entry.Scripts {
			if sc.Name == ref.Script && sc.TimeoutMs > 0 {
				base = max(base, sc.TimeoutMs)
			}
		}
		t.TimeoutMs = planner.ScaleTimeout(base, cs.TimeoutFactor)
	}
}

// checkPlan validates a generated plan against the catalogue: schema and
// graph rules, known skills, nothing disabled.
func (n *Narrator) checkPlan(p *messages.Plan, req planner.Request) error {
	if p == nil {
		return errors.New("planner returned no plan")
	}
	p.SessionID = req.SessionID
	p.Metadata.GenerationAttempt = max(req.Attempt, 1)
	p.Metadata.ParentPlanID = nil
	if req.ParentPlanID != "" {
		parent := req.ParentPlanID
		p.Metadata.ParentPlanID = &parent
	}
	for _, d := range req.DisabledSkills {
		if !slices.Contains(p.DisabledSkills, d) {
			p.DisabledSkills = append(p.DisabledSkills, d)
		}
	}
	if n.cfg.PlanTimeoutMs > 0 && p.TimeoutMs == 0 {
		p.TimeoutMs = n.cfg.PlanTimeoutMs
	}
	if p.Priority == 0 {
		// A player waits on it: above plans that name no priority (§12).
		p.Priority = messages.PlanPriorityInteractive
	}
	return planner.CheckPlan(p, req.Catalogue)
}

func planSkills(p *messages.Plan) []string {
	var out []string
	for i := range p.Tools {
		if s := p.Tools[i].Skill(); s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
