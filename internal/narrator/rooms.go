package narrator

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/narratoria/runtime/pkg/messages"
)

// room owns the prompts of one partition this narrator owns: its session
// queues and its prompts by dedupe key, touched by one goroutine only —
// queueing, joining, a session's next prompt and a prompt's end all go
// through its mailbox (do). It stops taking prompts when the narrator
// stops (stop) or the partition's ownership ends; it ends once the
// ownership has ended and none of its sessions runs, so the partition is
// given up with every one of its prompts answered (the ones still queued
// with errNotOwner: the next owner resumes them from their attempt
// records).
type room struct {
	n  *Narrator
	op *ownedPartition
	// owned is the ownership's context: the room ends with it.
	owned context.Context
	// narrate narrates a queued prompt (Narrator.narrateQueued).
	narrate func(*job) (*messages.Narration, error)
	log     *slog.Logger
	in      chan func()
	// idle is closed once the room stopped taking prompts and none of its
	// sessions runs (Stop's grace waits for it); ended once the ownership
	// has ended too, and the room's goroutine with it.
	idle, ended chan struct{}

	// The room's goroutine's alone.
	queues   map[string]*sessionQueue
	jobs     map[string]*job
	draining int   // sessions whose prompts are being narrated
	stopped  error // nil while prompts are taken; then what a prompt sent gets
	isIdle   bool
}

// sessionQueue narrates one session's prompts one at a time, in order:
// stream prompts by stream sequence (so one redelivered goes before the
// newer ones still waiting), requests in arrival order.
type sessionQueue struct {
	pending []*job
	running bool
}

// add queues j behind every waiting stream prompt with a lower sequence.
func (q *sessionQueue) add(j *job) {
	i := len(q.pending)
	if j.seq != 0 {
		for i > 0 && q.pending[i-1].seq > j.seq {
			i--
		}
	}
	q.pending = slices.Insert(q.pending, i, j)
}

// newRoom makes the room of op; run starts it. A room made while the
// narrator stops takes no prompt.
func newRoom(n *Narrator, op *ownedPartition, stopping bool) *room {
	r := &room{n: n, op: op, owned: op.Context(), narrate: n.narrateQueued, log: n.log, in: make(chan func()), idle: make(chan struct{}),
		ended: make(chan struct{}), queues: map[string]*sessionQueue{}, jobs: map[string]*job{}}
	if stopping {
		r.stopped = ErrStopping
	}
	return r
}

// run is the room's goroutine.
func (r *room) run() {
	defer close(r.ended)
	owned := r.owned.Done()
	for {
		select {
		case f := <-r.in:
			f()
		case <-owned:
			owned = nil
			r.stop(errNotOwner)
		}
		if r.stopped != nil && r.draining == 0 {
			if !r.isIdle {
				r.isIdle = true
				close(r.idle)
			}
			if r.owned.Err() != nil {
				return
			}
		}
	}
}

// do runs f on the room's goroutine and returns once it has run; false
// when the room has ended (f does not run).
func (r *room) do(f func()) bool {
	ran := make(chan struct{})
	select {
	case r.in <- func() { f(); close(ran) }:
	case <-r.ended:
		return false
	}
	<-ran
	return true
}

// stop makes the room take no more prompts: the ones queued get why
// (ErrStopping, errNotOwner); the ones being narrated go on.
func (r *room) stop(why error) {
	if r.stopped == nil {
		r.stopped = why
	}
	for _, q := range r.queues {
		rest := q.pending
		q.pending = nil
		for _, j := range rest {
			r.answer(j, nil, r.stopped)
		}
	}
}

// has says whether the prompt of key is queued or being narrated here.
func (r *room) has(key string) bool {
	found := false
	r.do(func() { found = r.jobs[key] != nil })
	return found
}

// enqueue queues a prompt of the partition, or joins the same prompt
// queued or being narrated; done gets its narration.
func (r *room) enqueue(tctx context.Context, p *messages.Prompt, implicitID string, seq uint64, done func(*messages.Narration, error)) {
	key := promptKey(p, implicitID)
	var refused error
	joined := false
	if !r.do(func() {
		if r.stopped != nil {
			refused = r.stopped
			return
		}
		if j := r.jobs[key]; key != "" && j != nil {
			j.done, joined = append(j.done, done), true
			return
		}
		j := &job{part: r.op, prompt: p, implicitID: implicitID, key: key, seq: seq, at: time.Now(),
			done: []func(*messages.Narration, error){done}, trace: tctx}
		if key != "" {
			r.jobs[key] = j
			r.inflight(1)
		}
		q := r.queues[p.SessionID]
		if q == nil {
			q = &sessionQueue{}
			r.queues[p.SessionID] = q
		}
		q.add(j)
		if !q.running {
			q.running = true
			r.draining++
			go r.drain(p.SessionID, q)
		}
	}) {
		refused = errNotOwner
	}
	switch {
	case refused != nil:
		done(nil, refused)
	case joined:
		r.log.Debug("narrator: prompt already queued or being narrated; it gets the same narration",
			slog.String("sessionId", p.SessionID), slog.String("key", key))
	}
}

// next is the session's next prompt, nil when none is left (a room that
// stopped has answered every prompt queued): the session's drain then
// ends.
func (r *room) next(session string, q *sessionQueue) *job {
	if len(q.pending) == 0 {
		q.running = false
		delete(r.queues, session)
		r.draining--
		return nil
	}
	j := q.pending[0]
	q.pending = q.pending[1:]
	return j
}

// answer gives everyone waiting for j its narration (on the room's
// goroutine: the answers publish, ack or hand over, never wait for the
// room).
func (r *room) answer(j *job, nar *messages.Narration, err error) {
	done := j.done
	j.done = nil
	if j.key != "" && r.jobs[j.key] == j {
		delete(r.jobs, j.key)
		r.inflight(-1)
	}
	for _, d := range done {
		d(nar, err)
	}
}

// inflight counts d more prompts with an ID in progress (the narrator's).
func (r *room) inflight(d int64) {
	if r.n != nil {
		r.n.inflight.Add(d)
	}
}

// drain narrates a session's prompts one at a time until none is left.
func (r *room) drain(session string, q *sessionQueue) {
	for {
		var j *job
		r.do(func() { j = r.next(session, q) })
		if j == nil {
			return
		}
		nar, err := r.narrate(j)
		r.do(func() { r.answer(j, nar, err) })
	}
}
