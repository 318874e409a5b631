package dag

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func mustBuild(t testing.TB, nodes []Node) *Graph {
	t.Helper()
	g, err := Build(nodes)
	require.NoError(t, err)
	return g
}

// run starts and finishes a tool, failing the test on any error.
func run(t testing.TB, tr *Tracker, id string, o Outcome) (ready, skipped []string) {
	t.Helper()
	require.NoError(t, tr.Start(id))
	ready, skipped, err := tr.Finish(id, o)
	require.NoError(t, err)
	return ready, skipped
}

func TestTrackerDiamond(t *testing.T) {
	t.Parallel()
	g := mustBuild(t, []Node{node("a"), node("b", "a"), node("c", "a"), node("d", "b", "c")})
	tr := g.NewTracker()
	require.Same(t, g, tr.Graph())
	require.Equal(t, []string{"a"}, tr.Ready())
	require.False(t, tr.Done())

	ready, skipped := run(t, tr, "a", Succeeded)
	require.Equal(t, []string{"b", "c"}, ready)
	require.Empty(t, skipped)
	require.Equal(t, []string{"b", "c"}, tr.Ready())

	require.NoError(t, tr.Start("c"))
	require.NoError(t, tr.Start("b"))
	require.Empty(t, tr.Ready())
	require.Equal(t, StateCounts{Running: 2, Succeeded: 1, Pending: 1}, tr.Counts())
	ready, _, err := tr.Finish("c", Succeeded)
	require.NoError(t, err)
	require.Empty(t, ready, "d still waits for b")
	ready, _, err = tr.Finish("b", Succeeded)
	require.NoError(t, err)
	require.Equal(t, []string{"d"}, ready)

	run(t, tr, "d", Succeeded)
	require.True(t, tr.Done())
	require.Equal(t, StateCounts{Succeeded: 4}, tr.Counts())
	require.Equal(t, []NodeState{StateSucceeded, StateSucceeded, StateSucceeded, StateSucceeded}, tr.States())
}

func TestTrackerRequiredFailureSkipsExactlyTheDependents(t *testing.T) {
	t.Parallel()
	// a -> b -> c -> z, a -> d; x alone; y needs x and b.
	g := mustBuild(t, []Node{node("z", "c"), node("a"), node("b", "a"), node("c", "b"), node("d", "a"), node("x"), node("y", "x", "b")})
	tr := g.NewTracker()
	require.Equal(t, []string{"a", "x"}, tr.Ready())
	run(t, tr, "a", Succeeded)
	require.NoError(t, tr.Start("b"))

	_, skipped, err := tr.Finish("b", Failed)
	require.NoError(t, err)
	require.Equal(t, []string{"z", "c", "y"}, skipped, "every transitive dependent, in plan order")
	require.Equal(t, []string{"d", "x"}, tr.Ready(), "the independent branches stay runnable")
	for _, id := range skipped {
		st, ok := tr.State(id)
		require.True(t, ok)
		require.Equal(t, StateSkipped, st, id)
	}

	ready, _ := run(t, tr, "x", Succeeded)
	require.Empty(t, ready, "y stays skipped although x succeeded")
	require.ErrorIs(t, tr.Start("y"), ErrAlreadyFinished)
	run(t, tr, "d", Succeeded)
	require.True(t, tr.Done())
	require.Equal(t, StateCounts{Succeeded: 3, Failed: 1, Skipped: 3}, tr.Counts())
}

func TestTrackerFailedOptionalLetsDependentsRun(t *testing.T) {
	t.Parallel()
	g := mustBuild(t, []Node{node("a"), node("b", "a"), node("c", "b")})
	tr := g.NewTracker()
	ready, skipped := run(t, tr, "a", FailedOptional)
	require.Equal(t, []string{"b"}, ready)
	require.Empty(t, skipped)
	ready, _ = run(t, tr, "b", Succeeded)
	require.Equal(t, []string{"c"}, ready)
	run(t, tr, "c", Succeeded)
	require.True(t, tr.Done())
}

