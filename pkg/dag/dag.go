// Package dag is the dependency graph of a plan's tools.
//
// Build validates the tools of a plan — duplicate IDs, unknown and self
// dependencies, cycles, and input references ("$id") to tools that are not
// ancestors — and reports every problem it finds as a typed error. The
// resulting Graph answers order questions: the Kahn topological order with
// ties in plan order, dependency levels, the critical path, ancestors and
// dependents. A Tracker follows one execution of the graph incrementally:
// which tools are ready, which run, and which are skipped because a
// required dependency failed.
//
// Building a graph costs O(V+E) (plus the reference check, see Build), and
// so does a whole Tracker run. The package is pure logic: no I/O, no
// logging, no goroutines, and it imports only the standard library. A Graph
// is immutable and safe for concurrent use; a Tracker is not.
package dag

import (
	"errors"
	"slices"
)

// MaxProblems bounds the number of problems Build reports: it stops looking
// once it has found this many.
const MaxProblems = 100

// Node is one tool of a plan as the graph sees it.
type Node struct {
	// ID is the plan-unique tool ID.
	ID string
	// Deps are the IDs this tool depends on, in plan order. A repeated
	// dependency counts once.
	Deps []string
	// Refs are the tool IDs this tool's input references via "$id"; each
	// must be an ancestor of the tool. It may be nil.
	Refs []string
}

// Graph is a validated, acyclic dependency graph of a plan's tools.
// Vertices are numbered by plan index (with duplicate IDs dropped), and the
// edges are kept as index arrays, so every query walks int32 slices.
type Graph struct {
	ids   []string
	index map[string]int32
	// deps of v are depAdj[depOff[v]:depOff[v+1]], in plan order of
	// declaration; children of v are childAdj[childOff[v]:childOff[v+1]],
	// in plan order.
	depOff, depAdj     []int32
	childOff, childAdj []int32
	order              []int32 // Kahn order
	pos                []int32 // pos[v] is v's place in order
	level              []int32 // level[v]: 0 without deps, else 1 + max level of deps
	depth              int     // number of levels
}

// builder collects Build's problems up to MaxProblems.
type builder struct {
	errs []error
}

// report records a problem and says whether Build may look for more.
func (b *builder) report(err error) bool {
	b.errs = append(b.errs, err)
	return len(b.errs) < MaxProblems
}

// Build validates nodes and builds their graph.
//
// It reports every problem it finds, up to MaxProblems, as one error made
// with errors.Join, in this order: repeated IDs, then unknown and self
// dependencies (in plan order), then one cycle per strongly connected
// component, then references. Each problem is a typed error that names the
// tool(s) and matches its sentinel with errors.Is: *DuplicateIDError
// (ErrDuplicateID), *UnknownDependencyError (ErrUnknownDependency),
// *SelfDependencyError (ErrSelfDependency), *CycleError (ErrCycle) and
// *RefError (ErrRefNotAncestor).
//
// A tool whose ID repeats an earlier one is dropped (the first keeps the
// ID) and its dependencies and references are not checked. Unknown and self
// dependencies are left out of the graph, so the remaining checks still
// run. References are checked only when the graph is acyclic.
//
// Build costs O(V+E) plus the reference check. A reference to a direct
// dependency, or to an ancestor within a few dependency hops, costs O(1);
// the others are settled in passes over the order, O(V+E) for each 64
// distinct tools they name (one pass, or none, in practice).
func Build(nodes []Node) (*Graph, error) {
	var b builder
	g := &Graph{
		ids:   make([]string, 0, len(nodes)),
		index: make(map[string]int32, len(nodes)),
	}
	src := make([]int32, 0, len(nodes)) // src[v] is v's index in nodes
	for i := range nodes {
		id := nodes[i].ID
		// One map operation per tool: the insert tells a repeated ID by
		// not growing the map, and the rare repeat finds the first again.
		size := len(g.index)
		g.index[id] = int32(len(g.ids))
		if len(g.index) == size {
			first := int32(slices.Index(g.ids, id))
			g.index[id] = first
			if !b.report(&DuplicateIDError{ID: id, Index: i, First: int(src[first])}) {
				return nil, errors.Join(b.errs...)
			}
			continue
		}
		g.ids = append(g.ids, id)
		src = append(src, int32(i))
	}
	n := len(g.ids)
	if !g.link(nodes, src, &b) {
		return nil, errors.Join(b.errs...)
	}
	g.sort()
	if len(g.order) < n {
		for _, c := range g.cycles() {
			if !b.report(c) {
				break
			}
		}
		return nil, errors.Join(b.errs...)
	}
	g.pos = make([]int32, n)
	for p, v := range g.order {
		g.pos[v] = int32(p)
	}
	g.checkRefs(nodes, src, &b)
	if len(b.errs) > 0 {
		return nil, errors.Join(b.errs...)
	}
	return g, nil
}

