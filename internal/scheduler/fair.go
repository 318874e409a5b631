package scheduler

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/fairshare"
	"github.com/narratoria/runtime/pkg/messages"
)

// Fair dispatch (§12; docs/decisions/, "Fair when saturated"). The work
// queue serves a skill's jobs first in, first out, so the scheduler keeps
// it shallow: it admits a skill's jobs to NARRATORIA_JOBS only while fewer
// than the skill's bound are admitted and not ended — its live workers'
// slots (the registry's concurrency of each) plus a headroom of about
// headroomWindow of work, so a slot that frees finds the next job stored —
// and holds the rest here, ready. When a job ends, the next one admitted
// is the one fairshare.Queue chooses: the highest priority, then the
// tenant (weighted), then the session with the least service (start-time
// fair queueing: no credit for idleness, no debt for steady use).
//
// Nothing about a job changes on its way through the gate: the plan
// machine dispatched it (its lost-attempt timer runs), the job message is
// made and stamped as before, and it is published through the partition's
// jobs writer when admitted. A held job is not stored: a probe asks the
// gate first (an attempt held here is "stored": it will be sent), and a
// scheduler that dies holding jobs leaves them to the partition's next
// owner, whose probe finds them missing and sends them.

// headroomWindow is how much work beyond the running jobs a skill's queue
// may hold: admitted jobs not yet taken by a worker wait first in, first
// out, so this bounds what fair dispatch gives up to keep the workers fed.
const headroomWindow = 20 * time.Millisecond

// capacityRefresh is how often a skill's slots are read again from the
// registry mirror.
const capacityRefresh = time.Second

// waitSamples is how many recent waits per skill and tenant the status
// keeps for its percentiles.
const waitSamples = 256

// gateKey names one tool's running attempt (one at a time per tool).
type gateKey struct{ plan, tool string }

func (k gateKey) id() string { return k.plan + "." + k.tool }

// fairGate admits every skill's jobs by fair share. Its methods are safe
// for concurrent use (actors of every partition call them), and on a nil
// gate (Config.FairDispatch false) send at once and hold nothing.
type fairGate struct {
	// capacity is the sum of the concurrency of a skill's live workers; 0
	// when unknown (no registry): the skill is then not bounded.
	capacity func(skill string) int
	weights  *tenantWeights
	m        *metrics
	now      func() time.Time

	mu     sync.Mutex
	skills map[string]*skillGate
	// plans are the tools each plan has in the gate, and their skills.
	plans map[string]map[string]string
}

// skillGate is one skill's admissions.
type skillGate struct {
	name     string
	q        *fairshare.Queue[*gatedJob]
	inflight map[gateKey]*gatedJob
	// rate is admissions per second, decayed over a second (headroom).
	rate   float64
	rateAt time.Time
	cap    int
	capAt  time.Time
	// waits are recent waits (ready → the script's start) by tenant.
	waits map[string]*waitRing
	// tenants are the tenants with jobs held or admitted now.
	tenants map[string]*tenantCount
}

type tenantCount struct{ waiting, inflight int }

// gatedJob is a job ready to go: send publishes it.
type gatedJob struct {
	tenant string
	send   func()
}

func newFairGate(capacity func(string) int, weights *tenantWeights, m *metrics) *fairGate {
	return &fairGate{capacity: capacity, weights: weights, m: m, now: time.Now, skills: map[string]*skillGate{}, plans: map[string]map[string]string{}}
}

func (g *fairGate) skill(name string) *skillGate {
	sg := g.skills[name]
	if sg == nil {
		sg = &skillGate{name: name, q: fairshare.New[*gatedJob](), inflight: map[gateKey]*gatedJob{},
			waits: map[string]*waitRing{}, tenants: map[string]*tenantCount{}}
		if g.weights != nil {
			sg.q.Weight = g.weights.get
		}
		g.skills[name] = sg
	}
	return sg
}

