// Package promptfsm is the narrator's life of one prompt as a pure state
// machine: the replan loop of docs/spec.md §8.2 made durable (each
// attempt recorded before its plan is published, so another narrator can
// carry it on), the dedupe of a prompt already narrated, the claim that
// makes every narrator finishing the same attempt answer alike, and the
// fallback after the last attempt.
//
// The machine does no I/O. Step takes one event (what the last effect
// found) and returns effects as data (look up, record, generate, await,
// build, claim, publish); the narrator is the shell that performs them
// and feeds their outcome back. Every phase change goes through one table
// of allowed moves, and an event the current phase does not expect is an
// error (ErrUnexpected), never ignored: the seeded simulation in this
// package runs two narrators on the same prompt with crashes, a store
// that fails and plans that fail, and fails on any such error.
package promptfsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/narratoria/runtime/pkg/messages"
)

// Phase is where a prompt's life is.
type Phase string

// The phases of a prompt.
const (
	// PhaseNew: nothing done yet.
	PhaseNew Phase = "new"
	// PhaseLookup: looking for a narration already stored (dedupe).
	PhaseLookup Phase = "lookup"
	// PhaseLoad: reading the prompt's running attempt, if any.
	PhaseLoad Phase = "load"
	// PhasePlanning: the planner makes the next attempt's plan.
	PhasePlanning Phase = "planning"
	// PhaseRecording: the attempt is being recorded (compare-and-set).
	PhaseRecording Phase = "recording"
	// PhaseResult: a taken-over attempt: looking for its plan's result,
	// stored already (it may have come while no narrator was alive).
	PhaseResult Phase = "result"
	// PhaseChecking: a taken-over attempt without a stored result: is its
	// plan waiting in the plans stream?
	PhaseChecking Phase = "checking"
	// PhaseSending: the attempt's plan is being published.
	PhaseSending Phase = "sending"
	// PhaseAwaiting: the attempt's plan runs; waiting for its result.
	PhaseAwaiting Phase = "awaiting"
	// PhaseBuilding: the shell writes the narration the verdict calls for.
	PhaseBuilding Phase = "building"
	// PhaseClaiming: the narration is being claimed in the dedupe store.
	PhaseClaiming Phase = "claiming"
	// PhasePublishing: the narration is being published.
	PhasePublishing Phase = "publishing"
	// PhaseDone: answered (terminal).
	PhaseDone Phase = "done"
	// PhaseAborted: given up on an error; the shell starts a new machine
	// later, which carries on from the stored attempt (terminal).
	PhaseAborted Phase = "aborted"
)

// legal lists every phase change the rules allow.
var legal = map[Phase][]Phase{
	PhaseNew:        {PhaseLoad, PhasePlanning},
	PhaseLoad:       {PhaseLookup, PhaseResult, PhasePlanning, PhaseBuilding, PhaseAborted},
	PhaseLookup:     {PhasePlanning, PhasePublishing, PhaseBuilding, PhaseAborted},
	PhasePlanning:   {PhaseRecording, PhaseSending, PhaseBuilding, PhaseAborted},
	PhaseRecording:  {PhaseSending, PhaseLoad, PhaseBuilding, PhaseAborted},
	PhaseResult:     {PhaseChecking, PhasePlanning, PhaseBuilding, PhaseAborted},
	PhaseChecking:   {PhaseAwaiting, PhaseSending, PhaseBuilding, PhaseAborted},
	PhaseSending:    {PhaseAwaiting, PhaseBuilding, PhaseAborted},
	PhaseAwaiting:   {PhasePlanning, PhaseBuilding, PhaseAborted},
	PhaseBuilding:   {PhaseClaiming, PhasePublishing, PhaseAborted},
	PhaseClaiming:   {PhasePublishing, PhaseAborted},
	PhasePublishing: {PhaseDone, PhaseAborted},
	PhaseDone:       {},
	PhaseAborted:    {},
}

// ErrUnexpected is matched by every *UnexpectedError.
var ErrUnexpected = errors.New("promptfsm: unexpected event")