func TestTrackerFinishPending(t *testing.T) {
	t.Parallel()
	nodes := []Node{node("a"), node("b", "a"), node("c", "b"), node("o")}
	t.Run("plan timeout skips an unstarted tool and what follows", func(t *testing.T) {
		t.Parallel()
		tr := mustBuild(t, nodes).NewTracker()
		require.NoError(t, tr.Start("a"))
		_, skipped, err := tr.Finish("b", Skipped)
		require.NoError(t, err)
		require.Equal(t, []string{"c"}, skipped)
		_, skipped, err = tr.Finish("o", Skipped)
		require.NoError(t, err)
		require.Empty(t, skipped)
		listed := []string{}
		for id := range tr.ReadyTools() {
			listed = append(listed, id)
		}
		require.Empty(t, listed)
		_, _, err = tr.Finish("a", Succeeded)
		require.NoError(t, err)
		require.True(t, tr.Done())
	})
	t.Run("approval denied: a ready required tool fails without running", func(t *testing.T) {
		t.Parallel()
		tr := mustBuild(t, nodes).NewTracker()
		_, skipped, err := tr.Finish("a", Failed)
		require.NoError(t, err)
		require.Equal(t, []string{"b", "c"}, skipped)
		require.Equal(t, []string{"o"}, tr.Ready())
	})
	t.Run("approval denied: a ready optional tool fails, dependents run", func(t *testing.T) {
		t.Parallel()
		tr := mustBuild(t, nodes).NewTracker()
		ready, _, err := tr.Finish("a", FailedOptional)
		require.NoError(t, err)
		require.Equal(t, []string{"b"}, ready)
	})
}

