package dag

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func n(id string, deps ...string) Node { return Node{ID: id, Deps: deps} }

func TestBuildErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		nodes   []Node
		wantErr []string
		is      []error
	}{
		{"duplicate", []Node{n("a"), n("b"), n("a")}, []string{`tool "a" is defined more than once (again at index 2)`}, []error{ErrDuplicateID}},
		{"unknown dep", []Node{n("a", "zz")}, []string{`tool "a" depends on "zz", which is not a tool of the plan`}, []error{ErrUnknownDependency}},
		{"self", []Node{n("a", "a")}, []string{`tool "a" depends on itself`}, []error{ErrSelfDependency}},
		{"2-cycle", []Node{n("a", "b"), n("b", "a")}, []string{"cycle: a -> b -> a"}, []error{ErrCycle}},
		{"3-cycle", []Node{n("a", "b"), n("b", "c"), n("c", "a")}, []string{"cycle: a -> b -> c -> a"}, []error{ErrCycle}},
		{"cycle away from first", []Node{n("root"), n("x", "root", "z"), n("y", "x"), n("z", "y")}, []string{"cycle: x -> z -> y -> x"}, []error{ErrCycle}},
		{"two cycles", []Node{n("a", "b"), n("b", "a"), n("c", "d"), n("d", "c")}, []string{"cycle: a -> b -> a", "cycle: c -> d -> c"}, []error{ErrCycle}},
		{"several problems", []Node{n("a", "a"), n("b", "nope"), n("b")}, []string{`tool "b" is defined more than once`, `tool "a" depends on itself`, `tool "b" depends on "nope"`},
			[]error{ErrDuplicateID, ErrSelfDependency, ErrUnknownDependency}},
		{"ref to non-ancestor", []Node{n("a"), {ID: "b", Refs: []string{"a"}}}, []string{`tool "b": input references "$a", which is not an ancestor of "b"`}, []error{ErrRefNotAncestor}},
		{"ref to sibling", []Node{n("r"), n("a", "r"), {ID: "b", Deps: []string{"r"}, Refs: []string{"a"}}}, []string{`references "$a"`}, []error{ErrRefNotAncestor}},
		{"ref to unknown", []Node{{ID: "b", Refs: []string{"ghost"}}}, []string{`references "$ghost"`}, []error{ErrRefNotAncestor}},
		{"ref to ancestor ok", []Node{n("a"), n("b", "a"), {ID: "c", Deps: []string{"b"}, Refs: []string{"a", "b"}}}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := Build(tt.nodes)
			if tt.wantErr == nil {
				require.NoError(t, err)
				require.NotNil(t, g)
				return
			}
			require.Error(t, err)
			require.Nil(t, g)
			for _, w := range tt.wantErr {
				require.Contains(t, err.Error(), w)
			}
			for _, target := range tt.is {
				require.True(t, errors.Is(err, target), "errors.Is %v", target)
			}
			if errors.Is(err, ErrCycle) {
				var ce *CycleError
				require.True(t, errors.As(err, &ce))
				require.Equal(t, ce.Path[0], ce.Path[len(ce.Path)-1])
			}
		})
	}
}

func TestOrder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		nodes []Node
		want  []string
	}{
		{"diamond", []Node{n("a"), n("b", "a"), n("c", "a"), n("d", "b", "c")}, []string{"a", "b", "c", "d"}},
		{"chain reversed", []Node{n("c", "b"), n("b", "a"), n("a")}, []string{"a", "b", "c"}},
		{"tie: lowest plan index among ready goes first", []Node{n("c", "a"), n("a"), n("b")}, []string{"a", "c", "b"}},
		{"wide", []Node{n("x"), n("y"), n("z")}, []string{"x", "y", "z"}},
	}
	for _, c := range cases {
		g, err := Build(c.nodes)
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, g.Order(), c.name)
	}
}

func randomDAG(r *rand.Rand, size, maxDeps int) []Node {
	nodes := make([]Node, size)
	for i := range nodes {
		nodes[i].ID = fmt.Sprintf("t%d", i)
		if i > 0 {
			for range r.IntN(maxDeps + 1) {
				nodes[i].Deps = append(nodes[i].Deps, fmt.Sprintf("t%d", r.IntN(i)))
			}
		}
	}
	// shuffle so plan order is not topological
	r.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	return dedupeDeps(nodes)
}

func dedupeDeps(nodes []Node) []Node {
	for i := range nodes {
		seen := map[string]bool{}
		var d []string
		for _, x := range nodes[i].Deps {
			if !seen[x] {
				seen[x] = true
				d = append(d, x)
			}
		}
		nodes[i].Deps = d
	}
	return nodes
}

