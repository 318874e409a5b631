package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// IsConflict reports whether a KV create or update lost a compare-and-set
// race (the key exists, or its revision moved on).
//
// A single-node stream reports the conflict as JetStream error 10071; a
// replicated (R3) one as 10164 (wrong last sequence, constant form). Both
// are conflicts, to be retried, never hard errors.
func IsConflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			return true
		}
	}
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// Sleep waits for d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Consume feeds the messages of a durable pull consumer to fn, one at a
// time, until ctx ends. The consumer is created (or updated) first; when it
// or the pull fails the loop waits a second and starts again, so a NATS
// outage never ends it. prefetch bounds the messages buffered in the client.
func Consume(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig, prefetch int,
	log *slog.Logger, fn func(jetstream.Msg)) {
	ConsumeReady(ctx, js, stream, cfg, prefetch, log, fn, nil)
}

// pullExpiry is how long one pull request of Consume waits. The server
// sends a heartbeat every half of it while it waits, and a consumer that
// misses two is started again: a consumer that vanished without notice
// (its stream deleted and provisioned again between two pull requests)
// is noticed within pullExpiry, not the client's default 30 s. Idle, each
// consumer costs a request and two heartbeats per pullExpiry.
const pullExpiry = 6 * time.Second

// ConsumeReady is Consume, calling ready (if not nil) once, when the
// consumer exists and messages are being pulled.
//
// The consumer is created once and its handle kept. When the pull ends
// (heartbeats missed while the consumer's or the stream's leader is
// re-elected, a reconnect), the consumer is asked whether it still
// exists: only a consumer the server says is gone (its stream deleted and
// provisioned again) is created again. Creating one goes through the
// JetStream meta leader, which a cluster may be electing at that very
// moment; pulling from the existing one does not.
func ConsumeReady(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig, prefetch int,
	log *slog.Logger, fn func(jetstream.Msg), ready func()) {
	consume(ctx, js, stream, cfg, prefetch, log, fn, ready, false)
}

// ConsumeInOrder is ConsumeReady for consumers whose order matters (a
// session's prompts, its plans): the consumer is rewound (Rewind) before
// the first pull, and again when a pull that broke (heartbeats missed
// while the consumer's leader was re-elected, a reconnect) lost
// deliveries — seen as a gap in the consumer sequence of the next
// message, which is then not handed over. A message the broken pull had
// taken but not handed over (in its buffer, or lost on the way from a
// leader that died) would otherwise come again only after the ack wait,
// behind the newer messages of its session (TestClusterFailure caught one
// session narrated out of order). Messages already handed over come again
// too; the callers are idempotent for them. It returns without pulling
// when ctx ends before the first rewind succeeded.
func ConsumeInOrder(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig, prefetch int,
	log *slog.Logger, fn func(jetstream.Msg), ready func()) {
	cfg, err := Rewind(ctx, js, stream, cfg, log)
	if err != nil {
		return
	}
	consume(ctx, js, stream, cfg, prefetch, log, fn, ready, true)
}

func consume(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig, prefetch int,
	log *slog.Logger, fn func(jetstream.Msg), ready func(), inOrder bool) {
	var cons jetstream.Consumer
	// handed is the consumer sequence (one per delivery, redeliveries
	// included) of the last message handed to fn; 0 right after a rewind.
	// A delivery after a broken pull that does not follow it means
	// deliveries were lost in between (dropped with the old pull's
	// buffer, or sent by a leader that died): only then is a rewind
	// needed, and it is done before that message is handed over.
	var handed uint64
	for ctx.Err() == nil {
		if cons == nil {
			c, err := js.CreateOrUpdateConsumer(ctx, stream, cfg)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("consumer unavailable; retrying", slog.String("consumer", cfg.Durable), slog.Any("error", err))
					Sleep(ctx, time.Second)
				}
				continue
			}
			cons = c
		}
		it, err := cons.Messages(jetstream.PullMaxMessages(prefetch), jetstream.PullExpiry(pullExpiry))
		if err != nil {
			log.Warn("cannot pull; retrying", slog.String("consumer", cfg.Durable), slog.Any("error", err))
			cons = nil
			Sleep(ctx, time.Second)
			continue
		}
		stop := context.AfterFunc(ctx, it.Stop)
		if ready != nil {
			ready()
			ready = nil
		}
		var ended error
		gap := false
		for {
			msg, err := it.Next()
			if err != nil {
				ended = err
				break
			}
			if inOrder {
				if md, err := msg.Metadata(); err == nil {
					if handed != 0 && md.Sequence.Consumer != handed+1 {
						gap = true
						log.Info("deliveries lost while the pull was broken; rewinding the consumer", slog.String("consumer", cfg.Durable),
							slog.Uint64("handed", handed), slog.Uint64("next", md.Sequence.Consumer))
						break
					}
					handed = md.Sequence.Consumer
				}
			}
			fn(msg)
		}
		stop()
		it.Stop()
		if ctx.Err() != nil {
			return
		}
		if !gap && consumerGone(ctx, cons, ended) {
			cons, handed = nil, 0
			continue
		}
		if gap {
			if _, err := Rewind(ctx, js, stream, cfg, log); err != nil {
				return // ctx ended
			}
			handed = 0
		}
	}
}