// submit queues a dispatched attempt's job and admits what may go now;
// send publishes it (on the goroutine of whoever admits it). A tool's
// earlier attempt still in the gate is dropped first.
func (g *fairGate) submit(k gateKey, skill string, fk fairshare.Key, send func()) {
	if g == nil {
		send()
		return
	}
	g.mu.Lock()
	g.dropLocked(k)
	sg := g.skill(skill)
	tools := g.plans[k.plan]
	if tools == nil {
		tools = map[string]string{}
		g.plans[k.plan] = tools
	}
	tools[k.tool] = skill
	if g.weights != nil {
		g.weights.touch(fk.Tenant)
	}
	sg.q.Push(k.id(), fk, &gatedJob{tenant: fk.Tenant, send: send})
	sg.count(fk.Tenant).waiting++
	g.m.jobsWaiting.WithLabelValues(fk.Tenant, skill).Inc()
	g.unlockAndSend(g.pumpLocked(sg))
}

// unlockAndSend releases the lock, then sends what was admitted under it,
// in order (sending never holds the lock: it may block on a full writer).
func (g *fairGate) unlockAndSend(out []*gatedJob) {
	g.mu.Unlock()
	for _, j := range out {
		j.send()
	}
}

// release ends a tool's attempt in the gate (its tool left running: it
// ended, or is to be retried): a held job is dropped, an admitted one
// frees its place for the next job of its skill.
func (g *fairGate) release(k gateKey) {
	if g == nil {
		return
	}
	g.mu.Lock()
	var out []*gatedJob
	if sg := g.dropLocked(k); sg != nil {
		out = g.pumpLocked(sg)
	}
	g.unlockAndSend(out)
}

// releasePlan releases every tool of a plan whose actor ends (finished,
// stopped, or its partition lost).
func (g *fairGate) releasePlan(plan string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	var pumped []*skillGate
	for tool := range g.plans[plan] {
		if sg := g.dropLocked(gateKey{plan, tool}); sg != nil && !slices.Contains(pumped, sg) {
			pumped = append(pumped, sg)
		}
	}
	var out []*gatedJob
	for _, sg := range pumped {
		out = append(out, g.pumpLocked(sg)...)
	}
	g.unlockAndSend(out)
}

// holds reports whether a tool's attempt is held in the gate, ready but
// not admitted yet: it will be sent, as good as stored.
func (g *fairGate) holds(k gateKey) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	skill, ok := g.plans[k.plan][k.tool]
	if !ok {
		return false
	}
	return g.skills[skill].q.Has(k.id())
}

// dropLocked takes the tool out of the gate, held or admitted; it returns
// its skill's gate, nil when the tool was not in it.
func (g *fairGate) dropLocked(k gateKey) *skillGate {
	tools := g.plans[k.plan]
	skill, ok := tools[k.tool]
	if !ok {
		return nil
	}
	delete(tools, k.tool)
	if len(tools) == 0 {
		delete(g.plans, k.plan)
	}
	sg := g.skills[skill]
	if j, ok := sg.inflight[k]; ok {
		delete(sg.inflight, k)
		sg.count(j.tenant).inflight--
		sg.forget(j.tenant)
		g.m.jobsInFlight.WithLabelValues(j.tenant, skill).Dec()
		return sg
	}
	if fk, _, ok := sg.q.Take(k.id()); ok {
		sg.count(fk.Tenant).waiting--
		sg.forget(fk.Tenant)
		g.m.jobsWaiting.WithLabelValues(fk.Tenant, skill).Dec()
	}
	return sg
}

// pumpLocked admits the skill's next jobs while it is under its bound and
// returns them, to be sent once the lock is released.
func (g *fairGate) pumpLocked(sg *skillGate) []*gatedJob {
	var out []*gatedJob
	now := g.now()
	for sg.q.Len() > 0 && len(sg.inflight) < g.boundLocked(sg, now) {
		id, fk, j, _ := sg.q.Pop()
		plan, tool := splitGateID(id)
		sg.inflight[gateKey{plan, tool}] = j
		c := sg.count(fk.Tenant)
		c.waiting--
		c.inflight++
		g.m.jobsWaiting.WithLabelValues(fk.Tenant, sg.name).Dec()
		g.m.jobsInFlight.WithLabelValues(fk.Tenant, sg.name).Inc()
		sg.admitted(now)
		out = append(out, j)
	}
	return out
}