// ErrRefusedMove: the machine asked itself for a phase change its rules
// refuse (a bug in the machine, never in the input).
var ErrRefusedMove = errors.New("promptfsm: the machine refused its own move")

// UnexpectedError is an event the current phase does not take.
type UnexpectedError struct {
	Phase Phase
	Event string
}

// Error renders "event X in phase Y".
func (e *UnexpectedError) Error() string {
	return fmt.Sprintf("promptfsm: event %s in phase %s", e.Event, e.Phase)
}

// Unwrap returns ErrUnexpected.
func (e *UnexpectedError) Unwrap() error { return ErrUnexpected }

// Verdict says which narration the shell builds.
type Verdict string

// The verdicts.
const (
	// VerdictSuccess: the attempt's plan succeeded; narrate its result.
	VerdictSuccess Verdict = "success"
	// VerdictFallback: every attempt failed (or the store refused a write
	// for good): the template narration.
	VerdictFallback Verdict = "fallback"
	// VerdictCancelled: the plan was cancelled (or may not be replanned):
	// the template narration at once, marked cancelled when it was.
	VerdictCancelled Verdict = "cancelled"
)

// Config bounds a prompt's life.
type Config struct {
	// MaxAttempts bounds the replan loop (§8.2). Default 5.
	MaxAttempts int
}

// Prompt is what the machine knows of its prompt.
type Prompt struct {
	// Key is the prompt's dedupe key (<session>.<promptId>); "" for a
	// request without an ID, which is neither deduplicated nor recorded.
	Key string
	// ReceivedAt is when this narrator took it.
	ReceivedAt time.Time
}

// Event is what an effect found, fed to Step.
type Event interface{ event() string }

// Begin starts the machine.
type Begin struct{}

// NarrationFound answers LookupNarration; Narration nil: none stored.
type NarrationFound struct{ Narration *messages.Narration }

// AttemptLoaded answers LoadAttempt: the running attempt (nil: none) and
// the record's revision. Broken says the record's plan cannot be read.
type AttemptLoaded struct {
	Record   *messages.PromptAttempt
	Revision uint64
	Broken   bool
}

// Generated answers Generate: the plan, encoded as it will be published.
type Generated struct {
	PlanID string
	Plan   json.RawMessage
}

// AttemptSaved answers SaveAttempt: the record's new revision.
type AttemptSaved struct{ Revision uint64 }

// AttemptConflict answers SaveAttempt: another narrator recorded first.
type AttemptConflict struct{}

// ResultLooked answers LookupResult: the plan's stored result, nil when
// none is stored.
type ResultLooked struct{ Result *messages.ExecutionResult }

// PlanChecked answers CheckPlan: whether the plan waits in the plans
// stream.
type PlanChecked struct{ Waiting bool }

// PlanSent answers SendPlan: the plans stream stored the plan (or knew
// its message ID already).
type PlanSent struct{}

// Awaited answers Await: the plan's result, nil when none came in time.
type Awaited struct{ Result *messages.ExecutionResult }

// Built answers Build: the narration the verdict called for.
type Built struct{ Narration *messages.Narration }

// Claimed answers Claim: the narration is the prompt's.
type Claimed struct{}

// ClaimConflict answers Claim: another narrator claimed first; Earlier is
// its narration (nil when it could not be read).
type ClaimConflict struct{ Earlier *messages.Narration }

// Published answers Publish. Earlier is the prompt's narration a Publish
// with IfMissing found already out (and so did not publish): it is the
// prompt's answer, whatever this machine built.
type Published struct{ Earlier *messages.Narration }

// Failed answers any effect that failed. Refused says the store refused
// a write for good (full, over a limit): the prompt then gets the template
// narration rather than waiting for ever.
type Failed struct {
	Err     error
	Refused bool
}

