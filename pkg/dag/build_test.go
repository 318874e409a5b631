package dag

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBuild(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		nodes   []Node
		wantErr []error  // sentinels the error must match, nil for success
		want    []string // every problem's message, in order
	}{
		{name: "empty plan", nodes: nil},
		{name: "diamond", nodes: []Node{node("a"), node("b", "a"), node("c", "a"), node("d", "b", "c")}},
		{name: "repeated dependency counts once", nodes: []Node{node("a"), node("b", "a", "a")}},
		{
			name:    "duplicate ID",
			nodes:   []Node{node("a"), node("b"), node("a", "nope")},
			wantErr: []error{ErrDuplicateID},
			want:    []string{`tool "a" is defined more than once (first at index 0, again at index 2)`},
		},
		{
			name:    "unknown dependency",
			nodes:   []Node{node("a", "zz")},
			wantErr: []error{ErrUnknownDependency},
			want:    []string{`tool "a" depends on "zz", which is not a tool of the plan`},
		},
		{
			name:    "self-dependency",
			nodes:   []Node{node("a", "a", "a")},
			wantErr: []error{ErrSelfDependency},
			want:    []string{`tool "a" depends on itself`},
		},
		{
			name:    "2-cycle",
			nodes:   []Node{node("a", "b"), node("b", "a")},
			wantErr: []error{ErrCycle},
			want:    []string{"cycle: a -> b -> a"},
		},
		{
			// a -> b reads "a is needed before b": b depends on a.
			name:    "3-cycle",
			nodes:   []Node{node("a", "c"), node("b", "a"), node("c", "b")},
			wantErr: []error{ErrCycle},
			want:    []string{"cycle: a -> b -> c -> a"},
		},
		{
			name:    "3-cycle declared the other way round",
			nodes:   []Node{node("a", "b"), node("b", "c"), node("c", "a")},
			wantErr: []error{ErrCycle},
			want:    []string{"cycle: a -> c -> b -> a"},
		},
		{
			name:    "cycle not involving the first tool; its dependents are not reported",
			nodes:   []Node{node("root"), node("x", "root", "z"), node("y", "x"), node("z", "y"), node("after", "z")},
			wantErr: []error{ErrCycle},
			want:    []string{"cycle: x -> y -> z -> x"},
		},
		{
			name:    "one cycle per strongly connected component",
			nodes:   []Node{node("p"), node("c", "d"), node("a", "b"), node("b", "a"), node("d", "c", "a")},
			wantErr: []error{ErrCycle},
			want:    []string{"cycle: c -> d -> c", "cycle: a -> b -> a"},
		},
		{
			name:    "two cycles through one tool are one component: the shortest is reported",
			nodes:   []Node{node("a", "c", "b"), node("b", "x"), node("c", "a"), node("x", "a")},
			wantErr: []error{ErrCycle},
			want:    []string{"cycle: a -> c -> a"},
		},
		{
			name:    "several problems at once, all reported",
			nodes:   []Node{node("a", "a"), node("b", "nope"), node("b"), node("c", "d"), node("d", "c")},
			wantErr: []error{ErrDuplicateID, ErrSelfDependency, ErrUnknownDependency, ErrCycle},
			want: []string{
				`tool "b" is defined more than once (first at index 1, again at index 2)`,
				`tool "a" depends on itself`,
				`tool "b" depends on "nope", which is not a tool of the plan`,
				"cycle: c -> d -> c",
			},
		},
		{
			name:    "ref to a tool that is not an ancestor",
			nodes:   []Node{node("a"), {ID: "b", Refs: []string{"a"}}},
			wantErr: []error{ErrRefNotAncestor},
			want:    []string{`tool "b": input references "$a", which is not an ancestor of "b"`},
		},
		{
			name:    "ref to a sibling",
			nodes:   []Node{node("r"), node("a", "r"), {ID: "b", Deps: []string{"r"}, Refs: []string{"r", "a"}}},
			wantErr: []error{ErrRefNotAncestor},
			want:    []string{`tool "b": input references "$a", which is not an ancestor of "b"`},
		},
		{
			name:    "ref to a dependent and to itself",
			nodes:   []Node{{ID: "a", Refs: []string{"b", "a"}}, node("b", "a")},
			wantErr: []error{ErrRefNotAncestor},
			want: []string{
				`tool "a": input references "$b", which is not an ancestor of "a"`,
				`tool "a": input references "$a", which is not an ancestor of "a"`,
			},
		},
		{
			name:  "ref to ancestors, direct and transitive",
			nodes: []Node{{ID: "c", Deps: []string{"b"}, Refs: []string{"a", "b", "a"}}, node("b", "a"), node("a")},
		},
		{
			name:    "ref to an unknown ID, once however often",
			nodes:   []Node{node("a"), {ID: "b", Deps: []string{"a"}, Refs: []string{"ghost", "a", "ghost"}}},
			wantErr: []error{ErrRefNotAncestor},
			want:    []string{`tool "b": input references "$ghost", which is not a tool of the plan`},
		},
		{
			name:    "refs are not checked when there is a cycle",
			nodes:   []Node{{ID: "a", Deps: []string{"b"}, Refs: []string{"zz"}}, node("b", "a")},
			wantErr: []error{ErrCycle},
			want:    []string{"cycle: a -> b -> a"},
		},
		{
			name:    "refs are checked next to other acyclic problems",
			nodes:   []Node{{ID: "a", Deps: []string{"zz"}, Refs: []string{"zz"}}},
			wantErr: []error{ErrUnknownDependency, ErrRefNotAncestor},
			want: []string{
				`tool "a" depends on "zz", which is not a tool of the plan`,
				`tool "a": input references "$zz", which is not a tool of the plan`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, err := Build(tt.nodes)
			if tt.wantErr == nil {
				require.NoError(t, err)
				require.NotNil(t, g)
				return
			}
			require.Error(t, err)
			require.Nil(t, g)
			for _, target := range tt.wantErr {
				require.ErrorIs(t, err, target)
			}
			require.Equal(t, tt.want, messages(err))
			for _, p := range problems(err) {
				require.True(t, isTyped(p), "untyped problem %v", p)
			}
		})
	}
}

