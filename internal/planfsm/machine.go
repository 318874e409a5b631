package planfsm

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/narratoria/runtime/internal/plancheck"

	"github.com/narratoria/runtime/pkg/dag"
	"github.com/narratoria/runtime/pkg/health"
	"github.com/narratoria/runtime/pkg/messages"
)

// Machine is one plan's execution state. It is not safe for concurrent
// use: the shell's actor goroutine owns it.
type Machine struct {
	faults   []error   // refused moves of this step (ErrRefusedMove)
	now      time.Time // the time of the event being stepped
	repaired []int     // tools Restore moved, to date and persist when Recovered
	cfg      Config
	rec      Record
	original *messages.Plan // as accepted
	plan     *messages.Plan // with the tools context re-planning merged
	graph    *dag.Graph
	tr       *dag.Tracker
	tools    []Tool
	index    map[string]int

	running   int // tools running or retrying (§4.3 concurrency)
	exclusive int // async:false tools of a parallel plan running or retrying
	awaiting  int // tools awaiting approval
	publishes int // failed result publications in a row
	dirty     bool
	out       []Effect

	// patched lists the tools whose success staged state patches, in
	// the order they succeeded (ancestorPatches looks only at them).
	patched []int
	// orderPos is each tool's place in the graph's order; nil until
	// needed and when the graph changes.
	orderPos []int
	// restored says the machine was rebuilt from the store: only then can
	// a dependency's end be owed (a lost write), so only then do sends and
	// approvals check for it.
	restored bool
	// unverified are the tools, after a recovery, whose next attempt may
	// have been sent already: its record (running) can have been lost while
	// its job was stored. Their next attempt is probed before it is sent.
	unverified map[int]bool
	// deferred are the tools, after a recovery, whose attempt must be
	// sent again while a dependency's end is still owed (restored running:
	// its last state was lost). They are sent once it has ended, with its
	// output.
	deferred map[int]bool
}

// New builds the machine of a plan just accepted. rec.Scripts must hold
// one resolved script per tool; the plan must be valid (plancheck).
func New(cfg Config, rec Record, plan *messages.Plan, graph *dag.Graph) (*Machine, error) {
	if len(rec.Scripts) != len(plan.Tools) || graph.Len() != len(plan.Tools) {
		return nil, fmt.Errorf("planfsm: plan %s has %d tools, %d scripts and %d graph nodes", plan.RequestID,
			len(plan.Tools), len(rec.Scripts), graph.Len())
	}
	if rec.Phase == "" {
		rec.Phase = PhaseRunning
	}
	m := &Machine{cfg: cfg.WithDefaults(), rec: rec, original: plan, plan: plan, graph: graph, tr: graph.NewTracker(),
		tools: make([]Tool, len(plan.Tools)), index: make(map[string]int, len(plan.Tools))}
	for i := range plan.Tools {
		m.index[plan.Tools[i].ToolID] = i
		m.tools[i] = Tool{State: messages.ToolPending, Skill: rec.Scripts[i].Skill}
	}
	return m, nil
}

// Restore rebuilds a machine from its persisted records (a tool without a
// record is pending). Step it with Recovered next. A crash between a
// failure and the skips it causes is repaired: those tools are skipped,
// and persisted by the Recovered step.
func Restore(cfg Config, rec Record, plan *messages.Plan, graph *dag.Graph, tools map[string]*Tool) (*Machine, error) {
	inferEnding(&rec, tools)
	original := plan
	if merged := mergedTools(rec.Iterations); len(merged) > 0 {
		// The plan as it ran: its tools and those context re-planning added.
		combined := *plan
		combined.Tools = append(slices.Clone(plan.Tools), merged...)
		var err error
		if graph, err = dag.Build(plancheck.Nodes(&combined)); err != nil {
			return nil, fmt.Errorf("planfsm: restore plan %s with its re-planned tools: %w", plan.RequestID, err)
		}
		plan = &combined
	}
	m, err := New(cfg, rec, plan, graph)
	if err != nil {
		return nil, err
	}
	m.original, m.restored = original, true
	states := make(map[string]dag.NodeState, len(tools))
	for id, t := range tools {
		i, ok := m.index[id]
		if !ok {
			continue
		}
		if t.Skill == "" {
			t.Skill = m.tools[i].Skill
		}
		m.tools[i] = *t
		states[id] = m.nodeState(i)
	}
	// A tool restored running or awaiting approval although a tool was
	// skipped for its end (SkippedFor): it ended — failed, or its approval
	// was denied or timed out — and that record was lost while the skip
	// was stored. It is ended again; a late outcome or approval of it
	// changes nothing.
	var lostEnds []int
	for c := range plan.Tools {
		cause, ok := m.index[m.tools[c].SkippedFor]
		if m.tools[c].State != messages.ToolSkipped || !ok || slices.Contains(lostEnds, cause) {
			continue
		}
		t := &m.tools[cause]
		switch t.State {
		case messages.ToolAwaitingApproval:
			t.Denied = true
			m.setError(cause, "approval_lost", messages.CategoryToolFailure, "the wait for approval ended before a restart and its record was lost")
			if err := m.restoreMove(cause, messages.ToolSkipped, "restored: its approval wait ended and that record was lost"); err != nil {
				return nil, err
			}
		case messages.ToolRunning, messages.ToolRetrying, messages.ToolPending:
			// Pending: a running attempt has no record of its own (its job
			// proves it), so a lost end leaves the tool as it was before.
			m.setError(cause, "state_lost", messages.CategoryInfrastructure, "the attempt ended in failure before a restart and its record was lost")
			if err := m.restoreMove(cause, messages.ToolFailed, "restored: its attempt failed and that record was lost"); err != nil {
				return nil, err
			}
		case messages.ToolSuccess, messages.ToolFailed, messages.ToolSkipped, messages.ToolTimeout, messages.ToolCancelled:
			continue // its end was stored
		default:
			continue
		}
		states[plan.Tools[cause].ToolID] = m.nodeState(cause)
		lostEnds = append(lostEnds, cause)
	}
	if rec.TimedOut || rec.Cancelled {
		owedEnds(graph, states)
	}
	var skipped []string
	if m.tr, skipped, err = graph.RestoreTracker(states); err != nil {
		return nil, fmt.Errorf("planfsm: restore plan %s: %w", plan.RequestID, err)
	}
	for i := range m.tools {
		m.count(i, +1)
		if len(m.tools[i].Patches) > 0 {
			m.patched = append(m.patched, i)
		}
	}
	m.repaired = append(lostEnds, m.repaired...) // persisted by the Recovered step, with its time
	for _, id := range skipped {
		i := m.index[id]
		m.setError(i, "dependency_failed", messages.CategoryToolFailure, "skipped: a dependency did not succeed")
		if err := m.move(i, messages.ToolSkipped, "restored behind a failed dependency", 0); err != nil {
			return nil, err
		}
		m.repaired = append(m.repaired, i)
	}
	return m, nil
}

// inferEnding sets on rec what its tools' records say of the plan's end
// when the record's own write was lost or refused while theirs were
// stored: a tool ended by the plan's deadline means the plan timed out, one
// ended by its cancel (state cancelled, which only the machine gives: a
// worker that stops reports its scripts failed, code cancelled) that it was
// cancelled, one ended for a refused state write that it was refused. The
// record is written first, so this only matters where its write was not
// stored.
func inferEnding(rec *Record, tools map[string]*Tool) {
	for _, t := range tools {
		if t.Error == nil {
			continue
		}
		switch {
		case t.Error.Code == codePlanTimeout && !rec.TimedOut:
			rec.TimedOut = true
		case t.State == messages.ToolCancelled && t.Error.Code == "cancelled" && !rec.Cancelled:
			rec.Cancelled = true
		case t.Error.Code == codeStateRefused && rec.Refused == "":
			rec.Refused = ClampText(t.Error.Message)
		}
	}
}

// owedEnds maps to failed, for the tracker, each tool restored skipped or
// cancelled behind which a dependent ran, or ended as only a satisfied
// dependency allows (succeeded, or failed as optional), in a plan that
// timed out or was cancelled. Such a tool's real end was lost while its
// dependents' were stored, and the plan's deadline or the cancel then
// ended it again from pending, as skipped or cancelled (a dispatched
// attempt has no record of its own); nothing else skips a tool whose
// dependents ran, so in a plan still running the tracker refuses it.
// Failed releases nothing and fits any dependent, so the dependents that
// ran on the lost end stay as they are. Dependents come first, so a chain
// of lost ends is followed to its start.
func owedEnds(graph *dag.Graph, states map[string]dag.NodeState) {
	order := graph.Order()
	owed := map[string]bool{}
	for k := len(order) - 1; k >= 0; k-- {
		id := order[k]
		if states[id] != dag.StateSkipped {
			continue
		}
		for _, c := range graph.Children(id) {
			switch states[c] {
			case dag.Running, dag.StateSucceeded, dag.StateFailedOptional:
				owed[id] = true
			case dag.StateFailed:
				owed[id] = owed[id] || owed[c]
			case dag.Pending, dag.StateSkipped:
			}
		}
		if owed[id] {
			states[id] = dag.StateFailed
		}
	}
}

// mergedTools lists the tools iterations merged, in order.
func mergedTools(its []Iteration) []messages.Tool {
	var out []messages.Tool
	for _, it := range its {
		if it.State == IterationMerged {
			out = append(out, it.Tools...)
		}
	}
	return out
}

