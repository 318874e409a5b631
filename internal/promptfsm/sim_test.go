package promptfsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/narratoria/runtime/pkg/messages"
)

// seeds is how many worlds the simulation runs: 20,000 in make test, ten
// times more with NARRATORIA_LONG.
func seeds() int {
	if os.Getenv("NARRATORIA_LONG") != "" {
		return 200_000
	}
	return 20_000
}

// world is the store and the scheduler as the narrators of one prompt see
// them: the dedupe bucket, the attempt record (a revisioned key), the
// plans published, each plan's result (drawn once, the same for every
// narrator), and the narrations published (a message ID keeps one).
type world struct {
	rng *rand.Rand
	now time.Time

	stored   *messages.Narration // the dedupe bucket's entry
	rec      *messages.PromptAttempt
	rev      uint64 // the record's revision (a delete makes one too)
	plans    map[string]int
	byNumber map[int][]string
	results  map[string]*messages.ExecutionResult
	out      []*messages.Narration // published, after message-ID dedupe
	ids      map[string]bool
	answers  []*messages.Narration
	planned  int
	// The scheduler's side: a plan sent waits in the plans stream until a
	// scheduler takes it; a plan taken has its result stored some time
	// after (the result drawn once; nil: none in time).
	waiting, taken, finished map[string]bool
	// claimRefused: a narrator's claim was refused for good; it published
	// its narration unclaimed, and another narrator may claim its own
	// later (the answers still agree with the narration out).
	claimRefused bool
	// failing is the share of effects that fail (transient), refusing
	// the share refused for good.
	failing, refusing float64
}

// owner is one narrator working on the prompt (a machine, or none when it
// crashed and has not restarted).
type owner struct {
	m       *Machine
	pending []Effect
	done    bool
	// What this narrator's takeover found: the result stored when it
	// looked it up (finishedAtTakeover), the plan waiting when it checked.
	finishedAtTakeover, waitingAtCheck bool
}

const maxAttempts = 5

// result draws a plan's result once.
func (w *world) result(plan string) *messages.ExecutionResult {
	if r, ok := w.results[plan]; ok {
		return r
	}
	var r *messages.ExecutionResult
	switch x := w.rng.IntN(20); {
	case x < 8:
		r = &messages.ExecutionResult{PlanID: plan, Success: true, AggregatedState: json.RawMessage(`{"ok":true}`)}
	case x < 15:
		r = &messages.ExecutionResult{PlanID: plan, CanReplan: true, FailureReason: messages.ReasonToolFailure,
			FailedTools: []string{"t"}, DisabledSkills: []string{fmt.Sprintf("s%d", w.rng.IntN(4))}}
	case x < 16:
		r = &messages.ExecutionResult{PlanID: plan, FailureReason: messages.ReasonCancelled}
	default:
		r = nil // no result in time
	}
	w.results[plan] = r
	return r
}

