package planfsm

import (
	"container/heap"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/narratoria/runtime/internal/plancheck"
	"github.com/narratoria/runtime/pkg/dag"
	"github.com/narratoria/runtime/pkg/messages"
)

var (
	simSeed  = flag.Uint64("seed", 0, "replay one simulation seed (0: run -seeds seeds)")
	simSeeds = flag.Int("seeds", 20000, "how many simulation seeds TestSim runs")
	// A store rollback forgets deletes, purges and acks; with this flag it
	// forgets the writes among them too (assumption 1 of "What the store
	// may forget" broken: a power cut without sync, or R3 losing a
	// majority). The machine does not survive that: see TestSim's doc.
	simRollbackWrites = flag.Bool("rollback-writes", false, "store rollbacks forget acknowledged writes too")
	// A reconnect's redelivered outcome may come after the plan ended, and a
	// finished plan's records must hold every tool's end even then (they
	// do not: see reconnect and checkStored).
	simStrictReconnect = flag.Bool("strict-reconnect", false, "a reconnect's outcome comes back late, and a finished plan's stored ends are checked after it too")
)

// TestSim drives the machine through seeded random plans, outcome
// schedules and crashes on a fake clock, checking the invariants after
// every step. A failing seed prints itself; replay it with
// go test ./internal/planfsm -run Sim -seed N.
//
// The store (issue 25) keeps a log of what it acknowledged: a server
// restart forgets a suffix of the last 2 s of it, and either the
// scheduler restarts with it (rollback) or stays up (reconnect). A
// restart forgets deletes, purges and acks and keeps writes, as
// docs/architecture.md ("What the store may forget") assumes; with
// -rollback-writes it forgets the writes too, and the machine does not
// survive that: a context request sent twice (the plan record saying it
// was asked is gone), a succeeded script run again (its records and jobs
// gone back to an attempt whose worker died), a second result unlike the
// first (the result gone, and the records it was built from). Replay with
// -seed N -rollback-writes: e.g. N = 1 (context), 146 (result), 1092
// (script). A crash in the middle of a step's record writes stores them
// as one atomic batch would: all or none.
func TestSim(t *testing.T) {
	if *simSeed != 0 {
		if err := runSim(*simSeed, true); err != nil {
			t.Fatalf("seed %d: %v", *simSeed, err)
		}
		return
	}
	n := *simSeeds
	if os.Getenv("NARRATORIA_LONG") != "" {
		n = 1_000_000
	}
	start := uint64(time.Now().UnixNano())
	if os.Getenv("NARRATORIA_SIM_FIXED") != "" {
		start = 1
	}
	failed := 0
	for k := range n {
		seed := start + uint64(k)
		if seed == 0 {
			continue
		}
		if err := runSim(seed, false); err != nil {
			failed++
			t.Errorf("seed %d: %v\n  replay: go test ./internal/planfsm -run Sim -seed %d -v", seed, err, seed)
			if failed >= 5 {
				t.FailNow()
			}
		}
	}
	if n >= 1000 {
		// The lost-write fault must be exercised, not only possible.
		if simLosses == 0 {
			t.Error("no seed lost a write: the fault is not exercised")
		}
		if simForgotten == 0 {
			t.Error("no store forgot a purge: the fault is not exercised")
		}
		if simRollbacks == 0 || simReconnects == 0 {
			t.Error("no store rolled back (under a crashed, or a running scheduler): the fault is not exercised")
		}
		if simBatches == 0 {
			t.Error("no crash cut a batch of writes: the fault is not exercised")
		}
		if simRefusedWrites == 0 {
			t.Error("no store refused a state write for good: the fault is not exercised")
		}
		if simPaused == 0 || simSecondRuns == 0 {
			t.Error("no worker was paused past the lost timer, or no job was run by a second worker: the fault is not exercised")
		}
	}
	t.Logf("writes lost (and never sent again): %d; refused for good: %d; purges forgotten: %d; rollbacks: %d (scheduler up: %d); batches cut by a crash: %d; workers paused past the lost timer: %d; second runs: %d",
		simLosses, simRefusedWrites, simForgotten, simRollbacks, simReconnects, simBatches, simPaused, simSecondRuns)
}

// simItem is something that happens at a time in the simulated world.
type simItem struct {
	at  time.Time
	seq int
	ev  Event
	gen int // timers: the generation armed; stale ones are dropped
	key TimerKey
	// durable: an outcome or approval stays queued until the step that
	// consumed it completed (it is acknowledged only then).
	durable bool
	// stored: an outcome that was already stored when a crash came (it
	// is redelivered to the next scheduler).
	stored bool
}

type simQueue []*simItem

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int)     { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)       { *q = append(*q, x.(*simItem)) }
func (q *simQueue) Pop() any         { old := *q; x := old[len(old)-1]; *q = old[:len(old)-1]; return x }
func (q *simQueue) push(it *simItem) { heap.Push(q, it) }
func (q *simQueue) pop() *simItem    { return heap.Pop(q).(*simItem) }

type jobKey struct{ i, attempt int }

// world is everything outside the machine: the store, the queues, the
// workers, the clock.
type world struct {
	// kept: the step kept its outcome (KeepOutcome), which is not
	// acknowledged; event is the event the step was given.
	kept  bool
	event Event
	r     *rand.Rand
	// f draws the faults added after seeds were recorded (a store that
	// forgets, a coarse clock), so a recorded seed replays what it found.
	f      *rand.Rand
	cfg    Config
	plan   *messages.Plan
	graph  *dag.Graph
	q      simQueue
	seq    int
	now    time.Time
	timers map[TimerKey]int // generation of each armed timer
	gen    int
	trace  bool

	// the store (what survives a crash)
	rec         Record
	tools       map[string]*Tool
	jobs        map[jobKey]bool // stored jobs
	runs        map[jobKey]int  // script runs
	committed   int             // commits that changed the session state (the mark makes a repeat a no-op)
	purged      bool
	result      *messages.ExecutionResult // the stored result (deduplicated by plan ID)
	outcomes    []*messages.Outcome       // every outcome a worker reported
	resurrected bool                      // the store forgot the purge: the records came back
	grid        time.Duration             // the clock's grain (0: nanoseconds)
	// The store refuses for good (a full bucket, a state over its limit):
	// the session state, the full result (1), or the full result and the
	// short one twice more (2: no room, until space returns).
	refuseState  bool
	refuseResult int
	shortRefused int
	// refuseWrites is the chance that the store refuses a plan state write
	// for good (a full plans bucket): the write is not stored, later ones
	// may be, and the shell tells the machine (StateRefused) instead of
	// sending it again. g draws those refusals.
	refuseWrites float64
	g            *rand.Rand
	refused      bool // a state write was refused
	// refusedPending: a state write of the running process was refused
	// (the actor's flag; a new process starts without it).
	refusedPending bool
	stepRefused    bool              // a write of the step being applied was refused
	planHist       []Record          // every revision of the plan record
	toolHist       map[string][]Tool // every revision of each tool record
	// planGone and toolGone mark the revisions above that the store never
	// kept (a batch that did not land, a write a rollback took back): a
	// forgotten purge cannot bring them back.
	planGone []bool
	toolGone map[string][]bool

	crashes, maxCrashes int
	crashP              float64
	lossP               float64      // chance that a tool write is lost while later ones are stored
	owed                map[int]bool // tools whose end was lost: the machine restores them running
	lostCrash           bool         // the last crash came because a write was lost
	succeeded           map[int]bool // tools the machine ended as success
	sent                map[jobKey]bool
	recovering          bool
	asked               map[int]int // context requests sent, by iteration
	before              []Tool      // the tools before the step being applied
	outage              bool        // an outage outlasted the duplicate window
	steps               int
	rest                []Effect // the effects a crash cut off (a paused owner carries them out when it wakes)

	// Two owners: a takeover may leave the old owner alive, paused; it
	// wakes up later and acts on its stale state, through the fence.
	z        *zombie
	zombies  int
	zombieOK int // outward effects a woken owner carried out (its writes were all stored before the takeover)

	// The store's log of acknowledged operations (writes, deletes,
	// purges, acks) with the time each was acknowledged: a rollback
	// reverts a suffix of it (issue 25, item 4).
	oplog                   []simOp
	rollbacks, maxRollbacks int
	reconnects              int
	forgot                  map[int]bool // tools whose end record a reconnect forgot, until their outcome comes again
	// published is the first result a client saw: every result stored
	// later, after any rollback, must say the same.
	published *messages.ExecutionResult
	// memory is the worker's memory of the attempts it took (an hour,
	// in process): a job that comes back is answered with the outcome it
	// reported (nil: it reported none) instead of running the script.
	memory map[jobKey]*messages.Outcome
	reruns int             // attempts with no remembered outcome run again after a rollback brought their job back
	rerun  map[jobKey]bool // those attempts
	// forgotSuccess: tools whose success record a rollback took back
	forgotSuccess map[int]bool
	// held: until when each attempt's job stays in the work queue, unacked
	// (a worker holds it, paused perhaps, or it waits to be delivered
	// again): an attempt is never given up as lost before then (issue 44).
	held map[jobKey]time.Time
	// p draws the pauses and redeliveries (issue 44), on a source of its
	// own so the draws of r and f stay where recorded seeds had them.
	p *rand.Rand
	// twoRuns: attempts run by two workers (one paused past the ack wait)
	twoRuns map[jobKey]bool
}

// simOp is one operation the store acknowledged, and how to revert it.
type simOp struct {
	at   time.Time
	what string
	// write: a message write (a KV put, a job, the result, the state
	// commit), kept by a killed server (docs/architecture.md, "What the
	// store may forget", assumption 1) unless -rollback-writes; else a
	// delete, a purge or an acknowledgement (assumption 2).
	write bool
	// batched: a record write (plan or tool), sent with the other record
	// writes of its step as one atomic batch.
	batched bool
	undo    func()
}

