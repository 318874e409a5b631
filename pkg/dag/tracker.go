package dag

import (
	"fmt"
	"iter"
	"slices"
)

// Outcome is how a tool ended, as reported to Tracker.Finish.
type Outcome int

// The outcomes of a tool (docs/spec.md §4.1, §4.6). The zero Outcome is invalid.
const (
	// Succeeded: the tool ran and succeeded; its dependents may run.
	Succeeded Outcome = iota + 1
	// Failed: a required tool failed (or was denied approval); every
	// transitive dependent that has not started is skipped.
	Failed
	// FailedOptional: a non-required tool failed; its dependents still run.
	FailedOptional
	// Skipped: the tool did not run (e.g. the plan timed out); every
	// transitive dependent that has not started is skipped as well.
	Skipped
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	case FailedOptional:
		return "failed-optional"
	case Skipped:
		return "skipped"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// NodeState is a tool's state in a Tracker.
type NodeState uint8

// The states of a tool. The zero NodeState is Pending.
const (
	// Pending: not started. A pending tool is ready when each of its
	// dependencies finished as Succeeded or FailedOptional.
	Pending NodeState = iota
	// Running: started and not finished.
	Running
	// StateSucceeded: finished with Succeeded.
	StateSucceeded
	// StateFailed: finished with Failed.
	StateFailed
	// StateFailedOptional: finished with FailedOptional.
	StateFailedOptional
	// StateSkipped: finished with Skipped, or skipped because a dependency
	// failed (required) or was skipped.
	StateSkipped

	numStates = iota
)

// String names the state.
func (s NodeState) String() string {
	switch s {
	case Pending:
		return "pending"
	case Running:
		return "running"
	case StateSucceeded:
		return "succeeded"
	case StateFailed:
		return "failed"
	case StateFailedOptional:
		return "failed-optional"
	case StateSkipped:
		return "skipped"
	}
	return fmt.Sprintf("NodeState(%d)", uint8(s))
}

// Finished reports whether the state is final: succeeded, failed,
// failed-optional or skipped.
func (s NodeState) Finished() bool { return s >= StateSucceeded && s < numStates }

// satisfies reports whether a dependency in this state lets its dependents run.
func (s NodeState) satisfies() bool { return s == StateSucceeded || s == StateFailedOptional }

// state maps an outcome to the state it leaves.
func (o Outcome) state() NodeState {
	return [...]NodeState{Succeeded: StateSucceeded, Failed: StateFailed, FailedOptional: StateFailedOptional, Skipped: StateSkipped}[o]
}

// StateCounts counts the tools of a Tracker by state.
type StateCounts struct {
	// Pending counts the tools not started, ready or not.
	Pending int
	// Ready counts the pending tools that may start now.
	Ready int
	// Running counts the tools started and not finished.
	Running int
	// Succeeded counts the tools finished as StateSucceeded.
	Succeeded int
	// Failed counts the tools finished as StateFailed.
	Failed int
	// FailedOptional counts the tools finished as StateFailedOptional.
	FailedOptional int
	// Skipped counts the tools finished as StateSkipped.
	Skipped int
}

// Tracker follows one execution of a graph: which tools are ready, running
// and finished, and which are skipped because a required dependency failed
// or was skipped.
//
// Start and Finish cost one map lookup plus O(degree of the tool), and a
// Finish that skips k tools O(k log k) more to sort them; the skipping
// visits each tool at most once, so a whole run costs O(V+E) plus that
// sorting. The ready set is kept in plan order at O(log64 V) per update or
// tool listed: at most three machine words for 100,000 tools.
//
// A Tracker is not safe for concurrent use; one goroutine (the plan's
// actor) owns it.
type Tracker struct {
	g         *Graph
	state     []NodeState
	remaining []int32  // dependencies not yet finished as Succeeded or FailedOptional
	ready     indexSet // pending tools with remaining == 0
	count     [numStates]int
	stack     []int32 // scratch for skipping: tools to look at
	found     []int32 // scratch for skipping: tools skipped
}

func (g *Graph) tracker() *Tracker {
	n := len(g.ids)
	return &Tracker{g: g, state: make([]NodeState, n), remaining: make([]int32, n), ready: newIndexSet(n)}
}

// NewTracker starts an execution of the graph: every tool is pending, and
// the tools without dependencies are ready.
func (g *Graph) NewTracker() *Tracker {
	t := g.tracker()
	for v := range int32(len(g.ids)) {
		t.remaining[v] = g.depOff[v+1] - g.depOff[v]
		if t.remaining[v] == 0 {
			t.ready.add(v)
		}
	}
	t.count[Pending] = len(g.ids)
	return t
}

// Graph returns the graph the tracker follows.
func (t *Tracker) Graph() *Graph { return t.g }

// Ready returns the tools that may start now, in plan order: pending tools
// whose dependencies all finished as Succeeded or FailedOptional.
func (t *Tracker) Ready() []string {
	out := make([]string, 0, t.ready.n)
	for id := range t.ReadyTools() {
		out = append(out, id)
	}
	return out
}

// ReadyTools yields the same tools as Ready, in plan order, without building
// a slice, so a caller that starts only a few can stop early. Starting the
// tool just yielded is fine during the iteration; whether the rest of the
// iteration sees other changes is not specified.
func (t *Tracker) ReadyTools() iter.Seq[string] {
	return func(yield func(string) bool) {
		for v := t.ready.min(); v >= 0; v = t.ready.next(v + 1) {
			if !yield(t.g.ids[v]) {
				return
			}
		}
	}
}

// Start marks a ready tool running. It returns a *StateError matching
// ErrUnknownTool, ErrNotReady (dependencies unfinished), ErrAlreadyStarted
// or ErrAlreadyFinished when the tool cannot start.
func (t *Tracker) Start(id string) error {
	v, ok := t.g.index[id]
	if !ok {
		return &StateError{Op: "start", ID: id, Err: ErrUnknownTool}
	}
	switch st := t.state[v]; {
	case st == Running:
		return &StateError{Op: "start", ID: id, State: st, Err: ErrAlreadyStarted}
	case st.Finished():
		return &StateError{Op: "start", ID: id, State: st, Err: ErrAlreadyFinished}
	case !t.ready.has(v):
		return &StateError{Op: "start", ID: id, State: st, Err: ErrNotReady}
	}
	t.ready.remove(v)
	t.move(v, Running)
	return nil
}

// Finish records how a tool ended. It returns the tools that became ready
// because of it, and the tools skipped because of it (every transitive
// dependent not yet started, when o is Failed or Skipped), both in plan
// order.
//
// A running tool may finish with any outcome. A pending tool may finish
// without running as Failed or Skipped (approval denied, plan timeout), and
// as FailedOptional once it is ready; as Succeeded it may not. Otherwise
// Finish changes nothing and returns a *StateError matching ErrUnknownTool,
// ErrInvalidOutcome, ErrAlreadyFinished (e.g. a duplicate outcome),
// ErrNotRunning or ErrNotReady.
func (t *Tracker) Finish(id string, o Outcome) (ready, skipped []string, err error) {
	v, ok := t.g.index[id]
	if !ok {
		return nil, nil, &StateError{Op: "finish", ID: id, Err: ErrUnknownTool}
	}
	st := t.state[v]
	switch {
	case o < Succeeded || o > Skipped:
		return nil, nil, &StateError{Op: "finish", ID: id, State: st, Err: ErrInvalidOutcome}
	case st.Finished():
		return nil, nil, &StateError{Op: "finish", ID: id, State: st, Err: ErrAlreadyFinished}
	case st == Running:
	case o == Succeeded:
		return nil, nil, &StateError{Op: "finish", ID: id, State: st, Err: ErrNotRunning}
	case o == FailedOptional && !t.ready.has(v):
		return nil, nil, &StateError{Op: "finish", ID: id, State: st, Err: ErrNotReady}
	}
	t.ready.remove(v)
	t.move(v, o.state())
	if o == Succeeded || o == FailedOptional {
		for _, c := range t.g.children(v) {
			t.remaining[c]--
			if t.remaining[c] == 0 && t.state[c] == Pending {
				t.ready.add(c)
				ready = append(ready, t.g.ids[c]) // children are in plan order
			}
		}
		return ready, nil, nil
	}
	// Skip every pending transitive dependent. A tool is skipped once and
	// only a newly skipped tool's children are looked at, so over a whole
	// run each edge is walked at most once here.
	found := t.found[:0]
	stack := append(t.stack[:0], t.g.children(v)...)
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if t.state[c] != Pending {
			continue
		}
		t.ready.remove(c)
		t.move(c, StateSkipped)
		found = append(found, c)
		stack = append(stack, t.g.children(c)...)
	}
	slices.Sort(found)
	skipped = t.g.names(found)
	t.stack, t.found = stack, found
	return nil, skipped, nil
}

