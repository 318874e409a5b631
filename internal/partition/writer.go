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
// given, and reports each one's fate. It keeps the queue, the order and
// the failures; its route (routes.go) is how the writes go out: pipelined,
// serial (with atomic batches), or pipelined with repair.
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
	sink   sink
	route  route // how queued writes go out (routes.go)
	fence  Fence
	cfg    WriterConfig
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	queue   []*Write
	head    [1]*Write // the write the pump took (popOneLocked)
	pumping bool
	failed  error
	closed  bool
	pump    sync.WaitGroup
	resent  int
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
	// of the same key may be stored without it. (The write itself may be
	// stored too: an earlier send of it whose answer was lost, refused when
	// sent again. Either way its owner gives it up.)
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
	return newWriter(ctx, streamSink{js}, fence, cfg)
}

// newWriter is NewWriter over any sink.
func newWriter(ctx context.Context, s sink, fence Fence, cfg WriterConfig) *Writer {
	if cfg.Timeout <= 0 {
		cfg.Timeout = writeTimeoutDefault
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &Writer{sink: s, fence: fence, cfg: cfg, ctx: wctx, cancel: cancel}
	w.route = newRoute(w, cfg)
	return w
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
	w.route.admit(x)
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

// Batches returns how many atomic batches the Writer stored.
func (w *Writer) Batches() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.batches
}

// Resent returns how many times writes were sent again after a failure.
func (w *Writer) Resent() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.resent
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