// reconnect: the server restarts and forgets the last step's suffix of
// what it acknowledged, while the scheduler stays up (it reconnects and
// keeps its plans in memory: internal/scheduler rebuilds a plan from the
// store only when it takes a partition over). It is drawn only when that
// suffix is the end record of the outcome's tool and the outcome's ack:
// the redelivered outcome is what tells the machine its write is gone,
// and it writes the record again. (A suffix with other writes, forgotten
// while the scheduler stays up, is not repaired: writes are assumed kept,
// docs/architecture.md, "What the store may forget", assumption 1.)
func (w *world) reconnect(m *Machine, o *messages.Outcome, mark int) {
	ops := w.oplog[mark:]
	if len(ops) != 2 || !strings.HasPrefix(ops[0].what, "tool "+o.ToolID+" ") || !strings.HasPrefix(ops[1].what, "ack ") {
		return
	}
	w.logf("STORE RESTART: the server forgets %s and the outcome's ack; the scheduler stays up", ops[0].what)
	if *simStrictReconnect {
		ops[1].undo() // redelivered a little later: the plan may end first
	} else {
		// The consumer, resumed, hands the outcome back before anything
		// else happens to the plan. Delivered later, after the plan ended,
		// it finds the plan finished and writes nothing: the finished plan's
		// records lack the tool's end (-strict-reconnect shows it).
		at := w.now
		if w.q.Len() > 0 && w.q[0].at.Before(at) {
			at = w.q[0].at // overdue: it comes first all the same
		}
		w.seq++
		w.q.push(&simItem{at: at, seq: w.seq - 1<<40, ev: OutcomeArrived{Outcome: o}, durable: true, stored: true})
	}
	ops[0].undo()
	w.oplog = w.oplog[:mark]
	w.rollbacks++
	w.reconnects++
	i, _ := m.Index(o.ToolID)
	w.forgot[i] = true
	simReconnects++
}

// checkStored: a plan recorded as finished has every tool's end stored as
// the machine has it (a recovery from the store then sees the plan the
// machine ended). It does not hold once a reconnect forgot an end record
// whose redelivered outcome comes after the plan finished (the machine
// writes a record again only while the plan runs): -strict-reconnect
// checks it anyway. Nor once the store refused a state write for good:
// that write is never sent again, and a recovery from the store resumes a
// plan recorded finished with a tool unfinished (Machine.recovered).
func (w *world) checkStored(m *Machine) error {
	if w.reconnects > 0 && !*simStrictReconnect || w.refused {
		return nil
	}
	if w.rec.Phase != PhaseFinished || m.Phase() != PhaseFinished {
		return nil
	}
	for i := range m.Len() {
		id := m.ToolID(i)
		t := w.tools[id]
		if t == nil || t.State != m.Tool(i).State || t.Attempt != m.Tool(i).Attempt {
			got := "no record"
			if t != nil {
				got = fmt.Sprintf("%s#%d", t.State, t.Attempt)
			}
			return fmt.Errorf("plan recorded finished while the store holds tool %s as %s (the machine: %s#%d)", id, got,
				m.Tool(i).State, m.Tool(i).Attempt)
		}
	}
	return nil
}

// rollbackWindow is how far back a server restart may forget what it
// acknowledged.
const rollbackWindow = 2 * time.Second

// rollback is a store crash that reverts a suffix of the operations it
// acknowledged within rollbackWindow: writes, deletes, purges and acks
// alike. It says whether there was anything to revert.
func (w *world) rollback() bool {
	lo := len(w.oplog)
	for lo > 0 && !w.oplog[lo-1].at.Before(w.now.Add(-rollbackWindow)) {
		lo--
	}
	if lo == len(w.oplog) {
		return false
	}
	cut := lo + w.f.IntN(len(w.oplog)-lo)
	w.logf("STORE ROLLBACK: the server forgets what it acknowledged since %.3fs", w.oplog[cut].at.Sub(time.Unix(0, 0)).Seconds())
	var kept []simOp
	for k := len(w.oplog) - 1; k >= cut; k-- {
		if op := w.oplog[k]; op.write && !*simRollbackWrites {
			kept = append(kept, op)
			continue
		}
		w.logf("  forgotten: %s (acked at %.3fs)", w.oplog[k].what, w.oplog[k].at.Sub(time.Unix(0, 0)).Seconds())
		w.oplog[k].undo()
	}
	slices.Reverse(kept)
	w.oplog = append(w.oplog[:cut], kept...)
	w.rollbacks++
	simRollbacks++
	return true
}

// logOp records an acknowledged store operation.
func (w *world) logOp(what string, write bool, undo func()) {
	w.oplog = append(w.oplog, simOp{at: w.now, what: what, write: write, batched: strings.HasPrefix(what, "plan ") || strings.HasPrefix(what, "tool "), undo: undo})
}

// zombie is a scheduler that lost the plan's partition while paused and
// then woke up: it still has its machine, its timers and whatever it had
// received, and no idea it is no longer the owner. The store refuses its
// plan-state writes and its jobs (the fence); an outward effect waits for
// its writes first (the shell's settled), so it sees the refusal there.
type zombie struct {
	m       *Machine
	q       simQueue
	timers  map[TimerKey]int
	pending []Effect // the rest of the step it was paused in
	refused bool     // a write of its was refused (it learns at the next wait)
	dead    bool
	steps   int
}

func (w *world) push(at time.Time, ev Event, durable bool) {
	w.seq++
	w.q.push(&simItem{at: at, seq: w.seq, ev: ev, durable: durable})
}

func (w *world) logf(format string, args ...any) {
	if w.trace {
		fmt.Printf("%8.3fs "+format+"\n", append([]any{w.now.Sub(time.Unix(0, 0)).Seconds()}, args...)...)
	}
}

// genPlan makes a random plan: a chain, a wide fan, a diamond or a random
// DAG, with random policies, timeouts, approvals and references.
func genPlan(r *rand.Rand) *messages.Plan {
	n := 1 + r.IntN(8)
	switch r.IntN(100) {
	case 0:
		n = 50 + r.IntN(151)
	case 1, 2, 3:
		n = 10 + r.IntN(30)
	}
	shape := r.IntN(4)
	p := &messages.Plan{RequestID: "00000000-0000-4000-8000-000000000001", Parallel: r.IntN(3) > 0,
		Metadata: messages.PlanMetadata{GenerationAttempt: 1}}
	for i := range n {
		t := messages.Tool{ToolID: fmt.Sprintf("t%d", i), ToolPath: "s/x", Required: r.IntN(4) > 0, Async: r.IntN(5) > 0,
			RequiresApproval: r.IntN(25) == 0, Input: json.RawMessage(`{}`),
			RetryPolicy: messages.RetryPolicy{MaxRetries: r.IntN(6), BackoffMs: int64(r.IntN(500))}}
		switch {
		case i == 0:
		case shape == 0: // chain
			t.Dependencies = []string{fmt.Sprintf("t%d", i-1)}
		case shape == 1: // wide
		case shape == 2: // diamonds: each tool depends on up to two of the previous three
			for k := max(0, i-3); k < i; k++ {
				if r.IntN(2) == 0 && len(t.Dependencies) < 2 {
					t.Dependencies = append(t.Dependencies, fmt.Sprintf("t%d", k))
				}
			}
		default: // random DAG
			for k := range i {
				if r.IntN(max(2, i/2)) == 0 {
					t.Dependencies = append(t.Dependencies, fmt.Sprintf("t%d", k))
				}
			}
		}
		if len(t.Dependencies) > 0 && r.IntN(3) == 0 {
			dep := t.Dependencies[r.IntN(len(t.Dependencies))]
			t.Input = json.RawMessage(`{"from":"$` + dep + `","field":"$` + dep + `.n","lit":"$$x"}`)
		}
		p.Tools = append(p.Tools, t)
	}
	return p
}

