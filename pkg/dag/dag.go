// Package dag is the dependency graph of a plan's tools: it validates the
// graph (duplicate IDs, unknown and self dependencies, cycles, references
// to non-ancestors), orders it with Kahn's algorithm (ties in plan order),
// and tracks an execution incrementally — each step O(degree), a whole run
// O(V+E). It is pure logic: no NATS, no I/O.
package dag

import (
	"container/heap"
	"errors"
	"fmt"
)

// MaxProblems bounds the errors Build reports.
const MaxProblems = 100

// Node is one tool as the graph sees it.
type Node struct {
	// ID is the plan-unique tool ID.
	ID string
	// Deps are the IDs the tool depends on.
	Deps []string
	// Refs are the IDs the tool's input references ("$id"); each must be
	// an ancestor.
	Refs []string
}

// Graph is a validated, acyclic dependency graph.
type Graph struct {
	ids      []string
	index    map[string]int
	deps     [][]int32
	children [][]int32
	order    []int32
}

// Build validates nodes and builds the graph. It reports every problem it
// finds (at most MaxProblems), joined with errors.Join; each is a typed
// error (*DuplicateIDError, *UnknownDependencyError, *SelfDependencyError,
// *CycleError, *RefError) matching its sentinel. References are checked
// only when the graph is otherwise valid.
func Build(nodes []Node) (*Graph, error) {
	n := len(nodes)
	g := &Graph{ids: make([]string, 0, n), index: make(map[string]int, n)}
	var errs []error
	add := func(err error) bool {
		errs = append(errs, err)
		return len(errs) < MaxProblems
	}
	keep := make([]int, 0, n) // node index of each graph vertex
	for i := range nodes {
		id := nodes[i].ID
		if _, dup := g.index[id]; dup {
			if !add(&DuplicateIDError{ID: id, Index: i}) {
				return nil, errors.Join(errs...)
			}
			continue
		}
		g.index[id] = len(g.ids)
		g.ids = append(g.ids, id)
		keep = append(keep, i)
	}
	g.deps = make([][]int32, len(g.ids))
	g.children = make([][]int32, len(g.ids))
	edges := 0
	for v, i := range keep {
		nd := &nodes[i]
		for _, d := range nd.Deps {
			if d == nd.ID {
				if !add(&SelfDependencyError{ID: nd.ID}) {
					return nil, errors.Join(errs...)
				}
				continue
			}
			u, ok := g.index[d]
			if !ok {
				if !add(&UnknownDependencyError{ID: nd.ID, Dep: d}) {
					return nil, errors.Join(errs...)
				}
				continue
			}
			g.deps[v] = append(g.deps[v], int32(u))
			edges++
		}
	}
	// children in one allocation
	counts := make([]int32, len(g.ids))
	for v := range g.deps {
		for _, u := range g.deps[v] {
			counts[u]++
		}
	}
	flat := make([]int32, edges)
	off := 0
	for u := range g.children {
		g.children[u] = flat[off : off : off+int(counts[u])]
		off += int(counts[u])
	}
	for v := range g.deps {
		for _, u := range g.deps[v] {
			g.children[u] = append(g.children[u], int32(v))
		}
	}
	g.order = g.kahn()
	if len(g.order) < len(g.ids) {
		for _, c := range g.cycles() {
			if !add(c) {
				break
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for v, i := range keep {
		for _, r := range nodes[i].Refs {
			u, ok := g.index[r]
			if !ok || !g.isAncestor(u, v) {
				if !add(&RefError{ID: nodes[i].ID, Ref: r}) {
					return nil, errors.Join(errs...)
				}
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return g, nil
}

// minHeap of vertex indexes: the lowest plan index is taken first.
type minHeap []int32

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.(int32)) }
func (h *minHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// kahn returns the topological order; ties go to the lowest plan index
// among the ready vertices. It is shorter than the graph when there is a cycle.
func (g *Graph) kahn() []int32 {
	indeg := make([]int32, len(g.ids))
	h := make(minHeap, 0, 16)
	for v := range g.deps {
		indeg[v] = int32(len(g.deps[v]))
		if indeg[v] == 0 {
			h = append(h, int32(v))
		}
	}
	heap.Init(&h)
	order := make([]int32, 0, len(g.ids))
	for h.Len() > 0 {
		v := heap.Pop(&h).(int32)
		order = append(order, v)
		for _, c := range g.children[v] {
			indeg[c]--
			if indeg[c] == 0 {
				heap.Push(&h, c)
			}
		}
	}
	return order
}

// cycles finds the cycles among the vertices Kahn could not order, one per
// depth-first search, each starting at its lowest-index vertex.
func (g *Graph) cycles() []*CycleError {
	ordered := make([]bool, len(g.ids))
	for _, v := range g.order {
		ordered[v] = true
	}
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(g.ids))
	var out []*CycleError
	type frame struct {
		v    int32
		next int
	}
	for start := range g.ids {
		if ordered[start] || color[start] != white {
			continue
		}
		stack := []frame{{v: int32(start)}}
		color[start] = grey
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			deps := g.deps[top.v]
			if top.next >= len(deps) {
				color[top.v] = black
				stack = stack[:len(stack)-1]
				continue
			}
			u := deps[top.next]
			top.next++
			if ordered[u] {
				continue
			}
			switch color[u] {
			case white:
				color[u] = grey
				stack = append(stack, frame{v: u})
			case grey:
				// back edge: the cycle is u .. top on the stack
				k := len(stack) - 1
				for stack[k].v != u {
					k--
				}
				cyc := make([]int32, 0, len(stack)-k)
				for _, f := range stack[k:] {
					cyc = append(cyc, f.v)
				}
				out = append(out, g.cycleError(cyc))
				if len(out) >= MaxProblems {
					return out
				}
			}
		}
	}
	return out
}

// cycleError renders a cycle starting at its lowest-index vertex.
func (g *Graph) cycleError(cyc []int32) *CycleError {
	lo := 0
	for i := range cyc {
		if cyc[i] < cyc[lo] {
			lo = i
		}
	}
	path := make([]string, 0, len(cyc)+1)
	for i := range cyc {
		path = append(path, g.ids[cyc[(lo+i)%len(cyc)]])
	}
	path = append(path, path[0])
	return &CycleError{Path: path}
}

// Len is the number of tools.
func (g *Graph) Len() int { return len(g.ids) }

// IDs returns the tool IDs in plan order.
func (g *Graph) IDs() []string { return append([]string(nil), g.ids...) }

// Index returns a tool's position in plan order.
func (g *Graph) Index(id string) (int, bool) {
	i, ok := g.index[id]
	return i, ok
}

// Order returns the Kahn topological order: among the tools ready at each
// step, the lowest plan index goes first.
func (g *Graph) Order() []string {
	out := make([]string, len(g.order))
	for i, v := range g.order {
		out[i] = g.ids[v]
	}
	return out
}

// Levels groups tools by dependency level: level 0 has no dependencies, a
// tool's level is one more than its deepest dependency's. Each level lists
// its tools in plan order.
func (g *Graph) Levels() [][]string {
	level := make([]int, len(g.ids))
	depth := 0
	for _, v := range g.order {
		l := 0
		for _, u := range g.deps[v] {
			l = max(l, level[u]+1)
		}
		level[v] = l
		depth = max(depth, l+1)
	}
	if len(g.ids) == 0 {
		return nil
	}
	out := make([][]string, depth)
	for v, l := range level {
		out[l] = append(out[l], g.ids[v])
	}
	return out
}

// CriticalPathLen is the number of tools on the longest dependency chain.
func (g *Graph) CriticalPathLen() int { return len(g.Levels()) }

// Dependencies returns a tool's direct dependencies.
func (g *Graph) Dependencies(id string) []string { return g.names(g.deps, id) }

// Children returns the tools that depend directly on id.
func (g *Graph) Children(id string) []string { return g.names(g.children, id) }

func (g *Graph) names(adj [][]int32, id string) []string {
	v, ok := g.index[id]
	if !ok {
		return nil
	}
	out := make([]string, len(adj[v]))
	for i, u := range adj[v] {
		out[i] = g.ids[u]
	}
	return out
}

// Ancestors returns every tool id transitively depends on, in plan order.
func (g *Graph) Ancestors(id string) []string { return g.reach(g.deps, id) }

// Dependents returns every tool that transitively depends on id, in plan order.
func (g *Graph) Dependents(id string) []string { return g.reach(g.children, id) }

func (g *Graph) reach(adj [][]int32, id string) []string {
	v, ok := g.index[id]
	if !ok {
		return nil
	}
	seen := make([]bool, len(g.ids))
	stack := []int32{int32(v)}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, u := range adj[x] {
			if !seen[u] {
				seen[u] = true
				stack = append(stack, u)
			}
		}
	}
	var out []string
	for u, s := range seen {
		if s {
			out = append(out, g.ids[u])
		}
	}
	return out
}

// IsAncestor reports whether anc is a transitive dependency of id.
func (g *Graph) IsAncestor(anc, id string) bool {
	a, ok1 := g.index[anc]
	v, ok2 := g.index[id]
	return ok1 && ok2 && g.isAncestor(a, v)
}

func (g *Graph) isAncestor(a, v int) bool {
	if a == v {
		return false
	}
	for _, u := range g.deps[v] { // the common case: a direct dependency
		if int(u) == a {
			return true
		}
	}
	seen := map[int32]bool{}
	stack := append([]int32(nil), g.deps[v]...)
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if int(x) == a {
			return true
		}
		for _, u := range g.deps[x] {
			if !seen[u] {
				seen[u] = true
				stack = append(stack, u)
			}
		}
	}
	return false
}

// String summarises the graph.
func (g *Graph) String() string {
	return fmt.Sprintf("dag(%d tools, %d levels)", g.Len(), g.CriticalPathLen())
}