func TestOrderProperty(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		nodes := randomDAG(r, 1+r.IntN(60), 3)
		g, err := Build(nodes)
		require.NoError(t, err)
		pos := map[string]int{}
		for i, id := range g.Order() {
			pos[id] = i
		}
		require.Len(t, pos, len(nodes))
		for _, nd := range nodes {
			for _, d := range nd.Deps {
				require.Less(t, pos[d], pos[nd.ID])
			}
		}
		// tie rule: simulate Kahn picking the lowest plan index
		idx := map[string]int{}
		for i, nd := range nodes {
			idx[nd.ID] = i
		}
		done := map[string]bool{}
		for _, id := range g.Order() {
			for _, nd := range nodes {
				if done[nd.ID] || nd.ID == id {
					continue
				}
				ready := true
				for _, d := range nd.Deps {
					ready = ready && done[d]
				}
				if ready {
					require.Greater(t, idx[nd.ID], idx[id], "a ready tool with a lower index was passed over")
				}
			}
			done[id] = true
		}
	}
}

func TestLevelsAndReach(t *testing.T) {
	t.Parallel()
	g, err := Build([]Node{n("a"), n("b", "a"), n("c", "a"), n("d", "b", "c"), n("e")})
	require.NoError(t, err)
	require.Equal(t, [][]string{{"a", "e"}, {"b", "c"}, {"d"}}, g.Levels())
	require.Equal(t, 3, g.CriticalPathLen())
	require.Equal(t, []string{"a", "b", "c"}, g.Ancestors("d"))
	require.Equal(t, []string{"b", "c", "d"}, g.Dependents("a"))
	require.True(t, g.IsAncestor("a", "d"))
	require.False(t, g.IsAncestor("e", "d"))
	require.Equal(t, []string{"b", "c"}, g.Dependencies("d"))
	require.Equal(t, []string{"b", "c"}, g.Children("a"))
}

func TestTrackerDiamond(t *testing.T) {
	t.Parallel()
	g, err := Build([]Node{n("a"), n("b", "a"), n("c", "a"), n("d", "b", "c")})
	require.NoError(t, err)
	tr := g.NewTracker()
	require.Equal(t, []string{"a"}, tr.Ready())
	require.ErrorIs(t, tr.Start("b"), ErrNotReady)
	require.NoError(t, tr.Start("a"))
	ready, skipped, err := tr.Finish("a", Succeeded)
	require.NoError(t, err)
	require.Equal(t, []string{"b", "c"}, ready)
	require.Empty(t, skipped)
	_, _, err = tr.Finish("a", Succeeded)
	require.ErrorIs(t, err, ErrAlreadyFinished, "a duplicate outcome is refused")
	require.NoError(t, tr.Start("b"))
	require.NoError(t, tr.Start("c"))
	ready, _, _ = tr.Finish("b", Succeeded)
	require.Empty(t, ready)
	ready, _, _ = tr.Finish("c", FailedOptional)
	require.Equal(t, []string{"d"}, ready, "a failed non-required tool lets dependents run")
	require.NoError(t, tr.Start("d"))
	_, _, _ = tr.Finish("d", Succeeded)
	require.True(t, tr.Done())
}

func TestTrackerRequiredFailureSkipsExactlyDependents(t *testing.T) {
	t.Parallel()
	// a -> b -> c, a -> d; x independent; y depends on x and b
	g, err := Build([]Node{n("a"), n("b", "a"), n("c", "b"), n("d", "a"), n("x"), n("y", "x", "b")})
	require.NoError(t, err)
	tr := g.NewTracker()
	require.NoError(t, tr.Start("a"))
	require.NoError(t, tr.Start("x"))
	_, _, _ = tr.Finish("a", Succeeded)
	require.NoError(t, tr.Start("b"))
	_, skipped, err := tr.Finish("b", Failed)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"c", "y"}, skipped)
	require.Equal(t, []string{"d"}, tr.Ready(), "the independent branch stays runnable")
	ready, _, _ := tr.Finish("x", Succeeded)
	require.Empty(t, ready, "y stays skipped")
	st, _ := tr.State("y")
	require.Equal(t, StateSkipped, st)
	require.NoError(t, tr.Start("d"))
	_, _, _ = tr.Finish("d", Succeeded)
	require.True(t, tr.Done())
}