func runSim(seed uint64, trace bool) (err error) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	plan := genPlan(r)
	graph, gerr := dag.Build(plancheck.Nodes(plan))
	if gerr != nil {
		return fmt.Errorf("generated plan invalid: %w", gerr)
	}
	start := time.Unix(1_000_000, 0).UTC()
	w := &world{r: r, f: rand.New(rand.NewPCG(seed^0x5bd1e995, seed)), plan: plan, graph: graph, now: start, timers: map[TimerKey]int{}, trace: trace,
		tools: map[string]*Tool{}, toolHist: map[string][]Tool{}, toolGone: map[string][]bool{}, jobs: map[jobKey]bool{}, runs: map[jobKey]int{},
		held: map[jobKey]time.Time{}, twoRuns: map[jobKey]bool{}, p: rand.New(rand.NewPCG(seed^0x85ebca6b, seed^0xc2b2ae35)),
		maxCrashes: r.IntN(4), crashP: []float64{0, 0.01, 0.05}[r.IntN(3)], lossP: []float64{0, 0, 0.02}[r.IntN(3)], owed: map[int]bool{}, memory: map[jobKey]*messages.Outcome{}, rerun: map[jobKey]bool{}, forgotSuccess: map[int]bool{}, forgot: map[int]bool{}, succeeded: map[int]bool{}, sent: map[jobKey]bool{}, asked: map[int]int{},
		cfg: Config{Concurrency: 1 + r.IntN(4), ApprovalTimeout: time.Duration(1+r.IntN(10)) * time.Second,
			LostGrace: 500 * time.Millisecond, MaxContextIterations: 1 + r.IntN(2), ContextTimeout: time.Second}}
	// On a coarse clock (one world in three) every duration is a multiple
	// of 100 ms, so events meet exactly: a retry timer at the deadline,
	// an outcome at its attempt's timeout.
	// Refusals draw from their own source, so recorded seeds replay.
	g := rand.New(rand.NewPCG(seed^0x2545f491, seed))
	w.refuseState = g.IntN(15) == 0
	w.refuseResult = []int{1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}[g.IntN(20)]
	w.refuseWrites, w.g = []float64{0.02, 0.1, 0, 0, 0, 0, 0, 0, 0, 0}[g.IntN(10)], g
	if w.f.IntN(3) == 0 {
		w.grid = 100 * time.Millisecond
		for i := range plan.Tools {
			plan.Tools[i].RetryPolicy.BackoffMs -= plan.Tools[i].RetryPolicy.BackoffMs % 100
		}
	}
	w.maxRollbacks = []int{0, 0, 1, 2}[w.f.IntN(4)]
	scripts := make([]Script, len(plan.Tools))
	for i := range scripts {
		scripts[i] = Script{Skill: "s", Name: "x", TimeoutMs: w.snap(time.Duration(100+r.IntN(3000)) * time.Millisecond).Milliseconds()}
	}
	planTimeout := w.snap(time.Duration(500+r.IntN(30_000)) * time.Millisecond)
	w.rec = Record{SessionID: "sess", AcceptedAt: start, Deadline: start.Add(planTimeout), Scripts: scripts, Phase: PhaseRunning}
	m, err := New(w.cfg, w.rec, plan, graph)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n  (%d tools, parallel %v, concurrency %d, crashes %d, step %d, t=%s)", err, len(plan.Tools),
				plan.Parallel, w.cfg.Concurrency, w.crashes, w.steps, w.now.Sub(start))
		}
	}()
	// Approvals arrive at random times, some never (the wait times out),
	// some for tools that are not waiting.
	for i := range plan.Tools {
		if r.IntN(3) > 0 && (plan.Tools[i].RequiresApproval || r.IntN(20) == 0) {
			w.push(start.Add(time.Duration(r.IntN(15000))*time.Millisecond), ApprovalArrived{ToolID: plan.Tools[i].ToolID,
				Approval: messages.Approval{Approved: r.IntN(3) > 0, By: "sim"}}, true)
		}
	}
	if r.IntN(8) == 0 { // someone cancels the plan
		w.push(start.Add(time.Duration(r.IntN(10_000))*time.Millisecond), CancelRequested{Reason: "sim"}, true)
	}
	for _, tl := range plan.Tools {
		w.logf("  plan %s deps %v required %v", tl.ToolID, tl.Dependencies, tl.Required)
	}
	ev := Event(Started{Now: start})
	var item *simItem
	for {
		w.steps++
		if w.steps > 200_000 {
			return fmt.Errorf("no end after %d steps", w.steps)
		}
		var crashed bool
		mark := len(w.oplog)
		m, crashed, err = w.step(m, ev)
		if err != nil {
			return err
		}
		if crashed {
			if item != nil && item.durable { // not acknowledged: redelivered
				w.seq++
				w.q.push(&simItem{at: w.now.Add(time.Duration(1+r.IntN(50)) * time.Millisecond), seq: w.seq, ev: item.ev, durable: true, stored: true})
			}
			if w.z == nil && r.IntN(2) == 0 {
				// Not a crash: the owner was paused past its lease. Another
				// scheduler takes the partition over (raising the fence); the
				// paused one will wake up with everything it had.
				// After a lost write, the paused owner's writer can never
				// store it (the fence has moved): its next wait fails.
				// After a write refused for good, the outward effects that go
				// out without it check the owner's term first: paused past
				// its lease, it does not hold it.
				w.z = &zombie{m: m, q: slices.Clone(w.q), timers: maps.Clone(w.timers), pending: w.rest, refused: w.lostCrash || w.refusedPending}
				heap.Init(&w.z.q)
				w.zombies++
				w.logf("PAUSE: the owner is paused past its lease; another takes the partition over")
			}
			w.rest = nil
			if m, err = w.recover(); err != nil {
				return err
			}
			ev, item = Recovered{Now: w.now, ResultStored: w.result != nil}, nil
			continue
		}
		switch {
		case item != nil && item.durable && w.kept:
			// Not taken yet (KeepOutcome): not acknowledged, so delivered
			// again later.
			w.seq++
			w.q.push(&simItem{at: w.now.Add(time.Duration(1+w.f.IntN(50)) * time.Millisecond), seq: w.seq, ev: item.ev, durable: true, stored: true})
			w.kept = false
		case item != nil && item.durable && w.stepRefused:
			// Its step's write was refused: the acknowledgement waits for
			// the writes, meets the refusal and naks — delivered again.
			w.seq++
			w.q.push(&simItem{at: w.now.Add(time.Duration(1+w.g.IntN(50)) * time.Millisecond), seq: w.seq, ev: item.ev, durable: true, stored: true})
		case item != nil && item.durable:
			// Acknowledged once its step's writes are stored; a forgotten
			// ack delivers it again.
			if err := w.checkAck(m, item.ev); err != nil {
				return err
			}
			it := item
			w.logOp(fmt.Sprintf("ack %T", it.ev), false, func() {
				w.seq++
				w.q.push(&simItem{at: w.now.Add(time.Duration(1+w.f.IntN(20)) * time.Millisecond), seq: w.seq, ev: it.ev, durable: true, stored: true})
			})
		}
		w.kept = false
		if w.resurrected && !w.purged {
			return fmt.Errorf("recovered with its result stored after the store went back in time, but not purged at once (phase %s)", m.Phase())
		}
		if err := w.check(m); err != nil && !w.resurrected {
			return err
		}
		if err := w.checkStored(m); err != nil && !w.resurrected && !*simStrictReconnect {
			return err
		}
		if o, ok := ev.(OutcomeArrived); ok {
			if i, known := m.Index(o.Outcome.ToolID); known && w.forgot[i] && m.Phase() == PhaseRunning && !w.refused {
				// The redelivered outcome of a tool whose end record the
				// store forgot: the machine writes the record again (which
				// a store refusing writes for good may refuse again).
				delete(w.forgot, i)
				if t := w.tools[o.Outcome.ToolID]; t == nil || t.State != m.Tool(i).State || t.Attempt != m.Tool(i).Attempt {
					return fmt.Errorf("outcome %s#%d redelivered after the store forgot its end record, which is still not stored (the machine: %s#%d)",
						o.Outcome.ToolID, o.Outcome.Attempt, m.Tool(i).State, m.Tool(i).Attempt)
				}
			}
			if w.rollbacks < w.maxRollbacks && w.f.IntN(8) == 0 {
				w.reconnect(m, o.Outcome, mark)
			}
		}
		if w.rollbacks < w.maxRollbacks && len(w.oplog) > 0 && w.f.IntN(20) == 0 && w.rollback() {
			// The server restarted and forgot a suffix of what it had
			// acknowledged; the scheduler restarts with it.
			if m, err = w.recover(); err != nil {
				return err
			}
			ev, item = Recovered{Now: w.now, ResultStored: w.result != nil}, nil
			continue
		}
		if w.purged && w.crashes < w.maxCrashes && w.f.IntN(3) == 0 {
			// The store forgets the purge (nats-server killed in the
			// moments after it): every key of the plan comes back as last
			// written, and the next owner recovers the plan. Its stored
			// result must win: nothing runs again.
			// What comes back of each key is any revision it had, not
			// only its last: the deletes of older revisions are forgotten
			// too, in no order we can rely on.
			w.logf("STORE FORGETS the purge: the plan's records come back at earlier revisions")
			w.purged, w.resurrected = false, true
			// Only a revision the store kept can come back: the draw picks
			// one, and a revision that never landed gives way to the
			// nearest that did (the same draws as before, so recorded
			// seeds replay).
			if len(w.planHist) == 0 {
				// Every record write was refused: the record stays as
				// intake stored it.
			} else if rec, ok := pickStored(w.planHist, w.planGone, w.f.IntN(len(w.planHist))); ok {
				w.rec = rec
			}
			for id, h := range w.toolHist {
				if t, ok := pickStored(h, w.toolGone[id], w.f.IntN(len(h))); ok {
					w.tools[id] = &t
				} else {
					delete(w.tools, id)
				}
			}
			simForgotten++
			m2, rerr := w.recover()
			if rerr != nil {
				// Records from different moments may not fit together: the
				// shell drops such a plan and purges its keys.
				w.logf("the records brought back do not restore (%v): dropped and purged", rerr)
				w.purged = true
				return w.final(m)
			}
			m = m2
			ev, item = Recovered{Now: w.now, ResultStored: w.result != nil}, nil
			continue
		}
		if w.purged {
			if w.f.IntN(4) == 0 {
				// The plan's outcomes are delivered again after it ended and
				// its keys were purged (forgotten acks): they change nothing.
				for _, o := range w.outcomes {
					effects, serr := m.Step(OutcomeArrived{Now: w.now, Outcome: o})
					if serr != nil {
						return fmt.Errorf("outcome %s#%d after the purge: %w", o.ToolID, o.Attempt, serr)
					}
					for _, e := range effects {
						if _, ok := e.(Log); !ok {
							return fmt.Errorf("outcome %s#%d delivered after the purge made %T", o.ToolID, o.Attempt, e)
						}
					}
				}
			}
			return w.final(m)
		}
		// The paused owner wakes up now and then and takes a step.
		if z := w.z; z != nil && !z.dead && r.IntN(3) == 0 {
			if err := w.stepZombie(z); err != nil {
				return fmt.Errorf("the owner that lost the partition: %w", err)
			}
		}
		// Next event.
		for {
			if w.q.Len() == 0 {
				return fmt.Errorf("nothing left to happen, but the plan is %s (running %d)", m.Phase(), m.Running())
			}
			item = w.q.pop()
			if item.gen != 0 && w.timers[item.key] != item.gen {
				continue // stopped or replaced
			}
			if item.gen != 0 {
				delete(w.timers, item.key)
			}
			if item.at.After(w.now) {
				w.now = item.at
			}
			ev = withNow(item.ev, w.now)
			if a, ok := ev.(ApprovalArrived); ok && a.StoredAt.IsZero() {
				// A decision is stored when it is sent (one read back after
				// a crash carries that time already).
				a.StoredAt = item.at
				ev = a
			}
			break
		}
	}
}

func withNow(ev Event, now time.Time) Event {
	switch e := ev.(type) {
	case TimerFired:
		e.Now = now
		return e
	case OutcomeArrived:
		e.Now = now
		return e
	case ApprovalArrived:
		e.Now = now
		return e
	case DispatchFailed:
		e.Now = now
		return e
	case Probed:
		e.Now = now
		return e
	case PublishDone:
		e.Now = now
		return e
	case CancelRequested:
		e.Now = now
		return e
	case CommitDone:
		e.Now = now
		return e
	case StateRefused:
		e.Now = now
		return e
	case ContextAnswered:
		e.Now = now
		return e
	}
	return ev
}

// snap rounds d up to the world's clock grid (none: d as it is).
func (w *world) snap(d time.Duration) time.Duration {
	if w.grid <= 0 {
		return d
	}
	return max(w.grid, (d+w.grid-1)/w.grid*w.grid)
}

// recover rebuilds the machine from the store only, as a new scheduler
// would: in-memory timers are gone.
func (w *world) recover() (*Machine, error) {
	w.crashes++
	w.refusedPending = false
	w.timers = map[TimerKey]int{}
	w.forgot = map[int]bool{} // the new scheduler knows only the store
	if w.r.IntN(3) == 0 {     // the next scheduler takes over after a while
		w.now = w.now.Add(time.Duration(w.r.IntN(10_000)) * time.Millisecond)
	}
	w.outage = w.outage || w.r.IntN(2) == 0
	// What the dead process had in memory (answers to its probes and
	// publications, its timers) dies with it; outcomes and approvals are
	// durable and stay queued.
	kept := w.q[:0]
	for _, it := range w.q {
		if _, ok := it.ev.(OutcomeArrived); ok && it.at.Before(w.now) {
			it.stored = true
		}
		if d, ok := it.ev.(ApprovalArrived); ok && it.at.Before(w.now) && d.StoredAt.IsZero() {
			// A decision sent while no scheduler ran is read back from the
			// approvals stream once the plan is recovered: a moment after
			// the recovery, with the time it was stored.
			d.StoredAt = it.at
			it.ev, it.at = d, w.now.Add(time.Duration(w.f.IntN(500))*time.Millisecond)
		}
		if it.durable {
			kept = append(kept, it)
		}
	}
	w.q = kept
	heap.Init(&w.q)
	w.logf("CRASH %d: recovering from the store", w.crashes)
	tools := map[string]*Tool{}
	for id, t := range w.tools {
		c := *t
		tools[id] = &c
	}
	m, err := Restore(w.cfg, w.rec, w.plan, w.graph, tools)
	if err != nil {
		return nil, fmt.Errorf("restore after crash %d: %w", w.crashes, err)
	}
	return m, nil
}

