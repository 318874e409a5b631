// Package fairshare decides which waiting job a saturated skill serves
// next (docs/spec.md §12; docs/decisions/, "Fair when saturated"):
//
//  1. the highest priority that has a job waiting;
//  2. within it, the tenant with the least weighted service: start-time
//     fair queueing (the scheme of Linux's CFS). Each tenant has a virtual
//     time that grows by 1/weight for each job it is served; a tenant
//     whose jobs start waiting after it had none is brought up to the
//     level's virtual time (the start of the job served last), so
//     idleness is no credit to hoard and steady use no debt: a tenant
//     that comes back is served at the next turn, and tenants that all
//     wait take turns in proportion to their weights;
//  3. within the tenant, the session chosen the same way (sessions of a
//     tenant weigh the same);
//  4. within the session, first in, first out: the order the plan machine
//     made its jobs ready in.
//
// Ties go to the key whose oldest waiting job came first. A Queue is
// pure: no clock, no goroutine, no I/O, and it is not safe for concurrent
// use; its owner serialises the calls.
package fairshare

import "math"

// Key says whose a job is.
type Key struct {
	// Priority orders first: a job of a higher priority goes before every
	// job of a lower one.
	Priority int
	// Tenant is the tenant's name ("" in a single-tenant deployment).
	Tenant string
	// Session is the session (qualified with its tenant or not: it is only
	// compared within its tenant).
	Session string
}

// Queue holds waiting jobs of one skill and hands them out by fair share.
type Queue[T any] struct {
	// Weight returns a tenant's weight (> 0; values ≤ 0 count as 1). Nil:
	// every tenant weighs 1.
	Weight func(tenant string) float64

	levels map[int]*level[T]
	byID   map[string]*item[T]
	seq    uint64
	n      int
	depth  map[string]int // waiting jobs by tenant
}

// clock is start-time fair queueing among the members of one group (the
// tenants of a priority, the sessions of a tenant): v is the group's
// virtual time, the start of the job served last; vt each member's
// virtual time, the finish of its last job. A member's vt at or below v
// says nothing max(vt, v) does not, so it is dropped.
type clock struct {
	v  float64
	vt map[string]float64
}

// start is a member's virtual start as it waits now.
func (c *clock) start(member string) float64 { return max(c.vt[member], c.v) }

// activate brings a member whose jobs start waiting up to the group's
// virtual time: no credit for the time it had none waiting.
func (c *clock) activate(member string) {
	if vt, ok := c.vt[member]; ok && vt <= c.v {
		delete(c.vt, member)
	}
}

// serve counts one job of cost (1/weight) to a member.
func (c *clock) serve(member string, cost float64) {
	s := c.start(member)
	c.v = s
	c.vt[member] = s + cost
}

// prune drops what max(vt, v) makes meaningless, and, when that is not
// enough, the members at most one job ahead (forgiving each that one job:
// many sessions served once each, say).
func (c *clock) prune() {
	for _, ahead := range []float64{0, 1} {
		for m, vt := range c.vt {
			if vt <= c.v+ahead+epsilon {
				delete(c.vt, m)
			}
		}
		if len(c.vt) <= pruneAbove {
			return
		}
	}
}

type level[T any] struct {
	tenants map[string]*tenantQ[T] // with jobs waiting
	clock   clock                  // among tenants
	// sessions are the session clocks of the level's tenants, kept while
	// a tenant is ahead of the level (its vt above v) or waits.
	sessions map[string]*clock
	n        int
}

type tenantQ[T any] struct {
	sessions map[string]*fifo[T] // with jobs waiting
	n        int
}

type fifo[T any] struct {
	items []*item[T]
	head  int
}

type item[T any] struct {
	id      string
	key     Key
	seq     uint64
	value   T
	removed bool
}

// New returns an empty queue.
func New[T any]() *Queue[T] {
	return &Queue[T]{levels: map[int]*level[T]{}, byID: map[string]*item[T]{}, depth: map[string]int{}}
}

// Len is how many jobs wait.
func (q *Queue[T]) Len() int { return q.n }

// Depth is how many jobs of tenant wait.
func (q *Queue[T]) Depth(tenant string) int { return q.depth[tenant] }

// Depths returns the waiting jobs by tenant (tenants with none left out).
func (q *Queue[T]) Depths() map[string]int {
	out := make(map[string]int, len(q.depth))
	for t, n := range q.depth {
		if n > 0 {
			out[t] = n
		}
	}
	return out
}

// Has reports whether the job id waits.
func (q *Queue[T]) Has(id string) bool {
	_, ok := q.byID[id]
	return ok
}

// Push adds a job behind the jobs of its session. An id already waiting
// with the same key keeps its place (its value is replaced); with another
// key it is moved.
func (q *Queue[T]) Push(id string, k Key, v T) {
	if it, ok := q.byID[id]; ok && it.key == k {
		it.value = v
		return
	} else if ok {
		q.Remove(id)
	}
	q.seq++
	it := &item[T]{id: id, key: k, seq: q.seq, value: v}
	q.byID[id] = it
	l := q.levels[k.Priority]
	if l == nil {
		l = &level[T]{tenants: map[string]*tenantQ[T]{}, clock: clock{vt: map[string]float64{}}, sessions: map[string]*clock{}}
		q.levels[k.Priority] = l
	}
	t := l.tenants[k.Tenant]
	if t == nil {
		t = &tenantQ[T]{sessions: map[string]*fifo[T]{}}
		l.tenants[k.Tenant] = t
		l.clock.activate(k.Tenant)
	}
	f := t.sessions[k.Session]
	if f == nil {
		f = &fifo[T]{}
		t.sessions[k.Session] = f
		l.sessionClock(k.Tenant).activate(k.Session)
	}
	f.items = append(f.items, it)
	l.n++
	t.n++
	q.n++
	q.depth[k.Tenant]++
}