func (Begin) event() string           { return "begin" }
func (NarrationFound) event() string  { return "narration_found" }
func (AttemptLoaded) event() string   { return "attempt_loaded" }
func (Generated) event() string       { return "generated" }
func (AttemptSaved) event() string    { return "attempt_saved" }
func (AttemptConflict) event() string { return "attempt_conflict" }
func (ResultLooked) event() string    { return "result_looked" }
func (PlanChecked) event() string     { return "plan_checked" }
func (PlanSent) event() string        { return "plan_sent" }
func (Awaited) event() string         { return "awaited" }
func (Built) event() string           { return "built" }
func (Claimed) event() string         { return "claimed" }
func (ClaimConflict) event() string   { return "claim_conflict" }
func (Published) event() string       { return "published" }
func (Failed) event() string          { return "failed" }

// Effect is what the shell does next.
type Effect interface{ effect() }

// LookupNarration: read the stored narration of Key (answer
// NarrationFound). It comes after a load found no running attempt.
type LookupNarration struct{ Key string }

// LoadAttempt: read the running attempt of Key (answer AttemptLoaded).
type LoadAttempt struct{ Key string }

// Generate: plan attempt Attempt without Disabled (answer Generated).
type Generate struct {
	Attempt  int
	Parent   string
	Disabled []string
}

// SaveAttempt: record Record as Key's running attempt if its revision is
// still Revision (answer AttemptSaved or AttemptConflict).
type SaveAttempt struct {
	Key      string
	Record   *messages.PromptAttempt
	Revision uint64
}

// LookupResult: read the stored result of a taken-over attempt's plan
// (answer ResultLooked). From here to Await the shell listens for the
// plan's result, so none is missed.
type LookupResult struct{ Record *messages.PromptAttempt }

// CheckPlan: read whether a taken-over attempt's plan waits in the plans
// stream (answer PlanChecked).
type CheckPlan struct{ Record *messages.PromptAttempt }

// SendPlan: publish Record's plan under its message ID (answer PlanSent).
// Again: a taken-over attempt's plan that no result and no wait in the
// plans stream accounts for — its first publish never landed, or a
// scheduler took it: within the duplicate window the stream drops it,
// after it the scheduler finds the plan's record or its stored result and
// does not run it twice.
type SendPlan struct {
	Record *messages.PromptAttempt
	Again  bool
}

// Await: wait for the result of Record's plan, sent (answer Awaited).
// FromStart: it was sent by the narrator that started the attempt; the
// wait is counted from the attempt's start.
type Await struct {
	Record    *messages.PromptAttempt
	FromStart bool
}

// Build: write the narration Verdict calls for (answer Built). Result is
// the last attempt's result (nil for a fallback without one).
type Build struct {
	Verdict  Verdict
	Attempt  int
	Plan     json.RawMessage
	Result   *messages.ExecutionResult
	Disabled []string
	Trace    []messages.AttemptTrace
	State    json.RawMessage
	// Reason is a fallback's failure reason when it is not the last
	// attempt's (storage_refused).
	Reason     string
	ReceivedAt time.Time
}

// Claim: store Narration as Key's, if none is (answer Claimed or
// ClaimConflict).
type Claim struct {
	Key       string
	Narration *messages.Narration
}

// Publish: publish Narration (only if it is not out yet when IfMissing)
// (answer Published).
type Publish struct {
	Narration *messages.Narration
	IfMissing bool
}

// Forget: delete Key's attempt record (no answer: best effort).
type Forget struct{ Key string }

// Resumed: this narrator carries on another's attempt (no answer).
type Resumed struct{ Record *messages.PromptAttempt }

// Finish: the prompt is answered with Narration; Duplicate says it is one
// stored before (no answer; the machine is done).
type Finish struct {
	Narration *messages.Narration
	Duplicate bool
}

// Abort: given up on Err (no answer). A later machine carries on from the
// stored attempt.
type Abort struct{ Err error }

func (LookupNarration) effect() {}
func (LoadAttempt) effect()     {}
func (Generate) effect()        {}
func (SaveAttempt) effect()     {}
func (LookupResult) effect()    {}
func (CheckPlan) effect()       {}
func (SendPlan) effect()        {}
func (Await) effect()           {}
func (Build) effect()           {}
func (Claim) effect()           {}
func (Publish) effect()         {}
func (Forget) effect()          {}
func (Resumed) effect()         {}
func (Finish) effect()          {}
func (Abort) effect()           {}