func TestTrackerPendingSkip(t *testing.T) {
	t.Parallel()
	g, err := Build([]Node{n("a"), n("b", "a")})
	require.NoError(t, err)
	tr := g.NewTracker()
	_, skipped, err := tr.Finish("a", Skipped)
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, skipped)
	require.True(t, tr.Done())
	_, _, err = g.NewTracker().Finish("a", Succeeded)
	require.ErrorIs(t, err, ErrNotReady)
}

func TestRestoreTracker(t *testing.T) {
	t.Parallel()
	g, err := Build([]Node{n("a"), n("b", "a"), n("c", "a"), n("d", "b", "c"), n("e", "c")})
	require.NoError(t, err)
	tr := g.NewTracker()
	require.NoError(t, tr.Start("a"))
	_, _, _ = tr.Finish("a", Succeeded)
	require.NoError(t, tr.Start("b"))
	states := tr.States()
	re, skipped, err := g.RestoreTracker(states)
	require.NoError(t, err)
	require.Empty(t, skipped)
	require.Equal(t, []string{"c"}, re.Ready())
	st, _ := re.State("b")
	require.Equal(t, Running, st)
	// a failure persisted before its dependents were: restore skips them
	states["c"] = StateFailed
	re, skipped, err = g.RestoreTracker(states)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"d", "e"}, skipped)
	_, _, _ = re.Finish("b", Succeeded)
	require.True(t, re.Done())
	_, _, err = g.RestoreTracker(map[string]NodeState{"zz": Running})
	require.ErrorIs(t, err, ErrUnknownTool)
}

func TestLargePlans(t *testing.T) {
	t.Parallel()
	for _, shape := range []string{"chain", "wide"} {
		nodes := make([]Node, 20_000)
		for i := range nodes {
			nodes[i].ID = fmt.Sprintf("t%d", i)
			if shape == "chain" && i > 0 {
				nodes[i].Deps = []string{nodes[i-1].ID}
			}
		}
		g, err := Build(nodes)
		require.NoError(t, err)
		tr := g.NewTracker()
		count := 0
		for !tr.Done() {
			id := tr.Ready()[0]
			require.NoError(t, tr.Start(id))
			_, _, err := tr.Finish(id, Succeeded)
			require.NoError(t, err)
			count++
			if shape == "wide" && count > 200 {
				break // Ready() is O(V/64) per call; the full wide run is covered by the benchmark
			}
		}
	}
}

func FuzzBuild(f *testing.F) {
	f.Add([]byte{0, 1, 1, 2, 2, 0})
	f.Add([]byte{0, 1, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 400 {
			return
		}
		size := 1 + len(data)/2
		nodes := make([]Node, size)
		for i := range nodes {
			nodes[i].ID = fmt.Sprintf("n%d", i%(size-size/8))
		}
		for i := 0; i+1 < len(data); i += 2 {
			a, b := int(data[i])%size, int(data[i+1])%(size+1)
			dep := fmt.Sprintf("n%d", b)
			nodes[a].Deps = append(nodes[a].Deps, dep)
			if data[i]%7 == 0 {
				nodes[a].Refs = append(nodes[a].Refs, dep)
			}
		}
		g, err := Build(nodes)
		if err != nil {
			if !strings.Contains(err.Error(), "tool") && !strings.Contains(err.Error(), "cycle") {
				t.Fatalf("unhelpful error: %v", err)
			}
			return
		}
		pos := map[string]int{}
		for i, id := range g.Order() {
			pos[id] = i
		}
		for _, nd := range nodes {
			for _, d := range nd.Deps {
				if pos[d] >= pos[nd.ID] {
					t.Fatalf("%s before its dependency %s", nd.ID, d)
				}
			}
		}
		tr := g.NewTracker()
		for steps := 0; !tr.Done(); steps++ {
			r := tr.Ready()
			if len(r) == 0 || steps > 2*size {
				t.Fatalf("tracker stuck")
			}
			_ = tr.Start(r[0])
			o := Succeeded
			if steps%5 == 4 {
				o = Failed
			}
			if _, _, err := tr.Finish(r[0], o); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func ExampleBuild() {
	g, err := Build([]Node{
		{ID: "roll"},
		{ID: "memory"},
		{ID: "tell", Deps: []string{"roll", "memory"}, Refs: []string{"roll"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(g.Order())
	_, err = Build([]Node{{ID: "a", Deps: []string{"c"}}, {ID: "b", Deps: []string{"a"}}, {ID: "c", Deps: []string{"b"}}})
	fmt.Println(err)
	// Output:
	// [roll memory tell]
	// cycle: a -> c -> b -> a
}