// consumerGone reports whether a pull that ended with err ended because
// its consumer no longer exists: the server said so, or says so now. A
// consumer the server cannot tell about (no leader yet, a timeout) is
// taken to exist: pulling again costs nothing, while creating it again
// would wait for the meta leader.
func consumerGone(ctx context.Context, cons jetstream.Consumer, err error) bool {
	if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
		return true
	}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, ierr := cons.Info(ictx)
	return errors.Is(ierr, jetstream.ErrConsumerNotFound) || errors.Is(ierr, jetstream.ErrStreamNotFound)
}

// StopWatch stops a KV watch and drains what it still delivers. nats.go
// hands each update to the watch's channel with a blocking send, and
// stopping the watch does not end a send already waiting: a reader that
// stops reading with the channel full (256 updates behind) leaks the
// client's delivery goroutine for good (goleak caught one under load).
// The drain ends when the client closes the channel, once the
// subscription is gone.
func StopWatch(w jetstream.KeyWatcher) {
	_ = w.Stop()
	go func() {
		for range w.Updates() {
		}
	}()
}

// Mirror follows every key of a bucket: apply sees each current value, then
// each change (deletes included), until ctx ends. It returns once the
// current values have been applied (or after 10 s, with a warning). When
// the watch ends on its own (the bucket was deleted and recreated, a
// long outage), it is started again, which replays the current values.
//
// A watch can also fall silent without ending: nats.go recreates a watch's
// consumer after a gap in its deliveries, and gives that up quietly when
// the request fails. Mirror does not take silence on trust: a watch that
// delivered nothing for watchSilence while the bucket took writes it did
// not deliver is stopped and started again, with a warning.
func Mirror(ctx context.Context, kv jetstream.KeyValue, log *slog.Logger, apply func(jetstream.KeyValueEntry)) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", kv.Bucket(), err)
	}
	synced := make(chan struct{})
	go func() {
		var once sync.Once
		for {
			why := "bucket watch ended; watching again"
			if follow(ctx, kv, w, apply, func() { once.Do(func() { close(synced) }) }) {
				why = "bucket watch silent while the bucket took writes; watching again"
			}
			StopWatch(w)
			for ctx.Err() == nil {
				log.Warn(why, slog.String("bucket", kv.Bucket()))
				Sleep(ctx, time.Second)
				if w, err = kv.WatchAll(ctx); err == nil {
					break
				}
			}
			if ctx.Err() != nil {
				return
			}
		}
	}()
	select {
	case <-synced:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Second):
		log.Warn("bucket not synced after 10s; continuing", slog.String("bucket", kv.Bucket()))
	}
	return nil
}

// watchSilence is how long a Mirror's watch may deliver nothing before
// Mirror asks whether its bucket took writes meanwhile. A live watch
// delivers a write within milliseconds; registry buckets take a heartbeat
// every few seconds.
var watchSilence = 10 * time.Second