// Machine is one prompt's life.
type Machine struct {
	cfg    Config
	prompt Prompt
	phase  Phase

	disabled  []string
	trace     []messages.AttemptTrace
	lastState json.RawMessage
	parent    string
	next      int // the attempt to plan when none runs
	cur       *messages.PromptAttempt
	rev       uint64
	// nar is the narration built, claimed and published.
	nar *messages.Narration
	// duplicate says nar is one another narrator stored.
	duplicate bool
	// refused notes a refused write: the fallback's reason.
	refused bool
	// unclaimed: the dedupe store refused the narration; its attempt
	// record is kept.
	unclaimed bool
}

// New returns a machine for one prompt; Step(Begin{}) starts it.
func New(cfg Config, p Prompt) *Machine {
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 5
	}
	return &Machine{cfg: cfg, prompt: p, phase: PhaseNew, next: 1, disabled: []string{}}
}

// Phase is where the prompt is.
func (m *Machine) Phase() Phase { return m.phase }

// Attempt is the attempt running or about to be planned.
func (m *Machine) Attempt() int {
	if m.cur != nil {
		return m.cur.Attempt
	}
	return m.next
}

// Done reports whether the machine reached an end (done or aborted).
func (m *Machine) Done() bool { return m.phase == PhaseDone || m.phase == PhaseAborted }

