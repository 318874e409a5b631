package partition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/pkg/client"
)

// run settles the queued writes in order, as the Writer's route takes
// them, until none is left.
func (w *Writer) run() {
	defer w.pump.Done()
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.pumping = false
			w.route.idle()
			w.mu.Unlock()
			return
		}
		xs := w.route.take()
		failed := w.failed
		w.mu.Unlock()
		if failed != nil && w.cfg.Ordered {
			// Not sent: a write after a newer fence's refusal would be
			// stored out of order (take gives one write then).
			for _, x := range xs {
				w.finishWrite(x, nil, fmt.Errorf("an earlier write failed: %w", failed))
			}
			continue
		}
		w.route.settle(xs)
	}
}

// popOneLocked removes the first write of the queue and returns it, in a
// slice of the pump's own (no allocation per write).
func (w *Writer) popOneLocked() []*Write {
	w.head[0] = w.queue[0]
	w.queue[0] = nil
	w.queue = w.queue[1:]
	return w.head[:]
}

// popLocked removes the first n writes of the queue and returns them.
func (w *Writer) popLocked(n int) []*Write {
	xs := make([]*Write, n)
	copy(xs, w.queue[:n])
	clear(w.queue[:n])
	w.queue = w.queue[n:]
	return xs
}

// finishWrite settles x with the outcome of sending it. A failure is
// recorded first (an ordered Writer's first failure, told to OnFail once x
// is settled; a store refusal, told to OnRefused before); it returns the
// error x settled with (naming ErrWriterClosed when the Writer ended).
func (w *Writer) finishWrite(x *Write, ack *jetstream.PubAck, err error) error {
	if err == nil {
		x.finish(ack, nil)
		return nil
	}
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
	return err
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

// awaitAck waits for a pipelined write's acknowledgement.
func (w *Writer) awaitAck(f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
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