// follow applies a watch's updates until ctx ends or the watch does;
// synced is called at the end of the initial values. It reports true when
// it gave the watch up as silent: nothing delivered for watchSilence, and
// the bucket's last revision grew past the last delivered between two
// looks. Growth is what counts, not the gap alone: a bucket whose last
// message was removed (a purged delete marker) keeps a last revision no
// watch will deliver.
func follow(ctx context.Context, kv jetstream.KeyValue, w jetstream.KeyWatcher, apply func(jetstream.KeyValueEntry), synced func()) (silent bool) {
	tick := time.NewTicker(watchSilence / 2)
	defer tick.Stop()
	heard := time.Now()
	var delivered, looked uint64 // the last revision delivered; the bucket's last at the previous look
	for {
		select {
		case <-ctx.Done():
			return false
		case e, ok := <-w.Updates():
			if !ok {
				return false
			}
			heard, looked = time.Now(), 0
			if e == nil {
				synced()
				continue
			}
			delivered = max(delivered, e.Revision())
			apply(e)
		case <-tick.C:
			if time.Since(heard) < watchSilence {
				continue
			}
			last, ok := lastRevision(ctx, kv)
			if !ok {
				continue // the store did not answer: that is not the watch's silence
			}
			if looked > 0 && last > looked && last > delivered {
				return true
			}
			looked = last
		}
	}
}

// lastRevision is the bucket's last revision (its stream's last
// sequence), and false when the store did not say.
func lastRevision(ctx context.Context, kv jetstream.KeyValue) (uint64, bool) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := kv.Status(sctx)
	if err != nil {
		return 0, false
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return 0, false
	}
	return bs.StreamInfo().State.LastSeq, true
}

// Client is what every component builds on: its bus configuration with
// defaults applied, a JetStream handle and a logger.
type Client struct {
	// Config is the validated bus configuration.
	Config Config
	// JS is a JetStream handle on the component's connection.
	JS jetstream.JetStream
	// Log is the component's logger (discarding when none was given).
	Log *slog.Logger
}