// nodeState maps a tool's state to the tracker's.
func (m *Machine) nodeState(i int) dag.NodeState {
	t := &m.tools[i]
	switch t.State {
	case messages.ToolRunning, messages.ToolRetrying:
		return dag.Running
	case messages.ToolSuccess:
		return dag.StateSucceeded
	case messages.ToolFailed, messages.ToolTimeout:
		return failedState(m.plan.Tools[i].Required)
	case messages.ToolSkipped:
		if t.Denied {
			return failedState(m.plan.Tools[i].Required)
		}
		return dag.StateSkipped
	case messages.ToolCancelled:
		// Ended without succeeding: nothing after it may start.
		return dag.StateSkipped
	case messages.ToolPending, messages.ToolAwaitingApproval:
		return dag.Pending
	}
	return dag.Pending
}

func failedState(required bool) dag.NodeState {
	if required {
		return dag.StateFailed
	}
	return dag.StateFailedOptional
}

func failedOutcome(required bool) dag.Outcome {
	if required {
		return dag.Failed
	}
	return dag.FailedOptional
}

// ID returns the plan ID.
func (m *Machine) ID() string { return m.plan.RequestID }

// Session returns the plan's session.
func (m *Machine) Session() string { return m.rec.SessionID }

// Plan returns the plan document (do not change it).
func (m *Machine) Plan() *messages.Plan { return m.plan }

// Record returns the plan record to persist.
func (m *Machine) Record() Record { return m.rec }

// Phase returns the plan's phase.
func (m *Machine) Phase() Phase { return m.rec.Phase }

// Len returns the number of tools.
func (m *Machine) Len() int { return len(m.tools) }

// Tool returns tool i's record (a copy; its slices are shared, never
// changed in place by the machine).
func (m *Machine) Tool(i int) Tool { return m.tools[i] }

// ToolID returns tool i's ID.
func (m *Machine) ToolID(i int) string { return m.plan.Tools[i].ToolID }

// Script returns tool i's resolved script.
func (m *Machine) Script(i int) Script { return m.rec.Scripts[i] }

// Index returns the index of a tool ID.
func (m *Machine) Index(id string) (int, bool) {
	i, ok := m.index[id]
	return i, ok
}

// Deadline returns the plan deadline as of now: the persisted deadline,
// pushed back by every approval wait so far, including those still
// waiting (§9.3: a wait does not count against the plan deadline).
func (m *Machine) Deadline(now time.Time) time.Time {
	d := m.rec.Deadline
	if m.awaiting > 0 {
		for i := range m.tools {
			if t := &m.tools[i]; t.State == messages.ToolAwaitingApproval && now.After(t.WaitSince) {
				d = d.Add(now.Sub(t.WaitSince))
			}
		}
	}
	return d
}

// pastDeadline says whether now is at or past the plan deadline (§4.4:
// nothing starts then).
func (m *Machine) pastDeadline(now time.Time) bool { return !now.Before(m.Deadline(now)) }

// Running returns the number of tools running or waiting to retry.
func (m *Machine) Running() int { return m.running }

// Step applies one event and returns the effects to carry out, in order.
// The error reports an event the rules refuse (an approval for a tool that
// is not waiting); the effects are still valid.
func (m *Machine) Step(ev Event) ([]Effect, error) {
	now := ev.at()
	m.now = now
	var err error
	switch e := ev.(type) {
	case Started:
		m.emit(Progress{State: messages.PlanStarted})
		m.armDeadline()
		m.schedule(now)
	case Recovered:
		m.recovered(now, e.ResultStored)
	case OutcomeArrived:
		m.onOutcome(now, e)
		m.schedule(now)
	case TimerFired:
		m.onTimer(now, e)
		m.schedule(now)
	case DispatchFailed:
		switch {
		case !m.isAttempt(e.Index, e.Attempt, messages.ToolRunning):
		case e.Refused:
			// A full jobs stream: the store's failure, not the skill's
			// (§7): retried by the tool's policy, within the deadline, and
			// ending the plan storage_refused if it stays full.
			m.emit(StopTimer{Key: TimerKey{TimerLost, e.Index}})
			m.logf(slog.LevelError, "scheduler: the store refused the job; attempt fails", e.Index, slog.String("error", e.Err))
			m.attemptFailed(now, e.Index, &messages.ToolError{Code: CodeStorageRefused, Category: messages.CategoryInfrastructure,
				Message: "the store refused the job: " + e.Err})
		default:
			// No answer: the job may be stored all the same. Looked for
			// before another attempt is sent (its script would run twice).
			m.logf(slog.LevelWarn, "scheduler: the job's write got no answer; looking for it before sending another attempt", e.Index, slog.String("error", e.Err))
			m.emit(Probe{Index: e.Index, Attempt: e.Attempt, Why: ProbeUnanswered})
		}
		m.schedule(now)
	case Probed:
		switch {
		case e.Why == ProbeOverdue:
			m.onLostProbed(now, e)
		case e.Why == ProbeUnanswered:
			m.onUnansweredProbed(now, e)
		case !m.isAttempt(e.Index, e.Attempt, messages.ToolRunning) || e.Stored:
		case m.pastDeadline(now):
			// Nothing starts at or past the deadline (§4.4): the deadline's
			// timer ends the tool, which never ran.
			m.logf(slog.LevelInfo, "scheduler: attempt's job not stored before the crash; past the deadline, not sent", e.Index, slog.Int("attempt", e.Attempt))
		default:
			m.logf(slog.LevelInfo, "scheduler: attempt's job not stored before the crash; sending it again", e.Index, slog.Int("attempt", e.Attempt))
			m.send(now, e.Index)
		}
		m.schedule(now)
	case ApprovalArrived:
		err = m.onApproval(now, e)
		m.schedule(now)
	case PublishDone:
		m.onPublished(now, e)
	case CommitDone:
		m.onCommitted(now, e)
	case CancelRequested:
		err = m.onCancel(now, e.Reason)
	case StateRefused:
		m.onStateRefused(now, e)
	case ContextAnswered:
		m.onContextAnswer(now, e)
		m.schedule(now)
	default:
		err = fmt.Errorf("planfsm: unknown event %T", ev)
	}
	if len(m.faults) > 0 {
		err = errors.Join(append([]error{err}, m.faults...)...)
		m.faults = nil
	}
	out := m.out
	m.out = nil
	return out, err
}

func (m *Machine) emit(e Effect) { m.out = append(m.out, e) }

// persistPlan persists a snapshot of the plan record: its slices are
// copied, so later changes do not reach a write still to be made.
func (m *Machine) persistPlan() {
	rec := m.rec
	rec.Scripts = slices.Clone(rec.Scripts)
	rec.Iterations = slices.Clone(rec.Iterations)
	rec.ContextNotes = slices.Clone(rec.ContextNotes)
	m.emit(PersistPlan{Record: rec})
}

func (m *Machine) persistTool(i int) { m.emit(PersistTool{Index: i, Tool: m.tools[i]}) }

func (m *Machine) logf(level slog.Level, msg string, i int, attrs ...slog.Attr) {
	if i >= 0 {
		attrs = append([]slog.Attr{slog.String("toolId", m.plan.Tools[i].ToolID)}, attrs...)
	}
	m.emit(Log{Level: level, Msg: msg, Attrs: attrs})
}

func (m *Machine) isAttempt(i, attempt int, state messages.ToolState) bool {
	return m.rec.Phase == PhaseRunning && i >= 0 && i < len(m.tools) && m.tools[i].State == state && m.tools[i].Attempt == attempt
}

func (m *Machine) armDeadline() {
	m.emit(ArmTimer{Key: TimerKey{TimerDeadline, -1}, At: m.rec.Deadline})
}

// legal lists every tool transition the rules allow.
var legal = map[messages.ToolState][]messages.ToolState{
	messages.ToolPending:          {messages.ToolAwaitingApproval, messages.ToolRunning, messages.ToolSkipped, messages.ToolCancelled},
	messages.ToolAwaitingApproval: {messages.ToolPending, messages.ToolSkipped, messages.ToolCancelled},
	messages.ToolRunning:          {messages.ToolSuccess, messages.ToolRetrying, messages.ToolFailed, messages.ToolTimeout, messages.ToolCancelled},
	messages.ToolRetrying:         {messages.ToolRunning, messages.ToolTimeout, messages.ToolCancelled},
}

// move is the one place a tool's state changes. It refuses a transition
// the rules do not allow, keeps the running, exclusive and awaiting counts,
// and tells the tracker: o is the tracker outcome for a tool that ends (0
// when the tracker already knows, e.g. a tool it skipped). Tools the
// tracker skips because of this end are moved to skipped too.
func (m *Machine) move(i int, to messages.ToolState, why string, o dag.Outcome) error {
	t := &m.tools[i]
	from := t.State
	ok := false
	for _, s := range legal[from] {
		if s == to {
			ok = true
		}
	}
	if !ok {
		return &TransitionError{ToolID: m.plan.Tools[i].ToolID, From: from, To: to, Why: why}
	}
	id := m.plan.Tools[i].ToolID
	var skipped []string
	switch {
	case from == messages.ToolPending && to == messages.ToolRunning:
		if err := m.tr.Start(id); err != nil {
			return fmt.Errorf("planfsm: %s: %w", why, err)
		}
	case o != 0:
		var err error
		if _, skipped, err = m.tr.Finish(id, o); err != nil {
			return fmt.Errorf("planfsm: %s: %w", why, err)
		}
	}
	m.count(i, -1)
	t.State = to
	m.count(i, +1)
	m.remember(i, why)
	for _, sid := range skipped {
		j := m.index[sid]
		m.setError(j, "dependency_failed", messages.CategoryToolFailure, fmt.Sprintf("skipped: dependency %q did not succeed", id))
		m.tools[j].SkippedFor = id
		if err := m.move(j, messages.ToolSkipped, "a dependency did not succeed", 0); err != nil {
			return err
		}
		m.persistTool(j)
		m.emit(Progress{ToolID: sid, State: string(messages.ToolSkipped), Error: m.tools[j].Error.Message})
	}
	return nil
}

