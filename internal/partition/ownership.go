package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/narratoria/runtime/internal/election"
	"github.com/narratoria/runtime/pkg/client"
)

// Ownership is one term of one partition held by this process: the lease
// term it was won under, the fences raised when it was taken, and the
// context of the work done under it, which ends when the ownership does.
// The scheduler and the narrator hold their partitions through it; each
// adds what it runs under the ownership (writers, consumers, work).
//
// An ownership ends in one of two ways: the component lets it go (its
// lease moved or lapsed, it is stopping: Release), or a write was refused
// by a newer fence (Lose), which means another instance owns the
// partition now, or the fence vanished (see Why).
type Ownership struct {
	// P is the partition.
	P int
	// Term is the lease's term.
	Term election.Term
	// Fences are the fences raised when the partition was taken, in the
	// order of the subjects given to Take.
	Fences []Fence
	// Log is the component's logger, naming the partition.
	Log *slog.Logger

	js     jetstream.JetStream
	role   string
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
}

// Take starts an ownership of partition p under term: it raises a fence on
// each subject, in order, trying again until it succeeds (a new owner must
// fence its partition before it acts on it). role names the component in
// logs ("scheduler", "narrator"); owner is its instance ID, written in
// the fence markers. The ownership's Context ends when ctx does, or when
// the ownership is released or lost; Take fails only when ctx ends first.
// The caller must Release the ownership when it is done with it.
func Take(ctx context.Context, js jetstream.JetStream, role, owner string, p int, term election.Term, log *slog.Logger,
	subjects ...string) (*Ownership, error) {
	octx, cancel := context.WithCancel(ctx)
	fences, err := RaiseAll(octx, js, owner, log, subjects...)
	if err != nil {
		cancel()
		return nil, err
	}
	return &Ownership{P: p, Term: term, Fences: fences, Log: log, js: js, role: role, ctx: octx, cancel: cancel}, nil
}

// Context is the context of the work done under the ownership: it ends
// when the ownership does.
func (o *Ownership) Context() context.Context { return o.ctx }

// Held reports whether the ownership is certainly still this process's:
// not ended, and its lease renewed recently enough (election.Term.Held).
// Check it right before an action another owner must never see twice.
func (o *Ownership) Held() bool { return o.ctx.Err() == nil && o.Term.Held() }

// Release ends the ownership (a hand-over, a lost lease, a stop).
func (o *Ownership) Release() { o.cancel() }

// Lose ends the ownership after a write the partition's fence refused:
// from now on another instance may own the partition. It logs, once, what
// was refused and why (Why).
func (o *Ownership) Lose(what string) { o.end(what, "") }

// Lapsed ends the ownership when its lease was found not renewed in time
// (Term.Held) right before what: this process was paused or starved, and
// another instance may own the partition already.
func (o *Ownership) Lapsed(what string) {
	o.end(what, "the lease was not renewed in time (this process was paused or starved of CPU)")
}

// end ends the ownership once and logs why; reason "" asks the fences.
func (o *Ownership) end(what, reason string) {
	o.once.Do(func() {
		o.cancel()
		if reason == "" {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			reason = "a write was refused by the partition's fence: " + o.Why(ctx)
			cancel()
		}
		o.Log.Warn(o.role+": giving the partition up (it is taken again with a new fence if this instance still holds its lease)",
			slog.String("before", what), slog.String("reason", reason))
	})
}

// Why says what became of the ownership's fences: whether each is still
// the newest marker of its subject, was replaced by a newer one (another
// owner), or is gone (a purged bucket, a re-created stream, a store rolled
// back) — the real reason a fenced write was refused.
func (o *Ownership) Why(ctx context.Context) string {
	for _, f := range o.Fences {
		st, err := o.js.Stream(ctx, f.Stream)
		if err != nil {
			return fmt.Sprintf("the fence's stream %s cannot be read: %v", f.Stream, err)
		}
		m, err := st.GetLastMsgForSubject(ctx, f.Subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return fmt.Sprintf("the fence %s is gone from %s (purged, re-created or rolled back)", f.Subject, f.Stream)
		case err != nil:
			return fmt.Sprintf("the fence %s cannot be read: %v", f.Subject, err)
		case m.Sequence > f.Seq:
			return fmt.Sprintf("another %s raised a newer fence on %s", o.role, f.Subject)
		case m.Sequence < f.Seq:
			return fmt.Sprintf("the fence %s went back in %s (a store rolled back)", f.Subject, f.Stream)
		}
	}
	return fmt.Sprintf("the fences are still this %s's (a refusal for another reason)", o.role)
}

