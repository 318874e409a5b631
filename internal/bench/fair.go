package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/embedded"
	"github.com/narratoria/runtime/internal/scheduler"
	"github.com/narratoria/runtime/internal/skillworker"
	"github.com/narratoria/runtime/pkg/codec"
	"github.com/narratoria/runtime/pkg/messages"
)

// fairEnv is figure 12's deployment: the service side of a multi-tenant
// deployment (sessions <tenant>.<session>) on an embedded server, one
// scheduler, and one skill worker with the default concurrency (the
// machine's cores) serving "slow", a sh script that takes 300 ms.
type fairEnv struct {
	dir   string
	srv   *server.Server
	bus   bus.Config
	nc    *nats.Conn
	js    jetstream.JetStream
	sch   *scheduler.Scheduler
	stops []func()
	log   *slog.Logger

	mu sync.Mutex
	// results: every result's arrival time by plan, and how many came.
	results map[string][]time.Time
}

const slowScript = "#!/bin/sh\ncat > /dev/null\nsleep 0.3\necho '{\"version\":\"0\",\"type\":\"done\",\"ok\":true,\"output\":{\"narration\":\"ok\"}}'\n"

func (f *fairEnv) close() {
	for i := len(f.stops) - 1; i >= 0; i-- {
		f.stops[i]()
	}
	f.stops = nil
}