// HistoryMax bounds the transitions a tool record keeps.
const HistoryMax = 32

// remember appends tool i's current state to its history, with its cause.
func (m *Machine) remember(i int, why string) {
	t := &m.tools[i]
	h := append(t.History[:len(t.History):len(t.History)], messages.ToolTransition{State: t.State, At: m.now, Attempt: t.Attempt, Cause: why})
	if len(h) > HistoryMax {
		h = h[len(h)-HistoryMax:]
	}
	t.History = h
}

// count adds d to the counts tool i's state is part of.
func (m *Machine) count(i int, d int) {
	switch m.tools[i].State {
	case messages.ToolRunning, messages.ToolRetrying:
		m.running += d
		if m.plan.Parallel && !m.plan.Tools[i].Async {
			m.exclusive += d
		}
	case messages.ToolAwaitingApproval:
		m.awaiting += d
	case messages.ToolPending, messages.ToolSuccess, messages.ToolFailed, messages.ToolSkipped, messages.ToolTimeout, messages.ToolCancelled:
		// counted nowhere
	}
}

// recoveryLegal lists the moves only a restore makes, before the tracker
// exists: a tool's end that a stored skip proves, while its own record of
// that end was lost.
var recoveryLegal = map[messages.ToolState][]messages.ToolState{
	messages.ToolPending:          {messages.ToolFailed},
	messages.ToolRunning:          {messages.ToolFailed},
	messages.ToolRetrying:         {messages.ToolFailed},
	messages.ToolAwaitingApproval: {messages.ToolSkipped},
}

// restoreMove is move for Restore's repairs (recoveryLegal): it refuses
// anything else, and records the transition in the tool's history.
func (m *Machine) restoreMove(i int, to messages.ToolState, why string) error {
	t := &m.tools[i]
	if !slices.Contains(recoveryLegal[t.State], to) {
		return fmt.Errorf("%w: %w", ErrRefusedMove, &TransitionError{ToolID: m.plan.Tools[i].ToolID, From: t.State, To: to, Why: why})
	}
	t.State = to
	m.remember(i, why)
	return nil
}

// legalPhases lists every plan phase change the rules allow.
var legalPhases = map[Phase][]Phase{
	PhaseRunning:   {PhaseFinished, PhasePublished},
	PhaseFinished:  {PhasePublished, PhaseRunning},
	PhasePublished: {},
}

// movePhase is the one place the plan's phase changes; a change the rules
// do not allow is refused like a tool move (ErrRefusedMove from Step).
func (m *Machine) movePhase(to Phase, why string) {
	if !slices.Contains(legalPhases[m.rec.Phase], to) {
		err := &PhaseError{From: m.rec.Phase, To: to, Why: why}
		m.logf(slog.LevelError, "scheduler: state machine refused a phase change", -1, slog.String("error", err.Error()))
		m.faults = append(m.faults, fmt.Errorf("%w: %w", ErrRefusedMove, err))
		return
	}
	m.rec.Phase = to
}

// mustMove is move for transitions the caller has checked. A refusal is a
// bug in the machine: it is logged and Step returns it (ErrRefusedMove),
// so the simulation fails on it and the shell counts it; the machine does
// not crash the scheduler.
func (m *Machine) mustMove(i int, to messages.ToolState, why string, o dag.Outcome) {
	if err := m.move(i, to, why, o); err != nil {
		m.logf(slog.LevelError, "scheduler: state machine refused a move", i, slog.String("error", err.Error()))
		m.faults = append(m.faults, fmt.Errorf("%w: %w", ErrRefusedMove, err))
	}
}

func (m *Machine) setError(i int, code, category, msg string) {
	m.tools[i].Error = &messages.ToolError{Code: code, Category: category, Message: msg}
}

// schedule starts every tool the rules allow now (§4.1–4.3, §9.3), and
// finishes the plan when every tool has ended.
func (m *Machine) schedule(now time.Time) {
	if len(m.deferred) > 0 && m.rec.Phase == PhaseRunning {
		m.sendDeferred(now) // an owed end may have come with this event
	}
	for m.rec.Phase == PhaseRunning {
		m.dirty = false
		if it := m.openIteration(); it != nil {
			// §9.1: paused. Nothing new starts and the plan does not end;
			// once the running tools finished, a planner is asked, once.
			if it.State == IterationPending && m.running == 0 {
				m.askPlanner(now, it)
			}
			return
		}
		if m.tr.Done() {
			m.finish(now)
			return
		}
		m.scheduleOnce(now)
		if !m.dirty { // a tool ended while being started: look again
			return
		}
	}
}

func (m *Machine) scheduleOnce(now time.Time) {
	if m.rec.TimedOut || m.rec.Cancelled || m.pastDeadline(now) {
		return // §4.4, §4.5: nothing starts at or past the deadline; its timer ends the plan
	}
	parallel := m.plan.Parallel
	for id := range m.tr.ReadyTools() { // stops at the first tool it cannot start: no slice of every ready tool per step
		i := m.index[id]
		t := &m.tools[i]
		spec := &m.plan.Tools[i]
		switch t.State {
		case messages.ToolAwaitingApproval:
			if !parallel {
				return // §4.2: the waiting tool is the one at a time
			}
			continue
		case messages.ToolPending:
		case messages.ToolRunning, messages.ToolRetrying, messages.ToolSuccess, messages.ToolFailed, messages.ToolSkipped, messages.ToolTimeout, messages.ToolCancelled:
			continue // started or ended
		default:
			continue
		}
		if spec.RequiresApproval && !t.Approved && t.Decision != nil { // decided before it was ready
			if !t.Decision.Approved {
				m.deny(i, "approval_denied", denial(*t.Decision))
				m.dirty = true
				continue
			}
			t.Approved = true
			m.persistTool(i)
		}
		if spec.RequiresApproval && !t.Approved {
			if !parallel && m.running > 0 {
				return
			}
			m.await(now, i)
			if !parallel {
				return
			}
			continue
		}
		switch {
		case !parallel: // §4.2: one tool at a time, in topological order
			if m.running > 0 {
				return
			}
			m.dispatch(now, i)
			return
		case !spec.Async: // §4.3: an async:false tool runs alone
			if m.running > 0 {
				return
			}
			m.dispatch(now, i)
			return
		case m.exclusive > 0 || m.running >= m.cfg.Concurrency:
			return
		}
		m.dispatch(now, i)
	}
}

// dispatch starts the next attempt of tool i.
func (m *Machine) dispatch(now time.Time, i int) {
	t := &m.tools[i]
	m.mustMove(i, messages.ToolRunning, "dispatch", 0)
	t.Attempt++
	t.DispatchedAt = now
	t.RetryAt = time.Time{}
	m.send(now, i)
}

// send resolves tool i's references (§9.2) and sends its current attempt.
func (m *Machine) send(now time.Time, i int) {
	t := &m.tools[i]
	if m.restored && !m.depsEnded(i) {
		// Only after a recovery: a dependency is restored running because
		// its end was lost. The input needs its output: wait for it.
		m.deferTool(i)
		m.emit(StopTimer{Key: TimerKey{TimerLost, i}})
		m.logf(slog.LevelInfo, "scheduler: attempt waits for a dependency's owed outcome", i, slog.Int("attempt", t.Attempt))
		return
	}
	input, err := messages.ResolveRefs(m.plan.Tools[i].Input, m.outputOf)
	if err != nil {
		m.attemptFailed(now, i, &messages.ToolError{Code: "bad_reference", Category: messages.CategoryInvalidInput, Message: err.Error()})
		m.dirty = true
		return
	}
	timeout := m.rec.Scripts[i].Timeout()
	t.InputKey = InputKey(m.rec.Scripts[i], input)
	// No record says "running": the job, stored under the attempt's
	// subject, proves the dispatch, and a recovery probes for it before it
	// sends an attempt again (unverified). The tool's next record is its
	// end (or its retry).
	if m.unverified[i] {
		// The first attempt after a recovery: its job may be stored
		// already (a lost record). Probed sends it when it is not.
		delete(m.unverified, i)
		m.emit(Probe{Index: i, Attempt: t.Attempt})
		m.emit(ArmTimer{Key: TimerKey{TimerLost, i}, Attempt: t.Attempt, At: now.Add(2*timeout + m.cfg.LostGrace)})
		m.emit(Progress{ToolID: m.plan.Tools[i].ToolID, State: string(messages.ToolRunning), Attempt: t.Attempt})
		return
	}
	m.emit(Dispatch{Index: i, Attempt: t.Attempt, Input: input, Timeout: timeout, InputKey: t.InputKey, Patches: m.ancestorPatches(i),
		AfterWrites: i >= len(m.original.Tools)})
	m.emit(ArmTimer{Key: TimerKey{TimerLost, i}, Attempt: t.Attempt, At: now.Add(2*timeout + m.cfg.LostGrace)})
	m.emit(Progress{ToolID: m.plan.Tools[i].ToolID, State: string(messages.ToolRunning), Attempt: t.Attempt})
}