// boundLocked is how many of the skill's jobs may be admitted at once:
// its workers' slots plus the headroom (at most the slots again); no
// bound when the slots are unknown.
func (g *fairGate) boundLocked(sg *skillGate, now time.Time) int {
	if now.Sub(sg.capAt) >= capacityRefresh || sg.capAt.IsZero() {
		sg.cap, sg.capAt = g.capacity(sg.name), now
	}
	if sg.cap <= 0 {
		return math.MaxInt
	}
	return sg.cap + headroom(sg.cap, sg.rateAt.IsZero(), sg.rateNow(now))
}

// headroom is how many admitted jobs may wait in the work queue beyond
// the slots: about headroomWindow of work at the skill's recent rate
// (rounded: none for a skill whose jobs take longer than twice the window
// per slot, whose workers then lose only the admission's round trip per
// job), at most the slots; 1 until the rate is known.
func headroom(slots int, unknown bool, rate float64) int {
	if unknown {
		return 1
	}
	h := int(math.Round(rate * headroomWindow.Seconds()))
	return min(max(h, 0), slots)
}

// admitted counts one admission in the skill's decayed rate.
func (sg *skillGate) admitted(now time.Time) {
	sg.rate = sg.rateNow(now) + 1
	sg.rateAt = now
}

// rateNow is the admissions per second: events decayed over a second.
func (sg *skillGate) rateNow(now time.Time) float64 {
	if sg.rateAt.IsZero() {
		return 0
	}
	return sg.rate * math.Exp(-now.Sub(sg.rateAt).Seconds())
}

func (sg *skillGate) count(tenant string) *tenantCount {
	c := sg.tenants[tenant]
	if c == nil {
		c = &tenantCount{}
		sg.tenants[tenant] = c
	}
	return c
}

func (sg *skillGate) forget(tenant string) {
	if c := sg.tenants[tenant]; c != nil && c.waiting <= 0 && c.inflight <= 0 {
		delete(sg.tenants, tenant)
	}
}

func splitGateID(id string) (plan, tool string) {
	// A plan ID is a UUID (no dot); the tool ID follows it.
	return id[:36], id[37:]
}

// observeWait records how long a job of a skill waited from ready to its
// script's start, for the status's percentiles.
func (g *fairGate) observeWait(skill, tenant string, d time.Duration) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	sg := g.skill(skill)
	r := sg.waits[tenant]
	if r == nil {
		r = &waitRing{}
		sg.waits[tenant] = r
	}
	r.add(d)
}

// waitRing keeps the last waitSamples waits.
type waitRing struct {
	d    [waitSamples]time.Duration
	n, i int
}

func (r *waitRing) add(d time.Duration) {
	r.d[r.i] = d
	r.i = (r.i + 1) % waitSamples
	r.n = min(r.n+1, waitSamples)
}

// quantile is the q-quantile of the kept waits (0 when none).
func (r *waitRing) quantile(q float64) time.Duration {
	if r == nil || r.n == 0 {
		return 0
	}
	s := slices.Clone(r.d[:r.n])
	slices.Sort(s)
	return s[min(int(q*float64(r.n)), r.n-1)]
}

// SkillQueue is one skill's fair dispatch on one scheduler (Status).
type SkillQueue struct {
	// Skill is the skill's name.
	Skill string `json:"skill"`
	// Slots is the sum of the concurrency of its live workers (0: not
	// known, not bounded); Bound how many of its jobs may be admitted to
	// the work queue at once.
	Slots int `json:"slots"`
	Bound int `json:"bound"`
	// InFlight are its jobs admitted and not ended; Waiting its jobs
	// ready and held back by fair dispatch.
	InFlight int `json:"inFlight"`
	Waiting  int `json:"waiting"`
	// Tenants are the tenants with jobs in flight or waiting, or with
	// recent waits, sorted by name.
	Tenants []TenantQueue `json:"tenants"`
}

// TenantQueue is one tenant's jobs of a skill on one scheduler.
type TenantQueue struct {
	// Tenant is the tenant ("" in a single-tenant deployment).
	Tenant string `json:"tenant"`
	// Weight is the tenant's weight (narratoria tenant add --weight).
	Weight float64 `json:"weight"`
	// Waiting and InFlight count its jobs as SkillQueue does.
	Waiting  int `json:"waiting"`
	InFlight int `json:"inFlight"`
	// WaitP50Ms and WaitP99Ms are over its last waits (ready → the
	// script's start), milliseconds.
	WaitP50Ms float64 `json:"waitP50Ms"`
	WaitP99Ms float64 `json:"waitP99Ms"`
}

