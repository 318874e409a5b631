package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/election"
	"github.com/narratoria/runtime/internal/partition"
	"github.com/narratoria/runtime/internal/planfsm"
	"github.com/narratoria/runtime/pkg/messages"
)

// Scale-out (docs/spec.md §10): sessions map to partitions; every scheduler owns a
// share of them (internal/partition), and runs the plans of its partitions
// only. For each partition it owns, a scheduler
//
//  1. raises the partition's fences (a marker on fence.<p> in the plan
//     state bucket, one on <prefix>.jobs._fence.<p> in the jobs stream) —
//     from then on every plan-state write and every job of an earlier
//     owner is refused by the server;
//  2. recovers the partition's plans from KV, exactly as a failover did
//     before partitions (a plan moves with its partition);
//  3. rewinds and consumes the partition's plan and outcome consumers
//     (filtered on the partition token the streams' subject transform
//     stores), so what the previous owner held unacknowledged comes at
//     once.
//
// When it stops owning the partition (hand-over, a lost lease, a write
// refused by the fence) it stops the partition's consumers and actors and
// waits for its pending writes before the lease is released.

// partitionGroup is the schedulers' group in narratoria_owners.
const partitionGroup = "scheduler"

// ownedPartition is one partition this scheduler owns now.
type ownedPartition struct {
	p    int
	term election.Term
	// writer sends the partition's plan state writes (narratoria_plans),
	// ordered (a failed write is sent again, and so is every later one),
	// stamped with its fence; jobs sends its jobs (NARRATORIA_JOBS),
	// stamped with the jobs fence.
	writer, jobs *partition.Writer
	// lose gives the partition up: called when a write was refused by a
	// newer fence (another scheduler owns it now).
	lose     context.CancelFunc
	loseOnce sync.Once
	log      *slog.Logger
	// why says, after a refused write, whether the partition's fences are
	// still ours, were replaced or vanished (nil: not known).
	why func(context.Context) string
}

// fencedOut ends this ownership after a refused write.
func (op *ownedPartition) fencedOut(what string) {
	op.loseOnce.Do(func() {
		op.lose()
		reason := "another scheduler raised a newer fence"
		if op.why != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			reason = op.why(ctx)
			cancel()
		}
		op.log.Warn("scheduler: a write was refused by the partition's fence; giving the partition up (it is taken again with a new fence if this scheduler still holds its lease)",
			slog.String("write", what), slog.String("reason", reason))
	})
}

// fenceState says what became of fences: whether each is still the
// newest marker of its subject, was replaced by a newer one (another
// owner), or is gone (a purged bucket, a re-created stream, a store
// rolled back) — the real reason a fenced write was refused.
func fenceState(ctx context.Context, js jetstream.JetStream, fences map[string]partition.Fence) string {
	for stream, f := range fences {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return fmt.Sprintf("the fence's stream %s cannot be read: %v", stream, err)
		}
		m, err := st.GetLastMsgForSubject(ctx, f.Subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return fmt.Sprintf("the fence %s is gone from %s (purged, re-created or rolled back)", f.Subject, stream)
		case err != nil:
			return fmt.Sprintf("the fence %s cannot be read: %v", f.Subject, err)
		case m.Sequence > f.Seq:
			return fmt.Sprintf("another scheduler raised a newer fence on %s", f.Subject)
		case m.Sequence < f.Seq:
			return fmt.Sprintf("the fence %s went back in %s (a store rolled back)", f.Subject, stream)
		}
	}
	return "the fences are still this scheduler's (a refusal for another reason)"
}

// replicated reports whether a stream has more than one replica (its
// fenced writes go one at a time: partition.Writer); true when it cannot
// tell.
func (s *Scheduler) replicated(ctx context.Context, stream string) bool {
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := s.js.Stream(ictx, stream) // fetches the stream's info
	if err != nil {
		return true
	}
	return st.CachedInfo().Config.Replicas > 1
}

func fenceKey(p int) string { return "fence." + strconv.Itoa(p) }

// Owned returns the partitions this scheduler owns now (their fences
// raised), sorted.
func (s *Scheduler) Owned() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.owned))
}

// OwnsAll reports whether this scheduler owns every partition (a single
// scheduler, once it has taken them all).
func (s *Scheduler) OwnsAll() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.owned) == s.bus.Partitions
}

// Owns reports whether this scheduler owns the partition of a session.
func (s *Scheduler) Owns(session string) bool {
	return s.ownedPart(messages.PartitionOf(session, s.bus.Partitions)) != nil
}

