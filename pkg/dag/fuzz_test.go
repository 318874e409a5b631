package dag

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fuzzPlan decodes fuzz bytes into a small plan: data[0] sets the number of
// tools, data[1] how many of the last ones repeat an earlier ID, and each
// following byte pair (x, y) adds an edge from tool x: a dependency, or a
// reference when x has its high bit set. y may name no tool.
func fuzzPlan(data []byte) []Node {
	if len(data) < 2 {
		return nil
	}
	n := 1 + int(data[0])%24
	unique := max(1, n-int(data[1])%4)
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i].ID = fmt.Sprintf("n%d", i%unique)
	}
	for k := 2; k+1 < len(data); k += 2 {
		x, y := data[k], data[k+1]
		from := &nodes[int(x&0x7f)%n]
		to := fmt.Sprintf("n%d", int(y)%(n+1)) // "n<n>" names no tool
		if x&0x80 != 0 {
			from.Refs = append(from.Refs, to)
		} else {
			from.Deps = append(from.Deps, to)
		}
	}
	return nodes
}

// sanitize keeps the first tool of each ID and the dependencies that name
// another tool: the graph Build checks for cycles.
func sanitize(nodes []Node) []Node {
	ids := map[string]bool{}
	var out []Node
	for _, nd := range nodes {
		if !ids[nd.ID] {
			ids[nd.ID] = true
			out = append(out, Node{ID: nd.ID, Refs: nd.Refs})
		}
	}
	for i := range out {
		for _, nd := range nodes {
			if nd.ID != out[i].ID {
				continue
			}
			for _, d := range nd.Deps {
				if ids[d] && d != nd.ID {
					out[i].Deps = append(out[i].Deps, d)
				}
			}
			break
		}
	}
	return out
}

func FuzzBuild(f *testing.F) {
	f.Add([]byte{3, 0, 0, 1, 1, 2, 2, 0})               // 3-cycle
	f.Add([]byte{4, 0, 1, 0, 2, 0, 3, 1, 3, 2, 131, 0}) // diamond with a ref
	f.Add([]byte{5, 1, 0, 0, 1, 9, 130, 1})             // duplicate, self, unknown
	f.Add([]byte{20, 0, 1, 0, 2, 1, 3, 2, 4, 3, 5, 4, 6, 0, 7, 6, 135, 0, 133, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 512 {
			return
		}
		nodes := fuzzPlan(data)
		g, err := Build(nodes)
		clean := sanitize(nodes)
		_, acyclic := naiveOrder(clean)
		if err != nil {
			require.Nil(t, g)
			probs := problems(err)
			require.LessOrEqual(t, len(probs), MaxProblems)
			for _, p := range probs {
				require.True(t, isTyped(p), "untyped problem %v", p)
				msg := p.Error()
				require.True(t, strings.HasPrefix(msg, "cycle: n") || strings.Contains(msg, `"n`), "message names no tool: %s", msg)
			}
			if len(probs) < MaxProblems {
				require.Equal(t, !acyclic, errors.Is(err, ErrCycle))
			}
			return
		}
		require.True(t, acyclic)
		require.Equal(t, len(nodes), g.Len())
		order := g.Order()
		require.NoError(t, checkTopological(nodes, order))
		want, _ := naiveOrder(nodes)
		require.Equal(t, want, order)
		anc := naiveAncestors(nodes)
		for _, nd := range nodes {
			for _, r := range nd.Refs {
				require.True(t, anc[nd.ID][r], "%s references non-ancestor %s", nd.ID, r)
			}
		}

		h := fnv.New64a()
		_, _ = h.Write(data)
		r := rand.New(rand.NewPCG(h.Sum64(), 0))
		tr := g.NewTracker()
		for steps := 0; step(t, r, tr); steps++ {
			require.Less(t, steps, 2*len(nodes), "a run takes at most two steps per tool")
			checkInvariants(t, nodes, tr)
		}
		require.True(t, tr.Done())
	})
}