// step runs one event and carries out its effects, crashing at a random
// effect boundary.
func (w *world) step(m *Machine, ev Event) (*Machine, bool, error) {
	before := make([]Tool, m.Len())
	for i := range before {
		before[i] = m.Tool(i)
	}
	w.logf("event %T %+v", ev, short(ev))
	if e, ok := ev.(TimerFired); ok && e.Key.Kind == TimerLost {
		// An attempt is given up only when no outcome of it is stored.
		for _, it := range w.q {
			if o, ok := it.ev.(OutcomeArrived); ok && it.stored && o.Outcome.ToolID == m.ToolID(e.Key.Index) && o.Outcome.Attempt == e.Attempt &&
				m.Tool(e.Key.Index).State == messages.ToolRunning && m.Tool(e.Key.Index).Attempt == e.Attempt {
				return m, false, fmt.Errorf("attempt %d of %s given up as lost while its outcome is stored", e.Attempt, o.Outcome.ToolID)
			}
		}
	}
	_, w.recovering = ev.(Recovered)
	w.before, w.event, w.kept = before, ev, false
	effects, err := m.Step(ev)
	if errors.Is(err, ErrRefusedMove) {
		return m, false, err
	}
	// Checks on the transition itself.
	for i := range before {
		b, a := before[i], m.Tool(i)
		if terminal(b.State) && (a.State != b.State || a.Attempt != b.Attempt) {
			return m, false, fmt.Errorf("tool %s left terminal state %s for %s", m.ToolID(i), b.State, a.State)
		}
	}
	for i := range before {
		// A decision stored before the wait's deadline wins over the
		// approval timeout, however late it is read back (a recovery).
		b, a := before[i], m.Tool(i)
		if b.State != messages.ToolAwaitingApproval || a.State != messages.ToolFailed || a.Error == nil || a.Error.Code != "approval_timeout" {
			continue
		}
		for _, it := range w.q {
			if d, ok := it.ev.(ApprovalArrived); ok && d.ToolID == m.ToolID(i) && it.at.Before(b.WaitUntil) {
				return m, false, fmt.Errorf("the approval wait of %s timed out while a decision stored in time (at %s, deadline %s) was queued",
					m.ToolID(i), it.at.Format("15:04:05.000"), b.WaitUntil.Format("15:04:05.000"))
			}
		}
	}
	if o, ok := ev.(OutcomeArrived); ok && o.Outcome.Error != nil && Classify(o.Outcome.Error) == Terminal {
		i, _ := m.Index(o.Outcome.ToolID)
		if b := before[i]; b.State == messages.ToolRunning && b.Attempt == o.Outcome.Attempt && m.Phase() == PhaseRunning {
			if a := m.Tool(i); a.State != messages.ToolFailed {
				return m, false, fmt.Errorf("terminal failure of %s was not final: %s", m.ToolID(i), a.State)
			}
		}
	}
	lost := false
	w.lostCrash, w.stepRefused = false, false
	mark := len(w.oplog) // the store operations of this step's last batch start here
	for k, e := range effects {
		if d, ok := e.(Dispatch); lost && ok && d.AfterWrites {
			w.logf("crash before effect %d/%d: the job waits for the lost write", k, len(effects))
			w.rest, w.lostCrash = nil, true
			return m, true, nil
		}
		if lost {
			switch e.(type) {
			case CommitState, CancelRunning, PublishResult, RequestContext, Purge:
				// These wait until every write before them is stored (the
				// scheduler's settled): the lost one never is, and the
				// process dies before its writer sends it again. Later
				// writes, dispatches (through the jobs writer) and the rest
				// go on.
				w.logf("crash before effect %d/%d: it waits for the lost write", k, len(effects))
				w.rest, w.lostCrash = nil, true
				return m, true, nil
			}
		}
		if w.refusedWrite(m, e) {
			continue
		}
		if w.refusedPending {
			// A write of this process was refused for good: the effects
			// that must not go out without the plan's state stored wait for
			// their writes (settled), which fails — a second context
			// request, a job (its attempt is in no record stored), a commit (the plan a successor
			// resumes from the state stored may end otherwise: the commit
			// is refused, and the plan fails without it); the others (a
			// result, deduplicated and trusted by recovery, a kill) go out
			// while the owner's term holds.
			switch e := e.(type) {
			case CommitState:
				w.push(w.now, CommitDone{Err: "the plan's state was refused by the store", Refused: true}, false)
				continue
			case RequestContext:
				w.push(w.now, ContextAnswered{N: e.N, Err: "plan state refused by the store"}, false)
				continue
			case Dispatch:
				// No job goes out: the attempt it would start is in no
				// record the store holds (StateRefused, on its way, ends
				// the plan; after a crash, a probe finds no job).
				w.logf("  dispatch of %s#%d dropped: a state write was refused", m.ToolID(e.Index), e.Attempt)
				continue
			}
		}
		if _, ok := e.(PersistPlan); ok && !lost && w.crashes < w.maxCrashes && w.r.Float64() < w.lossP {
			w.logf("write lost: plan record (phase %s)", e.(PersistPlan).Record.Phase)
			simLosses++
			lost = true
			continue
		}
		if _, ok := e.(PersistTool); ok && !lost && w.crashes < w.maxCrashes && w.r.Float64() < w.lossP {
			// A write lost across a reconnect while later ones are stored
			// (the ordered writer would send it again, but the process is
			// killed first).
			pt := e.(PersistTool)
			w.logf("write lost: tool %s %s", m.ToolID(pt.Index), pt.Tool.State)
			if terminal(pt.Tool.State) {
				w.owed[pt.Index] = true
			}
			simLosses++
			lost = true
			continue
		}
		if w.crashes < w.maxCrashes && w.r.Float64() < w.crashP {
			w.logf("crash before effect %d/%d", k, len(effects))
			w.rest, w.lostCrash = effects[k:], lost
			if !lost {
				if err := w.batch(m, effects[k:], mark); err != nil {
					return m, false, err
				}
			}
			return m, true, nil
		}
		if w.trace {
			if d, ok := e.(Dispatch); ok {
				w.logf("  dispatch %s#%d", m.ToolID(d.Index), d.Attempt)
			}
		}
		if err := w.apply(m, e); err != nil {
			return m, false, err
		}
		switch e := e.(type) {
		case CommitState, CancelRunning, PublishResult, RequestContext, Purge:
			// It went out once the writes before it were stored: they were
			// acknowledged, and a later batch holds the writes after it.
			mark = len(w.oplog)
		case Dispatch:
			if e.AfterWrites {
				mark = len(w.oplog)
			}
		}
	}
	if lost {
		w.logf("crash after the step: a write of it was lost")
		w.rest, w.lostCrash = nil, true
		return m, true, nil
	}
	return m, false, nil
}

// refusedWrite decides whether the store refuses a state write e for good
// (refuseWrites): then it is not stored, the effects after it go on (the
// writes a refusal does not hold back: the scheduler's settled counts a
// refused write as settled), and the shell tells the machine — an event
// of the process's memory, gone with it in a crash.
func (w *world) refusedWrite(m *Machine, e Effect) bool {
	if w.refuseWrites == 0 {
		return false
	}
	switch e := e.(type) {
	case PersistPlan:
		if w.g.Float64() >= w.refuseWrites {
			return false
		}
		w.logf("write refused by the store: plan record (phase %s)", e.Record.Phase)
	case PersistTool:
		if w.g.Float64() >= w.refuseWrites {
			return false
		}
		w.logf("write refused by the store: tool %s %s", m.ToolID(e.Index), e.Tool.State)
		if terminal(e.Tool.State) {
			w.owed[e.Index] = true
		}
	default:
		return false
	}
	simRefusedWrites++
	w.refused, w.refusedPending, w.stepRefused = true, true, true
	w.push(w.now.Add(time.Duration(1+w.g.IntN(5))*time.Millisecond), StateRefused{Err: "maximum bytes exceeded"}, false)
	return true
}

// checkAck: a success the machine acknowledges must have been taken. The
// outcome of an attempt the machine has not started (one sent before a
// recovery, of a tool whose dependencies it has not seen end) is the only
// word of that success: acknowledged and dropped while the plan runs on,
// it is lost, and the tool runs again once its dependencies end.
func (w *world) checkAck(m *Machine, ev Event) error {
	o, ok := ev.(OutcomeArrived)
	if !ok || o.Outcome.State != messages.ToolSuccess {
		return nil
	}
	i, known := m.Index(o.Outcome.ToolID)
	rec := m.Record()
	if !known || m.Phase() != PhaseRunning || rec.TimedOut || rec.Cancelled {
		return nil
	}
	if t := m.Tool(i); o.Outcome.Attempt > t.Attempt && (t.State == messages.ToolPending || t.State == messages.ToolRetrying) {
		return fmt.Errorf("the success of %s#%d was acknowledged but not taken (the tool is %s#%d): it is lost, and the script will run again",
			o.Outcome.ToolID, o.Outcome.Attempt, t.State, t.Attempt)
	}
	return nil
}

// batch decides what a crash in the middle of a step leaves of the
// step's record writes. The scheduler's writer sends the writes queued
// together as one atomic batch (docs/decisions/, "Atomic batches where
// they pay"), and the server stores a batch whole or not at all: either
// none of the step's writes is stored, or all of them are, the ones the
// crash came before included. A server without atomic batches stores them
// one at a time: what came before the crash.
func (w *world) batch(m *Machine, rest []Effect, mark int) error {
	switch w.f.IntN(3) {
	case 0: // one at a time
	case 1: // none: the batch never reached the server
		var kept []simOp
		for k := len(w.oplog) - 1; k >= mark; k-- {
			if op := w.oplog[k]; op.batched {
				w.logf("  batch not stored: %s", op.what)
				op.undo()
				// A paused owner sends the batch again when it wakes up;
				// the fence refuses it.
				w.lostCrash = true
				continue
			}
			kept = append(kept, w.oplog[k])
		}
		slices.Reverse(kept)
		w.oplog = append(w.oplog[:mark], kept...)
		simBatches++
	case 2: // all: the batch was stored, the crash came before its answer
		var left []Effect
		for _, e := range rest {
			switch e.(type) {
			case PersistPlan, PersistTool:
				w.logf("  batch stored whole: %T", e)
				if err := w.apply(m, e); err != nil {
					return err
				}
			default:
				left = append(left, e)
			}
		}
		w.rest = left
		simBatches++
	}
	return nil
}