// onLostProbed gives an overdue attempt up when neither its job nor its
// outcome is stored any more (the worker died after taking it, and the
// job went with an acknowledgement, or was never stored), and waits again
// when one is: the job in the work queue is held by a worker (perhaps
// paused, not dead) or waits to be delivered again, so running the
// attempt again now would run its script twice.
func (m *Machine) onLostProbed(now time.Time, e Probed) {
	i := e.Index
	if !m.isAttempt(i, e.Attempt, messages.ToolRunning) {
		return
	}
	if e.Stored {
		m.logf(slog.LevelWarn, "scheduler: no outcome in time, but the attempt's job or outcome is stored; waiting for it", i, slog.Int("attempt", e.Attempt))
		m.emit(ArmTimer{Key: TimerKey{TimerLost, i}, Attempt: e.Attempt, At: now.Add(m.rec.Scripts[i].Timeout() + m.cfg.LostGrace)})
		return
	}
	m.logf(slog.LevelWarn, "scheduler: no outcome in time and the attempt's job is gone; attempt given up as lost", i, slog.Int("attempt", e.Attempt))
	m.attemptFailed(now, i, &messages.ToolError{Code: "no_outcome", Category: messages.CategoryLostWorker,
		Message: fmt.Sprintf("no worker reported attempt %d in time, and its job is no longer stored", e.Attempt)})
}

// onUnansweredProbed fails an attempt whose job's write got no answer only
// when the job is not stored; a stored one was sent (its lost timer runs).
func (m *Machine) onUnansweredProbed(now time.Time, e Probed) {
	i := e.Index
	if !m.isAttempt(i, e.Attempt, messages.ToolRunning) || e.Stored {
		return
	}
	m.emit(StopTimer{Key: TimerKey{TimerLost, i}})
	m.logf(slog.LevelError, "scheduler: job not stored; attempt fails", i, slog.Int("attempt", e.Attempt))
	m.attemptFailed(now, i, &messages.ToolError{Code: "dispatch_failed", Category: messages.CategoryInfrastructure,
		Message: fmt.Sprintf("the job of attempt %d was not stored", e.Attempt)})
}

// CodeStorageRefused is the error code of an attempt whose job the store
// refused (a full jobs stream).
const CodeStorageRefused = "storage_refused"

// depsEnded says whether every dependency of tool i ended in a way that
// lets it run (succeeded, or an optional one failed).
func (m *Machine) depsEnded(i int) bool {
	for _, dep := range m.plan.Tools[i].Dependencies {
		switch m.nodeState(m.index[dep]) {
		case dag.StateSucceeded, dag.StateFailedOptional:
		case dag.Pending, dag.Running, dag.StateFailed, dag.StateSkipped:
			return false
		default:
			return false
		}
	}
	return true
}

// deferTool notes that tool i waits for a dependency's owed end.
func (m *Machine) deferTool(i int) {
	if m.deferred == nil {
		m.deferred = map[int]bool{}
	}
	m.deferred[i] = true
}

// sendDeferred carries on with the deferred tools whose dependencies have
// ended: an attempt is sent, an approval decision applied.
func (m *Machine) sendDeferred(now time.Time) {
	for _, i := range slices.Sorted(maps.Keys(m.deferred)) {
		t := &m.tools[i]
		switch {
		case !m.depsEnded(i) && (t.State == messages.ToolRunning || t.State == messages.ToolAwaitingApproval):
		case t.State == messages.ToolRunning && m.pastDeadline(now):
			// Past the deadline: its timer ends the tool (§4.4).
		case t.State == messages.ToolRunning:
			delete(m.deferred, i)
			m.send(now, i)
		case t.State == messages.ToolAwaitingApproval && t.Decision != nil:
			delete(m.deferred, i)
			d := *t.Decision
			t.Decision = nil
			if err := m.onApproval(now, ApprovalArrived{Now: now, ToolID: m.plan.Tools[i].ToolID, Approval: d}); err != nil {
				m.logf(slog.LevelError, "scheduler: kept approval decision not applied", i, slog.Any("error", err))
			}
		default:
			delete(m.deferred, i) // ended meanwhile (deadline, cancel)
		}
	}
}

// outputOf is what "$toolId" resolves to: a succeeded ancestor's output;
// anything else is null (§9.2).
func (m *Machine) outputOf(id string) (json.RawMessage, bool) {
	i, ok := m.index[id]
	if !ok || m.tools[i].State != messages.ToolSuccess {
		return nil, false
	}
	return m.tools[i].Output, true
}

func (m *Machine) onOutcome(now time.Time, e OutcomeArrived) {
	o := e.Outcome
	i, ok := m.index[o.ToolID]
	if ok && m.unverified[i] && o.Attempt == m.tools[i].Attempt+1 && !m.adopt(now, i, o.State == messages.ToolSuccess) && m.adoptable(i) {
		m.emit(KeepOutcome{ToolID: o.ToolID, Attempt: o.Attempt})
		m.emit(Log{Level: slog.LevelInfo, Msg: "scheduler: outcome of an attempt sent before the recovery, of a tool whose dependencies have not ended here yet; kept for later",
			Attrs: []slog.Attr{slog.String("toolId", o.ToolID), slog.Int("attempt", o.Attempt)}})
		return
	}
	if !ok || !m.isAttempt(i, o.Attempt, messages.ToolRunning) {
		// A duplicate (redelivery), a late outcome of an attempt given up,
		// or an outcome after the plan ended.
		state := "unknown tool"
		if ok {
			state = string(m.tools[i].State)
		}
		m.emit(Log{Level: slog.LevelDebug, Msg: "scheduler: outcome ignored", Attrs: []slog.Attr{slog.String("toolId", o.ToolID),
			slog.Int("attempt", o.Attempt), slog.String("state", state)}})
		if ok && m.rec.Phase == PhaseRunning && o.Attempt <= m.tools[i].Attempt {
			// A redelivered outcome can mean the write that followed it
			// was lost: write the tool's record again (idempotent).
			m.persistTool(i)
		}
		return
	}
	t := &m.tools[i]
	m.emit(StopTimer{Key: TimerKey{TimerLost, i}})
	events := o.Events
	if o.EventsRef != nil {
		events = e.Events
		t.EventsRefs = append(t.EventsRefs[:len(t.EventsRefs):len(t.EventsRefs)], *o.EventsRef)
	} else {
		t.Events = append(t.Events[:len(t.Events):len(t.Events)], events...)
	}
	t.ExecMs += o.ExecutionTimeMs
	if o.State == messages.ToolSuccess {
		m.succeeded(i, o, events)
		if o.Done != nil && o.Done.NeedsMoreContext {
			m.askContext(i, o.Done.ContextSuggestion)
		}
		return
	}
	err := o.Error
	if err == nil {
		err = &messages.ToolError{Code: "failed", Category: messages.CategoryToolFailure, Message: "the tool failed"}
	}
	m.attemptFailed(now, i, err)
}

// adopt takes the next attempt of tool i as sent, after a recovery, when
// its outcome arrives before the recovered plan sent it: no record says
// "running" (the job proves a dispatch), so a crash between a job and the
// end record, or before a batch of records was stored, leaves the tool
// pending or retrying in the store with its next attempt's outcome on the
// way. Dropping that outcome would have the probe find the job, wait for
// an outcome already consumed, and run the script again.
//
// A pending tool the concurrency rules (§4.2, §4.3) would keep out now
// ran alongside the tools the recovered plan started: its success is
// taken (it ends at once), a failure is dropped (the attempt is given up
// as lost once the probe finds its job, and retried then).
func (m *Machine) adopt(now time.Time, i int, success bool) bool {
	t := &m.tools[i]
	if m.rec.Phase != PhaseRunning || m.rec.TimedOut || m.rec.Cancelled || !m.depsEnded(i) ||
		(t.State != messages.ToolPending && t.State != messages.ToolRetrying) {
		return false
	}
	if t.State == messages.ToolPending && !success && m.running > 0 &&
		(!m.plan.Parallel || !m.plan.Tools[i].Async || m.exclusive > 0 || m.running >= m.cfg.Concurrency) {
		return false
	}
	input, err := messages.ResolveRefs(m.plan.Tools[i].Input, m.outputOf)
	if err != nil {
		return false
	}
	delete(m.unverified, i)
	m.emit(StopTimer{Key: TimerKey{TimerRetry, i}})
	m.mustMove(i, messages.ToolRunning, "outcome of an attempt sent before the recovery", 0)
	t.Attempt++
	t.DispatchedAt = now
	t.RetryAt = time.Time{}
	t.InputKey = InputKey(m.rec.Scripts[i], input)
	m.logf(slog.LevelInfo, "scheduler: outcome of an attempt sent before the recovery; taken as sent", i, slog.Int("attempt", t.Attempt))
	return true
}

// adoptable says whether an outcome adopt refused for tool i may be taken
// later: the plan runs on, the tool has not started here, and what kept
// it out is a dependency not ended yet — whose own outcome, sent before
// the recovery too, may still come (it then ends, and the kept outcome is
// taken when it comes again). A dependency that cannot end well any more
// skips the tool, and the outcome is then dropped.
func (m *Machine) adoptable(i int) bool {
	t := &m.tools[i]
	if m.rec.Phase != PhaseRunning || m.rec.TimedOut || m.rec.Cancelled ||
		(t.State != messages.ToolPending && t.State != messages.ToolRetrying) {
		return false
	}
	waiting := false
	for _, dep := range m.plan.Tools[i].Dependencies {
		switch m.nodeState(m.index[dep]) {
		case dag.StateSucceeded, dag.StateFailedOptional:
		case dag.Pending, dag.Running:
			waiting = true
		case dag.StateFailed, dag.StateSkipped:
			return false
		default:
			return false
		}
	}
	return waiting
}