func newFairEnv(ctx context.Context) (*fairEnv, error) {
	f := &fairEnv{log: slog.New(slog.DiscardHandler), results: map[string][]time.Time{}}
	dir, err := os.MkdirTemp("", "narratoria-bench-fair-")
	if err != nil {
		return nil, err
	}
	f.dir = dir
	f.stops = append(f.stops, func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // a root worker's script users reach the skill
		return f, err
	}
	srv, err := embedded.Start(embedded.Options{Port: -1, StoreDir: filepath.Join(dir, "js")})
	if err != nil {
		return f, err
	}
	f.srv = srv
	f.stops = append(f.stops, func() { srv.Shutdown(); srv.WaitForShutdown() })
	f.bus = bus.Config{URL: srv.ClientURL(), Tenants: true}.WithDefaults()
	if f.nc, err = nats.Connect(srv.ClientURL()); err != nil {
		return f, err
	}
	f.stops = append(f.stops, f.nc.Close)
	if f.js, err = jetstream.New(f.nc); err != nil {
		return f, err
	}
	if err := bus.Provision(ctx, f.js, f.bus); err != nil {
		return f, err
	}
	for t, w := range map[messages.Tenant]int{"acme": 1, "globex": 1, "heavy": 3, "light": 1} {
		if err := bus.ProvisionTenant(ctx, f.js, f.bus, t, bus.TenantLimits{Weight: w}); err != nil {
			return f, err
		}
	}
	sd := filepath.Join(dir, "skills", "slow")
	if err := os.MkdirAll(filepath.Join(sd, "scripts"), 0o755); err != nil {
		return f, err
	}
	if err := os.WriteFile(filepath.Join(sd, "skill.json"), []byte(`{"name":"slow","version":"1.0.0","description":"300 ms","scripts":[{"name":"run","path":"scripts/run"}]}`), 0o644); err != nil {
		return f, err
	}
	if err := os.WriteFile(filepath.Join(sd, "scripts", "run"), []byte(slowScript), 0o755); err != nil {
		return f, err
	}
	sub, err := f.nc.Subscribe("narratoria.results.>", func(m *nats.Msg) {
		var r struct {
			PlanID string `json:"planId"`
		}
		if codec.Unmarshal(m.Data, &r) != nil {
			return
		}
		f.mu.Lock()
		f.results[r.PlanID] = append(f.results[r.PlanID], time.Now())
		f.mu.Unlock()
	})
	if err != nil {
		return f, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := f.worker(ctx); err != nil {
		return f, err
	}
	return f, f.scheduler(ctx, true)
}

// worker starts one more skill worker of the default concurrency.
func (f *fairEnv) worker(ctx context.Context) error {
	wk, err := skillworker.New(f.conn(), skillworker.Config{SkillsDir: filepath.Join(f.dir, "skills"), WatchInterval: -1},
		skillworker.Options{Logger: f.log, Bus: f.bus})
	if err != nil {
		return err
	}
	if err := wk.Start(ctx); err != nil {
		return err
	}
	f.stops = append(f.stops, wk.Stop)
	// Its slots count once the scheduler's registry shows it.
	deadline := time.Now().Add(30 * time.Second)
	for f.sch != nil && time.Now().Before(deadline) && !f.serves(wk.ID()) {
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// serves reports whether the scheduler's status counts the worker: the
// skill's slots include its concurrency (or the skill is not known yet).
func (f *fairEnv) serves(string) bool {
	for _, q := range f.sch.Status().Queues {
		if q.Skill == "slow" {
			return q.Slots >= 2*runtime.NumCPU()
		}
	}
	return false
}

func (f *fairEnv) conn() *nats.Conn {
	nc, err := nats.Connect(f.srv.ClientURL())
	if err != nil {
		panic(err)
	}
	f.stops = append(f.stops, nc.Close)
	return nc
}

// scheduler stops the running scheduler (if any) and starts one with
// fair dispatch on or off, waiting until it owns every partition.
func (f *fairEnv) scheduler(ctx context.Context, fair bool) error {
	if f.sch != nil {
		f.sch.Stop()
	}
	sch, err := scheduler.New(f.conn(), scheduler.Config{ID: fmt.Sprintf("bench-fair-%v", fair), FairDispatch: &fair},
		scheduler.Options{Logger: f.log, Bus: f.bus})
	if err != nil {
		return err
	}
	if err := sch.Start(ctx); err != nil {
		return err
	}
	f.stops = append(f.stops, sch.Stop)
	f.sch = sch
	for !sch.OwnsAll() && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	// The worker's registry entry is read (its slots bound the queue).
	deadline := time.Now().Add(30 * time.Second)
	for sch.RegistryRevision("slow") == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// publish sends one one-tool plan of the slow skill; it returns its ID
// and when it was sent.
func (f *fairEnv) publish(ctx context.Context, session string) (string, time.Time, error) {
	p := &messages.Plan{RequestID: uuid.NewString(), DisabledSkills: []string{}, Metadata: messages.PlanMetadata{GenerationAttempt: 1}, TimeoutMs: 600_000,
		Tools: []messages.Tool{{ToolID: "t", ToolPath: "slow/run", Input: json.RawMessage(`{}`), Dependencies: []string{}, Required: true}}}
	b, _ := json.Marshal(p)
	at := time.Now()
	_, err := f.js.Publish(ctx, "narratoria.plans."+session, b)
	return p.RequestID, at, err
}

// flood sends n plans at once over sessions (round robin).
func (f *fairEnv) flood(ctx context.Context, n int, sessions ...string) ([]string, error) {
	ids := make([]string, n)
	for i := range n {
		id, _, err := f.publish(ctx, sessions[i%len(sessions)])
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	return ids, nil
}

// paced sends n plans of session, one every interval (open loop: not
// waiting for results), and returns their IDs and send times.
func (f *fairEnv) paced(ctx context.Context, n int, interval time.Duration, session string) ([]string, []time.Time, error) {
	ids, sent := make([]string, n), make([]time.Time, n)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := range n {
		<-tick.C
		id, at, err := f.publish(ctx, session)
		if err != nil {
			return nil, nil, err
		}
		ids[i], sent[i] = id, at
	}
	return ids, sent, nil
}

// wait waits until every plan of ids has a result (each should have
// exactly one) and returns how many results each has had.
func (f *fairEnv) wait(ctx context.Context, ids []string) (map[string]int, error) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		f.mu.Lock()
		done := 0
		for _, id := range ids {
			if len(f.results[id]) > 0 {
				done++
			}
		}
		f.mu.Unlock()
		if done == len(ids) {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%d of %d plans have no result", len(ids)-done, len(ids))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a second result would have come by now
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for _, id := range ids {
		out[id] = len(f.results[id])
	}
	return out, nil
}

// latencies are the paced plans' times from sending to their result.
func (f *fairEnv) latencies(ids []string, sent []time.Time) sample {
	f.mu.Lock()
	defer f.mu.Unlock()
	var s sample
	for i, id := range ids {
		s = append(s, f.results[id][0].Sub(sent[i]))
	}
	return s
}

// exactlyOnce counts the plans without exactly one result.
func exactlyOnce(counts map[string]int) (wrong int) {
	for _, n := range counts {
		if n != 1 {
			wrong++
		}
	}
	return wrong
}

// pacedRun is one measurement of the paced session: alone, or while
// flood plans are sent at once to the flood sessions.
func (f *fairEnv) pacedRun(ctx context.Context, n, flood int, pacedSession string, floodSessions ...string) (sample, int, error) {
	var floodIDs []string
	if flood > 0 {
		var err error
		if floodIDs, err = f.flood(ctx, flood, floodSessions...); err != nil {
			return nil, 0, err
		}
	}
	ids, sent, err := f.paced(ctx, n, 250*time.Millisecond, pacedSession)
	if err != nil {
		return nil, 0, err
	}
	counts, err := f.wait(ctx, append(ids, floodIDs...))
	if err != nil {
		return nil, 0, err
	}
	return f.latencies(ids, sent), exactlyOnce(counts), nil
}

// figure12 measures fair dispatch (issue 49) on the shape: a
// 300 ms skill, one worker of the default concurrency; acme sends 20
// plans, one every 250 ms, alone and while globex sends 100 plans at once;
// the same with two sessions of one tenant; then both again with a second
// worker (twice the slots); the share of a weight-3 tenant against a
// weight-1 one when both flood; and, for reference, the work queue alone
// (scheduler.fairDispatch: false).
func (e *env) figure12(ctx context.Context) error {
	f, err := newFairEnv(ctx)
	if err != nil {
		if f != nil {
			f.close()
		}
		return err
	}
	defer f.close()
	n, flood := 20, 100
	if e.opts.Quick {
		n, flood = 12, 40
	}
	for workers := 1; workers <= 2; workers++ {
		if workers == 2 {
			if err := f.worker(ctx); err != nil {
				return err
			}
		}
		slots := workers * runtime.NumCPU()
		// What the paced sender asks of the skill against its fair share
		// (half the slots): 4 jobs a second of 0.3 s.
		demand := fmt.Sprintf("the paced sender asks for %.0f%% of the slots, its fair share is 50%%", 100*4*0.3/float64(slots))
		shape := fmt.Sprintf("300 ms skill, %d worker(s) × %d slots; %d plans one every 250 ms, %d plans at once; %s", workers, runtime.NumCPU(), n, flood, demand)
		for _, c := range []struct {
			label, id, alone, paced string
			flood                   []string
		}{
			{"acme's paced plans while globex floods", "12", "acme.a", "acme.p", []string{"globex.f0", "globex.f1", "globex.f2", "globex.f3", "globex.f4"}},
			{"inside one tenant: a player's session while a bot's session of the same tenant floods", "12s", "acme.solo", "acme.player", []string{"acme.bot"}},
		} {
			sfx := fmt.Sprint(workers)
			alone, wrongA, err := f.pacedRun(ctx, n, 0, c.alone+sfx)
			if err != nil {
				return fmt.Errorf("%s alone: %w", c.paced, err)
			}
			withFlood, wrongF, err := f.pacedRun(ctx, n, flood, c.paced+sfx, c.flood...)
			if err != nil {
				return fmt.Errorf("%s with a flood: %w", c.paced, err)
			}
			r := float64(withFlood.p(0.99)) / float64(alone.p(0.99))
			e.rows = append(e.rows, Row{Figure: fmt.Sprintf("%s fair when saturated: %s (p50 / p99; %s)", c.id, c.label, shape),
				Value: ms(withFlood.p(0.5)) + " / " + ms(withFlood.p(0.99)), Baseline: "alone " + ms(alone.p(0.5)) + " / " + ms(alone.p(0.99)),
				Ratio: fmt.Sprintf("%.2f×", r), Target: "p99 ≤ 3×; every plan exactly one result", Met: r <= 3 && wrongA+wrongF == 0,
				Note: fmt.Sprintf("%d plans without exactly one result", wrongA+wrongF)})
		}
		if workers == 1 {
			if err := e.figure12Weights(ctx, f, flood); err != nil {
				return err
			}
		}
	}

	// For reference: the work queue alone, first in, first out (2 workers).
	if err := f.scheduler(ctx, false); err != nil {
		return err
	}
	fifo, wrongF, err := f.pacedRun(ctx, n, flood, "acme.fifo", "globex.f0", "globex.f1", "globex.f2", "globex.f3", "globex.f4")
	if err != nil {
		return fmt.Errorf("acme with globex's flood, fair dispatch off: %w", err)
	}
	e.rows = append(e.rows, Row{Figure: "12f reference: acme's paced plans while globex floods, fair dispatch off (scheduler.fairDispatch: false: the work queue first in, first out; 2 workers)",
		Value: ms(fifo.p(0.5)) + " / " + ms(fifo.p(0.99)), Baseline: "—", Ratio: "—",
		Target: "reported (issue 49 measured 19× its p99 alone)", Met: wrongF == 0, Note: fmt.Sprintf("%d plans without exactly one result", wrongF)})
	return nil
}

// figure12Weights floods the skill from heavy (weight 3) and light
// (weight 1) at once and counts whose plans finish while both still wait.
func (e *env) figure12Weights(ctx context.Context, f *fairEnv, flood int) error {
	per := flood / 2
	var heavy, light []string
	for i := range per {
		h, _, err := f.publish(ctx, fmt.Sprintf("heavy.s%d", i%4))
		if err != nil {
			return err
		}
		l, _, err := f.publish(ctx, fmt.Sprintf("light.s%d", i%4))
		if err != nil {
			return err
		}
		heavy, light = append(heavy, h), append(light, l)
	}
	counts, err := f.wait(ctx, append(append([]string{}, heavy...), light...))
	if err != nil {
		return err
	}
	// Results in the order they came; the window is while both tenants
	// still had plans waiting: up to the moment heavy's last finished.
	f.mu.Lock()
	type done struct {
		at    time.Time
		heavy bool
	}
	var all []done
	for _, id := range heavy {
		all = append(all, done{f.results[id][0], true})
	}
	for _, id := range light {
		all = append(all, done{f.results[id][0], false})
	}
	f.mu.Unlock()
	slices.SortFunc(all, func(a, b done) int { return a.at.Compare(b.at) })
	h, l := 0, 0
	for _, d := range all {
		if d.heavy {
			h++
		} else {
			l++
		}
		if h == per {
			break
		}
	}
	share := float64(h) / float64(max(l, 1))
	e.rows = append(e.rows, Row{Figure: fmt.Sprintf("12w weighted shares: heavy (weight 3) and light (weight 1) each send %d plans at once; plans finished until heavy's last", per),
		Value: fmt.Sprintf("heavy %d, light %d", h, l), Baseline: "weight 3 : 1", Ratio: fmt.Sprintf("%.2f×", share),
		Target: "3× ± 25% (2.25–3.75×); every plan exactly one result", Met: share >= 2.25 && share <= 3.75 && exactlyOnce(counts) == 0,
		Note: fmt.Sprintf("%d plans without exactly one result", exactlyOnce(counts))})
	return nil
}
