package dag

import "slices"

// cycles returns one cycle for each strongly connected component among the
// vertices Kahn's algorithm could not order, sorted by the plan index of
// their first tool. Each cycle is the shortest one through the component's
// lowest-index vertex, following "is needed before" edges (dependency to
// dependent). It costs O(V+E).
func (g *Graph) cycles() []*CycleError {
	n := len(g.ids)
	ordered := make([]bool, n)
	for _, v := range g.order {
		ordered[v] = true
	}

	// Tarjan's algorithm, iterative, on the unordered vertices.
	const none = -1
	num := make([]int32, n) // DFS number + 1; 0 = not visited
	low := make([]int32, n)
	comp := make([]int32, n) // component of each vertex, none until assigned
	for v := range comp {
		comp[v] = none
	}
	type frame struct {
		v    int32
		next int32 // next child offset to look at
	}
	var (
		frames  []frame
		stack   []int32 // Tarjan's stack
		counter int32
		ncomp   int32
		starts  []int32 // the lowest-index vertex of each component of two or more
	)
	visit := func(v int32) {
		counter++
		num[v], low[v] = counter, counter
		stack = append(stack, v)
		frames = append(frames, frame{v: v, next: g.childOff[v]})
	}
	for s := range int32(n) {
		if ordered[s] || num[s] != 0 {
			continue
		}
		visit(s)
		for len(frames) > 0 {
			f := &frames[len(frames)-1]
			if f.next < g.childOff[f.v+1] {
				w := g.childAdj[f.next]
				f.next++
				switch {
				case ordered[w]:
				case num[w] == 0:
					visit(w)
				case comp[w] == none: // on the stack
					low[f.v] = min(low[f.v], num[w])
				}
				continue
			}
			v := f.v
			frames = frames[:len(frames)-1]
			if len(frames) > 0 {
				p := frames[len(frames)-1].v
				low[p] = min(low[p], low[v])
			}
			if low[v] != num[v] {
				continue
			}
			first, size := v, 0
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				comp[w] = ncomp
				first = min(first, w)
				size++
				if w == v {
					break
				}
			}
			if size > 1 { // self-loops are not edges of the graph
				starts = append(starts, first)
			}
			ncomp++
		}
	}
	slices.Sort(starts)

	// Breadth-first search from each start, inside its component, for the
	// shortest way back to it. Children are in plan order, so the result
	// does not depend on anything but the plan.
	prev := num // reused: prev[v] is v's BFS parent + 1; 0 = not reached
	clear(prev)
	out := make([]*CycleError, 0, len(starts))
	var queue []int32
	for _, s := range starts {
		queue = append(queue[:0], s)
		prev[s] = s + 1
		last := int32(none)
	search:
		for qi := 0; qi < len(queue); qi++ {
			x := queue[qi]
			for _, w := range g.children(x) {
				if comp[w] != comp[s] {
					continue
				}
				if w == s {
					last = x
					break search
				}
				if prev[w] == 0 {
					prev[w] = x + 1
					queue = append(queue, w)
				}
			}
		}
		var rev []int32
		for x := last; x != s; x = prev[x] - 1 {
			rev = append(rev, x)
		}
		path := make([]string, 0, len(rev)+2)
		path = append(path, g.ids[s])
		for i := len(rev) - 1; i >= 0; i-- {
			path = append(path, g.ids[rev[i]])
		}
		path = append(path, g.ids[s])
		out = append(out, &CycleError{Path: path})
		for _, x := range queue {
			prev[x] = 0
		}
	}
	return out
}