func short(ev Event) string {
	switch e := ev.(type) {
	case OutcomeArrived:
		return fmt.Sprintf("%s#%d %s", e.Outcome.ToolID, e.Outcome.Attempt, e.Outcome.State)
	case TimerFired:
		return fmt.Sprintf("%s tool %d attempt %d", e.Key.Kind, e.Key.Index, e.Attempt)
	case ApprovalArrived:
		return fmt.Sprintf("%s approved %v", e.ToolID, e.Approval.Approved)
	}
	return ""
}

func terminal(s messages.ToolState) bool {
	switch s {
	case messages.ToolSuccess, messages.ToolFailed, messages.ToolSkipped, messages.ToolTimeout, messages.ToolCancelled:
		return true
	case messages.ToolPending, messages.ToolRunning, messages.ToolRetrying, messages.ToolAwaitingApproval:
		return false
	}
	return false
}

// apply carries out one effect in the simulated world and checks the
// invariants that belong to it.
func (w *world) apply(m *Machine, e Effect) error {
	r := w.r
	switch e := e.(type) {
	case PersistPlan:
		if e.Record.Phase == PhaseFinished && w.rec.Phase != PhaseFinished && w.f.IntN(4) == 0 {
			// The acks of the plan's outcomes are forgotten (a killed
			// server): every outcome comes again after the plan ended.
			for _, o := range w.outcomes {
				w.push(w.now.Add(time.Duration(1+w.f.IntN(20))*time.Millisecond), OutcomeArrived{Outcome: o}, true)
			}
		}
		prev, rev := w.rec, len(w.planHist)
		w.logOp("plan "+string(e.Record.Phase), true, func() { w.rec, w.planGone[rev] = prev, true })
		w.rec = e.Record
		w.planHist, w.planGone = append(w.planHist, e.Record), append(w.planGone, false)
	case PersistTool:
		t := e.Tool
		id := m.ToolID(e.Index)
		w.logf("  stored %s %s#%d", id, t.State, t.Attempt)
		if old := w.tools[id]; old != nil && terminal(old.State) && (old.State != t.State || old.Attempt != t.Attempt) {
			return fmt.Errorf("persisted tool %s moved from terminal %s to %s", id, old.State, t.State)
		}
		prev, i, rev := w.tools[id], e.Index, len(w.toolHist[id])
		w.logOp("tool "+id+" "+string(t.State), true, func() {
			w.toolGone[id][rev] = true
			if prev == nil {
				delete(w.tools, id)
			} else {
				w.tools[id] = prev
			}
			if terminal(t.State) && (prev == nil || !terminal(prev.State)) {
				w.owed[i] = true // its end is gone from the store: the machine restores it running or pending
			}
			if t.State == messages.ToolSuccess && (prev == nil || prev.State != messages.ToolSuccess) {
				// The machine may send its attempt again: only the worker's
				// memory keeps the script from running a second time.
				delete(w.succeeded, i)
				w.forgotSuccess[i] = true
			}
		})
		if t.State != messages.ToolRunning && t.Error != nil && t.Error.Code == "dispatch_failed" && w.jobs[jobKey{i, t.Attempt}] && !w.recovering {
			return fmt.Errorf("attempt %d of %s failed as not stored, but its job is stored: its script would run twice", t.Attempt, id)
		}
		if t.State != messages.ToolRunning && t.Error != nil && t.Error.Code == "no_outcome" && w.now.Before(w.held[jobKey{i, t.Attempt}]) {
			return fmt.Errorf("attempt %d of %s given up as lost while its job was still held by a worker (until %s): its script would run twice",
				t.Attempt, id, w.held[jobKey{i, t.Attempt}].Sub(w.now))
		}
		w.tools[id] = &t
		w.toolHist[id], w.toolGone[id] = append(w.toolHist[id], t), append(w.toolGone[id], false)
		if t.State == messages.ToolSuccess {
			w.succeeded[e.Index] = true
		}
	case Dispatch:
		if w.resurrected {
			return fmt.Errorf("%s dispatched from records the store brought back after the plan's result was stored", m.ToolID(e.Index))
		}
		if err := w.checkDispatch(m, e); err != nil {
			return err
		}
		k := jobKey{e.Index, e.Attempt}
		if w.jobs[k] {
			if w.outage && w.runs[k] > 0 {
				// Past the duplicate window the resend is a new job.
				return w.run(m, e)
			}
			return nil // the message ID makes the resend a duplicate
		}
		if r.IntN(40) == 0 {
			switch w.p.IntN(4) {
			case 0:
				// Stored, but its answer was lost: the machine must find
				// it before it sends another attempt (issue 44).
				w.jobs[k] = true
				w.logOp(fmt.Sprintf("job %s#%d", m.ToolID(e.Index), e.Attempt), true, func() { delete(w.jobs, k) })
				w.push(w.now.Add(time.Millisecond), DispatchFailed{Index: e.Index, Attempt: e.Attempt, Err: "no response from stream"}, false)
				return w.run(m, e)
			case 1:
				// Refused: a full jobs stream, the store's failure.
				w.push(w.now.Add(time.Millisecond), DispatchFailed{Index: e.Index, Attempt: e.Attempt, Err: "maximum messages exceeded", Refused: true}, false)
				return nil
			}
			w.push(w.now.Add(time.Millisecond), DispatchFailed{Index: e.Index, Attempt: e.Attempt, Err: "no response from stream"}, false)
			return nil
		}
		w.jobs[k] = true
		w.logOp(fmt.Sprintf("job %s#%d", m.ToolID(e.Index), e.Attempt), true, func() { delete(w.jobs, k) })
		return w.run(m, e)
	case Probe:
		w.logf("  probe %s#%d", m.ToolID(e.Index), e.Attempt)
		if !w.recovering && e.Index < len(w.before) && w.before[e.Index].State != messages.ToolRunning {
			if err := w.checkRunning(m); err != nil {
				return err
			}
		}
		// A probe is a round trip: its answer may come after a timer that
		// falls due meanwhile (the deadline's, at the same instant on a
		// coarse clock).
		at := w.now
		if w.f.IntN(2) == 0 {
			at = at.Add(w.snap(time.Duration(w.f.IntN(300)) * time.Millisecond))
		}
		w.push(at, Probed{Index: e.Index, Attempt: e.Attempt, Stored: w.probeStored(e), Why: e.Why}, false)
	case ArmTimer:
		if e.Key.Kind == TimerRetry && !w.recovering {
			want := messages.RetryDelay(m.Plan().Tools[e.Key.Index].RetryPolicy.BackoffMs, e.Attempt)
			if got := e.At.Sub(w.now); got != want {
				return fmt.Errorf("retry %d of %s waits %s, want %s (§4.4)", e.Attempt, m.ToolID(e.Key.Index), got, want)
			}
			if !e.At.Before(m.Deadline(w.now)) {
				return fmt.Errorf("retry of %s armed past the plan deadline", m.ToolID(e.Key.Index))
			}
		}
		w.gen++
		w.timers[e.Key] = w.gen
		at := e.At
		if at.Before(w.now) {
			at = w.now
		}
		w.seq++
		seq := w.seq
		if w.grid > 0 && w.f.IntN(2) == 0 {
			seq += 1 << 40 // fires after whatever else happens at the same instant
		}
		w.q.push(&simItem{at: at, seq: seq, gen: w.gen, key: e.Key, ev: TimerFired{Key: e.Key, Attempt: e.Attempt}})
	case StopTimer:
		delete(w.timers, e.Key)
	case CommitState:
		if !m.Succeeded() || m.Record().Cancelled || m.Phase() != PhaseFinished {
			return fmt.Errorf("a plan that did not end well commits its state")
		}
		if want := m.allPatches(); len(e.Patches) != len(want) || len(want) == 0 {
			return fmt.Errorf("commit of %d patches, the plan staged %d", len(e.Patches), len(want))
		}
		if w.refuseState {
			w.push(w.now.Add(time.Millisecond), CommitDone{Err: "maximum bytes exceeded", Refused: true}, false)
			return nil
		}
		if r.IntN(10) == 0 {
			w.push(w.now.Add(time.Millisecond), CommitDone{Err: "no response from stream"}, false)
			return nil
		}
		if w.committed == 0 { // the commit mark makes a second commit of this plan a no-op
			w.committed++
			w.logOp("commit", true, func() { w.committed = 0 })
		}
		w.push(w.now.Add(time.Millisecond), CommitDone{}, false)
	case CancelRunning, FeedHealth, Progress, Log:
	case RequestContext:
		if w.asked[e.N] > 0 {
			return fmt.Errorf("context request %d sent twice", e.N)
		}
		w.asked[e.N]++
		if e.N > w.cfg.MaxContextIterations {
			return fmt.Errorf("context request %d past the limit %d", e.N, w.cfg.MaxContextIterations)
		}
		if m.Running() > 0 {
			return fmt.Errorf("context requested while %d tools still run", m.Running())
		}
		ans := ContextAnswered{N: e.N}
		switch x := r.IntN(10); {
		case x < 2:
			return nil // no planner answers: the context timer fires
		case x < 3:
			ans.Err = "planner failed"
		case x < 4: // nothing to add
		default:
			for k := range 1 + r.IntN(2) {
				tl := messages.Tool{ToolID: fmt.Sprintf("%sx%d", Prefix(e.N), k), ToolPath: "s/x", Required: r.IntN(3) > 0,
					Async: true, Input: json.RawMessage(`{}`), RetryPolicy: messages.RetryPolicy{MaxRetries: r.IntN(3), BackoffMs: 50}}
				if i, ok := m.Index(e.ToolID); ok && r.IntN(2) == 0 {
					tl.Dependencies = []string{m.ToolID(i)}
					tl.Input = json.RawMessage(`{"from":"$` + m.ToolID(i) + `"}`)
				}
				ans.Tools = append(ans.Tools, tl)
				ans.Scripts = append(ans.Scripts, Script{Skill: "s", Name: "x", TimeoutMs: int64(100 + r.IntN(2000))})
			}
		}
		w.push(w.now.Add(time.Duration(r.IntN(int(w.cfg.ContextTimeout/time.Millisecond)+500))*time.Millisecond), ans, false)
	case PublishResult:
		if m.Succeeded() && !m.Record().Cancelled && m.Record().Refused == "" && len(m.allPatches()) > 0 && w.committed == 0 {
			return fmt.Errorf("result published before the plan's state was committed")
		}
		if m.Phase() != PhaseFinished {
			return fmt.Errorf("result published in phase %s", m.Phase())
		}
		if err := w.checkPatchesStaged(m); err != nil {
			return err
		}
		res := m.Result()
		if err := w.checkResult(m, res); err != nil {
			return err
		}
		if w.refusesResult(m) {
			w.push(w.now.Add(time.Millisecond), PublishDone{Err: "maximum payload exceeded", Refused: true}, false)
			return nil
		}
		if r.IntN(10) == 0 {
			w.push(w.now.Add(time.Millisecond), PublishDone{Err: "no response from stream"}, false)
			return nil
		}
		if err := w.storeResult(res); err != nil {
			return err
		}
		w.push(w.now.Add(time.Millisecond), PublishDone{}, false)
	case KeepOutcome:
		o, ok := w.event.(OutcomeArrived)
		if !ok || o.Outcome.ToolID != e.ToolID || o.Outcome.Attempt != e.Attempt {
			return fmt.Errorf("keeps outcome %s#%d, which is not the one the step was given (%T)", e.ToolID, e.Attempt, w.event)
		}
		w.kept = true
	case Purge:
		if m.Phase() != PhasePublished || w.result == nil {
			return fmt.Errorf("purge in phase %s (result stored: %v)", m.Phase(), w.result != nil)
		}
		w.purged = true
		w.logOp("purge", false, func() {
			// The records come back as last written, next to the stored
			// result: the forgotten purge of "A store that forgets".
			w.purged, w.resurrected = false, w.result != nil
		})
	default:
		return fmt.Errorf("unknown effect %T", e)
	}
	return nil
}

