package dag

// refQuery is one reference of a tool's input, in plan order.
type refQuery struct {
	v, u int32  // the referencing tool and the referenced one (-1: unknown)
	ref  string // the reference as written
	open bool   // not settled yet
	ok   bool   // u is an ancestor of v
}

// nearbyWork bounds the dependency edges the search near a referencing tool
// looks at before its open references go to the batch pass.
const nearbyWork = 64

// refChecker holds checkRefs' scratch space: per-vertex stamps, so that
// nothing is cleared between tools.
type refChecker struct {
	g       *Graph
	queries []refQuery
	mark    []int32 // mark[u] == v+1: u is a direct dependency of v
	asked   []int32 // asked[u] == v+1: v references u; its query is queries[query[u]]
	query   []int32
	seen    []int32 // seen[u] == v+1: the search from v reached u
	queue   []int32
	slot    []int32 // slot[u] == t+1: u is targets[t]
	targets []int32 // the distinct tools that the batch pass asks about
}

// checkRefs reports each reference to a tool that is not an ancestor of the
// referencing tool, in plan order. It needs the order, so the graph must be
// acyclic.
//
// A reference to a direct dependency is settled at once, and so is one to
// the tool itself or to a tool placed after it in the order (wrong). Most
// other references name a near ancestor — a dependency's dependency — and a
// breadth-first search up from the tool, bounded to nearbyWork edges,
// settles them. The rest are settled together by settle.
func (g *Graph) checkRefs(nodes []Node, src []int32, b *builder) {
	budget := MaxProblems - len(b.errs)
	if budget <= 0 {
		return
	}
	n := len(g.ids)
	var c *refChecker
	bad := 0 // queries known to be wrong already
scan:
	for v, i := range src {
		refs := nodes[i].Refs
		if len(refs) == 0 {
			continue
		}
		if c == nil {
			c = &refChecker{g: g, mark: make([]int32, n), asked: make([]int32, n), query: make([]int32, n),
				seen: make([]int32, n), slot: make([]int32, n)}
		}
		tag := int32(v) + 1
		for _, u := range g.deps(int32(v)) {
			c.mark[u] = tag
		}
		first, open := len(c.queries), 0 // v's queries start at first
		minPos := g.pos[v]
		for _, r := range refs {
			u, known := g.index[r]
			switch {
			case !known:
				if repeated(c.queries[first:], r) {
					continue
				}
				c.queries = append(c.queries, refQuery{v: int32(v), u: -1, ref: r})
				bad++
			case c.mark[u] == tag || c.asked[u] == tag:
				continue // a direct dependency, or already asked
			case u == int32(v) || g.pos[u] > g.pos[v]:
				c.asked[u], c.query[u] = tag, int32(len(c.queries))
				c.queries = append(c.queries, refQuery{v: int32(v), u: u, ref: r})
				bad++
			default:
				c.asked[u], c.query[u] = tag, int32(len(c.queries))
				c.queries = append(c.queries, refQuery{v: int32(v), u: u, ref: r, open: true})
				open++
				minPos = min(minPos, g.pos[u])
			}
			if bad >= budget {
				break scan // nothing after this could be reported
			}
		}
		if open == 0 {
			continue
		}
		c.searchNear(int32(v), open, minPos)
		for k := first; k < len(c.queries); k++ {
			if u := c.queries[k].u; c.queries[k].open && c.slot[u] == 0 {
				c.targets = append(c.targets, u)
				c.slot[u] = int32(len(c.targets))
			}
		}
	}
	if c == nil {
		return
	}
	if len(c.targets) > 0 {
		c.settle()
	}
	for _, q := range c.queries {
		if q.ok {
			continue
		}
		if !b.report(&RefError{ID: g.ids[q.v], Ref: q.ref, Unknown: q.u < 0}) {
			return
		}
	}
}

// searchNear walks up from v, breadth first, through at most nearbyWork
// dependency edges, and settles each of v's open references it reaches.
// Vertices placed at or before minPos (the earliest target) lead to none.
func (c *refChecker) searchNear(v int32, open int, minPos int32) {
	g, tag := c.g, v+1
	queue := c.queue[:0]
	for _, u := range g.deps(v) {
		c.seen[u] = tag
		if g.pos[u] > minPos {
			queue = append(queue, u)
		}
	}
	work := 0
	for qi := 0; qi < len(queue) && open > 0 && work < nearbyWork; qi++ {
		for _, y := range g.deps(queue[qi]) {
			if work++; work > nearbyWork {
				break
			}
			if c.seen[y] == tag {
				continue
			}
			c.seen[y] = tag
			if c.asked[y] == tag {
				if q := &c.queries[c.query[y]]; q.open {
					q.open, q.ok = false, true
					open--
				}
			}
			if g.pos[y] > minPos {
				queue = append(queue, y)
			}
		}
	}
	c.queue = queue
}

// repeated reports whether qs holds an unknown reference r.
func repeated(qs []refQuery, r string) bool {
	for _, q := range qs {
		if q.u < 0 && q.ref == r {
			return true
		}
	}
	return false
}

// settle settles the open queries: for each batch of 64 targets, one pass
// over the part of the order between the batch's first target and the last
// tool asking about it computes, for every vertex there, the bitmask of the
// batch's targets among its ancestors and itself.
func (c *refChecker) settle() {
	g, queries, targets, slot := c.g, c.queries, c.targets, c.slot
	batches := make([][]int32, (len(targets)+63)/64) // query indexes by batch
	for i, q := range queries {
		if q.open {
			t := slot[q.u] - 1
			batches[t/64] = append(batches[t/64], int32(i))
		}
	}
	mask := make([]uint64, len(g.ids))
	for k, qs := range batches {
		start := int32(k * 64)
		bit := func(u int32) uint64 {
			if t := slot[u] - 1 - start; t >= 0 && t < 64 {
				return 1 << t
			}
			return 0
		}
		lo, hi := int32(len(g.ids)), int32(-1)
		for _, u := range targets[start:min(int(start)+64, len(targets))] {
			lo = min(lo, g.pos[u])
		}
		for _, i := range qs {
			hi = max(hi, g.pos[queries[i].v])
		}
		// A vertex placed before lo descends from no target, and none
		// placed after hi is asked about.
		for p := lo; p <= hi; p++ {
			v := g.order[p]
			m := bit(v)
			for _, u := range g.deps(v) {
				if g.pos[u] >= lo {
					m |= mask[u]
				}
			}
			mask[v] = m
		}
		for _, i := range qs {
			q := &queries[i]
			q.open, q.ok = false, mask[q.v]&bit(q.u) != 0
		}
	}
}