func (l *level[T]) sessionClock(tenant string) *clock {
	c := l.sessions[tenant]
	if c == nil {
		c = &clock{vt: map[string]float64{}}
		l.sessions[tenant] = c
	}
	return c
}

// Remove takes a waiting job out (its attempt ended before it was
// served); it reports whether it was waiting.
func (q *Queue[T]) Remove(id string) bool {
	_, _, ok := q.Take(id)
	return ok
}

// Take takes a waiting job out, as Remove, and returns its key and value.
func (q *Queue[T]) Take(id string) (k Key, v T, ok bool) {
	it, ok := q.byID[id]
	if !ok {
		return k, v, false
	}
	it.removed = true
	q.unlink(it)
	return it.key, it.value, true
}

// unlink forgets a job that leaves the queue (served or removed); its
// entry in the session's FIFO is skipped (removed) or was popped.
func (q *Queue[T]) unlink(it *item[T]) {
	delete(q.byID, it.id)
	k := it.key
	l := q.levels[k.Priority]
	t := l.tenants[k.Tenant]
	f := t.sessions[k.Session]
	l.n--
	t.n--
	q.n--
	if q.depth[k.Tenant]--; q.depth[k.Tenant] == 0 {
		delete(q.depth, k.Tenant)
	}
	f.compact()
	if f.empty() {
		delete(t.sessions, k.Session)
	}
	if t.n == 0 {
		delete(l.tenants, k.Tenant)
		if vt, ok := l.clock.vt[k.Tenant]; !ok || vt <= l.clock.v {
			// Not ahead of the others: nothing to remember of its sessions.
			delete(l.sessions, k.Tenant)
		}
	}
	if l.n == 0 {
		// Nothing waits at this priority: a new busy period starts even.
		delete(q.levels, k.Priority)
	}
}

// Pop takes the job to serve next (the package doc says which), counts
// it to its tenant and session, and returns it. ok is false when nothing
// waits.
func (q *Queue[T]) Pop() (id string, k Key, v T, ok bool) {
	if q.n == 0 {
		return "", Key{}, v, false
	}
	prio, first := 0, true
	for p, l := range q.levels {
		if l.n > 0 && (first || p > prio) {
			prio, first = p, false
		}
	}
	l := q.levels[prio]
	var tq *tenantQ[T]
	var tenant string
	bestV, bestSeq := math.Inf(1), uint64(math.MaxUint64)
	for name, t := range l.tenants {
		v, s := l.clock.start(name), t.oldest()
		if v < bestV-epsilon || (math.Abs(v-bestV) <= epsilon && s < bestSeq) {
			tq, tenant, bestV, bestSeq = t, name, v, s
		}
	}
	sc := l.sessionClock(tenant)
	var f *fifo[T]
	var session string
	bestV, bestSeq = math.Inf(1), uint64(math.MaxUint64)
	for name, ff := range tq.sessions {
		v, s := sc.start(name), ff.items[ff.head].seq
		if v < bestV-epsilon || (math.Abs(v-bestV) <= epsilon && s < bestSeq) {
			f, session, bestV, bestSeq = ff, name, v, s
		}
	}
	l.clock.serve(tenant, 1/q.weight(tenant))
	sc.serve(session, 1)
	if len(l.clock.vt) > pruneAbove {
		l.clock.prune()
	}
	if len(sc.vt) > pruneAbove {
		sc.prune()
	}
	it := f.items[f.head]
	f.items[f.head] = nil
	f.head++
	q.unlink(it)
	return it.id, it.key, it.value, true
}

// epsilon absorbs rounding, so equal virtual times tie.
const epsilon = 1e-9

// pruneAbove is how many members' virtual times a clock keeps before it
// prunes them.
const pruneAbove = 1024

func (q *Queue[T]) weight(tenant string) float64 {
	if q.Weight == nil {
		return 1
	}
	if w := q.Weight(tenant); w > 0 {
		return w
	}
	return 1
}

// oldest is the sequence of the tenant's oldest waiting job.
func (t *tenantQ[T]) oldest() uint64 {
	best := uint64(math.MaxUint64)
	for _, f := range t.sessions {
		if s := f.items[f.head].seq; s < best {
			best = s
		}
	}
	return best
}

// compact skips removed jobs at the head and drops the consumed prefix
// once it is half the slice.
func (f *fifo[T]) compact() {
	for f.head < len(f.items) && (f.items[f.head] == nil || f.items[f.head].removed) {
		f.items[f.head] = nil
		f.head++
	}
	if f.head > 32 && f.head*2 >= len(f.items) {
		f.items = append(f.items[:0], f.items[f.head:]...)
		f.head = 0
	}
}

func (f *fifo[T]) empty() bool { return f.head >= len(f.items) }
