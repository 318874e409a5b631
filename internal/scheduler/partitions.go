package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
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

// ownedPartition is one partition this scheduler owns now: its
// ownership (term, fences, work context) and its two writers.
type ownedPartition struct {
	*partition.Ownership
	// writer sends the partition's plan state writes (narratoria_plans),
	// ordered (a failed write is sent again, and so is every later one),
	// stamped with its fence; jobs sends its jobs (NARRATORIA_JOBS),
	// stamped with the jobs fence.
	writer, jobs *partition.Writer
}

func fenceKey(p int) string { return "fence." + strconv.Itoa(p) }

// Owned returns the partitions this scheduler owns now (their fences
// raised), sorted.
func (s *Scheduler) Owned() []int { return s.owned.Owned() }

// OwnsAll reports whether this scheduler owns every partition (a single
// scheduler, once it has taken them all).
func (s *Scheduler) OwnsAll() bool { return s.owned.All() }

// Owns reports whether this scheduler owns the partition of a session.
func (s *Scheduler) Owns(session string) bool {
	return s.ownedPart(messages.PartitionOf(session, s.bus.Partitions)) != nil
}

// own runs the scheduler's work on partition p while it owns it
// (partition.Own).
func (s *Scheduler) own(ctx context.Context, p int, term election.Term) {
	log := s.log.With(slog.Int("partition", p))
	// An earlier term of p in this process may still be landing its plan
	// state writes: they are valid until a newer fence is raised, and the
	// recovery below must read them (a write lost across a reconnect while
	// later ones were stored is sent again by that writer).
	s.awaitRetired(ctx, p)
	own, err := partition.Take(ctx, s.js, "scheduler", s.cfg.ID, p, term, log, bus.KVSubject(messages.BucketPlans, fenceKey(p)), s.subj.JobsFence(p))
	if err != nil {
		return
	}
	defer own.Release()
	pctx := own.Context()
	op := &ownedPartition{Ownership: own}
	// The writers outlive the partition's context: its pending writes may
	// land during the hand-over below.
	op.writer = own.Writer(ctx, 0, "plan state", partition.WriterConfig{Ordered: true,
		OnRefused: func(m *nats.Msg, err error) { s.stateRefused(op, m, err) }})
	op.jobs = own.Writer(ctx, 1, "job", partition.WriterConfig{})
	defer op.jobs.Abort()
	defer s.retire(p, op.writer)
	defer func() {
		s.owned.Remove(p, op)
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
		s.owned.Add(pctx, p, op)
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
func (s *Scheduler) ownedPart(p int) *ownedPartition { return s.owned.Get(p) }

// recoveryRequest asks for the persisted plans of one partition; the
// answer comes on reply.
type recoveryRequest struct {
	p     int
	reply chan recovered
}

type recovered struct {
	plans map[string]planfsm.Record
	tools map[string]map[string]*planfsm.Tool
	// legacy names plans with tool records of an earlier version.
	legacy map[string]bool
	err    error
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
		plans, tools, legacy, err := s.store.loadAll(ctx)
		for _, r := range batch {
			out := recovered{err: err, plans: map[string]planfsm.Record{}, tools: map[string]map[string]*planfsm.Tool{}, legacy: map[string]bool{}}
			for id, rec := range plans {
				if messages.PartitionOf(rec.SessionID, s.bus.Partitions) == r.p {
					out.plans[id] = rec
					out.tools[id] = tools[id]
					out.legacy[id] = legacy[id]
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
	case s.recoveries <- recoveryRequest{p: op.P, reply: reply}:
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
			s.unrecoverable(ctx, op, id, rec, done, "its persisted plan is unreadable", err)
			continue
		}
		checked, err := planCheckLenient(p)
		if err != nil {
			s.unrecoverable(ctx, op, id, rec, done, "its persisted plan is invalid", err)
			continue
		}
		if len(rec.Scripts) < len(p.Tools) { // a record from before scripts were persisted
			rec.Scripts = resolvedScripts(checked)
		}
		m, err := planfsm.Restore(s.cfg.machine(), rec, p, checked.Graph, r.tools[id])
		if err != nil {
			s.unrecoverable(ctx, op, id, rec, done, "its persisted state is inconsistent", err)
			continue
		}
		a := newActor(s, m, op)
		a.resultStored, a.legacyKeys = done, r.legacy[id]
		s.spawn(ctx, a, true)
	}
	if len(r.plans) > 0 {
		op.Log.Info("scheduler: recovered plans", slog.Int("plans", len(r.plans)))
	}
	return nil
}

// unrecoverable ends a persisted plan that cannot be run on: its record
// or its tools' records make no plan the machine can restore. Its result
// says so (recovery_failed, not to be replanned: some of its tools may have
// run), so whoever waits for it hears at once rather than at its timeout;
// its keys are purged once the result is stored (a result that cannot be
// published leaves them for the next recovery). A plan whose result is
// stored already is only purged.
func (s *Scheduler) unrecoverable(ctx context.Context, op *ownedPartition, id string, rec planfsm.Record, resultStored bool, what string, cause error) {
	s.m.plans.WithLabelValues("unrecoverable").Inc()
	op.Log.Error("scheduler: plan cannot be recovered: "+what+"; it fails", slog.String("planId", id),
		slog.String("sessionId", rec.SessionID), slog.Any("error", cause))
	if !resultStored {
		if messages.CheckPlanID(id) != nil || rec.SessionID == "" {
			return // no result can be addressed: the keys stay for an operator
		}
		res := failedResult(id, rec.SessionID, generationAttempt(rec.Plan), messages.ReasonRecoveryFailed,
			fmt.Sprintf("the scheduler could not recover the plan after a restart (%s: %v); it is not replanned, as some of its tools may have run", what, cause))
		if err := s.publishResult(ctx, res); err != nil {
			op.Log.Error("scheduler: result of an unrecoverable plan not published; its keys stay for the next recovery",
				slog.String("planId", id), slog.Any("error", err))
			return
		}
	}
	s.purgeLater(id, true, nil, op, s.log)
}

// errNotOwner is returned for work on a plan whose partition this
// scheduler does not own (any more).
var errNotOwner = fmt.Errorf("scheduler: plan: %w", partition.ErrNotOwner)