// stepZombie lets the paused owner run one step: the effects it was
// paused in the middle of, or its next event (a timer of its own, an
// outcome or approval it had received, an answer to its own request).
func (w *world) stepZombie(z *zombie) error {
	z.steps++
	effects := z.pending
	z.pending = nil
	if effects == nil {
		var it *simItem
		for z.q.Len() > 0 {
			it = z.q.pop()
			if it.gen != 0 && z.timers[it.key] != it.gen {
				it = nil
				continue // stopped or replaced
			}
			if it.gen != 0 {
				delete(z.timers, it.key)
			}
			break
		}
		if it == nil {
			z.dead = true // nothing left to do: it idles until it notices
			return nil
		}
		now := w.now
		if it.at.After(now) {
			now = it.at
		}
		w.logf("zombie event %T %+v", it.ev, short(it.ev))
		var err error
		if effects, err = z.m.Step(withNow(it.ev, now)); errors.Is(err, ErrRefusedMove) {
			return fmt.Errorf("paused owner: %w", err)
		}
	}
	for _, e := range effects {
		if err := w.applyZombie(z, e); err != nil {
			return err
		}
		if z.dead {
			return nil
		}
	}
	if z.refused && w.r.IntN(2) == 0 {
		z.dead = true // an acknowledgement's wait saw the refusal
	}
	return nil
}

// applyZombie carries out an effect of the paused owner: its writes and
// jobs are refused by the fence, and an outward effect goes out only when
// none of its writes was refused (the shell waits for them first).
func (w *world) applyZombie(z *zombie, e Effect) error {
	switch e := e.(type) {
	case PersistPlan, PersistTool:
		z.refused = true // the plan-state fence
	case Dispatch:
		z.refused = true // the jobs fence: nothing stored, nothing runs
	case Probe:
		w.seq++
		z.q.push(&simItem{at: w.now, seq: w.seq, ev: Probed{Index: e.Index, Attempt: e.Attempt, Stored: w.probeStored(e), Why: e.Why}})
	case ArmTimer:
		w.gen++
		z.timers[e.Key] = w.gen
		w.seq++
		z.q.push(&simItem{at: e.At, seq: w.seq, gen: w.gen, key: e.Key, ev: TimerFired{Key: e.Key, Attempt: e.Attempt}})
	case StopTimer:
		delete(z.timers, e.Key)
	case FeedHealth, Progress, Log, KeepOutcome:
	case CommitState, PublishResult, CancelRunning, RequestContext, Purge:
		if z.refused {
			z.dead = true // settled saw the refusal: it gives the partition up
			return nil
		}
		w.zombieOK++
		switch e := e.(type) {
		case CommitState:
			if !z.m.Succeeded() || z.m.Phase() != PhaseFinished {
				return fmt.Errorf("commits the state of a plan that did not end well")
			}
			w.seq++
			if w.refuseState {
				z.q.push(&simItem{at: w.now, seq: w.seq, ev: CommitDone{Err: "maximum bytes exceeded", Refused: true}})
				break
			}
			if w.committed == 0 {
				w.committed++
				w.logOp("commit (paused owner)", true, func() { w.committed = 0 })
			}
			z.q.push(&simItem{at: w.now, seq: w.seq, ev: CommitDone{}})
		case PublishResult:
			if z.m.Phase() != PhaseFinished || w.rec.Phase == PhaseRunning {
				return fmt.Errorf("publishes a result while its successor runs the plan (store phase %s)", w.rec.Phase)
			}
			res := z.m.Result()
			if w.refusesResult(z.m) {
				w.seq++
				z.q.push(&simItem{at: w.now, seq: w.seq, ev: PublishDone{Err: "maximum payload exceeded", Refused: true}})
				break
			}
			if err := w.storeResult(res); err != nil {
				return fmt.Errorf("unlike its successor's: %w", err)
			}
			w.seq++
			z.q.push(&simItem{at: w.now, seq: w.seq, ev: PublishDone{}})
		case CancelRunning:
			// What the successor makes of the store: its record, and the
			// end its tools' records say when the record's write was not
			// stored (Restore).
			rec := w.rec
			inferEnding(&rec, w.tools)
			if !rec.Cancelled && !rec.TimedOut && rec.Refused == "" {
				return fmt.Errorf("kills the running scripts of a plan its successor runs")
			}
		case RequestContext:
			if w.asked[e.N] > 0 {
				return fmt.Errorf("context request %d sent twice", e.N)
			}
			w.asked[e.N]++
		case Purge:
			if w.rec.Phase != PhasePublished {
				return fmt.Errorf("purges a plan in phase %s", w.rec.Phase)
			}
		}
	default:
		return fmt.Errorf("unknown effect %T", e)
	}
	return nil
}

// storeResult stores the plan's result (deduplicated by plan ID): one
// result per plan, whatever the store forgot in between.
func (w *world) storeResult(res *messages.ExecutionResult) error {
	if w.published == nil {
		w.published = res
	} else if w.published.Success != res.Success || !slices.Equal(w.published.FailedTools, res.FailedTools) {
		return fmt.Errorf("result published twice with different contents: %v/%v then %v/%v", w.published.Success,
			w.published.FailedTools, res.Success, res.FailedTools)
	}
	if w.result == nil {
		w.result = res
		w.logOp("result", true, func() { w.result, w.resurrected = nil, false })
	}
	return nil
}

// run decides what the worker does with a stored job.
func (w *world) run(m *Machine, d Dispatch) error {
	r := w.r
	k := jobKey{d.Index, d.Attempt}
	if o, ok := w.memory[k]; ok {
		if o != nil {
			// The worker remembers the attempt (a job the store handed
			// back): it answers with the outcome it reported and acks the
			// job; the script does not run again.
			w.logf("  worker remembers %s#%d: answered from memory", m.ToolID(d.Index), d.Attempt)
			w.push(w.now.Add(time.Millisecond), OutcomeArrived{Outcome: o}, true)
			return nil
		}
		// It reported nothing (it died with the job): another worker runs it.
		w.reruns++
		w.rerun[k] = true
	}
	if w.succeeded[d.Index] || w.forgotSuccess[d.Index] {
		// Unless an earlier attempt ran twice (its worker paused past the
		// ack wait) and the outcome taken was the failed run's: the tool
		// failed as far as the plan knows, and is retried.
		prev := jobKey{d.Index, d.Attempt - 1}
		if t := w.tools[m.ToolID(d.Index)]; !w.twoRuns[prev] || t == nil || t.State != messages.ToolRetrying || t.Attempt != prev.attempt {
			return fmt.Errorf("the script of %s, which succeeded, runs again (attempt %d)", m.ToolID(d.Index), d.Attempt)
		}
		delete(w.forgotSuccess, d.Index)
	}
	w.runs[k]++
	w.memory[k] = nil
	defer func() {
		if o := w.memory[k]; o != nil {
			// The worker acks the job once its outcome is stored; a
			// forgotten ack hands the job back, and the worker answers it
			// from its memory.
			w.logOp(fmt.Sprintf("job ack %s#%d", m.ToolID(d.Index), d.Attempt), false, func() {
				w.push(w.now.Add(time.Millisecond), OutcomeArrived{Outcome: o}, true)
			})
		}
	}()
	id := m.ToolID(d.Index)
	o := &messages.Outcome{PlanID: m.ID(), ToolID: id, Attempt: d.Attempt, ExecutionTimeMs: 1}
	latency := time.Duration(r.Int64N(int64(d.Timeout))) + time.Millisecond
	switch x := r.IntN(100); {
	case x < 60:
		o.State = messages.ToolSuccess
		o.Output = json.RawMessage(`{"n":1}`)
		if r.IntN(12) == 0 { // §9.1: the script asks for more context
			o.Done = &messages.DoneEvent{OK: true, NeedsMoreContext: true, ContextSuggestion: "what happened before?"}
		}
		if r.IntN(2) == 0 {
			// Without a draw of its own (the seeds' paths stay): a log line
			// before it on every other tool, and its type escaped on every
			// other attempt, which the machine's filter must still see.
			patch := json.RawMessage(`{"version":"0","type":"state_patch","patch":{"` + id + `":1}}`)
			if d.Attempt%2 == 0 {
				patch = json.RawMessage(`{"version":"0","type":"state\u005fpatch","patch":{"` + id + `":1}}`)
			}
			if d.Index%2 == 1 {
				o.Events = append(o.Events, json.RawMessage(`{"version":"0","type":"log","level":"info","message":"patching"}`))
			}
			o.Events = append(o.Events, patch)
		}
	case x < 75:
		o.State = messages.ToolFailed
		o.Error = &messages.ToolError{Code: "exit_1", Category: messages.CategoryToolFailure, Message: "exit 1"}
	case x < 85:
		o.State = messages.ToolTimeout
		o.Error = &messages.ToolError{Code: "timeout", Category: messages.CategoryTimeout, Message: "timed out"}
		latency = d.Timeout
	case x < 88:
		o.State = messages.ToolFailed
		o.Error = &messages.ToolError{Code: "invalid_input", Category: messages.CategoryInvalidInput, Message: "input.n: must be integer"}
	case x < 93: // lost: the worker died and nobody reports the attempt
		if w.p.IntN(2) == 0 {
			// Its job is gone (delivered its last time): given up once
			// overdue, and sent again.
			return nil
		}
		// JetStream delivers it again past the ack wait to another worker,
		// which runs it: unavoidable, the first worker being silent.
		w.reruns++
		w.rerun[k] = true
		simSecondRuns++
		o.State = messages.ToolSuccess
		o.Output = json.RawMessage(`{"n":2}`)
		latency = d.Timeout + time.Duration(r.IntN(1000))*time.Millisecond
	default: // late: the worker was paused past the lost timer, holding the job
		o.State = messages.ToolSuccess
		latency = 2*d.Timeout + w.cfg.LostGrace + time.Duration(r.IntN(1000))*time.Millisecond
		simPaused++
		if w.p.IntN(3) == 0 {
			// Paused past the ack wait too: the job is delivered again to
			// another worker, which runs it a second time. Only one of the
			// two outcomes may be taken.
			simSecondRuns++
			w.twoRuns[k] = true
			o2 := &messages.Outcome{PlanID: o.PlanID, ToolID: o.ToolID, Attempt: o.Attempt, ExecutionTimeMs: 1}
			if w.p.IntN(2) == 0 {
				o2.State, o2.Output = messages.ToolSuccess, json.RawMessage(`{"n":3}`)
			} else {
				o2.State = messages.ToolFailed
				o2.Error = &messages.ToolError{Code: "exit_1", Category: messages.CategoryToolFailure, Message: "exit 1"}
			}
			at := w.snap(d.Timeout + time.Duration(w.p.Int64N(int64(2*d.Timeout+w.cfg.LostGrace))))
			w.push(w.now.Add(at), OutcomeArrived{Outcome: o2}, true)
			w.outcomes = append(w.outcomes, o2)
			w.held[k] = w.now.Add(at)
		}
	}
	latency = w.snap(latency)
	w.push(w.now.Add(latency), OutcomeArrived{Outcome: o}, true)
	w.outcomes = append(w.outcomes, o)
	w.memory[k] = o
	// The job stays in the work queue until its worker acks it, once its
	// outcome is sent.
	if until := w.now.Add(latency); until.After(w.held[k]) {
		w.held[k] = until
	}
	if r.IntN(15) == 0 { // a redelivered duplicate
		w.push(w.now.Add(latency+time.Duration(r.IntN(500))*time.Millisecond), OutcomeArrived{Outcome: o}, true)
	}
	return nil
}

