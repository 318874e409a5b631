package narrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/partition"
	"github.com/narratoria/runtime/internal/tracing"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// planLookback is how far before an attempt's recorded start its plan is
// looked for in NARRATORIA_PLANS: slack for the clocks of the narrator
// that recorded it and of the server that stored the plan.
const planLookback = 10 * time.Minute

// attemptStore keeps the durable record of each prompt's running attempt
// in KV narratoria_inflight and finds the results of recorded plans.
//
// The record is written (create, then compare-and-set on its revision)
// before the attempt's plan is published and deleted once the prompt's
// narration is stored. Whoever finds a record carries the replan loop on
// from it: it waits for that plan's result instead of planning the
// attempt again, and a narrator that loses the compare-and-set for the
// next attempt follows the winner's plan. So each attempt of a prompt has
// exactly one plan, whoever narrates it and however often it is taken over.
type attemptStore struct {
	kv      jetstream.KeyValue
	js      jetstream.JetStream
	results jetstream.Stream
	// partitions is the partition count: plans are stored with their
	// session's partition in the subject.
	partitions int
}

// load returns the prompt's recorded attempt (nil when none) and the
// key's revision, for the next save. An unreadable record is reported as
// none, with its revision, so the next save replaces it. A deleted record
// (a prompt narrated and forgotten) reads as none with its delete's
// revision: a save after it is an update of that revision, which fails
// if another narrator recorded an attempt since — a create would succeed
// and plan the prompt a second time (the promptfsm simulation, seed 27).
func (s *attemptStore) load(ctx context.Context, key string, log *slog.Logger) (*messages.PromptAttempt, uint64, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		rev, err := s.markerRevision(ctx, key)
		return nil, rev, err
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read attempt record %s: %w", key, err)
	}
	var rec messages.PromptAttempt
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.Attempt < 1 || rec.PlanID == "" {
		log.Error("narrator: attempt record unreadable; it will be replaced", slog.String("key", key), slog.Any("error", err))
		return nil, e.Revision(), nil
	}
	return &rec, e.Revision(), nil
}

// markerRevision is the revision of key's delete marker, 0 when the key
// was never written (or its marker expired).
func (s *attemptStore) markerRevision(ctx context.Context, key string) (uint64, error) {
	seq, err := bus.LastSeq(ctx, s.js.Conn(), bus.KVStream(messages.BucketInflight), bus.KVSubject(messages.BucketInflight, key))
	if err != nil {
		return 0, fmt.Errorf("read attempt record %s: %w", key, err)
	}
	return seq, nil
}

// save records an attempt as an update of revision rev, what load saw (0:
// the key was never written). A conflict (bus.IsConflict) means another
// narrator recorded an attempt of the prompt since.
func (s *attemptStore) save(ctx context.Context, key string, rec *messages.PromptAttempt, rev uint64) (uint64, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("encode attempt record %s: %w", key, err)
	}
	rev, err = s.kv.Update(ctx, key, b, rev)
	if err != nil {
		return 0, fmt.Errorf("record attempt %d of %s: %w", rec.Attempt, key, err)
	}
	return rev, nil
}

// forget deletes the record of a narrated prompt; a record left behind
// only costs a lookup, and the bucket's TTL removes it.
func (s *attemptStore) forget(ctx context.Context, key string, log *slog.Logger) {
	if err := s.kv.Delete(ctx, key); err != nil {
		log.Warn("narrator: attempt record not deleted", slog.String("key", key), slog.Any("error", err))
	}
}

// decodeRecordedPlan reads the plan of a recorded attempt.
func decodeRecordedPlan(rec *messages.PromptAttempt) (*messages.Plan, error) {
	var p messages.Plan
	if err := json.Unmarshal(rec.Plan, &p); err != nil {
		return nil, fmt.Errorf("decode recorded plan %s: %w", rec.PlanID, err)
	}
	if p.RequestID != rec.PlanID {
		return nil, fmt.Errorf("recorded plan %q does not match planId %q", p.RequestID, rec.PlanID)
	}
	return &p, nil
}