// mayPatchOrShow says whether an event may be a state patch or a ui event,
// the only ones succeeded keeps, without decoding it (most events are
// neither: a done, a log). A line with no escape in it names its type
// literally, so one without either type's name is neither; a line with an
// escape is decoded.
func mayPatchOrShow(raw []byte) bool {
	return bytes.IndexByte(raw, '\\') >= 0 || bytes.Contains(raw, patchType) || bytes.Contains(raw, uiType)
}

// patchType and uiType are the two event types as they appear quoted.
var patchType, uiType = []byte(`"` + messages.EventStatePatch + `"`), []byte(`"` + messages.EventUI + `"`)

// succeeded ends tool i as success: its state patches are merged into the
// session before anything that depends on it starts (§4.8), its ui events
// and assets are kept (§4.7).
func (m *Machine) succeeded(i int, o *messages.Outcome, events []json.RawMessage) {
	t := &m.tools[i]
	id := m.plan.Tools[i].ToolID
	var patches []map[string]any
	var ui []messages.UIEventRecord
	for _, raw := range events {
		if !mayPatchOrShow(raw) {
			continue
		}
		ev, err := messages.DecodeEvent(raw)
		if err != nil {
			continue
		}
		switch e := ev.(type) {
		case *messages.StatePatchEvent:
			patches = append(patches, e.Patch)
		case *messages.UIEvent:
			ui = append(ui, messages.UIEventRecord{ToolID: id, Event: e.Event, Payload: e.Payload})
		}
	}
	t.UIEvents = ui
	t.ReusedFrom = o.ReusedFrom
	t.Assets = nil
	for _, a := range o.Assets {
		a.ToolID = id
		t.Assets = append(t.Assets, a)
	}
	t.Patches = patches // staged: committed with the plan's other patches when it ends well
	if len(patches) > 0 && !slices.Contains(m.patched, i) {
		m.patched = append(m.patched, i)
	}
	t.Output = o.Output
	if len(t.Output) == 0 {
		t.Output = json.RawMessage(`{"summary":""}`)
	}
	t.Error = nil
	m.mustMove(i, messages.ToolSuccess, "attempt succeeded", dag.Succeeded)
	m.persistTool(i)
	m.emit(FeedHealth{Skill: t.Skill, Input: health.Success, Reason: "attempt succeeded"})
	m.emit(Progress{ToolID: id, State: string(messages.ToolSuccess), Attempt: t.Attempt})
}

// attemptFailed retries tool i when its error class, its policy and the
// plan deadline allow (§4.4), else ends it as failed or timeout (§4.6).
func (m *Machine) attemptFailed(now time.Time, i int, e *messages.ToolError) {
	t := &m.tools[i]
	spec := &m.plan.Tools[i]
	t.Error = e
	class := Classify(e)
	if class == Retryable {
		in := health.Failure
		if e.Transient() {
			in = health.Transient
		}
		m.emit(FeedHealth{Skill: t.Skill, Input: in, Reason: e.Message})
	}
	retries := t.Attempt - 1
	if class != Terminal && retries < spec.RetryPolicy.MaxRetries {
		delay := messages.RetryDelay(spec.RetryPolicy.BackoffMs, retries+1)
		if at := now.Add(delay); at.Before(m.Deadline(now)) {
			m.mustMove(i, messages.ToolRetrying, "attempt failed with retries left", 0)
			t.RetryAt = at
			m.persistTool(i)
			m.emit(ArmTimer{Key: TimerKey{TimerRetry, i}, Attempt: t.Attempt, At: at})
			m.emit(Progress{ToolID: spec.ToolID, State: string(messages.ToolRetrying), Attempt: t.Attempt, Error: e.Message})
			m.logf(slog.LevelInfo, "scheduler: tool attempt failed; retrying", i, slog.String("skill", t.Skill),
				slog.Int("attempt", t.Attempt), slog.Duration("backoff", delay), slog.String("error", e.Message))
			return
		}
	}
	final := messages.ToolFailed
	if e.Category == messages.CategoryTimeout {
		final = messages.ToolTimeout
	}
	m.end(i, final, "attempt failed for good", failedOutcome(spec.Required))
	if class == Retryable && retries >= spec.RetryPolicy.MaxRetries {
		m.emit(FeedHealth{Skill: t.Skill, Input: health.Exhausted, Reason: fmt.Sprintf("%d attempts failed", t.Attempt)})
	}
	m.logf(slog.LevelWarn, "scheduler: tool failed", i, slog.String("skill", t.Skill), slog.Int("attempts", t.Attempt),
		slog.String("category", e.Category), slog.String("error", e.Message))
}

// end moves tool i to a final state, persists it, then lets the tracker
// skip what depended on it.
func (m *Machine) end(i int, to messages.ToolState, why string, o dag.Outcome) {
	t := &m.tools[i]
	// Persist this tool before the tools it causes to be skipped, so a
	// crash in between never leaves a skip without its cause.
	mark := len(m.out)
	m.mustMove(i, to, why, o)
	persist := PersistTool{Index: i, Tool: m.tools[i]}
	progress := Progress{ToolID: m.plan.Tools[i].ToolID, State: string(to), Attempt: t.Attempt}
	if t.Error != nil {
		progress.Error = t.Error.Message
	}
	m.out = append(m.out[:mark], append([]Effect{persist, progress}, m.out[mark:]...)...)
}

// await parks a ready tool that needs approval (§9.3).
func (m *Machine) await(now time.Time, i int) {
	t := &m.tools[i]
	m.mustMove(i, messages.ToolAwaitingApproval, "requires approval", 0)
	t.WaitSince = now
	t.WaitUntil = now.Add(m.cfg.ApprovalTimeout)
	m.persistTool(i)
	m.emit(ArmTimer{Key: TimerKey{TimerApproval, i}, At: t.WaitUntil})
	m.emit(Progress{ToolID: m.plan.Tools[i].ToolID, State: string(messages.ToolAwaitingApproval), Input: m.pendingInput(i)})
}

// pendingInput is what tool i would run with if it started now: its input
// with its references resolved (§9.2), or nil when one cannot be (it is
// then refused at dispatch, with that error).
func (m *Machine) pendingInput(i int) json.RawMessage {
	input, err := messages.ResolveRefs(m.plan.Tools[i].Input, m.outputOf)
	if err != nil {
		return nil
	}
	return input
}

// CheckDecision says whether an approval decision on the tool can be
// taken now, by the rules ApprovalArrived applies: a tool waiting for
// approval, or one that will (it requires approval, has not started
// waiting, and has no decision yet), of a running plan. Otherwise it is
// ErrUnknownTool, ErrPlanOver, or ErrNotAwaitingApproval naming the
// tool's state.
func (m *Machine) CheckDecision(toolID string) error {
	i, ok := m.index[toolID]
	if !ok {
		return fmt.Errorf("plan %s has no tool %q: %w", m.plan.RequestID, toolID, ErrUnknownTool)
	}
	t := &m.tools[i]
	switch {
	case m.rec.Phase != PhaseRunning:
		return fmt.Errorf("plan %s: %w: tool %q takes no decision", m.plan.RequestID, ErrPlanOver, toolID)
	case t.State == messages.ToolAwaitingApproval:
		return nil
	case t.State == messages.ToolPending && m.plan.Tools[i].RequiresApproval && !t.Approved && t.Decision == nil:
		return nil
	case !m.plan.Tools[i].RequiresApproval:
		return fmt.Errorf("tool %q of plan %s requires no approval (it is %s): %w", toolID, m.plan.RequestID, t.State, ErrNotAwaitingApproval)
	case t.Approved || t.Decision != nil:
		return fmt.Errorf("tool %q of plan %s was decided already (it is %s): %w", toolID, m.plan.RequestID, t.State, ErrNotAwaitingApproval)
	default:
		return fmt.Errorf("tool %q of plan %s no longer waits for approval (it is %s): %w", toolID, m.plan.RequestID, t.State, ErrNotAwaitingApproval)
	}
}

// approvalReadGrace is how long a recovered wait whose deadline passed
// gives its stored decision to be read back before the wait times out.
const approvalReadGrace = 2 * time.Second

// latest returns the later of two times.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (m *Machine) onApproval(now time.Time, e ApprovalArrived) error {
	i, ok := m.index[e.ToolID]
	if !ok {
		return fmt.Errorf("planfsm: plan %s: %w %q", m.plan.RequestID, ErrUnknownTool, e.ToolID)
	}
	t := &m.tools[i]
	if m.rec.Phase == PhaseRunning && t.State == messages.ToolPending && m.plan.Tools[i].RequiresApproval && !t.Approved && t.Decision == nil {
		// Early: keep the decision for when the tool is ready.
		d := e.Approval
		t.Decision = &d
		m.persistTool(i)
		m.logf(slog.LevelInfo, "scheduler: approval decision kept until the tool is ready", i, slog.Bool("approved", d.Approved))
		return nil
	}
	if m.rec.Phase != PhaseRunning || t.State != messages.ToolAwaitingApproval {
		return fmt.Errorf("planfsm: tool %q of plan %s: %w (it is %s)", e.ToolID, m.plan.RequestID, ErrNotAwaitingApproval, t.State)
	}
	if m.restored && !m.depsEnded(i) {
		// Only after a recovery: a dependency's end is owed (its record
		// was lost). The decision is applied once it has come — a late
		// one too: the tool cannot end, timed out or denied, before its
		// dependency has (seed 1795761846943321200: a denial past the
		// wait's deadline ended the tool while its dependency's skip was
		// owed, a move the machine refuses). Applied then, it is judged
		// against the wait's deadline as below.
		d := e.Approval
		t.Decision = &d
		m.emit(StopTimer{Key: TimerKey{TimerApproval, i}})
		m.persistTool(i)
		m.deferTool(i)
		return nil
	}
	if at := cmp.Or(e.StoredAt, now); !at.Before(t.WaitUntil) {
		// Decided at or after the wait's deadline (read back after a
		// recovery gave the wait a grace, or come just before its timer):
		// the wait timed out, as its timer would have said.
		m.emit(StopTimer{Key: TimerKey{TimerApproval, i}})
		m.approvalTimedOut(now, i)
		return nil
	}
	m.emit(StopTimer{Key: TimerKey{TimerApproval, i}})
	m.endWait(now, i)
	if !e.Approval.Approved {
		m.deny(i, "approval_denied", denial(e.Approval))
		return nil
	}
	m.tools[i].Approved = true
	m.mustMove(i, messages.ToolPending, "approved", 0)
	m.persistTool(i)
	m.logf(slog.LevelInfo, "scheduler: tool approved", i, slog.String("by", e.Approval.By))
	return nil
}

