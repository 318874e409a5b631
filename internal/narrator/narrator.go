package narrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/plancheck"
	"github.com/narratoria/runtime/pkg/messages"
)

// ServiceName is the narrator's NATS micro service name.
const ServiceName = "narratoria-narrator"

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
	Planner Planner
	// Version is reported by the micro service.
	Version string
}

// Narrator turns prompts into narrations. Create it with New, Start it, Stop it.
type Narrator struct {
	cfg     Config
	bus     bus.Config
	subj    messages.Subjects
	nc      *nats.Conn
	js      jetstream.JetStream
	log     *slog.Logger
	m       *metrics
	opts    Options
	planner Planner
	rules   RulePlanner
	cat     *catalogueSource
	dedupe  jetstream.KeyValue

	sem      chan struct{}
	mu       sync.Mutex
	queues   map[string]*sessionQueue
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	svc      micro.Service
	started  atomic.Bool
	stopOnce sync.Once
	stopped  chan struct{}
}

// New checks the configuration and builds a narrator on an open connection.
func New(nc *nats.Conn, cfg Config, opts Options) (*Narrator, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	bc, err := bus.NewClient("narrator", nc, opts.Bus, opts.Logger)
	if err != nil {
		return nil, err
	}
	b, js, log := bc.Config, bc.JS, bc.Log
	if opts.Version == "" {
		opts.Version = bus.VersionDefault
	}
	n := &Narrator{cfg: cfg, bus: b, subj: b.Subjects(), nc: nc, js: js, log: log, m: newMetrics(opts.Registerer),
		opts: opts, sem: make(chan struct{}, cfg.Sessions), queues: map[string]*sessionQueue{}, stopped: make(chan struct{}),
		cat: newCatalogueSource(cfg.WorkerTTL, log)}
	switch {
	case opts.Planner != nil:
		n.planner = opts.Planner
	case cfg.Planner == "llm":
		n.planner = NewLLMPlanner(cfg.LLM, nil)
	default:
		n.planner = n.rules
	}
	return n, nil
}

