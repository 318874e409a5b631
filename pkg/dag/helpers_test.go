package dag

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// newRand returns a random source whose seed the test logs, so a failure
// can be replayed.
func newRand(t testing.TB) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d", seed)
	return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
}

// node is a tool without refs.
func node(id string, deps ...string) Node { return Node{ID: id, Deps: deps} }

// problems splits Build's joined error into its problems.
func problems(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// messages renders each problem.
func messages(err error) []string {
	var out []string
	for _, p := range problems(err) {
		out = append(out, p.Error())
	}
	return out
}

// randomDAG returns size tools where each depends on up to maxDeps earlier
// ones (by creation), shuffled so plan order is not a topological order.
// Each tool references up to maxRefs random tools (ancestors or not).
func randomDAG(r *rand.Rand, size, maxDeps, maxRefs int) []Node {
	nodes := make([]Node, size)
	for i := range nodes {
		nodes[i].ID = fmt.Sprintf("t%d", i)
	}
	for i := 1; i < size; i++ {
		for range r.IntN(maxDeps + 1) {
			nodes[i].Deps = append(nodes[i].Deps, nodes[r.IntN(i)].ID)
		}
		for range r.IntN(maxRefs + 1) {
			nodes[i].Refs = append(nodes[i].Refs, nodes[r.IntN(size)].ID)
		}
	}
	r.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	return nodes
}

// naiveOrder is Kahn's algorithm the slow way: at each step scan the plan
// for the first tool whose dependencies are all placed. It assumes unique
// IDs and known dependencies, and returns false on a cycle.
func naiveOrder(nodes []Node) ([]string, bool) {
	placed := map[string]bool{}
	order := []string{}
	for len(order) < len(nodes) {
		next := -1
		for i, nd := range nodes {
			if placed[nd.ID] {
				continue
			}
			ready := true
			for _, d := range nd.Deps {
				ready = ready && placed[d]
			}
			if ready {
				next = i
				break
			}
		}
		if next < 0 {
			return order, false
		}
		placed[nodes[next].ID] = true
		order = append(order, nodes[next].ID)
	}
	return order, true
}

// naiveAncestors returns each tool's transitive dependencies, for an
// acyclic plan with unique IDs; unknown dependencies are ignored.
func naiveAncestors(nodes []Node) map[string]map[string]bool {
	deps := map[string][]string{}
	for _, nd := range nodes {
		deps[nd.ID] = nd.Deps
	}
	out := map[string]map[string]bool{}
	var visit func(id string) map[string]bool
	visit = func(id string) map[string]bool {
		if a, ok := out[id]; ok {
			return a
		}
		a := map[string]bool{}
		out[id] = a
		for _, d := range deps[id] {
			if _, known := deps[d]; !known || d == id {
				continue
			}
			a[d] = true
			for x := range visit(d) {
				a[x] = true
			}
		}
		return a
	}
	for _, nd := range nodes {
		visit(nd.ID)
	}
	return out
}

// inPlanOrder returns the IDs of nodes whose ID is in set, in plan order.
func inPlanOrder(nodes []Node, set map[string]bool) []string {
	out := []string{}
	for _, nd := range nodes {
		if set[nd.ID] {
			out = append(out, nd.ID)
		}
	}
	return out
}

// checkTopological returns an error unless order lists every tool of nodes
// once and after all its dependencies.
func checkTopological(nodes []Node, order []string) error {
	pos := map[string]int{}
	for i, id := range order {
		if _, dup := pos[id]; dup {
			return fmt.Errorf("%q twice in the order", id)
		}
		pos[id] = i
	}
	if len(pos) != len(nodes) {
		return fmt.Errorf("order has %d tools, plan %d", len(pos), len(nodes))
	}
	for _, nd := range nodes {
		for _, d := range nd.Deps {
			if pos[d] >= pos[nd.ID] {
				return fmt.Errorf("%q placed before its dependency %q", nd.ID, d)
			}
		}
	}
	return nil
}

// isTyped reports whether err is one of Build's typed problems.
func isTyped(err error) bool {
	var (
		dup  *DuplicateIDError
		unk  *UnknownDependencyError
		self *SelfDependencyError
		cyc  *CycleError
		ref  *RefError
	)
	return errors.As(err, &dup) || errors.As(err, &unk) || errors.As(err, &self) || errors.As(err, &cyc) || errors.As(err, &ref)
}