// NewClient validates c and opens JetStream on nc. name prefixes errors.
func NewClient(name string, nc *nats.Conn, c Config, log *slog.Logger) (*Client, error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("%s: jetstream: %w", name, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{Config: c, JS: js, Log: log}, nil
}

// Ready is the readiness every component reports: its life's own (nil
// while running: lifecycle.Service.Ready), then the connection to NATS.
func Ready(life error, nc *nats.Conn) error {
	if life != nil {
		return life
	}
	if !nc.IsConnected() {
		return errors.New("not connected to NATS")
	}
	return nil
}

// Rewind prepares a durable consumer for a new owner: the messages an
// earlier owner took and never acknowledged (it crashed, stopped, or lost
// its partition) are handed out again at once, in stream order, instead
// of after the ack wait — so newer messages of the same session cannot
// overtake them. The consumer is rewound to its ack floor
// ($JS.API.CONSUMER.RESET); on a server without that API it is recreated
// starting at the floor. Messages above the floor that were already
// acknowledged come again too; consumers here are idempotent for them.
// It returns cfg to consume with: an existing consumer keeps its deliver
// policy and start (they cannot be updated). A consumer that does not
// exist yet is left for Consume to create.
//
// While JetStream cannot answer (a stream or meta leader election in a
// cluster), Rewind tries again, 250 ms doubling to 1 s, until it succeeds
// or ctx ends: consuming before the rewind would let newer messages
// overtake the unacknowledged ones for a whole ack wait.
func Rewind(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig, log *slog.Logger) (jetstream.ConsumerConfig, error) {
	wait := 250 * time.Millisecond
	var recreate *jetstream.ConsumerConfig // deleted, to be created again at the floor
	for {
		var out jetstream.ConsumerConfig
		var err error
		if recreate != nil {
			out = *recreate
			_, err = js.CreateConsumer(ctx, stream, out)
			if err != nil {
				err = fmt.Errorf("recreate consumer %s: %w", cfg.Durable, err)
			}
		} else {
			out, recreate, err = rewindOnce(ctx, js, stream, cfg, log)
			if err == nil {
				recreate = nil
			}
		}
		if err == nil || ctx.Err() != nil {
			return out, err
		}
		log.Warn("consumer not rewound yet; trying again", slog.String("consumer", cfg.Durable), slog.Duration("in", wait), slog.Any("error", err))
		Sleep(ctx, wait)
		wait = min(2*wait, time.Second)
	}
}

// rewindOnce is one try of Rewind. When it deleted the consumer but could
// not create it again, it returns the configuration to create it with.
func rewindOnce(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig, log *slog.Logger) (jetstream.ConsumerConfig, *jetstream.ConsumerConfig, error) {
	cons, err := js.Consumer(ctx, stream, cfg.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return cfg, nil, nil
	}
	if err != nil {
		return cfg, nil, fmt.Errorf("read consumer %s: %w", cfg.Durable, err)
	}
	info := cons.CachedInfo()
	cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = info.Config.DeliverPolicy, info.Config.OptStartSeq, info.Config.OptStartTime
	if info.Delivered.Stream <= info.AckFloor.Stream {
		return cfg, nil, nil // nothing was left unacknowledged
	}
	from := info.AckFloor.Stream + 1
	log = log.With(slog.String("consumer", cfg.Durable), slog.Uint64("fromSeq", from), slog.Int("unacked", info.NumAckPending))
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = js.ResetConsumer(rctx, stream, cfg.Durable)
	cancel()
	if err == nil {
		log.Info("consumer rewound to its ack floor; unacknowledged messages come again now")
		return cfg, nil, nil
	}
	log.Warn("consumer reset failed; recreating it at its ack floor", slog.Any("error", err))
	if err := js.DeleteConsumer(ctx, stream, cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return cfg, nil, fmt.Errorf("delete consumer %s: %w", cfg.Durable, err)
	}
	cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverByStartSequencePolicy, from, nil
	if st, err := js.Stream(ctx, stream); err == nil && st.CachedInfo().Config.Retention == jetstream.WorkQueuePolicy {
		// A work queue keeps only what is unacknowledged, and its
		// consumers must deliver all: that is the floor.
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverAllPolicy, 0
	}
	if _, err := js.CreateConsumer(ctx, stream, cfg); err != nil {
		return cfg, &cfg, fmt.Errorf("recreate consumer %s: %w", cfg.Durable, err)
	}
	return cfg, nil, nil
}

// ReadKV returns the current value of every key of kv that matches filters
// (deleted keys left out). It reads through a KV watcher, which delivers
// the current values and then marks their end; a watcher can wait for that
// end forever while the bucket's keys are purged and rewritten under it
// (seen with the scheduler's plan records: 4 reads in 100,000 while plans
// finished). So a read that receives nothing for idle is started again,
// from scratch. It fails only when ctx ends.
//
// Each filter is read by a watcher of its own, one after the other: the
// server answers a watcher of several filters (a consumer delivering the
// last message of each subject over several filter subjects) in time that
// grows far faster than the bucket once purges left gaps in its stream.
// Measured on nats-server 2.15.2 with 12,000 keys written and purged: 10 s for "p.>" and "t.>" together, 28 ms for each
// alone (TestReadKVFiltersThroughManyPurgeMarkers). A key matched by two
// filters is returned once, at its newest revision.
func ReadKV(ctx context.Context, kv jetstream.KeyValue, filters []string, idle time.Duration) ([]jetstream.KeyValueEntry, error) {
	var out []jetstream.KeyValueEntry
	at := map[string]int{} // key → its index in out
	for _, f := range filters {
		entries, err := readKVFilter(ctx, kv, f, idle)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			i, seen := at[e.Key()]
			switch {
			case !seen:
				at[e.Key()] = len(out)
				out = append(out, e)
			case e.Revision() > out[i].Revision():
				out[i] = e
			}
		}
	}
	return out, nil
}

// readKVFilter is ReadKV of one filter.
func readKVFilter(ctx context.Context, kv jetstream.KeyValue, filter string, idle time.Duration) ([]jetstream.KeyValueEntry, error) {
	for {
		entries, complete, err := readKVOnce(ctx, kv, filter, idle)
		if err != nil || complete {
			return entries, err
		}
	}
}

// readKVOnce is one read of ReadKV; complete is false when it stalled.
// Deleted and purged keys are read and left out here, not by the watcher
// (IgnoreDeletes): they are progress too. A bucket of many purge markers
// (a finished plan leaves one per key for an hour) delivers them for
// longer than idle before its first live key, and a read that counted
// only live keys took that for a stall and started again, for ever.
func readKVOnce(ctx context.Context, kv jetstream.KeyValue, filter string, idle time.Duration) (entries []jetstream.KeyValueEntry, complete bool, err error) {
	w, err := kv.Watch(ctx, filter)
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", kv.Bucket(), err)
	}
	defer StopWatch(w)
	quiet := time.NewTimer(idle)
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, false, fmt.Errorf("read %s: %w", kv.Bucket(), ctx.Err())
		case <-quiet.C:
			return nil, false, nil
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				return entries, true, nil
			}
			if e.Operation() == jetstream.KeyValuePut {
				entries = append(entries, e)
			}
			quiet.Reset(idle)
		}
	}
}
