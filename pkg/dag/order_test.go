package dag

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOrder(t *testing.T) {
	t.Parallel()
	wide := make([]Node, 50)
	wideIDs := make([]string, 50)
	for i := range wide {
		wideIDs[i] = fmt.Sprintf("w%02d", 49-i) // plan order, not name order
		wide[i] = node(wideIDs[i])
	}
	tests := []struct {
		name  string
		nodes []Node
		want  []string
	}{
		{"empty", nil, []string{}},
		{"diamond", []Node{node("a"), node("b", "a"), node("c", "a"), node("d", "b", "c")}, []string{"a", "b", "c", "d"}},
		{"diamond declared backwards", []Node{node("d", "c", "b"), node("c", "a"), node("b", "a"), node("a")}, []string{"a", "c", "b", "d"}},
		{"chain declared backwards", []Node{node("c", "b"), node("b", "a"), node("a")}, []string{"a", "b", "c"}},
		{"the lowest plan index among ready tools goes first", []Node{node("c", "a"), node("a"), node("b")}, []string{"a", "c", "b"}},
		{"a later root waits for an earlier unlocked tool", []Node{node("x", "r"), node("y"), node("r")}, []string{"y", "r", "x"}},
		{"wide plan keeps plan order", wide, wideIDs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, err := Build(tt.nodes)
			require.NoError(t, err)
			require.Equal(t, tt.want, g.Order())
			require.NoError(t, checkTopological(tt.nodes, g.Order()))
		})
	}
}

// TestOrderRandom checks on random DAGs that every tool comes after its
// dependencies and that ties follow the rule, against a naive Kahn.
func TestOrderRandom(t *testing.T) {
	t.Parallel()
	r := newRand(t)
	for range 200 {
		nodes := randomDAG(r, 1+r.IntN(80), 4, 0)
		g, err := Build(nodes)
		require.NoError(t, err)
		order := g.Order()
		require.NoError(t, checkTopological(nodes, order))
		want, ok := naiveOrder(nodes)
		require.True(t, ok)
		require.Equal(t, want, order)
	}
}

func TestLevelsAndCriticalPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		nodes  []Node
		levels [][]string
	}{
		{"empty", nil, nil},
		{"one", []Node{node("a")}, [][]string{{"a"}}},
		{"diamond and a loner", []Node{node("d", "b", "c"), node("a"), node("b", "a"), node("c", "a"), node("e")}, [][]string{{"a", "e"}, {"b", "c"}, {"d"}}},
		{"level is 1 + the deepest dependency", []Node{node("a"), node("b", "a"), node("c", "b"), node("x", "a", "c")}, [][]string{{"a"}, {"b"}, {"c"}, {"x"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, err := Build(tt.nodes)
			require.NoError(t, err)
			require.Equal(t, tt.levels, g.Levels())
			require.Equal(t, len(tt.levels), g.CriticalPathLen())
		})
	}
}

func TestLevelsRandom(t *testing.T) {
	t.Parallel()
	r := newRand(t)
	for range 100 {
		nodes := randomDAG(r, 1+r.IntN(100), 3, 0)
		g, err := Build(nodes)
		require.NoError(t, err)
		level := map[string]int{}
		for l, ids := range g.Levels() {
			require.NotEmpty(t, ids)
			for _, id := range ids {
				level[id] = l
			}
			require.True(t, slices.IsSortedFunc(ids, func(a, b string) int {
				i, _ := g.Index(a)
				j, _ := g.Index(b)
				return i - j
			}), "level %d in plan order", l)
		}
		require.Len(t, level, len(nodes))
		for _, nd := range nodes {
			want := 0
			for _, d := range nd.Deps {
				want = max(want, level[d]+1)
			}
			require.Equal(t, want, level[nd.ID], nd.ID)
		}
		require.Equal(t, len(g.Levels()), g.CriticalPathLen())
	}
}