// probeStored answers a probe: on recovery, whether the attempt's job is
// stored; for an overdue attempt, whether it is still held (unacked) in
// the work queue, by a worker or waiting to be delivered again.
func (w *world) probeStored(e Probe) bool {
	k := jobKey{e.Index, e.Attempt}
	if e.Why == ProbeOverdue {
		return w.jobs[k] && w.now.Before(w.held[k])
	}
	return w.jobs[k]
}

// checkDispatch: a tool starts only after its dependencies ended (§4.1),
// within the concurrency rules (§4.2, §4.3), never after it succeeded,
// with its dependencies' state patches merged (§4.8), and never past the
// plan deadline.
func (w *world) checkDispatch(m *Machine, d Dispatch) error {
	i := d.Index
	id := m.ToolID(i)
	if w.succeeded[i] {
		return fmt.Errorf("tool %s dispatched after it succeeded", id)
	}
	// Only a stored job makes a send a duplicate (nothing runs): a job
	// that was sent but never stored (a crash, a refusal, a rollback) is
	// an attempt that starts now.
	resend := w.jobs[jobKey{d.Index, d.Attempt}]
	fresh := i >= len(w.before) || w.before[i].State == messages.ToolPending
	if its := m.Record().Iterations; fresh && len(its) > 0 {
		if st := its[len(its)-1].State; st == IterationPending || st == IterationAsked {
			return fmt.Errorf("tool %s started while the plan is paused for context", id)
		}
	}
	w.sent[jobKey{d.Index, d.Attempt}] = true
	if !w.now.Before(m.Deadline(w.now)) && !resend {
		return fmt.Errorf("tool %s attempt %d started at the plan deadline or later", id, d.Attempt)
	}
	for _, dep := range m.Plan().Tools[i].Dependencies {
		j, _ := m.Index(dep)
		t := m.Tool(j)
		ok := t.State == messages.ToolSuccess || (!m.Plan().Tools[j].Required && terminal(t.State) && (t.State != messages.ToolSkipped || t.Denied))
		if !ok {
			return fmt.Errorf("tool %s started while dependency %s is %s", id, dep, t.State)
		}
		if t.State == messages.ToolSuccess && len(t.Patches) > 0 && len(d.Patches) < len(t.Patches) {
			return fmt.Errorf("tool %s started without dependency %s's staged state patch", id, dep)
		}
	}
	if want := m.ancestorPatchesScan(i); !reflect.DeepEqual(d.Patches, want) {
		return fmt.Errorf("tool %s started with the patches %v; a walk of its ancestors gives %v", id, d.Patches, want)
	}
	if i < len(w.before) && w.before[i].State == messages.ToolRunning {
		// The attempt started earlier (a probe found its job not stored):
		// the rules were checked then. An attempt the machine learned of
		// only from its outcome after a recovery (adopt) may have run
		// alongside it.
		return nil
	}
	return w.checkRunning(m)
}

// checkRunning: the concurrency rules (§4.2, §4.3) hold as a tool starts.
func (w *world) checkRunning(m *Machine) error {
	running := 0
	exclusive := false
	for j := range m.Len() {
		if w.owed[j] && m.Tool(j).State == messages.ToolRunning {
			continue // ended, but its end was lost: the machine waits for the outcome again
		}
		if s := m.Tool(j).State; s == messages.ToolRunning || s == messages.ToolRetrying {
			running++
			if m.Plan().Parallel && !m.Plan().Tools[j].Async {
				exclusive = true
			}
		}
	}
	switch {
	case !m.Plan().Parallel && running > 1:
		return fmt.Errorf("sequential plan runs %d tools at once", running)
	case m.Plan().Parallel && running > w.cfg.Concurrency && !exclusive:
		return fmt.Errorf("%d tools running, concurrency %d", running, w.cfg.Concurrency)
	case exclusive && running > 1:
		return fmt.Errorf("an async:false tool runs alongside %d others", running-1)
	}
	return nil
}

// check runs after every completed step.
func (w *world) check(m *Machine) error {
	running := 0
	for i := range m.Len() {
		t := m.Tool(i)
		if t.State == messages.ToolRunning || t.State == messages.ToolRetrying {
			running++
		}
		// The history says how the tool got where it is: it ends in its
		// state, and every entry is dated.
		if h := t.History; len(h) > 0 && (h[len(h)-1].State != t.State || h[len(h)-1].At.IsZero()) {
			return fmt.Errorf("tool %s is %s but its history ends with %+v", m.ToolID(i), t.State, h[len(h)-1])
		}
	}
	if running != m.Running() {
		return fmt.Errorf("running count %d, but %d tools are running or retrying", m.Running(), running)
	}
	if m.Phase() != PhaseRunning && running > 0 && !(w.refused && w.recovering && m.Phase() == PhasePublished) {
		// (A result stored without the writes the store refused: the
		// recovery that finds it restores the tools as the store has
		// them, and only purges.)
		return fmt.Errorf("plan %s with %d tools still running", m.Phase(), running)
	}
	return nil
}

// checkResult: success iff every required tool succeeded (§4.10); every
// tool ended in a terminal state; dependents of a failed required tool
// were skipped and, unless the plan timed out, every other tool ran (§4.6).
func (w *world) checkResult(m *Machine, res *messages.ExecutionResult) error {
	all := true
	state := map[string]messages.ToolState{}
	for i := range m.Len() {
		t := m.Tool(i)
		state[m.ToolID(i)] = t.State
		if !terminal(t.State) {
			return fmt.Errorf("result with tool %s in state %s", m.ToolID(i), t.State)
		}
		if m.Plan().Tools[i].Required && t.State != messages.ToolSuccess {
			all = false
		}
	}
	if m.Record().Cancelled || m.Record().Refused != "" {
		all = false // a cancelled plan, or one the store refused, never succeeds
	}
	if res.Success != all {
		return fmt.Errorf("result success %v, every required tool succeeded (and not cancelled): %v", res.Success, all)
	}
	// §7: an infrastructure failure (a job the store refused or never
	// stored) never disables a skill: only a skill's own failures do.
	own := false
	for _, tr := range res.ToolResults {
		if tr.State != messages.ToolSuccess && tr.State != messages.ToolSkipped && (tr.Error == nil || tr.Error.Category != messages.CategoryInfrastructure) {
			own = true
		}
	}
	if !own && len(res.DisabledSkills) > 0 {
		return fmt.Errorf("skills %v disabled though no tool failed on its own account", res.DisabledSkills)
	}
	if m.Record().Cancelled {
		if res.CanReplan || res.FailureReason != messages.ReasonCancelled {
			return fmt.Errorf("cancelled plan's result: canReplan %v, reason %q", res.CanReplan, res.FailureReason)
		}
		for i := range m.Len() {
			if t := m.Tool(i); t.State != messages.ToolCancelled && !terminalBeforeCancel(t) {
				return fmt.Errorf("cancelled plan left tool %s %s", m.ToolID(i), t.State)
			}
		}
		return nil
	}
	if len(res.ToolResults) != m.Len() {
		return fmt.Errorf("result lists %d tools of %d", len(res.ToolResults), m.Len())
	}
	if m.Record().Refused != "" {
		if res.CanReplan || res.FailureReason != messages.ReasonStorageRefused || res.Message == "" {
			return fmt.Errorf("refused plan's result: canReplan %v, reason %q, message %q", res.CanReplan, res.FailureReason, res.Message)
		}
		if m.Record().ShortResult {
			for _, tr := range res.ToolResults {
				if len(tr.Events) > 0 || string(tr.Output) != "null" {
					return fmt.Errorf("short result keeps tool %s's events or output", tr.ToolID)
				}
			}
		}
		if w.refuseState && w.committed != 0 {
			return fmt.Errorf("the state was refused, yet committed")
		}
		return nil
	}
	if m.Record().TimedOut {
		return nil
	}
	for i := range m.Len() {
		spec := m.Plan().Tools[i]
		blocked := false
		for _, dep := range spec.Dependencies {
			j, _ := m.Index(dep)
			d := m.Tool(j)
			if d.State != messages.ToolSuccess && (m.Plan().Tools[j].Required || (d.State == messages.ToolSkipped && !d.Denied)) {
				blocked = true
			}
		}
		t := m.Tool(i)
		switch {
		case blocked && (t.State != messages.ToolSkipped || t.Denied):
			return fmt.Errorf("tool %s is %s though a dependency did not succeed", spec.ToolID, t.State)
		case !blocked && t.State == messages.ToolSkipped && !t.Denied:
			return fmt.Errorf("tool %s was skipped though its dependencies succeeded", spec.ToolID)
		}
	}
	return nil
}

