package skillworker

import (
	"context"
	"errors"
	"fmt"
	"github.com/narratoria/runtime/pkg/codec"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/lifecycle"
	"github.com/narratoria/runtime/internal/runner"
	"github.com/narratoria/runtime/internal/skills"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// Options are the worker's collaborators; every field is optional.
type Options struct {
	// Logger receives structured logs. Default: discard.
	Logger *slog.Logger
	// Registerer receives the worker's Prometheus collectors. Default: none.
	Registerer prometheus.Registerer
	// Bus names the subject prefix and stream sizing. Default: bus defaults.
	Bus bus.Config
	// Runner runs scripts. Default: a process runner with Config.Limits.
	Runner runner.Runner
	// Skills, when set, are served instead of the skills in Config.SkillsDir
	// (embedding and benchmarks with the in-process runner); the folder is
	// then neither read nor watched.
	Skills map[string]*skills.Skill
	// Version is reported by the micro service, as bus.ServiceVersion
	// makes it (default bus.VersionDefault; not SemVer: 0.0.0-dev+…).
	Version string

	// pullerPause holds a puller this long between counting a job and
	// starting it (tests: it widens the moment a stop used to race).
	pullerPause time.Duration
	// afterOutcome, in tests, runs once a job's outcome is stored and
	// before the job is acked (e.g. to end the worker's connection there).
	afterOutcome func()
}

// Worker serves tool jobs of its skills. Create it with New, then Start it;
// Stop ends it gracefully.
type Worker struct {
	// guard keeps the streams and buckets this component needs there.
	guard *bus.Guard
	cfg   Config
	bus   bus.Config
	subj  messages.Subjects
	nc    *nats.Conn
	js    jetstream.JetStream
	// registry is the skills bucket's handle, opened once: a heartbeat
	// is then a read and a compare-and-set, never a stream lookup that
	// times out while the cluster elects a leader (see registryKV).
	registry atomic.Pointer[jetstream.KeyValue]
	// assets is the asset object store's handle, opened on first use.
	assets atomic.Pointer[jetstream.ObjectStore]
	// assetReader checks an object already in the store, a chunk at a time
	// (direct gets, up to nats.assetMaxSize).
	assetReader *client.Client
	run         runner.Runner
	log         *slog.Logger
	m           *metrics
	opts        Options

	slots *slots

	mu        sync.Mutex
	served    map[string]*served           // by skill name
	running   map[string]map[*job]struct{} // by plan ID
	cancelled map[string]time.Time         // plan IDs cancelled recently
	attempts  *attempts                    // the attempts taken, so none runs twice
	inFlight  atomic.Int64

	// life starts and stops the worker. Its work context, workCtx, is
	// cancelled last (it kills running scripts); the heartbeat and the
	// jobs run under life.Go, so Stop waits for them.
	life    *lifecycle.Service
	workCtx context.Context
	// fetchCtx, a child of workCtx, is cancelled first: stop pulling jobs.
	fetchCtx    context.Context
	fetchCancel context.CancelFunc
	// pullers counts what can start a job (the skills' pullers and the
	// skills watcher, which starts pullers); Stop waits for it before it
	// waits for jobs, so no job is added while it waits for them.
	pullers sync.WaitGroup
	jobs    sync.WaitGroup // in-flight jobs, for the grace period

	svc      micro.Service
	cancelSb *nats.Subscription
}

type served struct {
	skill  *skills.Skill
	stop   context.CancelFunc
	done   chan struct{}
	cons   jetstream.Consumer
	pulled atomic.Int64
	// wake is signalled when a job is published on the skill's subject.
	wake   chan struct{}
	wakeSb *nats.Subscription
}

type job struct {
	cancel context.CancelCauseFunc
}

// errCancelled is the cause of a job's context when its plan was cancelled.
var errCancelled = errors.New("plan cancelled")

// New checks the configuration and builds a worker on an open connection.
func New(nc *nats.Conn, cfg Config, opts Options) (*Worker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	bc, err := bus.NewClient("skillworker", nc, opts.Bus, opts.Logger)
	if err != nil {
		return nil, err
	}
	b, js, log := bc.Config, bc.JS, bc.Log
	run := opts.Runner
	if run == nil {
		pr, err := processRunner(cfg)
		if err != nil {
			return nil, err
		}
		run = pr
	}
	opts.Version = bus.ServiceVersion(opts.Version)
	ar, err := client.New(nc, client.WithPrefix(b.Prefix), client.WithAssetMaxSize(b.AssetMaxSize), client.WithDirectAssetReads())
	if err != nil {
		return nil, err
	}
	w := &Worker{
		assetReader: ar,
		cfg:         cfg,
		bus:         b,
		subj:        b.Subjects(),
		nc:          nc,
		js:          js,
		run:         run,
		log:         log.With(slog.String("worker", cfg.ID)),
		m:           newMetrics(opts.Registerer),
		opts:        opts,
		slots:       newSlots(cfg.Concurrency),
		served:      map[string]*served{},
		running:     map[string]map[*job]struct{}{},
		cancelled:   map[string]time.Time{},
		attempts:    newAttempts(attemptMemoryDefault, attemptMemoryTTL),
		life:        lifecycle.New("skillworker"),
	}
	w.workCtx = w.life.Context()
	w.fetchCtx, w.fetchCancel = context.WithCancel(w.workCtx)
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(newQueueDepth(w))
	}
	return w, nil
}