func TestEdgesAndReach(t *testing.T) {
	t.Parallel()
	// a -> b -> d, a -> c -> d, e alone; declared out of order.
	g, err := Build([]Node{node("d", "c", "b", "c"), node("e"), node("b", "a"), node("a"), node("c", "a")})
	require.NoError(t, err)
	require.Equal(t, 5, g.Len())
	require.Equal(t, []string{"d", "e", "b", "a", "c"}, g.IDs())
	i, ok := g.Index("a")
	require.True(t, ok)
	require.Equal(t, 3, i)
	_, ok = g.Index("zz")
	require.False(t, ok)

	require.Equal(t, []string{"c", "b"}, g.Dependencies("d"), "declaration order, repeat dropped")
	require.Equal(t, []string{"b", "c"}, g.Children("a"), "plan order")
	require.Empty(t, g.Children("d"))
	require.Equal(t, []string{"b", "a", "c"}, g.Ancestors("d"))
	require.Equal(t, []string{"d", "b", "c"}, g.Dependents("a"))
	require.Empty(t, g.Ancestors("e"))
	require.Empty(t, g.Dependents("e"))
	require.Nil(t, g.Dependencies("zz"))
	require.Nil(t, g.Children("zz"))
	require.Nil(t, g.Ancestors("zz"))
	require.Nil(t, g.Dependents("zz"))

	require.True(t, g.IsAncestor("a", "d"))
	require.True(t, g.IsAncestor("b", "d"))
	require.False(t, g.IsAncestor("d", "a"))
	require.False(t, g.IsAncestor("b", "c"))
	require.False(t, g.IsAncestor("e", "d"))
	require.False(t, g.IsAncestor("a", "a"))
	require.False(t, g.IsAncestor("zz", "a"))

	ids := g.IDs()
	ids[0] = "changed"
	require.Equal(t, "d", g.IDs()[0], "IDs returns a copy")
}

func TestReachRandom(t *testing.T) {
	t.Parallel()
	r := newRand(t)
	for range 50 {
		nodes := randomDAG(r, 1+r.IntN(60), 3, 0)
		g, err := Build(nodes)
		require.NoError(t, err)
		anc := naiveAncestors(nodes)
		for _, nd := range nodes {
			require.Equal(t, inPlanOrder(nodes, anc[nd.ID]), g.Ancestors(nd.ID))
			dependents := map[string]bool{}
			for _, other := range nodes {
				if anc[other.ID][nd.ID] {
					dependents[other.ID] = true
				}
				require.Equal(t, anc[nd.ID][other.ID], g.IsAncestor(other.ID, nd.ID), "%s ancestor of %s", other.ID, nd.ID)
			}
			require.Equal(t, inPlanOrder(nodes, dependents), g.Dependents(nd.ID))
		}
	}
}

func TestIndexSet(t *testing.T) {
	t.Parallel()
	r := newRand(t)
	for _, size := range []int{0, 1, 63, 64, 65, 4095, 4096, 4097, 300_000} {
		s := newIndexSet(size)
		require.Equal(t, int32(-1), s.min())
		require.Equal(t, int32(-1), s.next(0))
		if size == 0 {
			continue
		}
		model := map[int32]bool{}
		for range 3000 {
			i := int32(r.IntN(size))
			if r.IntN(3) == 0 {
				s.remove(i)
				delete(model, i)
			} else {
				s.add(i)
				model[i] = true
			}
			require.Equal(t, len(model), s.n)
			require.Equal(t, model[i], s.has(i))
			want := int32(-1)
			for m := range model {
				if want < 0 || m < want {
					want = m
				}
			}
			require.Equal(t, want, s.min())
			from := int32(r.IntN(size))
			want = -1
			for m := range model {
				if m >= from && (want < 0 || m < want) {
					want = m
				}
			}
			require.Equal(t, want, s.next(from), "next(%d) of size %d", from, size)
		}
		var all []int32
		for v := s.min(); v >= 0; v = s.next(v + 1) {
			all = append(all, v)
		}
		require.Len(t, all, len(model))
		require.True(t, slices.IsSorted(all))
	}
}
