// Package fairshare decides which waiting job a saturated skill serves
// next (docs/spec.md §12; docs/decisions.md, "Fair when saturated"):
//
//  1. the highest priority that has a job waiting;
//  2. within it, the tenant with the least weighted service lately: the
//     jobs it was given, each divided by its weight, decayed with a
//     half-life (HalfLifeDefault), so a tenant that was served a lot a
//     minute ago is not held back now, and one that was idle has no
//     credit to hoard beyond "nothing lately";
//  3. within the tenant, the session with the least service lately
//     (sessions of a tenant weigh the same);
//  4. within the session, first in, first out: the order the plan machine
//     made its jobs ready in.
//
// Ties go to the key whose oldest waiting job came first. A Queue is
// pure: no clock (every call is given now), no goroutine, no I/O, and it
// is not safe for concurrent use; its owner serialises the calls.
package fairshare

import (
	"math"
	"time"
)

// HalfLifeDefault is how fast service is forgotten: service given one
// half-life ago counts half.
const HalfLifeDefault = 10 * time.Second

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
	halfLife float64 // seconds
	// Weight returns a tenant's weight (> 0; values ≤ 0 count as 1). Nil:
	// every tenant weighs 1.
	Weight func(tenant string) float64

	levels  map[int]*level[T]
	byID    map[string]*item[T]
	tenants map[string]*served // service by tenant
	seq     uint64
	n       int
	depth   map[string]int // waiting jobs by tenant
}

// served is a decayed sum of service: v at time at.
type served struct {
	v  float64
	at time.Time
	// sessions is the service of the tenant's sessions.
	sessions map[string]*served
}

type level[T any] struct {
	tenants map[string]*tenantQ[T]
	n       int
}

type tenantQ[T any] struct {
	sessions map[string]*fifo[T]
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

// New returns an empty queue forgetting service with the given half-life
// (HalfLifeDefault when ≤ 0).
func New[T any](halfLife time.Duration) *Queue[T] {
	if halfLife <= 0 {
		halfLife = HalfLifeDefault
	}
	return &Queue[T]{halfLife: halfLife.Seconds(), levels: map[int]*level[T]{}, byID: map[string]*item[T]{},
		tenants: map[string]*served{}, depth: map[string]int{}}
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
// is replaced (its place kept): a job is pushed once per attempt.
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
		l = &level[T]{tenants: map[string]*tenantQ[T]{}}
		q.levels[k.Priority] = l
	}
	t := l.tenants[k.Tenant]
	if t == nil {
		t = &tenantQ[T]{sessions: map[string]*fifo[T]{}}
		l.tenants[k.Tenant] = t
	}
	f := t.sessions[k.Session]
	if f == nil {
		f = &fifo[T]{}
		t.sessions[k.Session] = f
	}
	f.items = append(f.items, it)
	l.n++
	t.n++
	q.n++
	q.depth[k.Tenant]++
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
	}
	if l.n == 0 {
		delete(q.levels, k.Priority)
	}
}

// Pop takes the job to serve next (the package doc says which), counts
// one job of service to its tenant and session at now, and returns it.
// ok is false when nothing waits.
func (q *Queue[T]) Pop(now time.Time) (id string, k Key, v T, ok bool) {
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
		v := q.tenantValue(name, now) / q.weight(name)
		s := t.oldest()
		if v < bestV-epsilon || (math.Abs(v-bestV) <= epsilon && s < bestSeq) {
			tq, tenant, bestV, bestSeq = t, name, v, s
		}
	}
	sv := q.tenants[tenant]
	var f *fifo[T]
	bestV, bestSeq = math.Inf(1), uint64(math.MaxUint64)
	for name, ff := range tq.sessions {
		var v float64
		if sv != nil {
			v = sv.sessions[name].value(now, q.halfLife)
		}
		s := ff.items[ff.head].seq
		if v < bestV-epsilon || (math.Abs(v-bestV) <= epsilon && s < bestSeq) {
			f, bestV, bestSeq = ff, v, s
		}
	}
	it := f.items[f.head]
	f.items[f.head] = nil
	f.head++
	q.unlink(it)
	q.charge(it.key, now)
	return it.id, it.key, it.value, true
}

// epsilon absorbs the rounding of decayed sums, so equal service ties.
const epsilon = 1e-9

func (q *Queue[T]) weight(tenant string) float64 {
	if q.Weight == nil {
		return 1
	}
	if w := q.Weight(tenant); w > 0 {
		return w
	}
	return 1
}

// tenantValue is the tenant's service at now, unweighted.
func (q *Queue[T]) tenantValue(tenant string, now time.Time) float64 {
	return q.tenants[tenant].value(now, q.halfLife)
}

// charge counts one job of service to k's tenant and session at now.
func (q *Queue[T]) charge(k Key, now time.Time) {
	t := q.tenants[k.Tenant]
	if t == nil {
		t = &served{sessions: map[string]*served{}}
		q.tenants[k.Tenant] = t
	}
	t.add(now, q.halfLife, 1)
	s := t.sessions[k.Session]
	if s == nil {
		s = &served{}
		t.sessions[k.Session] = s
	}
	s.add(now, q.halfLife, 1)
	if len(t.sessions) > pruneAbove {
		q.prune(t, now)
	}
}

// pruneAbove is how many sessions' service a tenant keeps before the
// forgotten ones (decayed to nearly nothing, none waiting) are dropped.
const pruneAbove = 1024

// prune drops the service of sessions that is nearly forgotten.
func (q *Queue[T]) prune(t *served, now time.Time) {
	for name, s := range t.sessions {
		if s.value(now, q.halfLife) < 1e-3 {
			delete(t.sessions, name)
		}
	}
}

// value is the decayed sum at now (0 for nil).
func (s *served) value(now time.Time, halfLife float64) float64 {
	if s == nil {
		return 0
	}
	dt := now.Sub(s.at).Seconds()
	if dt <= 0 {
		return s.v
	}
	return s.v * math.Exp2(-dt/halfLife)
}

func (s *served) add(now time.Time, halfLife, cost float64) {
	s.v = s.value(now, halfLife) + cost
	if now.After(s.at) {
		s.at = now
	}
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
