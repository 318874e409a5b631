package scheduler

import (
	"crypto/hmac"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/pkg/codec"
	"github.com/narratoria/runtime/pkg/messages"
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
	if m.Header.Get(messages.HeaderKind) == messages.KindProgress {
		s.relayProgress(m)
		return
	}
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

// relayProgress publishes a running tool's progress, which the worker of
// its attempt sent here (the job's outcomeTo), on the plan's progress
// subject: only once the report carries its attempt's token (worker
// credentials cannot publish progress themselves, so no other worker can
// make one up), and only for a plan this scheduler runs (its session is
// the plan's, not the report's say).
func (s *Scheduler) relayProgress(m *nats.Msg) {
	var p messages.Progress
	if err := codec.Unmarshal(m.Data, &p); err != nil || p.PlanID == "" || p.ToolID == "" || p.Progress == nil {
		s.m.badMessages.WithLabelValues("progress").Inc()
		return
	}
	want := s.keys.token(p.PlanID, p.ToolID, m.Header.Get(messages.HeaderSkill), p.Attempt)
	if !hmac.Equal([]byte(want), []byte(m.Header.Get(messages.HeaderToken))) {
		s.m.unverified.WithLabelValues("progress").Inc()
		s.log.Error("scheduler: progress refused: its token is not the attempt's (not from the worker that took the job)",
			slog.String("planId", p.PlanID), slog.String("toolId", p.ToolID), slog.Int("attempt", p.Attempt))
		return
	}
	a := s.actor(p.PlanID)
	if a == nil {
		return
	}
	p.State = string(messages.ToolRunning)
	s.publishProgress(a.session, p)
}

// outcomeDelivery is how an outcome came, and how it is settled once its
// effects are stored: a message of the outcomes stream (a jetstream.Msg,
// acknowledged or asked for again) or a worker's request (directMsg,
// answered "+" or "-"). The outcome's one path through the scheduler —
// checked, routed to its plan's actor, kept or taken — is the same for
// both; only this settles them differently.
type outcomeDelivery interface {
	Data() []byte
	Subject() string
	// Ack settles the outcome as taken.
	Ack() error
	// Nak and NakWithDelay settle it as not taken (yet): the stream
	// delivers it again, a worker stores it on the stream.
	Nak() error
	NakWithDelay(time.Duration) error
	// Term settles it as never to be taken (malformed, or forged).
	Term() error
}

var (
	_ outcomeDelivery = jetstream.Msg(nil)
	_ outcomeDelivery = (*directMsg)(nil)
)

// directMsg is an outcome taken as a request: acknowledging it answers
// "+", anything else answers "-" (the worker then stores the outcome on
// the stream).
type directMsg struct{ m *nats.Msg }

func (d *directMsg) answer(b []byte) error {
	if d.m.Reply == "" {
		return nil
	}
	return d.m.Respond(b)
}

func (d *directMsg) Data() []byte                     { return d.m.Data }
func (d *directMsg) Subject() string                  { return d.m.Subject }
func (d *directMsg) Ack() error                       { return d.answer(directTaken) }
func (d *directMsg) Nak() error                       { return d.answer(directNot) }
func (d *directMsg) NakWithDelay(time.Duration) error { return d.answer(directNot) }
func (d *directMsg) Term() error                      { return d.answer(directNot) }