// approvalTimedOut ends tool i's wait for a decision that did not come in
// time.
func (m *Machine) approvalTimedOut(now time.Time, i int) {
	m.endWait(now, i)
	m.deny(i, "approval_timeout", fmt.Sprintf("no approval decision within %s", m.cfg.ApprovalTimeout))
}

func denial(a messages.Approval) string {
	reason := "approval denied"
	if a.By != "" {
		reason += " by " + a.By
	}
	if a.Reason != "" {
		reason += ": " + a.Reason
	}
	return reason
}

// endWait pushes the plan deadline back by the approval wait that just
// ended: a wait counts against neither the tool nor the plan (§9.3).
func (m *Machine) endWait(now time.Time, i int) {
	if waited := now.Sub(m.tools[i].WaitSince); waited > 0 && !m.tools[i].WaitSince.IsZero() {
		m.rec.Deadline = m.rec.Deadline.Add(waited)
		m.persistPlan()
	}
	m.armDeadline()
}

// deny ends a tool that waited for approval as skipped; for its dependents
// it counts as a failure (§9.3).
func (m *Machine) deny(i int, code, msg string) {
	m.setError(i, code, messages.CategoryToolFailure, msg)
	m.tools[i].Denied = true
	m.end(i, messages.ToolSkipped, code, failedOutcome(m.plan.Tools[i].Required))
}

func (m *Machine) onTimer(now time.Time, e TimerFired) {
	i := e.Key.Index
	switch e.Key.Kind {
	case TimerRetry:
		if m.isAttempt(i, e.Attempt, messages.ToolRetrying) {
			if m.pastDeadline(now) {
				// §4.4: nothing starts at or past the deadline. Its timer
				// ends the plan, the tool included: now, or when an
				// approval wait that holds it back ends. (A recovery after
				// a lost plan write can bring the deadline before a retry
				// armed under the one written.)
				return
			}
			m.dispatch(now, i)
		}
	case TimerLost:
		if m.isAttempt(i, e.Attempt, messages.ToolRunning) {
			// Overdue: given up only if neither its job nor its outcome
			// is stored (onLostProbed). A worker paused past every window
			// still holds its job, and its outcome comes when it resumes.
			m.emit(Probe{Index: i, Attempt: e.Attempt, Why: ProbeOverdue})
		}
	case TimerApproval:
		if m.rec.Phase == PhaseRunning && i >= 0 && i < len(m.tools) && m.tools[i].State == messages.ToolAwaitingApproval {
			if m.restored && !m.depsEnded(i) {
				// A dependency's end is owed (see onApproval): wait for it.
				m.emit(ArmTimer{Key: e.Key, At: now.Add(time.Second)})
				return
			}
			m.approvalTimedOut(now, i)
		}
	case TimerDeadline:
		m.onDeadline(now)
	case TimerPublish:
		if m.rec.Phase == PhaseFinished {
			m.emit(PublishResult{})
		}
	case TimerCommit:
		if m.rec.Phase == PhaseFinished {
			m.commitOrPublish()
		}
	case TimerContext:
		if it := m.openIteration(); it != nil && it.State == IterationAsked && it.N == e.Attempt {
			m.carryOn(it, fmt.Sprintf("no planner answered context request %d within %s", it.N, m.cfg.ContextTimeout))
		}
	}
}

// onDeadline ends the plan at its timeout (§4.5): running tools are
// cancelled and end as timeout, unstarted ones as skipped; the result is
// still published. While a tool awaits approval the deadline waits too.
func (m *Machine) onDeadline(now time.Time) {
	if m.rec.Phase != PhaseRunning {
		return
	}
	if m.awaiting > 0 {
		return // pushed back by the wait: re-armed when it ends
	}
	if now.Before(m.rec.Deadline) && !m.rec.TimedOut {
		m.armDeadline() // pushed back by an approval wait that ended
		return
	}
	m.rec.TimedOut = true
	m.persistPlan() // before the tools it ends, so a crash in between still reads as a timeout
	m.emit(Log{Level: slog.LevelWarn, Msg: "scheduler: plan timed out", Attrs: []slog.Attr{slog.Duration("timeout", m.rec.Deadline.Sub(m.rec.AcceptedAt))}})
	m.emit(CancelRunning{})
	for i := range m.tools {
		t := &m.tools[i]
		switch t.State {
		case messages.ToolRunning, messages.ToolRetrying:
			m.emit(StopTimer{Key: TimerKey{TimerLost, i}})
			m.emit(StopTimer{Key: TimerKey{TimerRetry, i}})
			// The deadline is the plan's, not the skill's: its health is
			// not fed (§7).
			m.setError(i, codePlanTimeout, messages.CategoryTimeout, "the plan timed out while the tool ran")
			m.end(i, messages.ToolTimeout, "plan deadline", failedOutcome(m.plan.Tools[i].Required))
		case messages.ToolPending:
			if d := t.Decision; d != nil && !d.Approved {
				// Denied before it was ready and not applied yet (after a
				// recovery its dependents may even have run on the denial
				// whose record was lost): it ends denied, as it would have.
				m.deny(i, "approval_denied", denial(*d))
				continue
			}
			m.setError(i, codePlanTimeout, messages.CategoryTimeout, "the plan timed out before the tool started")
			m.end(i, messages.ToolSkipped, "plan deadline", dag.Skipped)
		case messages.ToolAwaitingApproval:
			// Its wait does not count against the deadline (§9.3): it
			// goes on until its own timeout or a decision.
		case messages.ToolSuccess, messages.ToolFailed, messages.ToolSkipped, messages.ToolTimeout, messages.ToolCancelled:
			// already ended
		}
	}
	m.finish(now)
}

// onCancel cancels the plan (§9.4): running scripts are killed, every
// unfinished tool ends cancelled, the result says cancelled and the plan
// is not to be replanned.
func (m *Machine) onCancel(now time.Time, reason string) error {
	if m.rec.Phase != PhaseRunning {
		return fmt.Errorf("planfsm: plan %s: %w", m.plan.RequestID, ErrPlanOver)
	}
	m.rec.Cancelled = true
	reason = ClampText(reason)
	m.rec.CancelReason = reason
	m.persistPlan() // first, so a crash halfway still reads as cancelled
	m.emit(Log{Level: slog.LevelWarn, Msg: "scheduler: plan cancelled", Attrs: []slog.Attr{slog.String("reason", reason)}})
	m.cancelAll(now)
	return nil
}

func (m *Machine) cancelAll(now time.Time) {
	msg := "the plan was cancelled"
	if m.rec.CancelReason != "" {
		msg += ": " + m.rec.CancelReason
	}
	m.stopAll(now, "cancelled", messages.CategoryCancelled, msg, "plan cancelled")
}

// stopAll ends the plan now: its running scripts are killed and every
// unfinished tool ends cancelled, with the error (code, category, msg) and
// why its move is made.
func (m *Machine) stopAll(now time.Time, code, category, msg, why string) {
	m.emit(CancelRunning{})
	// Dependents first, so ending a tool never skips one that is to be
	// cancelled.
	order := m.graph.Order()
	for k := len(order) - 1; k >= 0; k-- {
		i := m.index[order[k]]
		t := &m.tools[i]
		switch t.State {
		case messages.ToolRunning, messages.ToolRetrying, messages.ToolPending, messages.ToolAwaitingApproval:
			for _, k := range []TimerKind{TimerLost, TimerRetry, TimerApproval} {
				m.emit(StopTimer{Key: TimerKey{k, i}})
			}
			m.setError(i, code, category, msg)
			o := dag.Skipped
			if t.State == messages.ToolRunning || t.State == messages.ToolRetrying {
				o = failedOutcome(m.plan.Tools[i].Required)
			}
			m.end(i, messages.ToolCancelled, why, o)
		case messages.ToolSuccess, messages.ToolFailed, messages.ToolSkipped, messages.ToolTimeout, messages.ToolCancelled:
			// already ended
		}
	}
	m.finish(now)
}