func TestTrackerErrors(t *testing.T) {
	t.Parallel()
	nodes := []Node{node("a"), node("b", "a"), node("c")}
	tests := []struct {
		name    string
		setup   func(*Tracker) // runs before the call under test, must not fail
		call    func(*Tracker) error
		wantErr error
		want    string
	}{
		{"start unknown", nil, func(tr *Tracker) error { return tr.Start("zz") }, ErrUnknownTool, `start tool "zz": unknown tool`},
		{"start not ready", nil, func(tr *Tracker) error { return tr.Start("b") }, ErrNotReady, `start tool "b": tool is not ready (state pending)`},
		{"start twice", func(tr *Tracker) { _ = tr.Start("a") }, func(tr *Tracker) error { return tr.Start("a") }, ErrAlreadyStarted, `start tool "a": tool already started (state running)`},
		{"start finished", func(tr *Tracker) { _ = tr.Start("a"); _, _, _ = tr.Finish("a", Succeeded) },
			func(tr *Tracker) error { return tr.Start("a") }, ErrAlreadyFinished, `start tool "a": tool already finished (state succeeded)`},
		{"start skipped", func(tr *Tracker) { _, _, _ = tr.Finish("a", Skipped) }, func(tr *Tracker) error { return tr.Start("b") }, ErrAlreadyFinished, `start tool "b": tool already finished (state skipped)`},
		{"finish unknown", nil, finish("zz", Succeeded), ErrUnknownTool, `finish tool "zz": unknown tool`},
		{"finish zero outcome", func(tr *Tracker) { _ = tr.Start("a") }, finish("a", 0), ErrInvalidOutcome, `finish tool "a": invalid outcome (state running)`},
		{"finish bad outcome", func(tr *Tracker) { _ = tr.Start("a") }, finish("a", Skipped+1), ErrInvalidOutcome, `finish tool "a": invalid outcome (state running)`},
		{"succeed without starting", nil, finish("a", Succeeded), ErrNotRunning, `finish tool "a": tool is not running (state pending)`},
		{"optional failure before ready", nil, finish("b", FailedOptional), ErrNotReady, `finish tool "b": tool is not ready (state pending)`},
		{"duplicate outcome", func(tr *Tracker) { _ = tr.Start("a"); _, _, _ = tr.Finish("a", Failed) },
			finish("a", Succeeded), ErrAlreadyFinished, `finish tool "a": tool already finished (state failed)`},
		{"outcome of a skipped tool", func(tr *Tracker) { _ = tr.Start("a"); _, _, _ = tr.Finish("a", Failed) },
			finish("b", Failed), ErrAlreadyFinished, `finish tool "b": tool already finished (state skipped)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := mustBuild(t, nodes).NewTracker()
			if tt.setup != nil {
				tt.setup(tr)
			}
			before, counts := tr.States(), tr.Counts()
			err := tt.call(tr)
			require.ErrorIs(t, err, tt.wantErr)
			require.EqualError(t, err, tt.want)
			var se *StateError
			require.ErrorAs(t, err, &se)
			require.Equal(t, before, tr.States(), "a refused call changes nothing")
			require.Equal(t, counts, tr.Counts())
		})
	}
}

func finish(id string, o Outcome) func(*Tracker) error {
	return func(tr *Tracker) error { _, _, err := tr.Finish(id, o); return err }
}

func TestTrackerReadyToolsStartWhileIterating(t *testing.T) {
	t.Parallel()
	tr := mustBuild(t, []Node{node("a"), node("b"), node("c", "a"), node("d"), node("e")}).NewTracker()
	var started []string
	for id := range tr.ReadyTools() {
		require.NoError(t, tr.Start(id))
		started = append(started, id)
		if id == "d" {
			break // e.g. the concurrency limit is reached
		}
	}
	require.Equal(t, []string{"a", "b", "d"}, started)
	require.Equal(t, []string{"e"}, tr.Ready())
	require.Equal(t, StateCounts{Pending: 2, Ready: 1, Running: 3}, tr.Counts())
}

func TestTrackerEmptyGraph(t *testing.T) {
	t.Parallel()
	tr := mustBuild(t, nil).NewTracker()
	require.True(t, tr.Done())
	require.Empty(t, tr.Ready())
	require.Empty(t, tr.States())
}

func TestStrings(t *testing.T) {
	t.Parallel()
	require.Equal(t, "failed-optional", FailedOptional.String())
	require.Equal(t, "Outcome(9)", Outcome(9).String())
	require.Equal(t, "running", Running.String())
	require.Equal(t, "NodeState(9)", NodeState(9).String())
	require.False(t, Running.Finished())
	require.True(t, StateSkipped.Finished())
	require.False(t, NodeState(9).Finished())
}

// step does one random legal thing to the tracker: start a ready tool,
// finish a running one with any outcome, or finish a pending one without
// running it. It returns false when nothing is left to do.
func step(t testing.TB, r *rand.Rand, tr *Tracker) bool {
	t.Helper()
	ids := tr.Graph().IDs()
	var running, pending, ready []string
	for i, s := range tr.States() {
		switch s {
		case Running:
			running = append(running, ids[i])
		case Pending:
			pending = append(pending, ids[i])
		case StateSucceeded, StateFailed, StateFailedOptional, StateSkipped:
		}
	}
	ready = tr.Ready()
	if len(running)+len(pending) == 0 {
		return false
	}
	// Weights: starting and finishing running tools is the common case,
	// finishing a pending tool without running it the rare one.
	var kinds []int
	for kind, w := range [3]int{len(ready) * 5, len(running) * 5, len(pending)} {
		for range min(w, 5) {
			kinds = append(kinds, kind)
		}
	}
	o := Outcome(1 + r.IntN(4))
	switch kinds[r.IntN(len(kinds))] {
	case 0:
		require.NoError(t, tr.Start(ready[r.IntN(len(ready))]))
	case 1:
		_, _, err := tr.Finish(running[r.IntN(len(running))], o)
		require.NoError(t, err)
	default:
		if o == Succeeded || o == FailedOptional {
			o = Failed
		}
		_, _, err := tr.Finish(pending[r.IntN(len(pending))], o)
		require.NoError(t, err)
	}
	return true
}

// checkInvariants compares the tracker with what its states imply.
func checkInvariants(t testing.TB, nodes []Node, tr *Tracker) {
	t.Helper()
	state := map[string]NodeState{}
	for i, id := range tr.Graph().IDs() {
		state[id] = tr.States()[i]
	}
	wantReady := []string{}
	var counts StateCounts
	for _, nd := range nodes {
		s := state[nd.ID]
		ready := true
		for _, d := range nd.Deps {
			ds := state[d]
			switch s {
			case Pending:
				require.NotContains(t, []NodeState{StateFailed, StateSkipped}, ds, "%s pending behind %s %s", nd.ID, d, ds)
			case Running, StateSucceeded, StateFailedOptional:
				require.True(t, ds.satisfies(), "%s %s behind %s %s", nd.ID, s, d, ds)
			case StateFailed, StateSkipped:
				// any dependency state fits an unsuccessful end
			}
			ready = ready && ds.satisfies()
		}
		if s == Pending && ready {
			wantReady = append(wantReady, nd.ID)
		}
		counts.Pending += b2i(s == Pending)
		counts.Running += b2i(s == Running)
		counts.Succeeded += b2i(s == StateSucceeded)
		counts.Failed += b2i(s == StateFailed)
		counts.FailedOptional += b2i(s == StateFailedOptional)
		counts.Skipped += b2i(s == StateSkipped)
	}
	counts.Ready = len(wantReady)
	require.Equal(t, wantReady, tr.Ready())
	require.Equal(t, counts, tr.Counts())
	require.Equal(t, counts.Pending+counts.Running == 0, tr.Done())
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestTrackerRandomRuns(t *testing.T) {
	t.Parallel()
	r := newRand(t)
	for range 100 {
		nodes := randomDAG(r, 1+r.IntN(40), 3, 0)
		g := mustBuild(t, nodes)
		// Plan order of the graph is the nodes' order.
		tr := g.NewTracker()
		checkInvariants(t, nodes, tr)
		for steps := 0; step(t, r, tr); steps++ {
			require.Less(t, steps, 3*len(nodes), "a run takes at most two steps per tool")
			checkInvariants(t, nodes, tr)
		}
		require.True(t, tr.Done())
	}
}

func TestRestoreTracker(t *testing.T) {
	t.Parallel()
	g := mustBuild(t, []Node{node("a"), node("b", "a"), node("c", "a"), node("d", "b", "c"), node("e", "c"), node("f")})
	tr := g.NewTracker()
	run(t, tr, "a", Succeeded)
	require.NoError(t, tr.Start("b"))

	states := map[string]NodeState{}
	for i, s := range tr.States() {
		states[g.IDs()[i]] = s
	}
	re, skipped, err := g.RestoreTracker(states)
	require.NoError(t, err)
	require.Empty(t, skipped)
	require.Equal(t, tr.States(), re.States())
	require.Equal(t, tr.Counts(), re.Counts())
	require.Equal(t, []string{"c", "f"}, re.Ready())
	st, _ := re.State("b")
	require.Equal(t, Running, st, "a tool persisted as running is restored as running")
	ready, _, err := re.Finish("b", Succeeded)
	require.NoError(t, err)
	require.Empty(t, ready)

	// The failure of c was persisted, the skips it causes were not.
	states["c"] = StateFailed
	re, skipped, err = g.RestoreTracker(states)
	require.NoError(t, err)
	require.Equal(t, []string{"d", "e"}, skipped)
	require.Equal(t, []string{"f"}, re.Ready())
	_, _, err = re.Finish("b", Succeeded)
	require.NoError(t, err)
	run(t, re, "f", Succeeded)
	require.True(t, re.Done())

	re, skipped, err = g.RestoreTracker(nil)
	require.NoError(t, err)
	require.Empty(t, skipped)
	require.Equal(t, g.NewTracker().States(), re.States())
	require.Equal(t, []string{"a", "f"}, re.Ready())
}

func TestRestoreTrackerErrors(t *testing.T) {
	t.Parallel()
	g := mustBuild(t, []Node{node("a"), node("b", "a"), node("c", "b")})
	tests := []struct {
		name    string
		states  map[string]NodeState
		wantErr error
		want    string
	}{
		{"unknown tools, smallest named", map[string]NodeState{"zz": Running, "yy": Pending, "a": 42}, ErrUnknownTool, `restore tool "yy": unknown tool`},
		{"invalid state, first in plan order", map[string]NodeState{"c": 7, "b": 42}, ErrInvalidState, `restore tool "b": invalid tool state (state NodeState(42))`},
		{"running behind a tool the restore skips", map[string]NodeState{"a": StateFailed, "c": Running}, ErrInconsistentState, `restore tool "c": it is running but its dependency "b" is skipped`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr, skipped, err := g.RestoreTracker(tt.states)
			require.ErrorIs(t, err, tt.wantErr)
			require.EqualError(t, err, tt.want)
			require.Nil(t, tr)
			require.Nil(t, skipped)
		})
	}
	_, _, err := g.RestoreTracker(map[string]NodeState{"a": StateFailed, "c": StateSucceeded})
	var re *RestoreError
	require.ErrorAs(t, err, &re)
	require.Equal(t, RestoreError{ID: "c", State: StateSucceeded, Dep: "b", DepState: StateSkipped}, *re)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// TestRestoreTrackerOwedOutcome: a tool running or finished behind a
// dependency still Running (its success was lost while later states were
// stored) is restored as it was; the dependency's outcome, applied later,
// starts nothing twice and readies what waited for both.
func TestRestoreTrackerOwedOutcome(t *testing.T) {
	t.Parallel()
	g := mustBuild(t, []Node{node("a"), node("b", "a"), node("c", "a"), node("d", "b", "c")})
	tr, skipped, err := g.RestoreTracker(map[string]NodeState{"a": Running, "b": StateSucceeded, "c": Running})
	require.NoError(t, err)
	require.Empty(t, skipped)
	require.Equal(t, []string{}, nonNil(tr.Ready()))
	tr, skipped, err = g.RestoreTracker(map[string]NodeState{"b": Running}) // a pending: its start was lost too
	require.NoError(t, err)
	require.Empty(t, skipped)
	require.Equal(t, []string{"a"}, tr.Ready())
	// The deadline timed the dependency out while its success was owed.
	tr, skipped, err = g.RestoreTracker(map[string]NodeState{"a": StateFailed, "b": StateFailedOptional, "c": StateSucceeded})
	require.NoError(t, err)
	require.Empty(t, skipped)
	require.Equal(t, []string{"d"}, tr.Ready(), "d's own dependencies ended well")
	tr, skipped, err = g.RestoreTracker(map[string]NodeState{"a": Running, "b": StateSucceeded, "c": Running})
	require.NoError(t, err)
	require.Empty(t, skipped)
	require.Empty(t, tr.Ready())
	ready, _, err := tr.Finish("a", Succeeded)
	require.NoError(t, err)
	require.Empty(t, ready, "b and c were started before the crash")
	ready, _, err = tr.Finish("c", Succeeded)
	require.NoError(t, err)
	require.Equal(t, []string{"d"}, ready)
	require.NoError(t, tr.Start("d"))
	_, _, err = tr.Finish("d", Succeeded)
	require.NoError(t, err)
	require.True(t, tr.Done())
}

// TestRestoreTrackerRandom snapshots random runs at random points; the
// restored tracker must match the original and behave the same from then on.
func TestRestoreTrackerRandom(t *testing.T) {
	t.Parallel()
	r := newRand(t)
	for range 100 {
		nodes := randomDAG(r, 1+r.IntN(40), 3, 0)
		g := mustBuild(t, nodes)
		tr := g.NewTracker()
		for range r.IntN(2 * len(nodes)) {
			step(t, r, tr)
		}
		states := map[string]NodeState{}
		for i, s := range tr.States() {
			if s != Pending || r.IntN(2) == 0 { // pending may be left out
				states[g.IDs()[i]] = s
			}
		}
		re, skipped, err := g.RestoreTracker(states)
		require.NoError(t, err)
		require.Empty(t, skipped)
		require.Equal(t, tr.States(), re.States())
		require.Equal(t, tr.Counts(), re.Counts())
		require.Equal(t, tr.Ready(), re.Ready())
		seed := r.Uint64()
		r1, r2 := rand.New(rand.NewPCG(seed, 1)), rand.New(rand.NewPCG(seed, 1))
		for step(t, r1, tr) {
			require.True(t, step(t, r2, re))
			require.Equal(t, tr.States(), re.States())
		}
		require.True(t, re.Done())
	}
}