// Start provisions streams and buckets, follows the registry and health,
// and starts taking prompts.
func (n *Narrator) Start(ctx context.Context) error {
	if !n.started.CompareAndSwap(false, true) {
		return errors.New("narrator: already started")
	}
	if err := bus.Provision(ctx, n.js, n.bus); err != nil {
		return fmt.Errorf("narrator: %w", err)
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	skillsKV, err := n.js.KeyValue(ctx, messages.BucketSkills)
	if err != nil {
		return fmt.Errorf("narrator: open bucket %s: %w", messages.BucketSkills, err)
	}
	healthKV, err := n.js.KeyValue(ctx, messages.BucketHealth)
	if err != nil {
		return fmt.Errorf("narrator: open bucket %s: %w", messages.BucketHealth, err)
	}
	if n.dedupe, err = n.js.KeyValue(ctx, messages.BucketPrompts); err != nil {
		return fmt.Errorf("narrator: open bucket %s: %w", messages.BucketPrompts, err)
	}
	if err := n.cat.run(n.ctx, skillsKV, healthKV); err != nil {
		n.cancel()
		return fmt.Errorf("narrator: %w", err)
	}
	if err := n.startService(); err != nil {
		n.cancel()
		return err
	}
	n.wg.Add(1)
	go n.consume()
	// Make sure the server has every subscription before Start returns,
	// so a request sent right after reaches the service.
	if err := n.nc.FlushTimeout(5 * time.Second); err != nil {
		return fmt.Errorf("narrator: flush: %w", err)
	}
	n.log.Info("narrator: started", slog.String("planner", n.planner.Name()))
	return nil
}

// Ready reports nil while the narrator runs and is connected.
func (n *Narrator) Ready() error {
	return bus.Ready(n.started.Load(), n.stopped, n.nc)
}

// Stop stops taking prompts and waits for the prompts being narrated; the
// ones not yet acknowledged are redelivered to the next narrator.
func (n *Narrator) Stop() {
	n.stopOnce.Do(func() {
		defer close(n.stopped)
		if n.cancel == nil {
			return
		}
		if n.svc != nil {
			_ = n.svc.Stop()
		}
		n.cancel()
		n.wg.Wait()
		n.log.Info("narrator: stopped")
	})
}

func (n *Narrator) startService() error {
	svc, err := micro.AddService(n.nc, micro.Config{
		Name:        ServiceName,
		Version:     n.opts.Version,
		Description: "Turns prompts into narrations by planning and running skills",
	})
	if err != nil {
		return fmt.Errorf("narrator: micro service: %w", err)
	}
	err = svc.AddEndpoint("narrate", micro.HandlerFunc(n.onNarrate), micro.WithEndpointSubject(n.subj.Narrate()))
	if err != nil {
		_ = svc.Stop()
		return fmt.Errorf("narrator: micro endpoint: %w", err)
	}
	n.svc = svc
	return nil
}

// onNarrate serves narratoria.narrate: a prompt in, its narration out.
func (n *Narrator) onNarrate(r micro.Request) {
	p, err := messages.DecodePrompt(r.Data(), "")
	if err != nil {
		n.m.prompts.WithLabelValues("invalid").Inc()
		n.log.Warn("narrator: invalid prompt on narrate", slog.String("problem", err.Error()))
		_ = r.Error("400", err.Error(), nil)
		return
	}
	n.enqueue(p, func(nar *messages.Narration, err error) {
		if err != nil {
			_ = r.Error("500", err.Error(), nil)
			return
		}
		_ = r.RespondJSON(nar)
	}, "")
}

// consume takes prompts from NARRATORIA_PROMPTS until Stop.
func (n *Narrator) consume() {
	defer n.wg.Done()
	cfg := jetstream.ConsumerConfig{Durable: promptsConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: n.cfg.AckWait,
		MaxAckPending: 100_000, DeliverPolicy: jetstream.DeliverAllPolicy}
	bus.Consume(n.ctx, n.js, messages.StreamPrompts, cfg, 256, n.log, n.onPromptMsg)
}

// onPromptMsg validates a stream prompt and queues it; the message is
// acked once its narration is published.
func (n *Narrator) onPromptMsg(msg jetstream.Msg) {
	session := msg.Subject()[strings.LastIndexByte(msg.Subject(), '.')+1:]
	p, err := messages.DecodePrompt(msg.Data(), session)
	if err != nil {
		n.m.prompts.WithLabelValues("invalid").Inc()
		n.log.Warn("narrator: invalid prompt acknowledged and dropped", slog.String("subject", msg.Subject()), slog.String("problem", err.Error()))
		_ = msg.Term()
		return
	}
	implicitID := ""
	if md, err := msg.Metadata(); err == nil {
		implicitID = fmt.Sprintf("seq-%d", md.Sequence.Stream)
	}
	stopKeepAlive := keepAlive(msg, n.cfg.AckWait/3)
	n.enqueue(p, func(_ *messages.Narration, err error) {
		stopKeepAlive()
		if err != nil {
			_ = msg.Nak()
			return
		}
		_ = msg.Ack()
	}, implicitID)
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

// sessionQueue narrates one session's prompts one at a time, in order.
type sessionQueue struct {
	pending []queued
	running bool
}

type queued struct {
	prompt     *messages.Prompt
	done       func(*messages.Narration, error)
	implicitID string
	at         time.Time
}

func (n *Narrator) enqueue(p *messages.Prompt, done func(*messages.Narration, error), implicitID string) {
	n.mu.Lock()
	q := n.queues[p.SessionID]
	if q == nil {
		q = &sessionQueue{}
		n.queues[p.SessionID] = q
	}
	q.pending = append(q.pending, queued{prompt: p, done: done, implicitID: implicitID, at: time.Now()})
	start := !q.running
	q.running = true
	n.mu.Unlock()
	if start {
		n.wg.Add(1)
		go n.drain(p.SessionID, q)
	}
}

func (n *Narrator) drain(session string, q *sessionQueue) {
	defer n.wg.Done()
	for {
		n.mu.Lock()
		if len(q.pending) == 0 || n.ctx.Err() != nil {
			rest := q.pending
			q.pending, q.running = nil, false
			delete(n.queues, session)
			n.mu.Unlock()
			for _, j := range rest {
				j.done(nil, errors.New("narrator is stopping"))
			}
			return
		}
		j := q.pending[0]
		q.pending = q.pending[1:]
		n.mu.Unlock()

		select {
		case n.sem <- struct{}{}:
		case <-n.ctx.Done():
			j.done(nil, errors.New("narrator is stopping"))
			continue
		}
		nar, err := n.Narrate(n.ctx, j.prompt, j.implicitID)
		<-n.sem
		if err == nil {
			n.m.latency.Observe(time.Since(j.at).Seconds())
		}
		j.done(nar, err)
	}
}

// dedupeKey is the bucket key of a prompt's narration.
func dedupeKey(session, id string) string { return session + "." + id }

// Narrate runs the replan loop for one prompt and publishes its narration.
// implicitID dedupes a redelivered stream prompt without a promptId.
func (n *Narrator) Narrate(ctx context.Context, p *messages.Prompt, implicitID string) (*messages.Narration, error) {
	start := time.Now()
	id := p.PromptID
	if id == "" {
		id = implicitID
	}
	log := n.log.With(slog.String("sessionId", p.SessionID), slog.String("promptId", p.PromptID))
	if id != "" {
		if e, err := n.dedupe.Get(ctx, dedupeKey(p.SessionID, id)); err == nil && e.Operation() == jetstream.KeyValuePut {
			var nar messages.Narration
			if json.Unmarshal(e.Value(), &nar) == nil {
				n.m.prompts.WithLabelValues("duplicate").Inc()
				log.Info("narrator: prompt already narrated; returning the earlier narration")
				return &nar, nil
			}
		}
	}
	nar := n.replan(ctx, p, log)
	nar.DurationMs = time.Since(start).Milliseconds()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	data, _ := json.Marshal(nar)
	subj, err := n.subj.Narrations(p.SessionID)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var pubOpts []jetstream.PublishOpt
	if id != "" {
		pubOpts = append(pubOpts, jetstream.WithMsgID("narration."+p.SessionID+"."+id))
	}
	if _, err := n.js.Publish(pctx, subj, data, pubOpts...); err != nil {
		n.m.prompts.WithLabelValues("error").Inc()
		return nil, fmt.Errorf("publish narration: %w", err)
	}
	if id != "" {
		if _, err := n.dedupe.Put(pctx, dedupeKey(p.SessionID, id), data); err != nil {
			log.Warn("narrator: prompt not remembered for dedupe", slog.Any("error", err))
		}
	}
	outcome := "narrated"
	if nar.Fallback {
		outcome = "fallback"
		n.m.fallbacks.Inc()
	}
	n.m.prompts.WithLabelValues(outcome).Inc()
	n.m.attempts.Observe(float64(nar.Attempts))
	log.Info("narrator: narrated", slog.String("planId", nar.PlanID), slog.Int("attempts", nar.Attempts),
		slog.Bool("fallback", nar.Fallback), slog.Int64("ms", nar.DurationMs))
	return nar, nil
}

// replan is the bounded replan loop of §8.2.
func (n *Narrator) replan(ctx context.Context, p *messages.Prompt, log *slog.Logger) *messages.Narration {
	var disabled []string
	parent := ""
	var trace []messages.AttemptTrace
	var lastState json.RawMessage
	for attempt := 1; attempt <= n.cfg.MaxAttempts && ctx.Err() == nil; attempt++ {
		cat := n.cat.Catalogue(p.SessionID, disabled)
		plan := n.generate(ctx, Request{SessionID: p.SessionID, Text: p.Text, Attempt: attempt, ParentPlanID: parent,
			DisabledSkills: disabled, Catalogue: cat}, log)
		res, err := n.execute(ctx, p.SessionID, plan)
		skills := planSkills(plan)
		if err != nil {
			log.Warn("narrator: attempt failed without a result", slog.Int("attempt", attempt), slog.String("planId", plan.RequestID),
				slog.Any("skills", skills), slog.Any("error", err))
			trace = append(trace, messages.AttemptTrace{PlanID: plan.RequestID, FailedTools: []string{}, DisabledSkills: slices.Clone(disabled),
				FailureReason: messages.ReasonTimeout})
			parent = plan.RequestID
			continue
		}
		lastState = res.AggregatedState
		trace = append(trace, messages.AttemptTrace{PlanID: plan.RequestID, Success: res.Success, FailedTools: res.FailedTools,
			DisabledSkills: res.DisabledSkills, FailureReason: res.FailureReason})
		log.Info("narrator: attempt", slog.Int("attempt", attempt), slog.String("planId", plan.RequestID), slog.Any("skills", skills),
			slog.Bool("success", res.Success), slog.String("failureReason", res.FailureReason), slog.Any("failedTools", res.FailedTools),
			slog.Any("disabledSkills", res.DisabledSkills))
		if res.Success {
			return buildNarration(p, plan, res, attempt, disabled, trace)
		}
		for _, s := range res.DisabledSkills {
			if !slices.Contains(disabled, s) {
				disabled = append(disabled, s)
			}
		}
		slices.Sort(disabled)
		parent = plan.RequestID
	}
	return fallbackNarration(p, disabled, trace, lastState)
}

// generate asks the planner, falling back to the rule-based planner when it
// fails, times out or returns an invalid plan.
func (n *Narrator) generate(ctx context.Context, req Request, log *slog.Logger) *messages.Plan {
	gctx, cancel := context.WithTimeout(ctx, generationDeadline)
	defer cancel()
	t0 := time.Now()
	plan, err := n.planner.Plan(gctx, req)
	n.m.plannerLatency.WithLabelValues(n.planner.Name()).Observe(time.Since(t0).Seconds())
	if err == nil {
		err = n.checkPlan(plan, req)
	}
	if err == nil {
		return plan
	}
	var kind string
	var le *LLMError
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
	}
	log.Warn("narrator: planner failed; using the rule-based planner for this attempt", slog.String("planner", n.planner.Name()),
		slog.String("kind", kind), slog.Any("error", err))
	plan, _ = n.rules.Plan(ctx, req)
	return plan
}

// checkPlan validates a generated plan against the catalogue: schema and
// graph rules, known skills, nothing disabled.
func (n *Narrator) checkPlan(p *messages.Plan, req Request) error {
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
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode plan: %w", err)
	}
	_, err = plancheck.Check(b, messages.PlanLimits{}, catalogueResolver{req.Catalogue})
	return err
}