// onStateRefused ends a running plan whose state write the store refused
// for good (a full plans bucket): without its state stored, it cannot run
// on and keep its promises across a crash. Every unfinished tool ends, its
// scripts killed; the result says storage_refused, not to be replanned
// (no other plan fares better against a full store). A plan already
// finishing goes on: its result does not wait for the refused write.
func (m *Machine) onStateRefused(now time.Time, e StateRefused) {
	if m.rec.Phase != PhaseRunning {
		return
	}
	if m.rec.Refused == "" {
		m.rec.Refused = ClampText("the store refused the plan's state: " + e.Err)
	}
	m.emit(Log{Level: slog.LevelError, Msg: "scheduler: the store refused a plan state write; the plan fails", Attrs: []slog.Attr{
		slog.String("error", e.Err), slog.String("failureReason", messages.ReasonStorageRefused)}})
	m.persistPlan() // first, so a crash halfway still reads as refused (if it is stored at all)
	m.refuseAll(now)
}

// refuseAll stops the plan for the refusal rec.Refused says.
func (m *Machine) refuseAll(now time.Time) {
	m.stopAll(now, codeStateRefused, messages.CategoryInfrastructure, m.rec.Refused, "plan state refused by the store")
}

// codeStateRefused is the error code of a tool ended because the store
// refused its plan's state (onStateRefused).
const codeStateRefused = "state_refused"

// finish marks the plan finished (persisted first) and asks for its result
// to be published.
func (m *Machine) finish(now time.Time) {
	if m.rec.Phase != PhaseRunning {
		return
	}
	if it := m.openIteration(); it != nil {
		it.State, it.Reason = IterationEnded, "the plan ended while waiting for more context"
		m.emit(StopTimer{Key: TimerKey{TimerContext, -1}})
	}
	m.movePhase(PhaseFinished, "every tool ended")
	m.rec.FinishedAt = now
	m.emit(StopTimer{Key: TimerKey{TimerDeadline, -1}})
	m.persistPlan()
	m.commitOrPublish()
}

// commitOrPublish commits the staged patches of a plan whose result is a
// success (once), then publishes its result; a plan that failed (timed out
// with a required tool unfinished, or was cancelled) commits nothing.
func (m *Machine) commitOrPublish() {
	if !m.rec.Committed && m.rec.Refused == "" && m.Succeeded() && !m.rec.Cancelled {
		if p := m.allPatches(); len(p) > 0 {
			m.emit(CommitState{Patches: p})
			return
		}
	}
	m.emit(PublishResult{})
}

// allPatches lists the staged patches of every succeeded tool, in
// topological order.
func (m *Machine) allPatches() []map[string]any {
	var out []map[string]any
	for _, id := range m.graph.Order() {
		if t := &m.tools[m.index[id]]; t.State == messages.ToolSuccess {
			out = append(out, t.Patches...)
		}
	}
	return out
}

// ancestorPatches lists the staged patches of tool i's succeeded
// ancestors, in topological order.
//
// Few tools stage patches, so it looks at those alone: a chain of N tools
// no longer walks every ancestor on each dispatch (O(N²) in all). When
// many tools have patches it scans the graph instead.
func (m *Machine) ancestorPatches(i int) []map[string]any {
	if len(m.patched) == 0 {
		return nil
	}
	if len(m.patched) > patchedScan {
		return m.ancestorPatchesScan(i)
	}
	id := m.plan.Tools[i].ToolID
	var from []int
	for _, j := range m.patched {
		if t := &m.tools[j]; t.State == messages.ToolSuccess && len(t.Patches) > 0 && m.graph.IsAncestor(m.plan.Tools[j].ToolID, id) {
			from = append(from, j)
		}
	}
	if len(from) == 0 {
		return nil
	}
	if m.orderPos == nil {
		m.orderPos = make([]int, len(m.tools))
		for k, tid := range m.graph.Order() {
			m.orderPos[m.index[tid]] = k
		}
	}
	sort.Slice(from, func(a, b int) bool { return m.orderPos[from[a]] < m.orderPos[from[b]] })
	var out []map[string]any
	for _, j := range from {
		out = append(out, m.tools[j].Patches...)
	}
	return out
}

// patchedScan is how many tools with patches ancestorPatches checks one
// by one before it scans the graph instead.
const patchedScan = 16

// ancestorPatchesScan is ancestorPatches by a walk of every ancestor.
func (m *Machine) ancestorPatchesScan(i int) []map[string]any {
	anc := m.graph.Ancestors(m.plan.Tools[i].ToolID)
	if len(anc) == 0 {
		return nil
	}
	is := map[string]bool{}
	for _, a := range anc {
		is[a] = true
	}
	var out []map[string]any
	for _, id := range m.graph.Order() {
		if t := &m.tools[m.index[id]]; is[id] && t.State == messages.ToolSuccess {
			out = append(out, t.Patches...)
		}
	}
	return out
}

func (m *Machine) onCommitted(now time.Time, e CommitDone) {
	if m.rec.Phase != PhaseFinished || m.rec.Committed || m.rec.Refused != "" && e.Err != "" {
		return
	}
	if e.Err != "" && e.Refused {
		// Sending it again changes nothing: the plan fails, loudly, and
		// its patches are not committed.
		m.rec.Refused = ClampText("the store refused the session state: " + e.Err)
		m.emit(Log{Level: slog.LevelError, Msg: "scheduler: the store refused the session state; the plan fails", Attrs: []slog.Attr{
			slog.String("error", e.Err), slog.String("failureReason", messages.ReasonStorageRefused)}})
		m.persistPlan()
		m.emit(PublishResult{})
		return
	}
	if e.Err != "" {
		m.publishes++
		wait := min(m.cfg.PublishBackoff<<min(m.publishes-1, 8), 30*time.Second)
		m.emit(Log{Level: slog.LevelError, Msg: "scheduler: state not committed; trying again", Attrs: []slog.Attr{
			slog.String("error", e.Err), slog.Duration("in", wait)}})
		m.emit(ArmTimer{Key: TimerKey{TimerCommit, -1}, At: now.Add(wait)})
		return
	}
	m.publishes = 0
	m.rec.Committed = true
	m.persistPlan()
	m.emit(PublishResult{})
}

func (m *Machine) onPublished(now time.Time, e PublishDone) {
	if m.rec.Phase != PhaseFinished {
		return
	}
	if e.Err != "" && e.Refused && !m.rec.ShortResult {
		// A result too large for the store (or a full results stream):
		// the plan fails and a short result says why.
		m.rec.ShortResult = true
		if m.rec.Refused == "" {
			m.rec.Refused = ClampText("the store refused the result: " + e.Err)
		}
		m.emit(Log{Level: slog.LevelError, Msg: "scheduler: the store refused the result; publishing a short one", Attrs: []slog.Attr{
			slog.String("error", e.Err), slog.String("failureReason", messages.ReasonStorageRefused)}})
		m.persistPlan()
		m.emit(PublishResult{})
		return
	}
	if e.Err != "" {
		// Even a short result refused means the store has no room at all
		// (the results stream discards old results; a short one is small):
		// it is tried again, as a stored result is the only proof a plan
		// ended that survives the store forgetting its purge.
		m.publishes++
		wait := m.cfg.PublishBackoff << min(m.publishes-1, 8)
		wait = min(wait, 30*time.Second)
		m.emit(Log{Level: slog.LevelError, Msg: "scheduler: result not published; trying again", Attrs: []slog.Attr{
			slog.String("error", e.Err), slog.Duration("in", wait)}})
		m.emit(ArmTimer{Key: TimerKey{TimerPublish, -1}, At: now.Add(wait)})
		return
	}
	m.publishes = 0
	m.movePhase(PhasePublished, "result stored")
	m.persistPlan()
	state := messages.PlanSucceeded
	switch {
	case m.rec.Cancelled:
		state = messages.PlanCancelled
	case m.rec.TimedOut:
		state = messages.PlanTimeout
	case !m.Succeeded() || m.rec.Refused != "":
		state = messages.PlanFailed
	}
	m.emit(Progress{State: state})
	m.emit(Purge{})
}

// Succeeded reports whether every required tool succeeded (§4.10).
func (m *Machine) Succeeded() bool {
	for i := range m.tools {
		if m.plan.Tools[i].Required && m.tools[i].State != messages.ToolSuccess {
			return false
		}
	}
	return true
}