// Step feeds one event and returns what to do next. An event the phase
// does not take is an *UnexpectedError and changes nothing.
func (m *Machine) Step(now time.Time, ev Event) ([]Effect, error) {
	unexpected := func() ([]Effect, error) {
		return nil, &UnexpectedError{Phase: m.phase, Event: ev.event()}
	}
	if f, ok := ev.(Failed); ok {
		return m.failed(now, f)
	}
	switch m.phase {
	case PhaseNew:
		if _, ok := ev.(Begin); !ok {
			return unexpected()
		}
		if m.prompt.Key == "" {
			return m.plan()
		}
		return m.to(PhaseLoad, LoadAttempt{Key: m.prompt.Key})
	case PhaseLoad:
		e, ok := ev.(AttemptLoaded)
		if !ok {
			return unexpected()
		}
		m.rev = e.Revision
		if e.Record == nil {
			// No attempt runs. Look for a narration only now, after the
			// load: a narrator that finished forgot its record after it
			// stored its narration, so a record gone means the narration
			// is there to find (looking first would miss one stored in
			// between, and plan the prompt a second time).
			return m.to(PhaseLookup, LookupNarration{Key: m.prompt.Key})
		}
		m.adopt(e.Record)
		if e.Broken {
			// Unreadable: plan that attempt anew.
			m.next, m.cur = e.Record.Attempt, nil
			return m.plan()
		}
		// Taken over: its plan may have run already, or wait to run, or
		// never have been sent. The result first: a plan with a result is
		// never sent again, whatever became of its message.
		return m.to(PhaseResult, Resumed{Record: e.Record}, LookupResult{Record: e.Record})
	case PhaseLookup:
		e, ok := ev.(NarrationFound)
		if !ok {
			return unexpected()
		}
		if e.Narration != nil {
			// Narrated before: publish it if a narrator stopped between
			// storing and publishing it, then answer with it.
			m.nar, m.duplicate = e.Narration, true
			return m.to(PhasePublishing, Publish{Narration: e.Narration, IfMissing: true})
		}
		return m.plan()
	case PhasePlanning:
		e, ok := ev.(Generated)
		if !ok {
			return unexpected()
		}
		rec := &messages.PromptAttempt{Attempt: m.next, PlanID: e.PlanID, Plan: e.Plan, DisabledSkills: slices.Clone(m.disabled),
			Trace: append([]messages.AttemptTrace{}, m.trace...), State: m.lastState, ReceivedAt: m.prompt.ReceivedAt.UTC(), StartedAt: now.UTC()}
		m.cur = rec
		if m.prompt.Key == "" {
			return m.to(PhaseSending, SendPlan{Record: rec})
		}
		return m.to(PhaseRecording, SaveAttempt{Key: m.prompt.Key, Record: rec, Revision: m.rev})
	case PhaseRecording:
		switch e := ev.(type) {
		case AttemptSaved:
			m.rev = e.Revision
			return m.to(PhaseSending, SendPlan{Record: m.cur})
		case AttemptConflict:
			// Another narrator recorded an attempt first: follow it.
			m.cur = nil
			return m.to(PhaseLoad, LoadAttempt{Key: m.prompt.Key})
		}
		return unexpected()
	case PhaseResult:
		e, ok := ev.(ResultLooked)
		if !ok {
			return unexpected()
		}
		if e.Result != nil {
			return m.awaited(e.Result)
		}
		return m.to(PhaseChecking, CheckPlan{Record: m.cur})
	case PhaseChecking:
		e, ok := ev.(PlanChecked)
		if !ok {
			return unexpected()
		}
		if e.Waiting {
			// Sent, and not taken yet: never sent again.
			return m.to(PhaseAwaiting, Await{Record: m.cur, FromStart: true})
		}
		return m.to(PhaseSending, SendPlan{Record: m.cur, Again: true})
	case PhaseSending:
		if _, ok := ev.(PlanSent); !ok {
			return unexpected()
		}
		return m.to(PhaseAwaiting, Await{Record: m.cur})
	case PhaseAwaiting:
		e, ok := ev.(Awaited)
		if !ok {
			return unexpected()
		}
		return m.awaited(e.Result)
	case PhaseBuilding:
		e, ok := ev.(Built)
		if !ok || e.Narration == nil {
			return unexpected()
		}
		m.nar = e.Narration
		if m.prompt.Key == "" {
			return m.to(PhasePublishing, Publish{Narration: m.nar})
		}
		return m.to(PhaseClaiming, Claim{Key: m.prompt.Key, Narration: m.nar})
	case PhaseClaiming:
		switch e := ev.(type) {
		case Claimed:
			return m.to(PhasePublishing, Publish{Narration: m.nar})
		case ClaimConflict:
			if e.Earlier == nil {
				return m.abort(errors.New("another narrator claimed the narration and it could not be read"))
			}
			// Another narrator following the same attempt claimed it
			// first: answer alike, publishing it only if it is not out.
			m.nar, m.duplicate = e.Earlier, true
			return m.to(PhasePublishing, Publish{Narration: m.nar, IfMissing: true})
		}
		return unexpected()
	case PhasePublishing:
		pub, ok := ev.(Published)
		if !ok {
			return unexpected()
		}
		if pub.Earlier != nil {
			// One narration per prompt: the one out is the answer (this
			// machine's may be the template a refused store gave).
			m.nar, m.duplicate = pub.Earlier, true
		}
		var effs []Effect
		if m.prompt.Key != "" && !m.unclaimed {
			effs = append(effs, Forget{Key: m.prompt.Key})
		}
		return m.to(PhaseDone, append(effs, Finish{Narration: m.nar, Duplicate: m.duplicate})...)
	}
	return unexpected()
}

// adopt carries on a recorded attempt (this narrator's or another's).
func (m *Machine) adopt(rec *messages.PromptAttempt) {
	m.cur = rec
	m.disabled = append([]string{}, rec.DisabledSkills...)
	m.trace = append([]messages.AttemptTrace{}, rec.Trace...)
	m.lastState = rec.State
	if !rec.ReceivedAt.IsZero() {
		m.prompt.ReceivedAt = rec.ReceivedAt
	}
}

// plan asks for the next attempt's plan, or the fallback after the last.
func (m *Machine) plan() ([]Effect, error) {
	if m.next > m.cfg.MaxAttempts {
		return m.build(VerdictFallback, nil, "")
	}
	return m.to(PhasePlanning, Generate{Attempt: m.next, Parent: m.parent, Disabled: slices.Clone(m.disabled)})
}