// move changes a tool's state and the counts.
func (t *Tracker) move(v int32, to NodeState) {
	t.count[t.state[v]]--
	t.count[to]++
	t.state[v] = to
}

// State returns a tool's state, and false when no tool has the ID.
func (t *Tracker) State(id string) (NodeState, bool) {
	v, ok := t.g.index[id]
	if !ok {
		return Pending, false
	}
	return t.state[v], true
}

// Done reports whether every tool has finished or been skipped.
func (t *Tracker) Done() bool { return t.count[Pending]+t.count[Running] == 0 }

// Counts returns how many tools are in each state.
func (t *Tracker) Counts() StateCounts {
	return StateCounts{
		Pending:        t.count[Pending],
		Ready:          t.ready.n,
		Running:        t.count[Running],
		Succeeded:      t.count[StateSucceeded],
		Failed:         t.count[StateFailed],
		FailedOptional: t.count[StateFailedOptional],
		Skipped:        t.count[StateSkipped],
	}
}

// States returns every tool's state in plan order: States()[i] is the state
// of Graph.IDs()[i]. It is a copy, meant to be persisted and given back to
// Graph.RestoreTracker (as a map by ID) after a restart.
func (t *Tracker) States() []NodeState { return slices.Clone(t.state) }

// RestoreTracker rebuilds a tracker from persisted states, e.g. after a
// restart of the scheduler. Tools absent from states are pending; a tool
// persisted as Running is restored as running, and ready tools are
// recomputed.
//
// A pending tool behind a dependency that failed (required) or was skipped
// is skipped, and returned in plan order so the caller can persist it: the
// state was saved between a failure and the skips it causes.
//
// A tool may be running or finished while a dependency has not ended
// (Pending or Running): the dependency's last state (its success, or an
// optional one's end) was lost while later ones were stored — a scheduler
// that pipelines its writes and dies before it can send a lost one again
// leaves that. The dependency's end is still owed, and when it comes the
// dependents are not started again (they are not pending). If the plan's
// deadline comes first, the dependency is failed (timed out) behind its
// running or finished dependents, which is restored as it is too.
//
// It returns a *StateError matching ErrUnknownTool or ErrInvalidState for a
// bad entry, and a *RestoreError (ErrInconsistentState) when a tool is
// running or finished as Succeeded or FailedOptional while a dependency was
// skipped, which no run produces even with one lost state. When several entries are wrong the error names the first in plan
// order (unknown IDs first, the smallest one).
func (g *Graph) RestoreTracker(states map[string]NodeState) (*Tracker, []string, error) {
	t := g.tracker()
	var unknown []string
	bad := int32(-1)
	for id, s := range states {
		v, ok := g.index[id]
		switch {
		case !ok:
			unknown = append(unknown, id)
		case s >= numStates:
			if bad < 0 || v < bad {
				bad = v
			}
		}
		if ok {
			t.state[v] = s
		}
	}
	if len(unknown) > 0 {
		return nil, nil, &StateError{Op: "restore", ID: slices.Min(unknown), Err: ErrUnknownTool}
	}
	if bad >= 0 {
		return nil, nil, &StateError{Op: "restore", ID: g.ids[bad], State: t.state[bad], Err: ErrInvalidState}
	}
	var skipped []int32
	var inconsistent *RestoreError
	incAt := int32(-1)
	for _, v := range g.order { // dependencies first, so skips propagate
		var blocked, unmet int32 = -1, -1
		for _, u := range g.deps(v) {
			switch s := t.state[u]; {
			case s.satisfies():
			case s == Running || s == Pending:
				// Not ended: its end is still owed (see above).
				t.remaining[v]++
			case s == StateFailed:
				// Failed after its dependents started: the plan's deadline
				// ended it while its success was owed (see above).
				if blocked < 0 {
					blocked = u
				}
				t.remaining[v]++
			default: // skipped
				if blocked < 0 {
					blocked = u
				}
				t.remaining[v]++
				if unmet < 0 || u < unmet {
					unmet = u
				}
			}
		}
		switch s := t.state[v]; s {
		case Pending:
			switch {
			case blocked >= 0:
				t.state[v] = StateSkipped
				skipped = append(skipped, v)
			case t.remaining[v] == 0:
				t.ready.add(v)
			}
		case Running, StateSucceeded, StateFailedOptional:
			if unmet >= 0 && (incAt < 0 || v < incAt) {
				incAt = v
				inconsistent = &RestoreError{ID: g.ids[v], State: s, Dep: g.ids[unmet], DepState: t.state[unmet]}
			}
		case StateFailed, StateSkipped:
			// Ended without succeeding: any state of its dependencies fits.
		}
	}
	if inconsistent != nil {
		return nil, nil, inconsistent
	}
	for _, s := range t.state {
		t.count[s]++
	}
	slices.Sort(skipped)
	return t, g.names(skipped), nil
}