// ID returns the worker's registry ID.
func (w *Worker) ID() string { return w.cfg.ID }

// Start provisions the streams and buckets, loads the skills, registers
// them, and starts pulling jobs. It returns once the worker is serving.
// Start once: a second Start, or one after Stop, is an error; one that
// fails leaves nothing running but Stop is still to be called.
func (w *Worker) Start(ctx context.Context) error {
	return w.life.Start(func(context.Context) error { return w.start(ctx) })
}

// start is Start's work, under w.life: on a failure it stops the pullers,
// then life cancels the work context and waits for the heartbeat and
// the jobs.
func (w *Worker) start(ctx context.Context) error {
	w.guard = bus.NewGuard(w.js, w.bus, workerStreams, workerBuckets, "skillworker", w.opts.Registerer, w.log)
	if err := w.guard.Ensure(ctx); err != nil {
		return fmt.Errorf("skillworker: %w", err)
	}
	if p, ok := w.run.(interface{ Prepare() error }); ok {
		// The script reaper runs before the first script does.
		if err := p.Prepare(); err != nil {
			return fmt.Errorf("skillworker: %w", err)
		}
	}
	w.logProtections()
	var initial map[string]*skills.Skill
	var loader *skills.Loader
	if w.opts.Skills != nil {
		initial = w.opts.Skills
	} else {
		loader = &skills.Loader{Dir: w.cfg.SkillsDir, Only: w.cfg.Skills}
		var warns []skills.Warning
		initial, warns = loader.Load()
		for _, wn := range warns {
			w.log.Warn("skillworker: skill skipped", slog.String("skill", wn.Skill), slog.String("problem", wn.String()))
		}
	}
	names := make([]string, 0, len(initial))
	for name := range initial {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := w.serve(ctx, initial[name]); err != nil {
			w.abort()
			return err
		}
	}
	sub, err := w.nc.Subscribe(w.subj.Prefix+".cancel.*", w.onCancel)
	if err != nil {
		w.abort()
		return fmt.Errorf("skillworker: subscribe to cancellations: %w", err)
	}
	w.cancelSb = sub
	if err := w.startService(); err != nil {
		w.abort()
		return err
	}
	w.life.Go(func(context.Context) { w.heartbeat() })
	if loader != nil && w.cfg.WatchInterval > 0 {
		w.pullers.Add(1)
		go func() {
			defer w.pullers.Done()
			loader.Watch(w.fetchCtx, w.cfg.WatchInterval, w.onSkillsChange)
		}()
	}
	// Make sure the server has every subscription before Start returns,
	// so a request sent right after reaches the service.
	if err := w.nc.FlushTimeout(5 * time.Second); err != nil {
		w.abort()
		return fmt.Errorf("skillworker: flush: %w", err)
	}
	w.mu.Lock()
	served := slices.Sorted(maps.Keys(w.served))
	w.mu.Unlock()
	w.log.Info("skillworker: started", slog.Any("skills", served), slog.Int("concurrency", w.cfg.Concurrency))
	w.guard.Start()
	return nil
}

