package scheduler

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Outcomes taken as requests.
//
// A worker sends a tool's outcome to the scheduler that dispatched the job
// (the job's outcomeTo) as a core NATS request, and stores it on the
// outcomes stream only when that scheduler does not answer "+" — which it
// does once the outcome's effects (the tool's record) are stored, exactly
// when it would have acknowledged the outcome on the stream. An outcome
// the scheduler took this way is never stored as a message of its own: the
// tool's record is the durable fact. Any other answer (the plan is not in
// flight here, the write failed, the partition moved) or none within the
// worker's wait, and the outcome goes to the stream as before, where the
// partition's owner finds it; one taken twice is a duplicate the plan
// machine drops.

// directSubject names a scheduler's subject for outcomes as requests:
// <prefix>.outcomes.direct.<random>. It has two tokens after "outcomes",
// the stream's subjects three or more, so the outcomes stream never
// stores what is sent on it.
func directSubject(prefix string) string {
	return prefix + ".outcomes.direct." + uuid.NewString()
}

// Answers to an outcome sent as a request.
var (
	directTaken = []byte("+")
	directNot   = []byte("-")
)

// onDirectOutcome takes an outcome sent as a request. An outcome of a plan
// this scheduler does not run is answered "-" at once, so the worker
// stores it on the stream, where the plan's owner takes it.
func (s *Scheduler) onDirectOutcome(m *nats.Msg) {
	msg := &directMsg{m: m}
	o, ok := s.checkOutcome(msg)
	if !ok {
		return
	}
	a := s.actor(o.PlanID)
	if a == nil {
		_ = msg.Nak()
		return
	}
	a.mb.put(outcomeMsg{out: o, msg: msg})
}

// directMsg is an outcome taken as a request, seen as a stream message by
// the code that handles both: acknowledging it answers "+", anything else
// answers "-" (the worker then stores the outcome on the stream).
type directMsg struct{ m *nats.Msg }

var _ jetstream.Msg = (*directMsg)(nil)

func (d *directMsg) answer(b []byte) error {
	if d.m.Reply == "" {
		return nil
	}
	return d.m.Respond(b)
}

func (d *directMsg) Metadata() (*jetstream.MsgMetadata, error) { return nil, jetstream.ErrNotJSMessage }
func (d *directMsg) Data() []byte                              { return d.m.Data }
func (d *directMsg) Headers() nats.Header                      { return d.m.Header }
func (d *directMsg) Subject() string                           { return d.m.Subject }
func (d *directMsg) Reply() string                             { return d.m.Reply }
func (d *directMsg) Ack() error                                { return d.answer(directTaken) }
func (d *directMsg) DoubleAck(context.Context) error           { return d.answer(directTaken) }
func (d *directMsg) Nak() error                                { return d.answer(directNot) }
func (d *directMsg) NakWithDelay(time.Duration) error          { return d.answer(directNot) }
func (d *directMsg) InProgress() error                         { return nil }
func (d *directMsg) Term() error                               { return d.answer(directNot) }
func (d *directMsg) TermWithReason(string) error               { return d.answer(directNot) }