func TestBuildTypedErrors(t *testing.T) {
	t.Parallel()
	_, err := Build([]Node{
		node("a"), node("a"), node("b", "b"), node("c", "ghost"),
		node("x", "z"), node("y", "x"), node("z", "y"),
	})
	var dup *DuplicateIDError
	require.ErrorAs(t, err, &dup)
	require.Equal(t, DuplicateIDError{ID: "a", Index: 1, First: 0}, *dup)
	var self *SelfDependencyError
	require.ErrorAs(t, err, &self)
	require.Equal(t, "b", self.ID)
	var unk *UnknownDependencyError
	require.ErrorAs(t, err, &unk)
	require.Equal(t, UnknownDependencyError{ID: "c", Dep: "ghost"}, *unk)
	var cyc *CycleError
	require.ErrorAs(t, err, &cyc)
	require.Equal(t, []string{"x", "y", "z", "x"}, cyc.Path)

	_, err = Build([]Node{node("a"), {ID: "b", Refs: []string{"a", "nobody"}}})
	var ref *RefError
	require.ErrorAs(t, err, &ref)
	require.Equal(t, RefError{ID: "b", Ref: "a"}, *ref)
	require.Equal(t, RefError{ID: "b", Ref: "nobody", Unknown: true}, *problems(err)[1].(*RefError))
}

func TestBuildProblemCap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		nodes func(i int) Node
	}{
		{"self-dependencies", func(i int) Node { id := fmt.Sprint(i); return node(id, id) }},
		{"duplicates", func(i int) Node { return node("same") }},
		{"cycles", func(i int) Node { return node(fmt.Sprint(i), fmt.Sprint(i^1)) }},
		{"refs", func(i int) Node { return Node{ID: fmt.Sprint(i), Refs: []string{fmt.Sprint(i + 1), "ghost"}} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			nodes := make([]Node, 3*MaxProblems)
			for i := range nodes {
				nodes[i] = tt.nodes(i)
			}
			_, err := Build(nodes)
			require.Error(t, err)
			require.Len(t, problems(err), MaxProblems)
		})
	}
}

// TestBuildRefsMatchNaive checks references on random plans against the
// transitive closure, with enough distinct targets for several batches.
func TestBuildRefsMatchNaive(t *testing.T) {
	t.Parallel()
	r := newRand(t)
	for range 40 {
		nodes := randomDAG(r, 2+r.IntN(300), 3, 2)
		anc := naiveAncestors(nodes)
		var want []string
		for _, nd := range nodes {
			seen := map[string]bool{}
			for _, ref := range nd.Refs {
				if !anc[nd.ID][ref] && !seen[ref] {
					seen[ref] = true
					want = append(want, (&RefError{ID: nd.ID, Ref: ref}).Error())
				}
			}
		}
		if len(want) > MaxProblems {
			want = want[:MaxProblems]
		}
		_, err := Build(nodes)
		require.Equal(t, want, messages(err))
		if len(want) > 0 {
			require.True(t, errors.Is(err, ErrRefNotAncestor))
		}
	}
}

// TestBuildRefsManyTargets references more than 64 distinct ancestors that
// are not direct dependencies, so the check runs several batches.
func TestBuildRefsManyTargets(t *testing.T) {
	t.Parallel()
	const size = 500
	nodes := make([]Node, size)
	for i := range nodes {
		nodes[i].ID = fmt.Sprintf("t%d", i)
	}
	for i := range nodes {
		if i > 0 {
			nodes[i].Deps = []string{nodes[i-1].ID}
		}
		if i >= 2 {
			nodes[i].Refs = []string{nodes[i/2-1].ID}
		}
		if i%25 == 0 {
			nodes[i].Refs = append(nodes[i].Refs, nodes[(i*7)%size].ID)
		}
	}
	var want []string
	for i := range size {
		if j := (i * 7) % size; i%25 == 0 && j >= i {
			want = append(want, (&RefError{ID: nodes[i].ID, Ref: nodes[j].ID}).Error())
		}
	}
	require.NotEmpty(t, want)
	_, err := Build(nodes)
	require.Equal(t, want, messages(err))
}