// link resolves the dependencies into the two adjacency arrays. It returns
// false once MaxProblems problems are found.
func (g *Graph) link(nodes []Node, src []int32, b *builder) bool {
	n := len(g.ids)
	edges := 0
	for _, i := range src {
		edges += len(nodes[i].Deps)
	}
	g.depOff = make([]int32, n+1)
	g.depAdj = make([]int32, 0, edges)
	seen := make([]int32, n) // seen[u] == v+1: u is already a dependency of v
	for v, i := range src {
		nd := &nodes[i]
		for _, d := range nd.Deps {
			u, ok := g.index[d]
			switch {
			case !ok:
				if !b.report(&UnknownDependencyError{ID: nd.ID, Dep: d}) {
					return false
				}
			case seen[u] == int32(v)+1:
				// a repeated dependency is one edge; a repeated self-dependency one problem
			case int(u) == v:
				seen[u] = int32(v) + 1
				if !b.report(&SelfDependencyError{ID: nd.ID}) {
					return false
				}
			default:
				seen[u] = int32(v) + 1
				g.depAdj = append(g.depAdj, u)
			}
		}
		g.depOff[v+1] = int32(len(g.depAdj))
	}
	// children by counting sort: filling in plan order of the dependent
	// keeps each child list in plan order.
	g.childOff = make([]int32, n+1)
	for _, u := range g.depAdj {
		g.childOff[u+1]++
	}
	for v := range n {
		g.childOff[v+1] += g.childOff[v]
	}
	g.childAdj = make([]int32, len(g.depAdj))
	fill := seen // reused as the write cursor of each child list
	copy(fill, g.childOff[:n])
	for v := range n {
		for _, u := range g.depAdj[g.depOff[v]:g.depOff[v+1]] {
			g.childAdj[fill[u]] = int32(v)
			fill[u]++
		}
	}
	return true
}

// sort runs Kahn's algorithm: among the ready vertices the lowest plan
// index goes first. It fills order (shorter than the graph when there is a
// cycle), level and depth.
func (g *Graph) sort() {
	n := len(g.ids)
	indeg := make([]int32, n)
	ready := newIndexSet(n)
	for v := range n {
		indeg[v] = g.depOff[v+1] - g.depOff[v]
		if indeg[v] == 0 {
			ready.add(int32(v))
		}
	}
	g.order = make([]int32, 0, n)
	g.level = make([]int32, n)
	for {
		v := ready.min()
		if v < 0 {
			break
		}
		ready.remove(v)
		g.order = append(g.order, v)
		lv := g.level[v] + 1
		g.depth = max(g.depth, int(lv))
		for _, c := range g.childAdj[g.childOff[v]:g.childOff[v+1]] {
			g.level[c] = max(g.level[c], lv)
			indeg[c]--
			if indeg[c] == 0 {
				ready.add(c)
			}
		}
	}
}

func (g *Graph) deps(v int32) []int32     { return g.depAdj[g.depOff[v]:g.depOff[v+1]] }
func (g *Graph) children(v int32) []int32 { return g.childAdj[g.childOff[v]:g.childOff[v+1]] }

// Len returns the number of tools in the graph.
func (g *Graph) Len() int { return len(g.ids) }