// own runs the scheduler's work on partition p while it owns it
// (partition.Own).
func (s *Scheduler) own(ctx context.Context, p int, term election.Term) {
	pctx, lose := context.WithCancel(ctx)
	defer lose()
	log := s.log.With(slog.Int("partition", p))
	op := &ownedPartition{p: p, term: term, lose: lose, log: log}
	// An earlier term of p in this process may still be landing its plan
	// state writes: they are valid until a newer fence is raised, and the
	// recovery below must read them (a write lost across a reconnect while
	// later ones were stored is sent again by that writer).
	s.awaitRetired(pctx, p)
	fences, err := partition.RaiseAll(pctx, s.js, s.cfg.ID, log, "$KV."+messages.BucketPlans+"."+fenceKey(p), s.subj.JobsFence(p))
	if err != nil {
		return
	}
	op.why = func(ctx context.Context) string {
		return fenceState(ctx, s.js, map[string]partition.Fence{"KV_" + messages.BucketPlans: fences[0], messages.StreamJobs: fences[1]})
	}
	// The writers outlive the partition's context: its pending writes may
	// land during the hand-over below.
	op.writer = partition.NewWriter(ctx, s.js, fences[0], partition.WriterConfig{
		Replicated: s.replicated(pctx, "KV_"+messages.BucketPlans), Ordered: true,
		OnFail: func(error) { op.fencedOut("plan state") }})
	op.jobs = partition.NewWriter(ctx, s.js, fences[1], partition.WriterConfig{Replicated: s.replicated(pctx, messages.StreamJobs)})
	defer op.jobs.Abort()
	defer s.retire(p, op.writer)
	defer func() {
		s.mu.Lock()
		if s.owned[p] == op {
			delete(s.owned, p)
			s.m.partitions.Dec()
		}
		s.mu.Unlock()
		// Another scheduler may change these sessions' state and health
		// while the partition is elsewhere.
		owns := func(session string) bool { return messages.PartitionOf(session, s.bus.Partitions) == p }
		s.sessions.ForgetIf(owns)
		s.health.ForgetIf(owns)
	}()
	if err := s.recoverPartition(pctx, op); err != nil {
		if pctx.Err() == nil {
			log.Error("scheduler: partition recovery failed; giving it up", slog.Any("error", err))
		}
		_ = s.stopActors(p)
		return
	}
	// The partition counts as owned (Owned, status, metrics) once both
	// consumers pull: from then on its plans and outcomes are taken.
	var wg, pulling sync.WaitGroup
	pulling.Add(2)
	go func() {
		pulling.Wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		if pctx.Err() == nil { // checked under the lock the removal takes
			s.owned[p] = op
			s.m.partitions.Inc()
		}
	}()
	for _, c := range []struct {
		stream, durable, kind string
		fn                    func(context.Context, *ownedPartition, jetstream.Msg)
		prefetch              int
	}{
		{messages.StreamOutcomes, outcomesConsumer, "outcomes", s.onOutcomeMsg, 256},
		{messages.StreamPlans, plansConsumer, "plans", s.onPlanMsg, 64},
	} {
		durable := fmt.Sprintf("%s-%d", c.durable, p)
		cfg := jetstream.ConsumerConfig{Durable: durable, Description: fmt.Sprintf("Scheduler intake of partition %d", p),
			FilterSubject: s.subj.PartitionFilter(c.kind, p), AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
			MaxAckPending: 100_000, DeliverPolicy: jetstream.DeliverAllPolicy}
		// What the previous owner took and never acknowledged comes again
		// at once, instead of after the ack wait, and again after a pull
		// that broke (ConsumeInOrder). The rewind tries until it succeeds
		// or the partition is lost.
		fn := c.fn
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			bus.ConsumeInOrder(pctx, s.js, c.stream, cfg, c.prefetch, log, func(m jetstream.Msg) { fn(pctx, op, m) },
				func() { once.Do(pulling.Done) })
			once.Do(pulling.Done) // ended before pulling: let the waiter go
		}()
	}
	<-pctx.Done()
	wg.Wait()
	// Let the partition's pending state writes land before its lease is
	// released, so the next owner resumes from the newest state and resends
	// nothing. It is not needed for safety: the next owner raises its fence
	// before it reads, so a write that lands later is refused, and outcomes
	// are acknowledged only once their writes are stored.
	wctx, cancel := context.WithTimeout(context.Background(), handOverWait)
	defer cancel()
	for _, w := range s.stopActors(p) {
		if _, err := w.Wait(wctx); errors.Is(err, context.DeadlineExceeded) {
			log.Warn("scheduler: state writes still pending at hand-over")
			break
		}
	}
}

// handOverWait bounds how long a scheduler handing a partition over waits
// for its pending state writes before it releases the lease.
const handOverWait = 2 * time.Second

// retireWait bounds how long the plan-state writer of a partition given up
// goes on landing (and repairing) its writes; a newer owner's fence ends it
// sooner.
const retireWait = 10 * time.Second