// awaited takes an attempt's result (nil: none in time).
func (m *Machine) awaited(res *messages.ExecutionResult) ([]Effect, error) {
	cur := m.cur
	m.parent, m.next, m.cur = cur.PlanID, cur.Attempt+1, nil
	if res == nil {
		m.trace = append(m.trace, messages.AttemptTrace{PlanID: cur.PlanID, FailedTools: []string{}, DisabledSkills: slices.Clone(m.disabled),
			FailureReason: messages.ReasonTimeout})
		return m.plan()
	}
	m.lastState = res.AggregatedState
	m.trace = append(m.trace, messages.AttemptTrace{PlanID: cur.PlanID, Success: res.Success, FailedTools: res.FailedTools,
		DisabledSkills: res.DisabledSkills, FailureReason: res.FailureReason})
	switch {
	case res.Success:
		return m.buildFor(VerdictSuccess, cur, res)
	case !res.CanReplan:
		return m.buildFor(VerdictCancelled, cur, res)
	}
	for _, s := range res.DisabledSkills {
		if !slices.Contains(m.disabled, s) {
			m.disabled = append(m.disabled, s)
		}
	}
	slices.Sort(m.disabled)
	return m.plan()
}

// buildFor asks for the narration of an attempt's result.
func (m *Machine) buildFor(v Verdict, cur *messages.PromptAttempt, res *messages.ExecutionResult) ([]Effect, error) {
	return m.to(PhaseBuilding, Build{Verdict: v, Attempt: cur.Attempt, Plan: cur.Plan, Result: res, Disabled: slices.Clone(m.disabled),
		Trace: slices.Clone(m.trace), State: m.lastState, ReceivedAt: m.prompt.ReceivedAt})
}

// build asks for a narration that no attempt's result makes.
func (m *Machine) build(v Verdict, res *messages.ExecutionResult, reason string) ([]Effect, error) {
	return m.to(PhaseBuilding, Build{Verdict: v, Attempt: len(m.trace), Result: res, Disabled: slices.Clone(m.disabled),
		Trace: slices.Clone(m.trace), State: m.lastState, Reason: reason, ReceivedAt: m.prompt.ReceivedAt})
}

// failed takes an effect's failure: a refused write before the narration
// exists gives the template narration; anything else aborts (the shell
// tries again with a new machine, which carries on from the record).
func (m *Machine) failed(_ time.Time, f Failed) ([]Effect, error) {
	if m.Done() || m.phase == PhaseNew {
		return nil, &UnexpectedError{Phase: m.phase, Event: f.event()}
	}
	err := f.Err
	if err == nil {
		err = errors.New("effect failed")
	}
	if m.phase == PhaseClaiming && f.Refused {
		// The dedupe store refuses it for good (full): the narration is
		// still the answer. The attempt's record stays, so a narrator
		// that takes the prompt again carries on that attempt and builds
		// the same narration, rather than planning the prompt anew.
		m.unclaimed = true
		return m.to(PhasePublishing, Publish{Narration: m.nar, IfMissing: true})
	}
	if f.Refused && !m.refused && m.nar == nil && m.phase != PhaseBuilding {
		m.refused, m.cur = true, nil
		m.trace = []messages.AttemptTrace{{FailedTools: []string{}, DisabledSkills: []string{}, FailureReason: messages.ReasonStorageRefused}}
		return m.build(VerdictFallback, nil, messages.ReasonStorageRefused)
	}
	return m.abort(err)
}

// abort gives up on err.
func (m *Machine) abort(err error) ([]Effect, error) {
	return m.to(PhaseAborted, Abort{Err: err})
}

// to is the one place the phase changes.
func (m *Machine) to(p Phase, effs ...Effect) ([]Effect, error) {
	if !slices.Contains(legal[m.phase], p) {
		return nil, fmt.Errorf("%w: %s -> %s", ErrRefusedMove, m.phase, p)
	}
	m.phase = p
	return effs, nil
}
