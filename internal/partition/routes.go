package partition

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A route is how a Writer's queued writes reach its sink. The Writer keeps
// the queue, the order of the writes and their failures; a route decides
// only how they go out: pipelined for a single-replica stream, one at a
// time (or in atomic batches) for a replicated one, and for an ordered
// Writer on a single replica, pipelined with repair (see repairing).
//
// admit and take are called with the Writer's lock held; settle by the
// Writer's pump, without it.
type route interface {
	// admit is told of x as it joins the queue.
	admit(x *Write)
	// take removes from the head of the queue the next writes to settle
	// together (at least one; the queue is not empty).
	take() []*Write
	// settle sends (or waits for) the writes take gave and finishes each
	// with Writer.finishWrite.
	settle(xs []*Write)
	// idle is told that the queue ran dry and the pump stops.
	idle()
}

// newRoute returns the route of a Writer configured by cfg.
func newRoute(w *Writer, cfg WriterConfig) route {
	switch {
	case cfg.Replicated:
		return &serial{w: w}
	case cfg.Ordered:
		return &repairing{w: w, inner: &pipelined{w: w}}
	default:
		return &pipelined{w: w}
	}
}

// pipelined is the route of a single-replica stream: each write is sent as
// it is published, under the Writer's lock so that the connection keeps
// their order, and the pump waits for the acknowledgements in turn. A
// write the client cannot take when published (closed, stalled) is sent by
// the pump instead.
type pipelined struct{ w *Writer }

func (p *pipelined) admit(x *Write) { p.sendNow(x) }

// sendNow sends x without waiting; it reports whether the client took it.
func (p *pipelined) sendNow(x *Write) bool {
	f, err := p.w.sink.publishAsync(x.msg, x.opts...)
	if err != nil {
		return false
	}
	x.future = f
	return true
}

func (p *pipelined) take() []*Write { return p.w.popOneLocked() }

func (p *pipelined) settle(xs []*Write) {
	x := xs[0]
	if x.future == nil {
		ack, err := p.w.send(x, false)
		p.w.finishWrite(x, ack, err)
		return
	}
	ack, err := p.w.awaitAck(x.future)
	p.w.finishWrite(x, ack, err)
}

func (p *pipelined) idle() {}

// repairing decorates the pipelined route of an ordered Writer. Once a
// pipelined write fails for a passing reason (no acknowledgement across a
// reconnect, a timeout), or the client cannot take one, the writes
// pipelined after it may be lost with it or stored before it: from that
// write on, every write is sent again, one at a time and whether or not it
// was stored already (Writer.send, which resends until stored), and
// nothing is pipelined until the queue has run dry.
type repairing struct {
	w     *Writer
	inner *pipelined
	// on is set while repairing (under the Writer's lock).
	on bool
	// taken says whether the writes the pump took last were taken while
	// repairing (the pump's own).
	taken bool
}

func (r *repairing) admit(x *Write) {
	if !r.on && !r.inner.sendNow(x) {
		r.on = true
	}
}

func (r *repairing) take() []*Write {
	r.taken = r.on
	return r.inner.take()
}

func (r *repairing) settle(xs []*Write) {
	x := xs[0]
	if r.taken || x.future == nil {
		ack, err := r.w.send(x, x.future != nil)
		r.w.finishWrite(x, ack, err)
		return
	}
	ack, err := r.w.awaitAck(x.future)
	if err != nil && !Refused(err) && !storeRefused(err) && r.w.ctx.Err() == nil {
		r.w.mu.Lock()
		r.on = true
		r.w.mu.Unlock()
		ack, err = r.w.send(x, true)
	}
	r.w.finishWrite(x, ack, err)
}

func (r *repairing) idle() { r.on = false }

// serial is the route of a replicated stream: one write in flight at a
// time (its leader refuses a second write checking the fence subject as
// busy while the first replicates), and where the stream allows atomic
// publish the writes waiting behind it go together as one atomic batch.
type serial struct {
	w *Writer
	// noBatch is set once the stream refused an atomic batch as disabled:
	// writes go one at a time from then on (under the Writer's lock).
	noBatch bool
}

func (s *serial) admit(*Write) {}

func (s *serial) take() []*Write {
	if batch := s.batchLocked(); len(batch) > 1 {
		return batch
	}
	return s.w.popOneLocked()
}

func (s *serial) settle(xs []*Write) {
	if len(xs) > 1 {
		s.sendBatch(xs)
		return
	}
	ack, err := s.w.send(xs[0], false)
	s.w.finishWrite(xs[0], ack, err)
}

func (s *serial) idle() {}

// batchMax bounds the writes of one atomic batch (the server takes up to
// 1,000) and batchBytes their size.
const (
	batchMax   = 256
	batchBytes = 4 << 20
)

// batchLocked takes the writes at the head of the queue that can go
// together as one atomic batch: none failed and none with publish options
// (a message ID goes in the Nats-Msg-Id header instead). It returns nil
// when there is nothing to batch, leaving the queue as it was.
func (s *serial) batchLocked() []*Write {
	w := s.w
	if s.noBatch || w.failed != nil {
		return nil
	}
	n, size := 0, 0
	for n < len(w.queue) && n < batchMax {
		x := w.queue[n]
		if len(x.opts) > 0 || size+len(x.msg.Data) > batchBytes {
			break
		}
		size += len(x.msg.Data)
		n++
	}
	if n < 2 {
		return nil
	}
	return w.popLocked(n)
}

// sendBatch stores batch as one atomic batch and settles each write. A
// newer fence refuses it whole; a batch the server will not take is sent
// one write at a time.
func (s *serial) sendBatch(batch []*Write) {
	w := s.w
	msgs := make([]*nats.Msg, len(batch))
	for i, x := range batch {
		msgs[i] = x.msg
	}
	var ack *jetstream.PubAck
	err := retryBusy(w.ctx, func() (err error) {
		ctx, cancel := context.WithTimeout(w.ctx, w.cfg.Timeout)
		defer cancel()
		ack, err = w.sink.publishBatch(ctx, msgs)
		return err
	})
	switch {
	case err == nil:
		w.mu.Lock()
		w.batches++
		w.mu.Unlock()
		for i, x := range batch {
			one := *ack
			one.Sequence = ack.Sequence - uint64(len(batch)-1-i)
			x.finish(&one, nil)
		}
		return
	case Refused(err) || w.ctx.Err() != nil:
		s.failBatch(batch, err)
		return
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeAtomicDisabled {
		w.mu.Lock()
		s.noBatch = true
		w.mu.Unlock()
	}
	// One at a time, as if each had been sent alone and not stored: a
	// batch whose acknowledgement was lost may have been stored, so each
	// is sent as a resend (a duplicate message ID counts as stored, a
	// repeated state write is the same write again).
	for i, x := range batch {
		ack, err := w.send(x, true)
		if err = w.finishWrite(x, ack, err); err != nil && w.cfg.Ordered && !storeRefused(err) {
			for _, rest := range batch[i+1:] {
				rest.finish(nil, fmt.Errorf("an earlier write failed: %w", err))
			}
			return
		}
	}
}

// failBatch fails every write of a batch refused whole (a newer fence) or
// cut short by the Writer's end.
func (s *serial) failBatch(batch []*Write, err error) {
	w := s.w
	if w.ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", ErrWriterClosed, err)
	}
	w.mu.Lock()
	call := w.failLocked(err)
	w.mu.Unlock()
	for _, x := range batch {
		x.finish(nil, err)
	}
	if call {
		w.cfg.OnFail(err)
	}
}