// Writer returns a Writer of the writes stamped with Fences[i]. Its writes
// go one at a time (or in atomic batches) when the fence's stream is
// replicated (cfg.Replicated is set here); a refusal of an ordered
// Writer's write loses the ownership. The Writer lives on ctx, not on the
// ownership's Context, so its pending writes may land during a hand-over.
func (o *Ownership) Writer(ctx context.Context, i int, what string, cfg WriterConfig) *Writer {
	cfg.Replicated = Replicated(o.ctx, o.js, o.Fences[i].Stream)
	if cfg.Ordered {
		cfg.OnFail = func(error) { o.Lose(what) }
		if cfg.OnRetry == nil && o.Log != nil {
			cfg.OnRetry = func(err error, failures int) { retryLogged(o.Log, what, err, failures) }
		}
	}
	return NewWriter(ctx, o.js, o.Fences[i], cfg)
}

// retryLogged logs a write an ordered Writer sends again (a passing
// failure: a leader election, a restart; a refusal for good is not sent
// again, see Writer): its first failure, then every tenth (about every
// 10 s once the backoff is at its longest).
func retryLogged(log *slog.Logger, what string, err error, failures int) {
	if failures != 1 && failures%10 != 0 {
		return
	}
	log.Warn("partition: a "+what+" write failed; sending it again", slog.Int("failures", failures), slog.Any("error", err))
}

// Replicated reports whether a stream has more than one replica (its
// fenced writes go one at a time: Writer); true when it cannot tell.
func Replicated(ctx context.Context, js jetstream.JetStream, stream string) bool {
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := js.Stream(ictx, stream) // fetches the stream's info
	if err != nil {
		return true
	}
	return st.CachedInfo().Config.Replicas > 1
}

// WaitStored waits for x, a write of w, and while it fails for a passing
// reason (no answer through a leader election or a server restart) sends
// it again — the same message, so its message ID makes a repeat harmless —
// with backoff (100 ms doubling to 1 s) for up to retryFor. A refusal by a
// newer fence (Refused), a refusal sending again does not change (a full
// stream, a message too large: client.Refused), a closed Writer
// (ErrWriterClosed) or ctx ending end it at once with that error.
func (w *Writer) WaitStored(ctx context.Context, x *Write, retryFor time.Duration) (*jetstream.PubAck, error) {
	ack, err := x.Wait(ctx)
	deadline := time.Now().Add(retryFor)
	for wait := 100 * time.Millisecond; err != nil && ctx.Err() == nil && !Refused(err) && !client.Refused(err) &&
		!errors.Is(err, ErrWriterClosed) && time.Now().Add(wait).Before(deadline); wait = min(2*wait, time.Second) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		again := &nats.Msg{Subject: x.msg.Subject, Data: x.msg.Data, Header: x.msg.Header}
		w.mu.Lock()
		w.resent++
		w.mu.Unlock()
		ack, err = w.Publish(again, x.opts...).Wait(ctx)
	}
	return ack, err
}

// Holdings are the partitions a component owns now, each with the state
// it keeps under its ownership (a pointer, T).
type Holdings[T comparable] struct {
	mu    sync.Mutex
	held  map[int]T
	count int
	gauge prometheus.Gauge
}

// NewHoldings returns empty holdings of count partitions; gauge (may be
// nil) counts the partitions held.
func NewHoldings[T comparable](count int, gauge prometheus.Gauge) *Holdings[T] {
	return &Holdings[T]{held: map[int]T{}, count: count, gauge: gauge}
}

// Add records v as partition p's holder, unless ctx (the ownership's
// context) has ended: checked under the lock Remove takes, so a partition
// given up is never added back late. It reports whether v was added.
func (h *Holdings[T]) Add(ctx context.Context, p int, v T) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ctx.Err() != nil {
		return false
	}
	h.held[p] = v
	if h.gauge != nil {
		h.gauge.Inc()
	}
	return true
}

// Remove forgets partition p if v holds it.
func (h *Holdings[T]) Remove(p int, v T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held[p] == v {
		delete(h.held, p)
		if h.gauge != nil {
			h.gauge.Dec()
		}
	}
}

// Get returns partition p's holder, the zero T when it is not held.
func (h *Holdings[T]) Get(p int) T {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held[p]
}

// Owned returns the partitions held, sorted.
func (h *Holdings[T]) Owned() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Sorted(maps.Keys(h.held))
}

// All reports whether every partition is held.
func (h *Holdings[T]) All() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held) == h.count
}