// catalogueResolver resolves toolPaths against a catalogue.
type catalogueResolver struct{ c *Catalogue }

func (r catalogueResolver) Resolve(ref messages.ToolRef) (plancheck.Script, error) {
	if r.c == nil {
		return plancheck.Script{}, fmt.Errorf("%w: no catalogue", plancheck.ErrUnknownSkill)
	}
	cs, ok := r.c.Skill(ref.Skill)
	if !ok {
		return plancheck.Script{}, fmt.Errorf("%w: skill %q is not in the catalogue (unknown, unserved or disabled)", plancheck.ErrUnknownSkill, ref.Skill)
	}
	s, ok := cs.Entry.Resolve(ref)
	if !ok {
		return plancheck.Script{}, fmt.Errorf("%w: skill %q has no script %q", plancheck.ErrUnknownSkill, ref.Skill, ref.String())
	}
	return plancheck.Script{Skill: ref.Skill, Name: s.Name}, nil
}

// execute publishes a plan and waits for its result. The subscription is
// made before the plan is published, so the result cannot be missed.
func (n *Narrator) execute(ctx context.Context, session string, plan *messages.Plan) (*messages.ExecutionResult, error) {
	resSubj, err := n.subj.Results(session, plan.RequestID)
	if err != nil {
		return nil, err
	}
	planSubj, err := n.subj.Plans(session)
	if err != nil {
		return nil, err
	}
	sub, err := n.nc.SubscribeSync(resSubj)
	if err != nil {
		return nil, fmt.Errorf("subscribe to result: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	b, err := json.Marshal(plan)
	if err != nil {
		return nil, fmt.Errorf("encode plan: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = n.js.Publish(pctx, planSubj, b, jetstream.WithMsgID("plan."+plan.RequestID))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("publish plan: %w", err)
	}
	timeout := plan.Timeout()
	wctx, cancel := context.WithTimeout(ctx, timeout+n.cfg.ResultMargin)
	defer cancel()
	msg, err := sub.NextMsgWithContext(wctx)
	if err != nil {
		return nil, fmt.Errorf("no result for plan %s within %s: %w", plan.RequestID, timeout+n.cfg.ResultMargin, err)
	}
	var res messages.ExecutionResult
	if err := json.Unmarshal(msg.Data, &res); err != nil {
		return nil, fmt.Errorf("decode result of plan %s: %w", plan.RequestID, err)
	}
	return &res, nil
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

// buildNarration assembles the narration of a successful plan (§8.4): the
// plan's narrative, then each successful tool's output.narration, in
// topological order (the order of the result's tool results).
func buildNarration(p *messages.Prompt, plan *messages.Plan, res *messages.ExecutionResult, attempts int, disabled []string, trace []messages.AttemptTrace) *messages.Narration {
	parts := []string{}
	if s := strings.TrimSpace(plan.Narrative); s != "" {
		parts = append(parts, s)
	}
	for _, tr := range res.ToolResults {
		if tr.State != messages.ToolSuccess || len(tr.Output) == 0 {
			continue
		}
		var out struct {
			Narration string `json:"narration"`
		}
		if json.Unmarshal(tr.Output, &out) == nil && strings.TrimSpace(out.Narration) != "" {
			parts = append(parts, strings.TrimSpace(out.Narration))
		}
	}
	nar := &messages.Narration{
		SessionID: p.SessionID, PromptID: p.PromptID, Text: strings.Join(parts, "\n\n"), PlanID: plan.RequestID,
		Attempts: attempts, Choices: []json.RawMessage{}, Assets: res.AggregatedAssets, UIEvents: res.UIEvents,
		State: res.AggregatedState, DisabledSkills: nonNil(disabled), Trace: trace,
	}
	if nar.Assets == nil {
		nar.Assets = []messages.Asset{}
	}
	if nar.UIEvents == nil {
		nar.UIEvents = []messages.UIEventRecord{}
	}
	for _, ev := range res.UIEvents {
		if ev.Event != messages.UIEventNarrativeChoice {
			continue
		}
		var payload struct {
			Choices []json.RawMessage `json:"choices"`
		}
		if json.Unmarshal(ev.Payload, &payload) == nil {
			nar.Choices = append(nar.Choices, payload.Choices...)
		}
	}
	if len(nar.State) == 0 {
		nar.State = json.RawMessage("{}")
	}
	return nar
}

// fallbackTemplates are the template narrations of §8.2.
var fallbackTemplates = []string{
	"The narrator pauses, considering your words: '%s'",
	"Your action '%s' echoes in the stillness...",
	"The story continues, though the path is unclear...",
}

func fallbackNarration(p *messages.Prompt, disabled []string, trace []messages.AttemptTrace, state json.RawMessage) *messages.Narration {
	h := fnv.New32a()
	_, _ = h.Write([]byte(p.SessionID + "\x00" + p.Text))
	tmpl := fallbackTemplates[int(h.Sum32())%len(fallbackTemplates)]
	text := tmpl
	if strings.Contains(tmpl, "%s") {
		text = fmt.Sprintf(tmpl, clip(p.Text, 300))
	}
	if len(state) == 0 {
		state = json.RawMessage("{}")
	}
	planID := ""
	if len(trace) > 0 {
		planID = trace[len(trace)-1].PlanID
	}
	return &messages.Narration{SessionID: p.SessionID, PromptID: p.PromptID, Text: text, PlanID: planID, Attempts: len(trace),
		Fallback: true, Choices: []json.RawMessage{}, Assets: []messages.Asset{}, UIEvents: []messages.UIEventRecord{},
		State: state, DisabledSkills: nonNil(disabled), Trace: trace}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