// recovered resumes a restored plan: a finished plan publishes its result,
// a published one is purged, a running one re-arms its timers and probes
// its running attempts before anything is sent again.
func (m *Machine) recovered(now time.Time, resultStored bool) {
	for _, i := range m.repaired {
		if h := m.tools[i].History; len(h) > 0 {
			h[len(h)-1].At = now // Restore has no clock: the repair is dated by this step
		}
	}
	if resultStored {
		// The plan's result is stored: it finished, whatever its records
		// say. Records of a running plan next to a stored result mean the
		// store went back in time (it forgot the purge of a finished
		// plan's keys after a kill, and brought them back): nothing runs
		// again; the keys are purged again.
		if m.rec.Phase != PhasePublished {
			m.emit(Log{Level: slog.LevelWarn, Msg: "scheduler: the store brought back the state of a finished plan (a forgotten purge); purged again",
				Attrs: []slog.Attr{slog.String("phase", string(m.rec.Phase))}})
			m.movePhase(PhasePublished, "result found stored on recovery")
		}
		m.emit(Purge{})
		return
	}
	for _, i := range m.repaired {
		m.persistTool(i)
	}
	m.repaired = nil
	switch m.rec.Phase {
	case PhaseFinished:
		if !m.toolsEnded() {
			// A tool's last state was lost while the plan's end was stored
			// (the lost write was never sent again: the scheduler died).
			// The result waits for every write, so none was published: the
			// plan runs on and ends again once the owed outcome is applied.
			m.movePhase(PhaseRunning, "recovered with a tool unfinished (a lost write)")
			m.rec.FinishedAt = time.Time{}
			m.persistPlan()
			m.emit(Log{Level: slog.LevelWarn, Msg: "scheduler: plan recorded as ended with a tool unfinished (a lost state write); resumed"})
			break
		}
		m.commitOrPublish() // a commit already made is found marked and not repeated
		return
	case PhasePublished:
		m.emit(Purge{})
		return
	case PhaseRunning:
	}
	m.armDeadline()
	m.unverified = map[int]bool{}
	for i := range m.tools {
		t := &m.tools[i]
		switch t.State {
		case messages.ToolPending:
			m.unverified[i] = true
		case messages.ToolRunning:
			m.emit(Probe{Index: i, Attempt: t.Attempt})
			// The attempt's clock restarts: its outcome may be stored and
			// waiting to be delivered, and must be applied before the
			// attempt is given up and run again.
			m.emit(ArmTimer{Key: TimerKey{TimerLost, i}, Attempt: t.Attempt, At: now.Add(2*m.rec.Scripts[i].Timeout() + m.cfg.LostGrace)})
		case messages.ToolRetrying:
			m.unverified[i] = true
			m.emit(ArmTimer{Key: TimerKey{TimerRetry, i}, Attempt: t.Attempt, At: t.RetryAt})
		case messages.ToolAwaitingApproval:
			m.unverified[i] = true
			// A decision may be stored already (sent while no scheduler
			// ran the plan): it is read back now, and must be applied before
			// a deadline that passed during the outage ends the wait
			// (onApproval refuses one stored too late).
			m.emit(ArmTimer{Key: TimerKey{TimerApproval, i}, At: latest(t.WaitUntil, now.Add(approvalReadGrace))})
		case messages.ToolSuccess, messages.ToolFailed, messages.ToolSkipped, messages.ToolTimeout, messages.ToolCancelled:
			// ended: nothing to resume
		}
	}
	if m.rec.TimedOut { // the crash came while the plan was timing out
		m.onDeadline(now)
		return
	}
	if m.rec.Cancelled { // the crash came while the plan was being cancelled
		m.cancelAll(now)
		return
	}
	if m.rec.Refused != "" { // the crash came while the plan was ending for a refused write
		m.refuseAll(now)
		return
	}
	if it := m.openIteration(); it != nil && it.State == IterationAsked {
		// Never ask twice for one iteration: wait out the first request's
		// deadline (its answer went to the process that died).
		m.emit(ArmTimer{Key: TimerKey{TimerContext, -1}, Attempt: it.N, At: it.AskedAt.Add(m.cfg.ContextTimeout)})
	}
	m.emit(Log{Level: slog.LevelInfo, Msg: "scheduler: plan resumed", Attrs: []slog.Attr{slog.Int("tools", len(m.tools)),
		slog.Int("running", m.running)}})
	m.schedule(now)
}

// toolsEnded says whether every tool is in a final state.
func (m *Machine) toolsEnded() bool {
	for i := range m.tools {
		switch m.tools[i].State {
		case messages.ToolSuccess, messages.ToolFailed, messages.ToolSkipped, messages.ToolTimeout, messages.ToolCancelled:
		case messages.ToolPending, messages.ToolRunning, messages.ToolRetrying, messages.ToolAwaitingApproval:
			return false
		default:
			return false
		}
	}
	return true
}

// openIteration returns the context re-planning round in progress, or nil.
func (m *Machine) openIteration() *Iteration {
	if n := len(m.rec.Iterations); n > 0 {
		if it := &m.rec.Iterations[n-1]; it.State == IterationPending || it.State == IterationAsked {
			return it
		}
	}
	return nil
}

// askContext pauses the plan for more context (§9.1), at most
// MaxContextIterations times; past that the request is noted and ignored.
func (m *Machine) askContext(i int, suggestion string) {
	id := m.plan.Tools[i].ToolID
	if m.rec.Cancelled || m.rec.TimedOut || m.rec.Phase != PhaseRunning {
		return
	}
	if it := m.openIteration(); it != nil {
		m.logf(slog.LevelInfo, "scheduler: context requested while already paused for context; folded into it", i)
		return
	}
	n := len(m.rec.Iterations) + 1
	if n > m.cfg.MaxContextIterations {
		note := fmt.Sprintf("tool %s asked for more context after %d re-planning iterations, the limit; carried on without", id, m.cfg.MaxContextIterations)
		if len(m.rec.ContextNotes) < RecordNotesMax {
			m.rec.ContextNotes = append(m.rec.ContextNotes, note)
			m.persistPlan()
		}
		m.logf(slog.LevelWarn, "scheduler: "+note, i)
		return
	}
	suggestion = ClampText(suggestion)
	m.rec.Iterations = append(m.rec.Iterations, Iteration{N: n, ToolID: id, Suggestion: suggestion, State: IterationPending})
	m.persistPlan()
	m.emit(Progress{State: messages.PlanPausedForContext, Error: suggestion})
	m.logf(slog.LevelInfo, "scheduler: plan paused for more context", i, slog.Int("iteration", n), slog.String("suggestion", suggestion))
}

// askPlanner sends the iteration's request, once: it is marked asked
// (persisted) first, so a recovered plan never asks again.
func (m *Machine) askPlanner(now time.Time, it *Iteration) {
	it.State = IterationAsked
	it.AskedAt = now
	m.persistPlan()
	m.emit(RequestContext{N: it.N, ToolID: it.ToolID, Suggestion: it.Suggestion})
	m.emit(ArmTimer{Key: TimerKey{TimerContext, -1}, Attempt: it.N, At: now.Add(m.cfg.ContextTimeout)})
}

// carryOn ends an iteration without more steps.
func (m *Machine) carryOn(it *Iteration, reason string) {
	reason = ClampText(reason)
	it.State, it.Reason = IterationEnded, reason
	m.emit(StopTimer{Key: TimerKey{TimerContext, -1}})
	m.persistPlan()
	m.emit(Progress{State: messages.PlanResumed, Error: reason})
	m.emit(Log{Level: slog.LevelWarn, Msg: "scheduler: carrying on without more context", Attrs: []slog.Attr{
		slog.Int("iteration", it.N), slog.String("reason", reason)}})
}

// onContextAnswer merges a planner's steps into the plan (§9.1): the new
// tools join the graph (they may depend on completed tools), the tracker
// is rebuilt from every tool's state, and the plan goes on.
func (m *Machine) onContextAnswer(now time.Time, e ContextAnswered) {
	it := m.openIteration()
	if it == nil || it.N != e.N || it.State != IterationAsked {
		m.emit(Log{Level: slog.LevelDebug, Msg: "scheduler: context answer ignored", Attrs: []slog.Attr{slog.Int("iteration", e.N)}})
		return
	}
	switch {
	case e.Err != "":
		m.carryOn(it, "context request "+strconv.Itoa(it.N)+": "+e.Err)
		return
	case len(e.Tools) == 0:
		m.carryOn(it, "context request "+strconv.Itoa(it.N)+": the planner had no steps to add")
		return
	case len(e.Tools) != len(e.Scripts):
		m.carryOn(it, "context request "+strconv.Itoa(it.N)+": answer without a script per tool")
		return
	}
	combined := *m.plan
	combined.Tools = append(slices.Clone(m.plan.Tools), e.Tools...)
	graph, err := dag.Build(plancheck.Nodes(&combined))
	if err != nil {
		m.carryOn(it, "context request "+strconv.Itoa(it.N)+": invalid steps: "+err.Error())
		return
	}
	states := make(map[string]dag.NodeState, len(m.tools))
	for i := range m.tools {
		states[m.plan.Tools[i].ToolID] = m.nodeState(i)
	}
	tr, skipped, err := graph.RestoreTracker(states)
	if err != nil {
		m.carryOn(it, "context request "+strconv.Itoa(it.N)+": invalid steps: "+err.Error())
		return
	}
	base := len(m.tools)
	m.plan, m.graph, m.tr = &combined, graph, tr
	m.orderPos = nil
	for k := range e.Tools {
		m.index[e.Tools[k].ToolID] = base + k
		m.tools = append(m.tools, Tool{State: messages.ToolPending, Skill: e.Scripts[k].Skill})
		m.rec.Scripts = append(m.rec.Scripts, e.Scripts[k])
	}
	it.State, it.Tools, it.Scripts = IterationMerged, e.Tools, e.Scripts
	m.emit(StopTimer{Key: TimerKey{TimerContext, -1}})
	m.persistPlan()
	for _, id := range skipped {
		j := m.index[id]
		m.setError(j, "dependency_failed", messages.CategoryToolFailure, "skipped: a dependency did not succeed")
		m.mustMove(j, messages.ToolSkipped, "added behind a failed dependency", 0)
		m.persistTool(j)
	}
	m.emit(Progress{State: messages.PlanResumed})
	m.emit(Log{Level: slog.LevelInfo, Msg: "scheduler: plan resumed with more steps", Attrs: []slog.Attr{
		slog.Int("iteration", it.N), slog.Int("tools", len(e.Tools))}})
}

// InputKey identifies a script and a resolved input: a hash of the script
// and the input re-encoded canonically (object keys sorted), so the same
// call planned twice, however its JSON was written, has the same key.
func InputKey(sc Script, input json.RawMessage) string {
	var v any
	canon := []byte(input)
	if json.Unmarshal(input, &v) == nil {
		if b, err := json.Marshal(v); err == nil {
			canon = b
		}
	}
	h := sha256.New()
	h.Write([]byte(sc.Skill + "/" + sc.Name + "\x00"))
	h.Write(canon)
	return hex.EncodeToString(h.Sum(nil))[:40]
}