// refusesResult says whether the store refuses the result m would
// publish now.
func (w *world) refusesResult(m *Machine) bool {
	if w.refuseResult == 0 {
		return false
	}
	if !m.Record().ShortResult {
		return true
	}
	if w.refuseResult == 2 && w.shortRefused < 2 {
		w.shortRefused++
		return true
	}
	return false
}

// terminalBeforeCancel: a tool that ended on its own before the cancel.
func terminalBeforeCancel(t Tool) bool {
	return t.Error == nil || t.Error.Category != messages.CategoryCancelled
}

// final runs when the plan's keys were purged.
func (w *world) final(m *Machine) error {
	if w.result == nil {
		return fmt.Errorf("purged without a result")
	}
	for k, n := range w.runs {
		if n > 1 && !w.rerun[k] {
			return fmt.Errorf("job %s attempt %d ran %d times", m.ToolID(k.i), k.attempt, n)
		}
	}
	if w.result.Success && len(m.allPatches()) > 0 && w.committed != 1 {
		return fmt.Errorf("a plan that succeeded with staged patches committed %d times", w.committed)
	}
	// A plan whose full result the store refused after its state was
	// committed fails (storage_refused) and says the state was committed.
	if !w.result.Success && w.committed != 0 && (w.result.FailureReason != messages.ReasonStorageRefused || !w.result.StateCommitted) {
		return fmt.Errorf("a failed plan committed its state")
	}
	return nil
}

// pickStored returns h[k] when the store kept it, or else the nearest
// revision it kept (earlier first); false when it kept none.
func pickStored[T any](h []T, gone []bool, k int) (T, bool) {
	for d := range len(h) {
		if j := k - d; j >= 0 && !gone[j] {
			return h[j], true
		}
		if j := k + d; j < len(h) && !gone[j] {
			return h[j], true
		}
	}
	var zero T
	return zero, false
}

// simLosses counts the writes the simulated worlds lost; simForgotten the
// purges their store forgot.
var simLosses, simForgotten, simRollbacks, simBatches, simReconnects int

// simRefusedWrites counts the state writes the store refused for good.
var simRefusedWrites int

// simPaused and simSecondRuns count the attempts whose worker was paused
// past the lost timer, and those run a second time by another worker
// (their job delivered again past the ack wait while the first still
// held it).
var simPaused, simSecondRuns int

// TestSimLostWriteSeeds replays the seeds that found how a lost write (one
// the scheduler's writer never sent again) broke a plan before the machine
// handled it: a result with a tool still running, a job run twice, a
// dependent started without its dependency's output, a skip whose cause
// came back to life, a decision on a tool whose dependency's end was owed,
// a purge by the owner that lost the partition, a dependency timed out by
// the deadline behind its finished dependents (a restore refused it), a
// merged tool run while the record that merged it was lost, an approval kept
// for an owed end that came with a timer rather than an outcome, a retry
// timer firing past the deadline that a lost plan write (the one pushing it
// back after an approval wait) brought forward, while another approval
// held the deadline's own timer back, and a denial kept for a tool not yet
// ready, whose applied record was lost while its dependent ran, skipped
// rather than denied by the deadline, and a running tool whose timeout
// at the deadline was lost while its denied dependent's end was stored,
// ended again from pending as skipped by the recovery (a restore after
// the next crash refused the two).
// checkPatchesStaged fails when a tool that succeeded has no staged patch
// although the outcome it succeeded with carried one.
func (w *world) checkPatchesStaged(m *Machine) error {
	for i := range m.Len() {
		t := m.Tool(i)
		if t.State != messages.ToolSuccess || len(t.Patches) > 0 {
			continue
		}
		for _, o := range w.outcomes {
			if o.ToolID != m.ToolID(i) || o.Attempt != t.Attempt || o.State != messages.ToolSuccess {
				continue
			}
			for _, raw := range o.Events {
				if ev, err := messages.DecodeEvent(raw); err == nil {
					if _, ok := ev.(*messages.StatePatchEvent); ok {
						return fmt.Errorf("%s succeeded with a state patch (%s) that was not staged", m.ToolID(i), raw)
					}
				}
			}
		}
	}
	return nil
}

func TestSimLostWriteSeeds(t *testing.T) {
	before := simLosses
	for _, seed := range []uint64{
		1795556279364601305, 1795556279364672279, 1795556314038797475, 1795556345447742734,
		1795556374177895005, 1795556408916277903, 1795556439243686678, 1795556533117997701,
		1795556593336181253, 1795556891911426316, 1795559019259005619, 1795559019259139024,
		1795567135215750695, // a retry timer firing past a deadline a lost plan write brought forward
		1795568693025965448, // a kept denial not applied when the deadline came, its dependent run on it
		1795726350863235569, // a lost timeout at the deadline, its denied dependent's end stored
		1795739830569441086, // a dependent's success from before the recovery, acked before its dependency ended
		1795739830569444489, // the same, with the tool's first attempt
		1795753957809282442, // a success whose state patch names its type with an escape (the events filter)
		1795761372009466172, // a forgotten purge brought back a success whose batch never landed (the simulated store's fault, not the machine's)
	} {
		if err := runSim(seed, false); err != nil {
			t.Errorf("seed %d: %v", seed, err)
		}
	}
	// Since a running attempt has no record of its own (its job proves
	// it), these seeds draw their faults at other moments than when they
	// were found: they are kept as plans that once broke the machine, and
	// must still lose writes as a set.
	if simLosses == before {
		t.Error("no recorded seed lost a write")
	}
}

// TestSimRefusalSeeds replays seeds that failed once the simulation failed
// on a move the machine refused itself (a cancelled tool restored as
// pending: seed 396, a cancel with two crashes, tried to skip it), and
// once timers could fire after what happens at the same instant (a job
// the crash kept from the store sent again, after the recovery, at the
// deadline: the probe's answer came before the deadline's timer), and a
// late approval decision that ended a restored tool whose dependency's
// end was owed (found by a 1,000,000-seed run).
// TestSimPauseSeeds replays seeds of the pauses and second runs of issue
// 44 that once broke the simulation's rules.
func TestSimPauseSeeds(t *testing.T) {
	for _, seed := range []uint64{
		1796415642313912251, // an attempt given up while a paused worker still held its job (found the rule's check)
		1796415693920503496, // a second run's failure taken after a crash lost the first run's success: the retry is legitimate
	} {
		if err := runSim(seed, false); err != nil {
			t.Errorf("seed %d: %v", seed, err)
		}
	}
}

func TestSimRefusalSeeds(t *testing.T) {
	for _, seed := range []uint64{396, 960, 1795640631409569519,
		1795761846943321200, // a denial past the wait's deadline, for a tool whose dependency's end was owed
	} {
		if err := runSim(seed, false); err != nil {
			t.Errorf("seed %d: %v", seed, err)
		}
	}
}

// TestSimRefusedWriteSeeds replays the seeds that failed while the
// refused-write fault was built (issue 46): each drew refusals of state
// writes the store never kept, and broke a rule the shell or the machine
// then learned (the effects that wait for the refused write, the nak of
// its outcome, how Restore reads a plan's end from its tools).
func TestSimRefusedWriteSeeds(t *testing.T) {
	before := simRefusedWrites
	for _, seed := range []uint64{
		1796441651455390205, 1796441651455390233, 1796441651455390238, 1796441651455390254, 1796441651455390270,
		1796441659532565621, 1796441659532566170, 1796441659532567116, 1796441659532567320, 1796441659532567978,
		1796441696424234927, 1796441696424235373, 1796441696424235746, 1796441696424237588, 1796441696424237927,
		1796441725427639656, 1796441725427645819, 1796441725427646205, 1796441725427651482, 1796441725427656557,
		1796441913297352607, 1796441913297354822, 1796441913297358371, 1796441913297358640, 1796441913297359442,
		1796441927138871112, 1796441927138880153, 1796441927138887013, 1796441967821459215, 1796441967821470587,
		1796441987979210546, 1796441987979226828, 1796441987979260703, 1796441987979270841, 1796441987979271921,
		1796442146565446952, // a cancel whose record was refused while its tools' ends were stored
		1796442146565940068,
		1796443601622712024, // a paused owner's kill of a plan whose end only its tools' records say
	} {
		if err := runSim(seed, false); err != nil {
			t.Errorf("seed %d: %v", seed, err)
		}
	}
	if simRefusedWrites == before {
		t.Error("no seed refused a write")
	}
}

// TestSimMutationSeeds replays seeds that catch two mutations of the
// machine that once survived 200,000 seeds (issue 25, item 4):
//   - a recovered attempt whose job was not stored resent when its probe's
//     answer comes exactly at the deadline (Probed's pastDeadline changed
//     to now.After(deadline)): caught since a probe's answer may come
//     after a round trip;
//   - a redelivered outcome of an attempt the machine closed no longer
//     writes the tool's record again: caught since a server restart may
//     forget an end record and the outcome's ack while the scheduler stays
//     up.
//
// and seeds that find the machine dropping an outcome of an attempt a
// recovered plan had not sent again, then running the succeeded script a
// second time (without adopt; found through a batch of end records a
// crash kept from the store).
func TestSimMutationSeeds(t *testing.T) {
	for _, seed := range []uint64{
		1795697255875928860, 1795697255875937454, // the probe's answer at the deadline
		1795697248747610177, 1795697248747610198, // the redelivered outcome's record
		1795697108630446651, 1795697303140491999, 1795697303140493460, // adopt
	} {
		if err := runSim(seed, false); err != nil {
			t.Errorf("seed %d: %v", seed, err)
		}
	}
}