// abort stops the pullers of a start that fails; life then cancels the
// work and waits for the jobs.
func (w *Worker) abort() {
	w.fetchCancel()
	w.pullers.Wait()
}

// Ready reports nil once the worker is serving and connected.
func (w *Worker) Ready() error {
	if err := bus.Ready(w.life.Ready(), w.nc); err != nil {
		return err
	}
	if w.guard != nil {
		return w.guard.Ready()
	}
	return nil
}

// Skills returns the names of the skills served now.
func (w *Worker) Skills() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.served))
	for n := range w.served {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Stop stops pulling jobs, lets in-flight scripts finish for up to
// ShutdownGrace, then kills them and naks their jobs so JetStream
// redelivers them at once; finally it removes the worker from the
// registry. It is idempotent, safe before Start (the worker then never
// starts) and while Start runs (it waits for it).
func (w *Worker) Stop() {
	w.life.Stop(w.drain, w.leave)
}

// drain is Stop's first step, before the work context is cancelled: no
// more jobs, and the running ones get the grace period.
func (w *Worker) drain() {
	w.log.Info("skillworker: stopping", slog.Int64("inFlight", w.inFlight.Load()))
	w.fetchCancel()
	// Pullers end within one fetch wait; only then is the job count
	// final, and waiting on it cannot race a job being added.
	w.pullers.Wait()
	done := make(chan struct{})
	w.life.Go(func(context.Context) { w.jobs.Wait(); close(done) })
	select {
	case <-done:
	case <-time.After(w.cfg.ShutdownGrace):
		// life cancels the work context next, and waits for the jobs.
		w.log.Warn("skillworker: grace period over, ending running scripts", slog.Int64("inFlight", w.inFlight.Load()))
	}
}

// leave is Stop's last step, once the jobs and the heartbeat are over.
func (w *Worker) leave() {
	if w.cancelSb != nil {
		_ = w.cancelSb.Unsubscribe()
	}
	if w.svc != nil {
		_ = w.svc.Stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, name := range w.Skills() {
		w.unregister(ctx, name)
	}
	if w.guard != nil {
		w.guard.Stop()
	}
	w.log.Info("skillworker: stopped")
}

// serve starts serving one skill: its consumer, its puller, its registry entry.
func (w *Worker) serve(ctx context.Context, sk *skills.Skill) error {
	// §6.1: the skill's data/ folder exists before its scripts run (made
	// once here, not on every job).
	if _, err := sk.DataDir(); err != nil {
		w.log.Warn("skillworker: no data folder for the skill", slog.String("skill", sk.Name), slog.Any("error", err))
	}
	if pr, ok := w.run.(*runner.ProcessRunner); ok && (pr.Users != nil || pr.Credential != nil) {
		// Scripts of another user must reach their folder: refuse the
		// skill at once, with the fix, rather than fail every job.
		if err := runner.ReachableByOthers(sk.Dir); err != nil {
			w.log.Error("skillworker: skill not served: its scripts' user cannot reach its folder", slog.String("skill", sk.Name), slog.Any("error", err))
			return nil
		}
	}
	w.checkLimits(sk)
	subject, err := w.subj.Jobs(sk.Name)
	if err != nil {
		return fmt.Errorf("skillworker: skill %s: %w", sk.Name, err)
	}
	cons, err := w.js.CreateOrUpdateConsumer(ctx, messages.StreamJobs, jetstream.ConsumerConfig{
		Durable:       "skill-" + sk.Name,
		Description:   "Tool jobs of skill " + sk.Name + ", shared by every worker serving it",
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.cfg.AckWait,
		MaxDeliver:    w.cfg.MaxDeliver,
		MaxAckPending: MaxAckPendingDefault,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("skillworker: consumer for skill %s: %w", sk.Name, err)
	}
	pctx, stop := context.WithCancel(w.fetchCtx)
	s := &served{skill: sk, stop: stop, done: make(chan struct{}), cons: cons, wake: make(chan struct{}, 1)}
	s.wakeSb, err = w.nc.Subscribe(subject, func(*nats.Msg) {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		stop()
		return fmt.Errorf("skillworker: job wake-up for skill %s: %w", sk.Name, err)
	}
	w.mu.Lock()
	w.served[sk.Name] = s
	w.mu.Unlock()
	if err := w.register(ctx, sk); err != nil {
		w.log.Warn("skillworker: registry update failed", slog.String("skill", sk.Name), slog.Any("error", err))
	}
	w.pullers.Add(1)
	go w.pull(pctx, s)
	return nil
}

// unserve stops pulling a skill's jobs; running jobs of it finish.
func (w *Worker) unserve(name string) {
	w.mu.Lock()
	s, ok := w.served[name]
	delete(w.served, name)
	w.mu.Unlock()
	if !ok {
		return
	}
	s.stop()
	<-s.done
	_ = s.wakeSb.Unsubscribe()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	w.unregister(ctx, name)
}

func (w *Worker) skill(name string) (*skills.Skill, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.served[name]
	if !ok {
		return nil, false
	}
	return s.skill, true
}

func (w *Worker) onSkillsChange(ch skills.Change) {
	for _, wn := range ch.Warnings {
		w.log.Warn("skillworker: skill skipped", slog.String("skill", wn.Skill), slog.String("problem", wn.String()))
	}
	for _, name := range ch.Removed {
		w.log.Info("skillworker: skill removed", slog.String("skill", name))
		w.unserve(name)
		w.forgetLater(name)
	}
	for _, sk := range ch.Updated {
		w.mu.Lock()
		s, ok := w.served[sk.Name]
		if ok {
			s.skill = sk
		}
		w.mu.Unlock()
		if !ok {
			ch.Added = append(ch.Added, sk)
			continue
		}
		w.log.Info("skillworker: skill updated", slog.String("skill", sk.Name))
		ctx, cancel := context.WithTimeout(w.fetchCtx, 5*time.Second)
		if err := w.register(ctx, sk); err != nil {
			w.log.Warn("skillworker: registry update failed", slog.String("skill", sk.Name), slog.Any("error", err))
		}
		cancel()
	}
	for _, sk := range ch.Added {
		w.log.Info("skillworker: skill added", slog.String("skill", sk.Name))
		ctx, cancel := context.WithTimeout(w.fetchCtx, 5*time.Second)
		if err := w.serve(ctx, sk); err != nil {
			w.log.Error("skillworker: cannot serve skill", slog.String("skill", sk.Name), slog.Any("error", err))
		}
		cancel()
	}
}

// pull feeds one skill's jobs to the worker's slots. It never holds a job
// it is not running: it takes the slots free now, fetches at most that
// many jobs (waiting fetchWait at most), starts each as it arrives, and
// gives back the slots no job came for; so no job waits in a client buffer past the ack wait (to be
// redelivered and run twice elsewhere), and a stopping worker has nothing
// to hand back. It looks for jobs when the skill's job subject shows a new
// one (a core subscription used only as a wake-up), when a slot frees up
// after a full fetch, and every pollInterval (redeliveries make no new
// message to wake it).
func (w *Worker) pull(ctx context.Context, s *served) {
	defer w.pullers.Done()
	defer close(s.done)
	log := w.log.With(slog.String("skill", s.skill.Name))
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		// Drain the queue while jobs come and slots are free.
		for ctx.Err() == nil {
			n := w.slots.take(ctx)
			if n == 0 {
				return
			}
			got, err := w.fetch(ctx, s, n, log)
			if err != nil || got < n {
				break // the queue is empty (or unreachable): wait for news
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-tick.C:
		}
	}
}

// fetchWait is how long one fetch waits for jobs: the wake-up can come a
// moment before the job is stored, so a fetch right after it waits a
// little rather than finding nothing and sleeping until the next poll.
const fetchWait = 50 * time.Millisecond

// fetch takes up to n jobs now and starts each on one of the n slots it
// was given; it gives back the slots it did not use and returns how many
// jobs it started.
func (w *Worker) fetch(ctx context.Context, s *served, n int, log *slog.Logger) (int, error) {
	batch, err := s.cons.Fetch(n, jetstream.FetchMaxWait(fetchWait))
	if err != nil {
		w.slots.give(n)
		if ctx.Err() == nil {
			log.Warn("skillworker: cannot fetch jobs; retrying", slog.Any("error", err))
		}
		return 0, err
	}
	used := 0
	for msg := range batch.Messages() {
		if ctx.Err() != nil || used == n {
			_ = msg.Nak() // stopping: hand the job back at once
			continue
		}
		used++
		s.pulled.Add(1)
		w.jobs.Add(1)
		if w.opts.pullerPause > 0 {
			time.Sleep(w.opts.pullerPause)
		}
		var once sync.Once
		release := func() { once.Do(func() { w.slots.give(1) }) }
		if !w.life.GoKept(func(context.Context) {
			defer w.jobs.Done()
			defer release()
			w.handle(msg, release)
		}) {
			// Not reached while pullers run (Stop waits for them first).
			w.jobs.Done()
			release()
			_ = msg.Nak()
		}
	}
	w.slots.give(n - used)
	if err := batch.Error(); err != nil && ctx.Err() == nil {
		log.Debug("skillworker: fetch ended", slog.Any("error", err))
	}
	return used, nil
}

// onCancel kills the running scripts of a cancelled plan and remembers the
// plan for a while so its queued jobs are not started.
func (w *Worker) onCancel(m *nats.Msg) {
	plan := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	if messages.CheckPlanID(plan) != nil {
		return
	}
	now := time.Now()
	w.mu.Lock()
	w.cancelled[plan] = now
	for p, at := range w.cancelled {
		if now.Sub(at) > 10*time.Minute {
			delete(w.cancelled, p)
		}
	}
	jobs := make([]*job, 0, len(w.running[plan]))
	for j := range w.running[plan] {
		jobs = append(jobs, j)
	}
	w.mu.Unlock()
	for _, j := range jobs {
		j.cancel(errCancelled)
	}
	if len(jobs) > 0 {
		w.log.Info("skillworker: plan cancelled, scripts ended", slog.String("planId", plan), slog.Int("scripts", len(jobs)))
	}
}

func (w *Worker) isCancelled(plan string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.cancelled[plan]
	return ok
}

func (w *Worker) track(plan string, j *job) func() {
	w.mu.Lock()
	set := w.running[plan]
	if set == nil {
		set = map[*job]struct{}{}
		w.running[plan] = set
	}
	set[j] = struct{}{}
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(set, j)
		if len(set) == 0 {
			delete(w.running, plan)
		}
		w.mu.Unlock()
	}
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// encodeJSON marshals v; the types passed here always marshal.
func encodeJSON(v any) []byte {
	b, err := codec.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("skillworker: marshal %T: %v", v, err))
	}
	return b
}

// What a skill worker needs in JetStream (see bus.Guard).
var (
	workerStreams = []string{messages.StreamJobs, messages.StreamEvents, messages.StreamOutcomes}
	workerBuckets = []string{messages.BucketSkills}
)
