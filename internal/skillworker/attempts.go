package skillworker

import (
	"container/list"
	"fmt"
	"sync"
	"time"
)

// attemptMemoryDefault bounds how many finished attempts a worker
// remembers, and attemptMemoryTTL how long.
const (
	attemptMemoryDefault = 16384
	attemptMemoryTTL     = time.Hour
)

// attempts is what a worker knows of the attempts it took: the ones it is
// running or publishing now, and the ones it finished, with their encoded
// outcome. A job for one of them is never run again: the store may hand a
// job back after the worker took it (a redelivery past the ack wait while
// the outcome is still being stored, or a forgotten ack after nats-server
// was killed), and the script's effects must not happen twice. The memory
// lives as long as the worker; a job redelivered to another worker is
// guarded by the scheduler's probe, not by this (docs/architecture.md).
type attempts struct {
	mu      sync.Mutex
	running map[string]struct{}
	done    map[string]*list.Element
	order   *list.List // of *finished, oldest first
	max     int
	ttl     time.Duration
	now     func() time.Time
}

// finished is one remembered outcome.
type finished struct {
	id, subject string
	data        []byte
	at          time.Time
}

func newAttempts(max int, ttl time.Duration) *attempts {
	return &attempts{running: map[string]struct{}{}, done: map[string]*list.Element{}, order: list.New(), max: max, ttl: ttl, now: time.Now}
}

// attemptID names one attempt of one tool of one plan; it is also the
// outcome's message ID.
func attemptID(plan, tool string, attempt int) string {
	return fmt.Sprintf("%s.%s.%d", plan, tool, attempt)
}

// claim reports what the worker knows of attempt id. When it knows
// nothing, the attempt is marked running and ok is true: the caller runs
// it and must call finish or forget. Otherwise ok is false and prior, when
// not nil, is the outcome it already produced (nil: still running here).
func (a *attempts) claim(id string) (prior *finished, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expire()
	if _, run := a.running[id]; run {
		return nil, false
	}
	if e, seen := a.done[id]; seen {
		f := *e.Value.(*finished)
		return &f, false
	}
	a.running[id] = struct{}{}
	return nil, true
}

// finish records the outcome of a claimed attempt.
func (a *attempts) finish(id, subject string, data []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.running, id)
	if e, seen := a.done[id]; seen {
		a.order.Remove(e)
	}
	a.done[id] = a.order.PushBack(&finished{id: id, subject: subject, data: data, at: a.now()})
	for a.order.Len() > a.max {
		a.drop(a.order.Front())
	}
}

// forget releases a claimed attempt that produced no outcome (its job was
// handed back), so its next delivery runs it.
func (a *attempts) forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.running, id)
}

func (a *attempts) expire() {
	cut := a.now().Add(-a.ttl)
	for e := a.order.Front(); e != nil && e.Value.(*finished).at.Before(cut); e = a.order.Front() {
		a.drop(e)
	}
}

func (a *attempts) drop(e *list.Element) {
	delete(a.done, e.Value.(*finished).id)
	a.order.Remove(e)
}