// await waits for the result of a recorded attempt's plan. A fresh attempt
// publishes its plan first. A taken-over one looks for a result already
// stored (it may have come while no narrator was alive), then publishes
// the plan only if it never reached NARRATORIA_PLANS (its narrator died
// between recording and publishing it); a plan that did is never sent
// again. The subscription is made first, so no result is missed; one
// that came while the connection was down is found in the stream when the
// wait ends.
func (s *attemptStore) await(ctx context.Context, subj messages.Subjects, session string, plan *messages.Plan,
	rec *messages.PromptAttempt, fresh bool, margin time.Duration, log *slog.Logger) (*messages.ExecutionResult, error) {
	resSubj, err := subj.Results(session, plan.RequestID)
	if err != nil {
		return nil, err
	}
	planSubj, err := subj.Plans(session)
	if err != nil {
		return nil, err
	}
	nc := s.js.Conn()
	sub, err := nc.SubscribeSync(resSubj)
	if err != nil {
		return nil, fmt.Errorf("subscribe to result: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	wait := plan.Timeout() + margin
	if !fresh {
		if res, err := s.storedResult(ctx, resSubj); err != nil || res != nil {
			return res, err
		}
		published, err := s.planStored(ctx, subj.Stored(planSubj, session, s.partitions), plan.RequestID, rec.StartedAt)
		if err != nil {
			return nil, err
		}
		if published {
			wait = max(time.Until(rec.StartedAt.Add(wait)), margin)
		} else {
			// Not waiting in the plans stream (a work queue): accepted by a
			// scheduler already, or never stored. Publishing it again under
			// its message ID is harmless either way: within the duplicate
			// window the stream drops it, after it the scheduler finds the
			// plan's record or its stored result and does not run it twice.
			log.Info("narrator: the recorded plan is not waiting in the plans stream; publishing it again under its message ID",
				slog.String("planId", plan.RequestID))
			fresh = true
		}
	}
	if fresh {
		m := &nats.Msg{Subject: planSubj, Data: rec.Plan}
		tracing.Inject(ctx, m)
		if op := ownershipOf(ctx); op != nil {
			// Only the partition's owner starts a plan: one paused past its
			// lease finds out here, and one that lost the partition while
			// publishing is refused by the stream. The message ID is a
			// header, so the partition's plans may go as one atomic batch.
			if !op.Term.Held() {
				op.Lapsed("plan " + plan.RequestID)
				return nil, errNotOwner
			}
			if m.Header == nil {
				m.Header = nats.Header{}
			}
			m.Header.Set(jetstream.MsgIDHeader, "plan."+plan.RequestID)
			_, err = op.plans.WaitStored(ctx, op.plans.Publish(m), client.PublishRetryDefault)
			switch {
			case partition.Refused(err):
				op.Lose("plan " + plan.RequestID)
				return nil, errNotOwner
			case errors.Is(err, partition.ErrWriterClosed):
				return nil, errNotOwner
			}
		} else {
			_, err = client.PublishRetry(ctx, s.js, m, client.PublishRetryDefault, jetstream.WithMsgID("plan."+plan.RequestID))
		}
		if err != nil {
			return nil, fmt.Errorf("publish plan: %w", err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	msg, err := sub.NextMsgWithContext(wctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if res, serr := s.storedResult(ctx, resSubj); serr == nil && res != nil {
			return res, nil
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("wait for the result of plan %s: %w", plan.RequestID, err)
		}
		return nil, fmt.Errorf("%w for plan %s within %s", ErrNoResult, plan.RequestID, wait)
	}
	return decodeResult(plan.RequestID, msg.Data)
}

// storedResult returns the result stored on subject, nil when there is none.
func (s *attemptStore) storedResult(ctx context.Context, subject string) (*messages.ExecutionResult, error) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := s.results.GetLastMsgForSubject(gctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up result %s: %w", subject, err)
	}
	return decodeResult(subject, m.Data)
}

func decodeResult(plan string, data []byte) (*messages.ExecutionResult, error) {
	var res messages.ExecutionResult
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, fmt.Errorf("decode result of plan %s: %w", plan, err)
	}
	return &res, nil
}

// planStored reports whether the plan waits in NARRATORIA_PLANS, reading the
// session's plans stored since shortly before the attempt was recorded.
func (s *attemptStore) planStored(ctx context.Context, subject, planID string, since time.Time) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	found := false
	err := bus.ScanSubject(cctx, s.js.Conn(), messages.StreamPlans, subject, since.Add(-planLookback), func(data []byte) bool {
		var p struct {
			RequestID string `json:"requestId"`
		}
		found = json.Unmarshal(data, &p) == nil && p.RequestID == planID
		return !found
	})
	if err != nil {
		return false, fmt.Errorf("read plans of %s: %w", subject, err)
	}
	return found, nil
}