// retire lets the writer of a partition given up finish in the background.
func (s *Scheduler) retire(p int, w *partition.Writer) {
	done := make(chan struct{})
	s.mu.Lock()
	s.retiring[p] = done
	s.mu.Unlock()
	s.life.Go(func(context.Context) {
		w.CloseWithin(retireWait)
		close(done)
		s.mu.Lock()
		if s.retiring[p] == done {
			delete(s.retiring, p)
		}
		s.mu.Unlock()
	})
}

// awaitRetired waits until the writer of an earlier term of partition p
// in this process is done, or ctx ends.
func (s *Scheduler) awaitRetired(ctx context.Context, p int) {
	s.mu.Lock()
	done := s.retiring[p]
	s.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// ownedPart returns this scheduler's ownership of partition p, nil when it
// does not own it.
func (s *Scheduler) ownedPart(p int) *ownedPartition {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owned[p]
}

// recoveryRequest asks for the persisted plans of one partition; the
// answer comes on reply.
type recoveryRequest struct {
	p     int
	reply chan recovered
}

type recovered struct {
	plans map[string]planfsm.Record
	tools map[string]map[string]*planfsm.Tool
	err   error
}

// recoverLoop serves recovery requests: every request waiting when a scan
// starts is answered from that one scan of narratoria_plans, so taking over
// many partitions at once (a start, a dead scheduler's share) reads the
// plan state once, not once per partition. A scan always starts after the
// requests it answers were made, so after their fences were raised.
func (s *Scheduler) recoverLoop(ctx context.Context) {
	for {
		var batch []recoveryRequest
		select {
		case <-ctx.Done():
			return
		case r := <-s.recoveries:
			batch = append(batch, r)
		}
		// Partitions won in the same check interval arrive together.
		deadline := time.After(20 * time.Millisecond)
	gather:
		for {
			select {
			case r := <-s.recoveries:
				batch = append(batch, r)
			case <-deadline:
				break gather
			case <-ctx.Done():
				return
			}
		}
		plans, tools, err := s.store.loadAll(ctx)
		for _, r := range batch {
			out := recovered{err: err, plans: map[string]planfsm.Record{}, tools: map[string]map[string]*planfsm.Tool{}}
			for id, rec := range plans {
				if messages.PartitionOf(rec.SessionID, s.bus.Partitions) == r.p {
					out.plans[id] = rec
					out.tools[id] = tools[id]
				}
			}
			r.reply <- out
		}
	}
}

// recoverPartition loads the partition's persisted plans and starts their
// actors. A finished plan only publishes its result (deduplicated by
// message ID) and a published one is only purged: nothing finished runs
// again.
func (s *Scheduler) recoverPartition(ctx context.Context, op *ownedPartition) error {
	reply := make(chan recovered, 1)
	select {
	case s.recoveries <- recoveryRequest{p: op.p, reply: reply}:
	case <-ctx.Done():
		return ctx.Err()
	}
	var r recovered
	select {
	case r = <-reply:
	case <-ctx.Done():
		return ctx.Err()
	}
	if r.err != nil {
		return r.err
	}
	for id, rec := range r.plans {
		if s.actor(id) != nil {
			continue
		}
		// The store may have brought back the keys of a plan that finished
		// (a forgotten purge): its stored result says so, and the machine
		// lets it win over any record (planfsm.Recovered).
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		done, err := s.store.resultStored(rctx, rec.SessionID, id)
		cancel()
		if err != nil {
			return err
		}
		if done && rec.Phase != planfsm.PhasePublished {
			s.m.resurrected.Inc()
		}
		p, err := messages.DecodePlan(rec.Plan, s.cfg.limits())
		if err != nil {
			op.log.Error("scheduler: persisted plan unreadable; dropped", slog.String("planId", id), slog.Any("error", err))
			s.purgeLater(id, nil, nil, op, s.log)
			continue
		}
		checked, err := planCheckLenient(p)
		if err != nil {
			op.log.Error("scheduler: persisted plan invalid; dropped", slog.String("planId", id), slog.Any("error", err))
			s.purgeLater(id, nil, nil, op, s.log)
			continue
		}
		if len(rec.Scripts) < len(p.Tools) { // a record from before scripts were persisted
			rec.Scripts = resolvedScripts(checked)
		}
		m, err := planfsm.Restore(s.cfg.machine(), rec, p, checked.Graph, r.tools[id])
		if err != nil {
			op.log.Error("scheduler: persisted plan state inconsistent; dropped", slog.String("planId", id), slog.Any("error", err))
			s.purgeLater(id, nil, nil, op, s.log)
			continue
		}
		a := newActor(s, m, op)
		a.resultStored = done
		s.spawn(ctx, a, true)
	}
	if len(r.plans) > 0 {
		op.log.Info("scheduler: recovered plans", slog.Int("plans", len(r.plans)))
	}
	return nil
}

// errNotOwner is returned for work on a plan whose partition this
// scheduler does not own (any more).
var errNotOwner = fmt.Errorf("scheduler: plan: %w", partition.ErrNotOwner)
