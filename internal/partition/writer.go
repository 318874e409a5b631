package partition

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Writer sends the writes stamped with one fence, in the order they are
// given, and reports each one's fate.
//
// A replicated stream (R>1) cannot take two writes that check the same
// subject at once: while one is being replicated, its leader refuses the
// next with "last sequence by subject mismatch" (the constant form of the
// error, Busy), although no newer fence exists. Every write of an owner
// checks its fence subject, so a Writer for a replicated stream has one
// write in flight at a time, and sends a write refused as busy again (the
// leader acknowledges a write a moment before it lets go of it); for a
// single-replica stream it pipelines them.
//
// An ordered Writer keeps what is stored in the order of what was
// written. A write that fails for a passing reason (no response while the
// server restarts, a timeout) is sent again, with backoff, until it is
// stored — and so is every write after it, one at a time and whether or
// not it was stored already: across a reconnect, a write sent before the
// connection dropped may be lost while later ones, buffered by the client,
// are stored, and a later write of the same key must land after the
// earlier one. It goes back to pipelining once it has caught up. A write
// refused by a newer fence fails, and so does every later one (not sent):
// OnFail is called once, and the owner must stop acting on its partition.
// Waiting for the newest write thus waits for all of them.
type Writer struct {
	js     jetstream.JetStream
	fence  Fence
	cfg    WriterConfig
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	queue   []*Write
	pumping bool
	// repairing is set while an ordered Writer sends its writes again
	// after a failure: nothing is pipelined then.
	repairing bool
	failed    error
	closed    bool
	pump      sync.WaitGroup
	resent    int
}

// WriterConfig says how a Writer sends.
type WriterConfig struct {
	// Replicated is true when the stream has more than one replica: one
	// write in flight at a time.
	Replicated bool
	// Ordered makes the Writer send failed writes again, and a refusal
	// fail every later write (see Writer).
	Ordered bool
	// Timeout bounds each write (default 10 s).
	Timeout time.Duration
	// OnFail is called once, with the error of the first write a newer
	// fence refused (ordered writers only).
	OnFail func(error)
}

// ErrWriterClosed is the error of a write given to a closed Writer.
var ErrWriterClosed = errors.New("partition: writer closed")

// NewWriter returns a Writer for the writes stamped with fence. Writes not
// settled when ctx ends fail with ErrWriterClosed; Close or Abort ends the
// Writer.
func NewWriter(ctx context.Context, js jetstream.JetStream, fence Fence, cfg WriterConfig) *Writer {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	wctx, cancel := context.WithCancel(ctx)
	return &Writer{js: js, fence: fence, cfg: cfg, ctx: wctx, cancel: cancel}
}

// Write is one write given to a Writer.
type Write struct {
	msg    *nats.Msg
	opts   []jetstream.PublishOpt
	future jetstream.PubAckFuture // pipelined writes only
	done   chan struct{}
	ack    *jetstream.PubAck
	err    error
}

// Wait returns the server's acknowledgement once the write is stored, or
// its error; or ctx's error if ctx ends first.
func (x *Write) Wait(ctx context.Context) (*jetstream.PubAck, error) {
	select {
	case <-x.done:
		return x.ack, x.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Done is closed once the write's fate is known.
func (x *Write) Done() <-chan struct{} { return x.done }

// Publish stamps m with the Writer's fence and queues it. The returned
// Write says when it is stored.
func (w *Writer) Publish(m *nats.Msg, opts ...jetstream.PublishOpt) *Write {
	w.fence.Stamp(m)
	x := &Write{msg: m, opts: opts, done: make(chan struct{})}
	w.mu.Lock()
	switch {
	case w.closed:
		w.mu.Unlock()
		x.finish(nil, ErrWriterClosed)
		return x
	case w.failed != nil && w.cfg.Ordered:
		err := w.failed
		w.mu.Unlock()
		x.finish(nil, fmt.Errorf("an earlier write failed: %w", err))
		return x
	}
	if !w.cfg.Replicated && !w.repairing {
		// Sent now, under the lock: the connection keeps the order. A
		// write the client cannot take now (closed, stalled) is sent by
		// the pump instead, and nothing after it is pipelined meanwhile.
		if f, err := w.js.PublishMsgAsync(m, opts...); err == nil {
			x.future = f
		} else {
			w.repairing = w.cfg.Ordered
		}
	}
	w.queue = append(w.queue, x)
	if !w.pumping {
		w.pumping = true
		w.pump.Add(1)
		go w.run()
	}
	w.mu.Unlock()
	return x
}

func (x *Write) finish(ack *jetstream.PubAck, err error) {
	x.ack, x.err = ack, err
	close(x.done)
}

// failLocked records the first failure of an ordered Writer; it reports
// whether OnFail is to be called (once the lock is released).
func (w *Writer) failLocked(err error) bool {
	if !w.cfg.Ordered || w.failed != nil {
		return false
	}
	w.failed = err
	return w.cfg.OnFail != nil && !errors.Is(err, ErrWriterClosed)
}

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
			if err != nil && w.cfg.Ordered && !Refused(err) && w.ctx.Err() == nil {
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
		}
		x.finish(ack, err)
		if call {
			w.cfg.OnFail(err)
		}
	}
}

// send publishes x and waits for the server. An ordered Writer tries again
// with backoff until x is stored, refused by a newer fence, or the Writer
// ends. again says x was sent before: then a duplicate (its message ID
// seen) means that earlier send was stored, which counts as stored now.
func (w *Writer) send(x *Write, again bool) (*jetstream.PubAck, error) {
	wait := 50 * time.Millisecond
	for {
		if again {
			w.mu.Lock()
			w.resent++
			w.mu.Unlock()
		}
		var ack *jetstream.PubAck
		err := RetryBusy(w.ctx, func() (err error) {
			ctx, cancel := context.WithTimeout(w.ctx, w.cfg.Timeout)
			defer cancel()
			ack, err = w.js.PublishMsg(ctx, x.msg, x.opts...)
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
		if !w.cfg.Ordered || Refused(err) || w.ctx.Err() != nil {
			return nil, err
		}
		again = true
		select {
		case <-w.ctx.Done():
			return nil, w.ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// RetryBusy runs publish, a fenced write, again after 1 ms (doubling to
// 32 ms) while its error is Busy, for up to busyRetryFor or until ctx
// ends; it returns the last error.
func RetryBusy(ctx context.Context, publish func() error) error {
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

// Resent returns how many times writes were sent again after a failure.
func (w *Writer) Resent() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.resent
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

// Close refuses further writes and waits until every queued write is
// settled (each bounded by the timeout).
func (w *Writer) Close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.pump.Wait()
	w.cancel()
}

// CloseWithin is Close bounded by d: the writes not settled by then fail
// as with Abort.
func (w *Writer) CloseWithin(d time.Duration) {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	done := make(chan struct{})
	go func() {
		w.pump.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		w.cancel()
		<-done
	}
	w.cancel()
}

// Abort ends the Writer at once: the writes not settled yet fail with
// ErrWriterClosed (OnFail is not called for them).
func (w *Writer) Abort() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cancel()
	w.pump.Wait()
}
