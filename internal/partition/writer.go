package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/narratoria/runtime/pkg/client"
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
// single-replica stream it pipelines them. On a replicated stream that
// allows atomic publish (nats-server 2.12+), the writes waiting behind the
// one in flight go together as one atomic batch, all checking the fence,
// so a partition's writes cost one replication round trip per batch, not
// per write; a batch the server will not take (atomic publish disabled, a
// duplicate message ID in it) is sent one write at a time.
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
//
// A write the store refuses for good (a full stream, a message over its
// maximum: client.Refused) fails alone, at once: sending it again would
// change nothing until someone frees room, and every later write would
// wait behind it — with a full plans bucket, the plans whose finishing
// would free room among them. OnRefused says which write it was; the
// writes after it go on (they are other keys' writes, or the same key's
// that its owner gives up on: see OnRefused).
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
	// noBatch is set once the stream refused an atomic batch as disabled:
	// writes go one at a time from then on.
	noBatch bool
	batches int // atomic batches stored
}

// WriterConfig says how a Writer sends.
type WriterConfig struct {
	// Replicated is true when the stream has more than one replica: one
	// write in flight at a time.
	Replicated bool
	// Ordered makes the Writer send failed writes again, and a refusal
	// fail every later write (see Writer).
	Ordered bool
	// Timeout bounds each write (default 3 s). While a replicated stream
	// elects a leader, a write reaching a server that is not the leader
	// gets no answer at all: it is given up after Timeout and sent again
	// (writes carry message IDs, or are the same write again), and on a
	// replicated stream every write behind it waits meanwhile — with 10 s,
	// jobs waited 20 s in a cluster run while other clients' writes went
	// through.
	Timeout time.Duration
	// OnFail is called once, with the error of the first write a newer
	// fence refused (ordered writers only).
	OnFail func(error)
	// OnRetry, when set, is called each time an ordered Writer is about to
	// send a failed write again, with the failure and how many times that
	// write has failed: every later write waits behind it, so a failure
	// that lasts (a full stream refusing it) must be seen.
	OnRetry func(err error, failures int)
	// OnRefused, when set, is called with each write the store refused for
	// good (client.Refused), before the write's Wait returns the refusal:
	// its owner must give up what the write was for, since a later write
	// of the same key may be stored without it.
	OnRefused func(m *nats.Msg, err error)
}

// writeTimeoutDefault is WriterConfig.Timeout's default.
const writeTimeoutDefault = 3 * time.Second

// ErrNotOwner is the error of work on a partition its instance does not
// own (any more): its lease is lost or was never held. Each component
// wraps it with what the work was (errors.Is finds it).
var ErrNotOwner = errors.New("not the owner of its partition (any more)")

// ErrWriterClosed is the error of a write given to a closed Writer.
var ErrWriterClosed = errors.New("partition: writer closed")

// NewWriter returns a Writer for the writes stamped with fence. Writes not
// settled when ctx ends fail with ErrWriterClosed; Close or Abort ends the
// Writer.
func NewWriter(ctx context.Context, js jetstream.JetStream, fence Fence, cfg WriterConfig) *Writer {
	if cfg.Timeout <= 0 {
		cfg.Timeout = writeTimeoutDefault
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
	if !w.cfg.Ordered || w.failed != nil || storeRefused(err) {
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
	var ack *jetstream.PubAck
	err := retryBusy(w.ctx, func() (err error) {
		ctx, cancel := context.WithTimeout(w.ctx, w.cfg.Timeout)
		defer cancel()
		ack, err = atomicBatch(ctx, w.js.Conn(), batch)
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

// errCodeAtomicDisabled is the server's error code for an atomic batch
// sent to a stream that does not allow atomic publish.
const errCodeAtomicDisabled jetstream.ErrorCode = 10174

// atomicBatch publishes the writes as one atomic batch (ADR-50): every
// message but the last is published with the batch's ID and its sequence
// in it, and the last commits the batch and carries the server's answer.
func atomicBatch(ctx context.Context, nc *nats.Conn, batch []*Write) (*jetstream.PubAck, error) {
	id := nuid.Next()
	for i, x := range batch {
		m := &nats.Msg{Subject: x.msg.Subject, Data: x.msg.Data, Header: nats.Header{}}
		for k, v := range x.msg.Header {
			m.Header[k] = v
		}
		m.Header.Set(batchIDHeader, id)
		m.Header.Set(batchSeqHeader, strconv.Itoa(i+1))
		if i < len(batch)-1 {
			if err := nc.PublishMsg(m); err != nil {
				return nil, err
			}
			continue
		}
		m.Header.Set(batchCommitHeader, "1")
		resp, err := nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			if errors.Is(err, nats.ErrNoResponders) {
				return nil, jetstream.ErrNoStreamResponse
			}
			return nil, err
		}
		var r struct {
			Error *jetstream.APIError `json:"error,omitempty"`
			jetstream.PubAck
		}
		if err := json.Unmarshal(resp.Data, &r); err != nil {
			return nil, fmt.Errorf("decode the answer to an atomic batch: %w", err)
		}
		if r.Error != nil {
			return nil, r.Error
		}
		if r.Stream == "" {
			return nil, jetstream.ErrInvalidJSAck
		}
		return &r.PubAck, nil
	}
	return nil, errors.New("partition: empty batch")
}

// The headers of an atomic batch (ADR-50).
const (
	batchIDHeader     = "Nats-Batch-Id"
	batchSeqHeader    = "Nats-Batch-Sequence"
	batchCommitHeader = "Nats-Batch-Commit"
)

// Batches returns how many atomic batches the Writer stored.
func (w *Writer) Batches() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.batches
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