// queues is the status of every skill the gate has seen.
func (g *fairGate) queues() []SkillQueue {
	if g == nil {
		return []SkillQueue{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	out := []SkillQueue{}
	for _, sg := range g.skills {
		q := SkillQueue{Skill: sg.name, Slots: sg.cap, InFlight: len(sg.inflight), Waiting: sg.q.Len(), Tenants: []TenantQueue{}}
		if b := g.boundLocked(sg, now); b != math.MaxInt {
			q.Bound = b
		}
		names := map[string]bool{}
		for t := range sg.tenants {
			names[t] = true
		}
		for t := range sg.waits {
			names[t] = true
		}
		for t := range names {
			tq := TenantQueue{Tenant: t, Weight: 1}
			if g.weights != nil {
				tq.Weight = g.weights.get(t)
			}
			if c := sg.tenants[t]; c != nil {
				tq.Waiting, tq.InFlight = c.waiting, c.inflight
			}
			r := sg.waits[t]
			tq.WaitP50Ms = float64(r.quantile(0.5).Microseconds()) / 1000
			tq.WaitP99Ms = float64(r.quantile(0.99).Microseconds()) / 1000
			q.Tenants = append(q.Tenants, tq)
		}
		sort.Slice(q.Tenants, func(i, j int) bool { return q.Tenants[i].Tenant < q.Tenants[j].Tenant })
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Skill < out[j].Skill })
	return out
}

// weightRefresh is how often the schedulers read the weights of the
// tenants they dispatch for again.
const weightRefresh = 10 * time.Second

// tenantWeights are the weights of the tenants this scheduler dispatched
// for, read from their state streams' metadata (bus.TenantWeightMetadata,
// which `narratoria tenant add --weight` sets; 1 until read, and for a
// tenant whose stream names none).
type tenantWeights struct {
	mu sync.RWMutex
	w  map[string]float64
	// seen are the tenants to read (touched since the last refresh).
	seen map[string]bool
}

func newTenantWeights() *tenantWeights {
	return &tenantWeights{w: map[string]float64{}, seen: map[string]bool{}}
}

// get is the tenant's weight, 1 when not known.
func (tw *tenantWeights) get(tenant string) float64 {
	tw.mu.RLock()
	w, ok := tw.w[tenant]
	tw.mu.RUnlock()
	if !ok || w <= 0 {
		return 1
	}
	return w
}

// touch notes a tenant whose weight is to be read.
func (tw *tenantWeights) touch(tenant string) {
	if tenant == "" {
		return
	}
	tw.mu.RLock()
	seen := tw.seen[tenant]
	tw.mu.RUnlock()
	if seen {
		return
	}
	tw.mu.Lock()
	tw.seen[tenant] = true
	tw.mu.Unlock()
}

// refresh reads the weight of every tenant seen (a new tenant's at once,
// the others every weightRefresh) until ctx ends.
func (tw *tenantWeights) run(ctx context.Context, js jetstream.JetStream, log *slog.Logger) {
	last := map[string]time.Time{}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		tw.mu.RLock()
		var due []string
		for t := range tw.seen {
			if time.Since(last[t]) >= weightRefresh {
				due = append(due, t)
			}
		}
		tw.mu.RUnlock()
		for _, t := range due {
			last[t] = time.Now()
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			st, err := js.Stream(rctx, messages.Tenant(t).StateStream())
			cancel()
			w := 1.0
			if err == nil {
				w = float64(bus.TenantWeight(st.CachedInfo().Config.Metadata))
			} else if ctx.Err() == nil {
				log.Debug("scheduler: tenant weight not readable; weight 1", slog.String("tenant", t), slog.Any("error", err))
			}
			tw.mu.Lock()
			if old, ok := tw.w[t]; !ok || old != w {
				log.Info("scheduler: tenant weight", slog.String("tenant", t), slog.Float64("weight", w))
			}
			tw.w[t] = w
			tw.mu.Unlock()
		}
	}
}
