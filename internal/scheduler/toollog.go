package scheduler

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"time"

	"github.com/narratoria/runtime/internal/partition"
)

// A plan's tool records go to its tool log (store.go) gathered: the
// records the actor's steps make while it works through its mailbox are
// written as one message when it is done with what it took, or sooner,
// before anything that must come after them — a write of the plan record
// (the store keeps the order of what was written), or any effect that
// waits for the plan's writes (settled). A wide plan whose outcomes arrive
// together thus stores a fraction of a message per tool; a chain, whose
// tools end one at a time, one per tool, as before. Nothing waits for a
// gathering: what a step writes is sent before the actor waits for its
// next message. An outcome is acknowledged (or answered) only once the
// message with its tool's record is stored.

// toolLogMax bounds the records gathered in one message of a tool log; a
// record bigger than that is a message of its own.
const toolLogMax = 256 << 10

// toolRecord is one tool's encoded record, waiting to be written.
type toolRecord struct {
	tool string
	body []byte
}

// pendingLog is what the actor gathered for its plan's tool log.
type pendingLog struct {
	recs []toolRecord
	at   map[string]int // tool → its record in recs: a later record replaces it
	size int
	// acks are the outcomes whose records are among recs (or were written
	// before them): acknowledged once recs are stored.
	acks []outcomeDelivery
}

// addTool gathers a tool's record, writing what was gathered first when
// it would grow past toolLogMax.
func (a *actor) addTool(tool string, body []byte) {
	p := &a.pend
	if i, ok := p.at[tool]; ok {
		p.size += len(body) - len(p.recs[i].body)
		p.recs[i].body = body
		return
	}
	if len(p.recs) > 0 && p.size+len(body) > toolLogMax {
		a.flush()
	}
	if p.at == nil {
		p.at = map[string]int{}
	}
	p.at[tool] = len(p.recs)
	p.recs = append(p.recs, toolRecord{tool: tool, body: body})
	p.size += len(body) + len(tool) + 4
}

// flush writes the gathered records as one message of the tool log and
// acknowledges, once it is stored, the outcomes waiting for it.
func (a *actor) flush() {
	p := &a.pend
	if len(p.recs) == 0 {
		return
	}
	a.persist(a.s.store.putToolLog(a.m.ID(), p.recs, a.part.writer), nil)
	acks := p.acks
	p.recs, p.acks, p.size = p.recs[:0], nil, 0
	clear(p.at)
	a.ackAll(acks)
}

// ackLater acknowledges an outcome once the writes it caused are stored:
// with the gathered records when there are some (they may hold its
// tool's record, or one its acknowledgement must not outrun), else with
// the newest write.
func (a *actor) ackLater(msg outcomeDelivery) {
	if msg == nil {
		return
	}
	if len(a.pend.recs) > 0 {
		a.pend.acks = append(a.pend.acks, msg)
		return
	}
	a.ackAll([]outcomeDelivery{msg})
}

// ackAll acks outcomes once the newest write is stored, so a crash before
// then means their redelivery, not their loss. Outcomes whose writes the
// fence refused are left to the partition's new owner.
func (a *actor) ackAll(msgs []outcomeDelivery) {
	if len(msgs) == 0 {
		return
	}
	w := a.lastWrite
	if w == nil {
		for _, m := range msgs {
			_ = m.Ack()
		}
		return
	}
	a.s.life.Go(func(ctx context.Context) {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := w.Wait(wctx)
		if err == nil && a.writeRefused.Load() {
			// An earlier write of the plan was refused for good: the
			// outcomes come again (to a plan then ended, or to the
			// scheduler that resumes it from the store).
			err = errStateRefused
		}
		switch {
		case partition.Refused(err):
			a.part.Lose("tool state")
			return
		case err != nil:
			a.log.Warn("scheduler: state write not confirmed; outcomes will be redelivered", slog.Int("outcomes", len(msgs)), slog.Any("error", err))
			for _, m := range msgs {
				_ = m.Nak()
			}
			return
		}
		for _, m := range msgs {
			_ = m.Ack()
		}
	})
}

// encodeToolLog is the body of a tool log message: a JSON object of the
// records by tool ID.
func encodeToolLog(recs []toolRecord) []byte {
	n := 2
	for _, r := range recs {
		n += len(r.tool) + len(r.body) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, r := range recs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, r.tool)
		b = append(b, ':')
		b = append(b, r.body...)
	}
	return append(b, '}')
}

// decodeToolLog reads a tool log message's records.
func decodeToolLog(b []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	err := json.Unmarshal(b, &m)
	return m, err
}
