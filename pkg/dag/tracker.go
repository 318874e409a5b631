package dag

import (
	"fmt"
	"math/bits"
)

// Outcome is how a tool ended.
type Outcome int

// Outcomes a tool can end with.
const (
	// Succeeded: dependents may run.
	Succeeded Outcome = iota + 1
	// Failed: a required tool failed; its transitive dependents are skipped.
	Failed
	// FailedOptional: a non-required tool failed; its dependents still run.
	FailedOptional
	// Skipped: the tool did not run; its transitive dependents are skipped.
	Skipped
)

// NodeState is a tool's state in a Tracker.
type NodeState int

// Tracker states.
const (
	Pending NodeState = iota
	Running
	StateSucceeded
	StateFailed
	StateFailedOptional
	StateSkipped
)

func (s NodeState) finished() bool { return s >= StateSucceeded }

// String names the state.
func (s NodeState) String() string {
	return [...]string{"pending", "running", "succeeded", "failed", "failed-optional", "skipped"}[s]
}

func stateOf(o Outcome) NodeState {
	switch o {
	case Succeeded:
		return StateSucceeded
	case Failed:
		return StateFailed
	case FailedOptional:
		return StateFailedOptional
	}
	return StateSkipped
}

// Tracker follows one execution of a graph: which tools are ready, running
// and finished, and which are skipped because a required dependency failed.
// Each call costs O(degree) plus what it returns; a whole run is O(V+E).
// It is not safe for concurrent use (the plan actor owns it).
type Tracker struct {
	g         *Graph
	state     []NodeState
	remaining []int32  // dependencies not yet satisfied
	ready     []uint64 // bitset of pending tools whose dependencies are satisfied
	finished  int
	running   int
}

// NewTracker starts an execution: the tools without dependencies are ready.
func (g *Graph) NewTracker() *Tracker {
	t := &Tracker{g: g, state: make([]NodeState, len(g.ids)), remaining: make([]int32, len(g.ids)),
		ready: make([]uint64, (len(g.ids)+63)/64)}
	for v := range g.deps {
		t.remaining[v] = int32(len(g.deps[v]))
		if t.remaining[v] == 0 {
			t.setReady(int32(v))
		}
	}
	return t
}

func (t *Tracker) setReady(v int32)   { t.ready[v>>6] |= 1 << (uint(v) & 63) }
func (t *Tracker) clearReady(v int32) { t.ready[v>>6] &^= 1 << (uint(v) & 63) }
func (t *Tracker) isReady(v int32) bool {
	return t.ready[v>>6]&(1<<(uint(v)&63)) != 0
}

// EachReady calls fn for each ready tool in plan order until fn returns false.
func (t *Tracker) EachReady(fn func(id string) bool) {
	for w, word := range t.ready {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			word &^= 1 << uint(b)
			if !fn(t.g.ids[w*64+b]) {
				return
			}
		}
	}
}

// Ready returns the tools that may start now, in plan order.
func (t *Tracker) Ready() []string {
	var out []string
	t.EachReady(func(id string) bool { out = append(out, id); return true })
	return out
}

// Start marks a ready tool running.
func (t *Tracker) Start(id string) error {
	v, ok := t.g.index[id]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownTool, id)
	}
	if !t.isReady(int32(v)) {
		return fmt.Errorf("%w: %q is %s", ErrNotReady, id, t.state[v])
	}
	t.clearReady(int32(v))
	t.state[v] = Running
	t.running++
	return nil
}

// Finish records how a tool ended. It returns the tools that became ready
// and those skipped because of it (both in plan order of discovery). A
// pending tool may be finished as Skipped, Failed or FailedOptional (e.g.
// approval denied, plan timeout), not as Succeeded. Finishing a finished tool returns ErrAlreadyFinished.
func (t *Tracker) Finish(id string, o Outcome) (ready, skipped []string, err error) {
	v, ok := t.g.index[id]
	if !ok {
		return nil, nil, fmt.Errorf("%w: %q", ErrUnknownTool, id)
	}
	switch st := t.state[v]; {
	case st.finished():
		return nil, nil, fmt.Errorf("%w: %q is %s", ErrAlreadyFinished, id, st)
	case st == Running:
		t.running--
	case o == Succeeded:
		return nil, nil, fmt.Errorf("%w: %q never started", ErrNotReady, id)
	}
	t.clearReady(int32(v))
	t.state[v] = stateOf(o)
	t.finished++
	if o == Succeeded || o == FailedOptional {
		for _, c := range t.g.children[v] {
			t.remaining[c]--
			if t.remaining[c] == 0 && t.state[c] == Pending {
				t.setReady(c)
				ready = append(ready, t.g.ids[c])
			}
		}
		return ready, nil, nil
	}
	// Failed or Skipped: every transitive dependent is skipped. Each tool is
	// skipped once, so the whole run stays O(V+E).
	stack := append([]int32(nil), t.g.children[v]...)
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if t.state[c] != Pending {
			continue
		}
		t.state[c] = StateSkipped
		t.clearReady(c)
		t.finished++
		skipped = append(skipped, t.g.ids[c])
		stack = append(stack, t.g.children[c]...)
	}
	return nil, skipped, nil
}

// State returns a tool's state.
func (t *Tracker) State(id string) (NodeState, bool) {
	v, ok := t.g.index[id]
	if !ok {
		return 0, false
	}
	return t.state[v], true
}

// Done reports whether every tool finished or was skipped.
func (t *Tracker) Done() bool { return t.finished == len(t.state) }

// Counts returns how many tools are running and finished.
func (t *Tracker) Counts() (running, finished int) { return t.running, t.finished }

// States returns every tool's state by ID (for persistence).
func (t *Tracker) States() map[string]NodeState {
	out := make(map[string]NodeState, len(t.state))
	for v, s := range t.state {
		out[t.g.ids[v]] = s
	}
	return out
}

// RestoreTracker rebuilds a tracker from persisted states (tools absent
// from states are pending). Pending tools behind a failed or skipped
// dependency are skipped and returned, so the caller can persist them.
func (g *Graph) RestoreTracker(states map[string]NodeState) (*Tracker, []string, error) {
	t := &Tracker{g: g, state: make([]NodeState, len(g.ids)), remaining: make([]int32, len(g.ids)),
		ready: make([]uint64, (len(g.ids)+63)/64)}
	for id, s := range states {
		v, ok := g.index[id]
		if !ok {
			return nil, nil, fmt.Errorf("%w: %q", ErrUnknownTool, id)
		}
		if s < Pending || s > StateSkipped {
			return nil, nil, fmt.Errorf("dag: tool %q has invalid state %d", id, s)
		}
		t.state[v] = s
		switch {
		case s == Running:
			t.running++
		case s.finished():
			t.finished++
		}
	}
	var skipped []string
	for _, v := range g.order {
		if t.state[v] != Pending {
			continue
		}
		blocked := false
		for _, u := range g.deps[v] {
			switch t.state[u] {
			case StateSucceeded, StateFailedOptional:
			case StateFailed, StateSkipped:
				blocked = true
				t.remaining[v]++
			default:
				t.remaining[v]++
			}
		}
		if blocked {
			t.state[v] = StateSkipped
			t.finished++
			skipped = append(skipped, g.ids[v])
			continue
		}
		if t.remaining[v] == 0 {
			t.setReady(v)
		}
	}
	return t, skipped, nil
}