// IDs returns the tool IDs in plan order. Index i of this slice is tool
// index i everywhere in the package (Index, Tracker.States).
func (g *Graph) IDs() []string { return slices.Clone(g.ids) }

// Index returns a tool's plan index, and false when no tool has the ID.
func (g *Graph) Index(id string) (int, bool) {
	v, ok := g.index[id]
	return int(v), ok
}

// Order returns the tool IDs in Kahn topological order, every tool after
// all its dependencies. The rule for ties is: at each step, among the tools
// whose dependencies are all placed, the lowest plan index goes first. So
// for the plan [c needs a, a, b] the order is a, c, b: a and b are ready at
// the start, a goes first, which makes c (index 0) ready, and c goes before
// b (index 2).
func (g *Graph) Order() []string { return g.names(g.order) }

// Levels groups the tools by dependency level: level 0 holds the tools
// without dependencies, and a tool's level is one more than the highest
// level among its dependencies. Each level lists its tools in plan order.
// Tools of one level never depend on each other. An empty graph has no
// levels.
func (g *Graph) Levels() [][]string {
	if g.depth == 0 {
		return nil
	}
	sizes := make([]int, g.depth)
	for _, l := range g.level {
		sizes[l]++
	}
	out := make([][]string, g.depth)
	for l := range out {
		out[l] = make([]string, 0, sizes[l])
	}
	for v, l := range g.level {
		out[l] = append(out[l], g.ids[v])
	}
	return out
}

// CriticalPathLen returns the number of tools on the longest dependency
// chain, which is also the number of levels. It is 0 for an empty graph.
func (g *Graph) CriticalPathLen() int { return g.depth }

// Dependencies returns the tools id depends on directly, in the order the
// plan declares them. It returns nil when no tool has the ID.
func (g *Graph) Dependencies(id string) []string {
	v, ok := g.index[id]
	if !ok {
		return nil
	}
	return g.names(g.deps(v))
}

// Children returns the tools that depend directly on id, in plan order. It
// returns nil when no tool has the ID.
func (g *Graph) Children(id string) []string {
	v, ok := g.index[id]
	if !ok {
		return nil
	}
	return g.names(g.children(v))
}

// Ancestors returns every tool id depends on, directly or transitively, in
// plan order. It returns nil when no tool has the ID.
func (g *Graph) Ancestors(id string) []string {
	v, ok := g.index[id]
	if !ok {
		return nil
	}
	return g.reach(v, g.deps)
}

// Dependents returns every tool that depends on id, directly or
// transitively, in plan order. It returns nil when no tool has the ID.
func (g *Graph) Dependents(id string) []string {
	v, ok := g.index[id]
	if !ok {
		return nil
	}
	return g.reach(v, g.children)
}

// IsAncestor reports whether id depends on anc, directly or transitively.
// A tool is not its own ancestor; unknown IDs have none.
func (g *Graph) IsAncestor(anc, id string) bool {
	a, ok := g.index[anc]
	v, ok2 := g.index[id]
	if !ok || !ok2 || a == v || g.pos[a] > g.pos[v] {
		return false
	}
	// Walk up from v; a vertex placed before a in the order cannot have a
	// as an ancestor, so the walk stops there.
	seen := make([]bool, len(g.ids))
	stack := []int32{v}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, u := range g.deps(x) {
			if u == a {
				return true
			}
			if !seen[u] && g.pos[u] > g.pos[a] {
				seen[u] = true
				stack = append(stack, u)
			}
		}
	}
	return false
}

// reach returns the vertices reachable from v along adj (v excluded), as
// IDs in plan order.
func (g *Graph) reach(v int32, adj func(int32) []int32) []string {
	seen := make([]bool, len(g.ids))
	var found []int32
	stack := []int32{v}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, u := range adj(x) {
			if !seen[u] {
				seen[u] = true
				found = append(found, u)
				stack = append(stack, u)
			}
		}
	}
	slices.Sort(found)
	return g.names(found)
}

// names maps vertices to their IDs.
func (g *Graph) names(vs []int32) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = g.ids[v]
	}
	return out
}
