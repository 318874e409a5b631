package partition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/pkg/client"
)

// run settles the queued writes in order until none is left.
func (w *Writer) run() {
	defer w.pump.Done()
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.pumping, w.repairing = false, false
			w.mu.Unlock()
			return
		}
		if batch := w.takeBatchLocked(); len(batch) > 1 {
			w.mu.Unlock()
			w.sendBatch(batch)
			continue
		}
		x := w.queue[0]
		w.queue[0] = nil
		w.queue = w.queue[1:]
		failed, repairing := w.failed, w.repairing
		w.mu.Unlock()

		var ack *jetstream.PubAck
		var err error
		switch {
		case failed != nil && w.cfg.Ordered:
			err = fmt.Errorf("an earlier write failed: %w", failed)
		case x.future != nil && !repairing:
			ack, err = w.settle(x.future)
			if err != nil && w.cfg.Ordered && !Refused(err) && !storeRefused(err) && w.ctx.Err() == nil {
				// From this write on, every write is sent again.
				w.mu.Lock()
				w.repairing = true
				w.mu.Unlock()
				ack, err = w.send(x, true)
			}
		default:
			ack, err = w.send(x, x.future != nil)
		}
		call := false
		if err != nil {
			if w.ctx.Err() != nil {
				err = fmt.Errorf("%w: %w", ErrWriterClosed, err)
			}
			w.mu.Lock()
			call = w.failLocked(err)
			w.mu.Unlock()
			w.refused(x, err)
		}
		x.finish(ack, err)
		if call {
			w.cfg.OnFail(err)
		}
	}
}

// batchMax bounds the writes of one atomic batch (the server takes up to
// 1,000) and batchBytes their size.
const (
	batchMax   = 256
	batchBytes = 4 << 20
)

// takeBatchLocked takes the writes at the head of the queue that can go
// together as one atomic batch: on a replicated stream, none failed, no
// repair under way, and none with publish options (a message ID goes in
// the Nats-Msg-Id header instead). It returns nil or a single write when
// there is nothing to batch, leaving the queue as it was.
func (w *Writer) takeBatchLocked() []*Write {
	if !w.cfg.Replicated || w.noBatch || w.repairing || w.failed != nil {
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
	batch := make([]*Write, n)
	copy(batch, w.queue[:n])
	clear(w.queue[:n])
	w.queue = w.queue[n:]
	return batch
}

// sendBatch stores batch as one atomic batch and settles each write. A
// newer fence refuses it whole; a batch the server will not take is sent
// one write at a time.
func (w *Writer) sendBatch(batch []*Write) {
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
	if err == nil {
		w.mu.Lock()
		w.batches++
		w.mu.Unlock()
		for i, x := range batch {
			one := *ack
			one.Sequence = ack.Sequence - uint64(len(batch)-1-i)
			x.finish(&one, nil)
		}
		return
	}
	if Refused(err) || w.ctx.Err() != nil {
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
		return
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeAtomicDisabled {
		w.mu.Lock()
		w.noBatch = true
		w.mu.Unlock()
	}
	// One at a time, as if each had been sent alone and not stored: a
	// batch whose acknowledgement was lost may have been stored, so each
	// is sent as a resend (a duplicate message ID counts as stored, a
	// repeated state write is the same write again).
	for i, x := range batch {
		ack, err := w.send(x, true)
		if err != nil {
			if w.ctx.Err() != nil {
				err = fmt.Errorf("%w: %w", ErrWriterClosed, err)
			}
			w.mu.Lock()
			call := w.failLocked(err)
			w.mu.Unlock()
			w.refused(x, err)
			x.finish(nil, err)
			if call {
				w.cfg.OnFail(err)
			}
			if w.cfg.Ordered && !storeRefused(err) {
				for _, rest := range batch[i+1:] {
					rest.finish(nil, fmt.Errorf("an earlier write failed: %w", err))
				}
				return
			}
			continue
		}
		x.finish(ack, nil)
	}
}

// storeRefused says whether err is the store refusing a write for good
// (client.Refused: a full stream, a message over its maximum), not a newer
// fence and not a passing failure.
func storeRefused(err error) bool { return !Refused(err) && client.Refused(err) }

// refused tells OnRefused of a write the store refused for good.
func (w *Writer) refused(x *Write, err error) {
	if w.cfg.OnRefused != nil && storeRefused(err) {
		w.cfg.OnRefused(x.msg, err)
	}
}

// send publishes x and waits for the server. An ordered Writer tries again
// with backoff until x is stored, refused by a newer fence, or the Writer
// ends. again says x was sent before: then a duplicate (its message ID
// seen) means that earlier send was stored, which counts as stored now.
func (w *Writer) send(x *Write, again bool) (*jetstream.PubAck, error) {
	wait := 50 * time.Millisecond
	failures := 0
	for {
		if again {
			w.mu.Lock()
			w.resent++
			w.mu.Unlock()
		}
		var ack *jetstream.PubAck
		err := retryBusy(w.ctx, func() (err error) {
			ctx, cancel := context.WithTimeout(w.ctx, w.cfg.Timeout)
			defer cancel()
			ack, err = w.sink.publish(ctx, x.msg, x.opts...)
			return err
		})
		if err == nil {
			if again && ack.Duplicate {
				stored := *ack
				stored.Duplicate = false
				return &stored, nil
			}
			return ack, nil
		}
		if !w.cfg.Ordered || Refused(err) || storeRefused(err) || w.ctx.Err() != nil {
			return nil, err
		}
		failures++
		if w.cfg.OnRetry != nil {
			w.cfg.OnRetry(err, failures)
		}
		again = true
		select {
		case <-w.ctx.Done():
			return nil, w.ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// retryBusy runs publish, a fenced write, again after 1 ms (doubling to
// 32 ms) while its error is Busy, for up to busyRetryFor or until ctx
// ends; it returns the last error.
func retryBusy(ctx context.Context, publish func() error) error {
	deadline := time.Now().Add(busyRetryFor)
	for wait := time.Millisecond; ; wait = min(2*wait, 32*time.Millisecond) {
		err := publish()
		if !Busy(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		// The leader has not let go of the previous write yet.
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// busyRetryFor bounds how long a write the stream leader refuses as busy
// is sent again before the refusal counts as a newer fence's.
const busyRetryFor = 2 * time.Second

// Busy reports whether err is a replicated stream's leader refusing a
// write because another write checking the same subject is still in
// process ("last sequence by subject mismatch" without sequences): one at
// a time, that is our previous write, acknowledged before the leader let
// go of it; a newer fence gives the numbered form instead.
func Busy(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// settle waits for a pipelined write's acknowledgement.
func (w *Writer) settle(f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	t := time.NewTimer(w.cfg.Timeout)
	defer t.Stop()
	select {
	case ack := <-f.Ok():
		return ack, nil
	case err := <-f.Err():
		return nil, err
	case <-w.ctx.Done():
		return nil, w.ctx.Err()
	case <-t.C:
		return nil, fmt.Errorf("write to %s not acknowledged within %s", f.Msg().Subject, w.cfg.Timeout)
	}
}
