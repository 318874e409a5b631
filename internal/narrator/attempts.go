package narrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
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