// schedulers move the plans on: a plan waiting is taken, a plan taken
// finishes, each at random.
func (w *world) schedulers() {
	for _, id := range slices.Sorted(maps.Keys(w.waiting)) {
		if w.waiting[id] && w.rng.IntN(3) == 0 {
			w.waiting[id], w.taken[id] = false, true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(w.taken)) {
		if w.taken[id] && !w.finished[id] && w.rng.IntN(3) == 0 {
			w.finished[id] = true
			w.result(id)
		}
	}
}

// perform does one effect and returns the event that answers it (nil for
// an effect that takes none).
func (w *world) perform(o *owner, e Effect, seed uint64) (Event, error) {
	w.schedulers()
	fail := func() Event {
		if w.rng.Float64() < w.refusing {
			return Failed{Err: errors.New("maximum bytes exceeded"), Refused: true}
		}
		return Failed{Err: errors.New("context deadline exceeded")}
	}
	store := func() bool { return w.rng.Float64() < w.failing+w.refusing }
	switch e := e.(type) {
	case LoadAttempt:
		if store() {
			return fail(), nil
		}
		// A deleted record reads as none, with its delete's revision (the
		// shell reads the marker), so a save after it is an update of that
		// revision: a record written since makes it a conflict.
		if w.rec != nil {
			o.finishedAtTakeover = w.finished[w.rec.PlanID] && w.results[w.rec.PlanID] != nil
		}
		return AttemptLoaded{Record: w.rec, Revision: w.rev}, nil
	case LookupNarration:
		if store() {
			return fail(), nil
		}
		return NarrationFound{Narration: w.stored}, nil
	case Generate:
		if e.Attempt < 1 || e.Attempt > maxAttempts {
			return nil, fmt.Errorf("asked to plan attempt %d", e.Attempt)
		}
		w.planned++
		id := fmt.Sprintf("plan-%d-%d", seed, w.planned)
		raw, _ := json.Marshal(map[string]any{"requestId": id, "attempt": e.Attempt})
		return Generated{PlanID: id, Plan: raw}, nil
	case SaveAttempt:
		if store() {
			return fail(), nil
		}
		// A save is an update of the revision the load saw; revision 0
		// means the key was never written. (A create would also succeed
		// on a deleted record, one another narrator finished meanwhile:
		// the prompt would be planned a second time. The shell never
		// creates; seed 27 fails if this accepts revision 0 whenever no
		// record is there.)
		if e.Revision != w.rev {
			return AttemptConflict{}, nil
		}
		w.rev++
		w.rec = e.Record
		return AttemptSaved{Revision: w.rev}, nil
	case LookupResult:
		if store() {
			return fail(), nil
		}
		if w.finished[e.Record.PlanID] {
			return ResultLooked{Result: w.results[e.Record.PlanID]}, nil
		}
		return ResultLooked{}, nil
	case CheckPlan:
		if store() {
			return fail(), nil
		}
		o.waitingAtCheck = w.waiting[e.Record.PlanID]
		return PlanChecked{Waiting: w.waiting[e.Record.PlanID]}, nil
	case SendPlan:
		// (A fresh send may come after another narrator's takeover sent
		// the plan again: the recording narrator was slow, not dead. The
		// stream's message ID or the scheduler's rule keeps one run.)
		id := e.Record.PlanID
		switch {
		case e.Again && o.finishedAtTakeover:
			// The idempotence rule: a plan whose result is stored is never
			// sent again (its scheduler would have to find the result).
			return nil, fmt.Errorf("plan %s sent again though its result was stored when the attempt was taken over", id)
		case e.Again && o.waitingAtCheck:
			return nil, fmt.Errorf("plan %s sent again though it waited in the plans stream", id)
		}
		if store() {
			// Not stored; or stored, its acknowledgement lost.
			if w.rng.IntN(2) == 0 {
				w.send(id, e.Record.Attempt)
			}
			return fail(), nil
		}
		w.send(id, e.Record.Attempt)
		return PlanSent{}, nil
	case Await:
		if _, ok := w.plans[e.Record.PlanID]; !ok {
			return nil, fmt.Errorf("waits for plan %s, never sent", e.Record.PlanID)
		}
		if store() {
			return fail(), nil
		}
		// The wait ends with the result, or without one in time.
		w.waiting[e.Record.PlanID], w.taken[e.Record.PlanID], w.finished[e.Record.PlanID] = false, true, true
		return Awaited{Result: w.result(e.Record.PlanID)}, nil
	case Build:
		return Built{Narration: narrationFor(e)}, nil
	case Claim:
		if store() {
			ev := fail()
			w.claimRefused = w.claimRefused || ev.(Failed).Refused
			return ev, nil
		}
		if w.stored != nil {
			return ClaimConflict{Earlier: w.stored}, nil
		}
		w.stored = e.Narration
		return Claimed{}, nil
	case Publish:
		if store() {
			return fail(), nil
		}
		id := "narration"
		if e.IfMissing && len(w.out) > 0 {
			// The shell finds the prompt's narration out already and
			// publishes nothing: that one is the answer.
			return Published{Earlier: w.out[0]}, nil
		}
		if w.ids[id] {
			// The stream knew the message ID: the narration out is
			// another narrator's (one whose claim the dedupe store
			// refused), and the shell answers with it.
			return Published{Earlier: w.out[0]}, nil
		}
		w.ids[id] = true
		w.out = append(w.out, e.Narration)
		return Published{}, nil
	case Forget:
		if !store() {
			w.rev++
			w.rec = nil
		}
		return nil, nil
	case Resumed:
		if e.Record == nil || e.Record.PlanID == "" {
			return nil, errors.New("resumed no attempt")
		}
		return nil, nil
	case Finish:
		w.answers = append(w.answers, e.Narration)
		o.done = true
		return nil, nil
	case Abort:
		o.m, o.pending = nil, nil // the shell starts again later
		return nil, nil
	}
	return nil, fmt.Errorf("unknown effect %T", e)
}

// send stores a plan in the plans stream: the stream's message ID keeps
// one copy; a plan taken or finished already is not run again (the
// scheduler's idempotence rule: its record or its stored result).
func (w *world) send(id string, attempt int) {
	if _, ok := w.plans[id]; !ok {
		w.plans[id] = attempt
		w.byNumber[attempt] = append(w.byNumber[attempt], id)
	}
	if !w.taken[id] && !w.finished[id] {
		w.waiting[id] = true
	}
}

// narrationFor is a stand-in for the narrator's narration: what it is
// built from, so two narrations of the same attempt compare equal.
func narrationFor(b Build) *messages.Narration {
	n := &messages.Narration{Attempts: b.Attempt, Fallback: b.Verdict != VerdictSuccess, Cancelled: b.Verdict == VerdictCancelled,
		Trace: b.Trace}
	if b.Result != nil {
		n.PlanID = b.Result.PlanID
	}
	return n
}

// run plays one world to its end and checks what must hold.
func run(seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	w := &world{rng: rng, now: time.Unix(1_800_000_000, 0), plans: map[string]int{}, byNumber: map[int][]string{},
		results: map[string]*messages.ExecutionResult{}, ids: map[string]bool{}, waiting: map[string]bool{}, taken: map[string]bool{},
		finished: map[string]bool{}}
	w.failing = []float64{0, 0.05, 0.2}[rng.IntN(3)]
	w.refusing = []float64{0, 0, 0.01}[rng.IntN(3)]
	crash := []float64{0, 0.02, 0.1}[rng.IntN(3)]
	owners := []*owner{{}, {}}
	if rng.IntN(3) == 0 {
		owners = owners[:1]
	}
	key := "s1.p1"
	for step := 0; step < 5000; step++ {
		live := slices.IndexFunc(owners, func(o *owner) bool { return !o.done })
		if live < 0 {
			break
		}
		o := owners[rng.IntN(len(owners))]
		if o.done {
			continue
		}
		w.now = w.now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
		if o.m == nil {
			o.m = New(Config{MaxAttempts: maxAttempts}, Prompt{Key: key, ReceivedAt: w.now})
			effs, err := o.m.Step(w.now, Begin{})
			if err != nil {
				return err
			}
			o.pending = effs
			continue
		}
		if rng.Float64() < crash {
			o.m, o.pending = nil, nil // the narrator died; it starts again
			continue
		}
		if len(o.pending) == 0 {
			return fmt.Errorf("a machine in phase %s waits for nothing", o.m.Phase())
		}
		e := o.pending[0]
		o.pending = o.pending[1:]
		m := o.m
		ev, err := w.perform(o, e, seed)
		if err != nil {
			return err
		}
		if ev == nil {
			continue
		}
		effs, err := m.Step(w.now, ev)
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		if o.m == m {
			o.pending = append(o.pending, effs...)
		}
	}
	return w.check(owners)
}

// check is what must hold once every narrator answered.
func (w *world) check(owners []*owner) error {
	for _, o := range owners {
		if !o.done {
			return errors.New("a narrator never answered (5,000 steps)")
		}
	}
	if w.stored == nil && w.failing+w.refusing == 0 {
		return errors.New("no narration stored")
	}
	if len(w.out) != 1 {
		return fmt.Errorf("%d narrations published, want 1", len(w.out))
	}
	for _, a := range w.answers {
		if !sameNarration(a, w.out[0]) {
			return fmt.Errorf("a narrator answered %+v, the published narration is %+v", a, w.out[0])
		}
		if w.stored != nil && !sameNarration(a, w.stored) && !w.claimRefused {
			return fmt.Errorf("a narrator answered %+v, the stored narration is %+v", a, w.stored)
		}
		if a.Attempts > maxAttempts {
			return fmt.Errorf("%d attempts", a.Attempts)
		}
	}
	for n, ids := range w.byNumber {
		if n < 1 || n > maxAttempts {
			return fmt.Errorf("a plan for attempt %d", n)
		}
		if len(ids) > 1 {
			return fmt.Errorf("attempt %d ran %d plans: %v", n, len(ids), ids)
		}
	}
	return nil
}

func sameNarration(a, b *messages.Narration) bool {
	return a.PlanID == b.PlanID && a.Attempts == b.Attempts && a.Fallback == b.Fallback && a.Cancelled == b.Cancelled &&
		len(a.Trace) == len(b.Trace)
}

// TestSimulation runs seeds() worlds: one or two narrators on the same
// prompt, crashes, a store that fails or refuses, plans that succeed,
// fail, are cancelled or never answer. Every narrator answers, with the
// same narration; one narration is published; no attempt runs two plans;
// no illegal move is ever asked for.
func TestSimulation(t *testing.T) {
	for seed := range uint64(seeds()) {
		if err := run(seed); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}
