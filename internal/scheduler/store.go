package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/partition"
	"github.com/narratoria/runtime/internal/planfsm"
	"github.com/narratoria/runtime/pkg/messages"
)

// The scheduler's durable state lives in KV narratoria_plans:
//
//	p.<plan>          planfsm.Record, written when the plan is accepted and at each phase
//	t.<plan>.<tool>   planfsm.Tool, written at every transition of the tool
//	fence.<p>         the fence of partition p's current owner (partitions.go)
//
// Every plan and tool write goes through the partition's Writer, which
// stamps it with the owner's fence, so the server refuses it once another
// scheduler owns the partition, and keeps what is stored a prefix of what
// was written. A finished plan's keys are purged key by key (purge); its
// approval decisions age out of NARRATORIA_APPROVALS.
type store struct {
	js        jetstream.JetStream
	kv        jetstream.KeyValue
	stream    jetstream.Stream
	approvals jetstream.Stream
	results   jetstream.Stream
	subj      messages.Subjects
}

func planKey(plan string) string       { return "p." + plan }
func toolKey(plan, tool string) string { return "t." + plan + "." + tool }
func toolsFilter(plan string) string   { return "t." + plan + ".>" }

// kvMsg builds a write of value to key (the partition's Writer stamps it
// with the owner's fence).
func (s *store) kvMsg(key string, value []byte) *nats.Msg {
	m := nats.NewMsg("$KV." + s.kv.Bucket() + "." + key)
	m.Data = value
	return m
}

// createPlan stores a new plan through the partition's writer; it fails
// with jetstream.ErrKeyExists when the plan was accepted before (a
// redelivered plan message), with errPlanFinished when it was accepted and
// has finished since (its keys purged, its result stored), and with a
// partition.Refused error when another scheduler owns the partition now.
//
// fresh says the plan's message is a first delivery stored a moment ago,
// of a plan no actor here runs: its plan cannot have been accepted but
// within the duplicate window, which the write's message ID covers, so the
// read that checks the key is not there yet is skipped (it is a round trip
// before anything is dispatched).
func (s *store) createPlan(ctx context.Context, id string, rec planfsm.Record, w *partition.Writer, fresh bool) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode plan record: %w", err)
	}
	// The fence takes the key's expected-sequence header, so "not there
	// yet" is checked by a read: only this owner writes the partition's
	// keys, and its intake takes one plan at a time. The message ID
	// catches a second write within the duplicate window all the same.
	if !fresh {
		if err := s.planAbsent(ctx, id); err != nil {
			return err
		}
	}
	ack, err := w.Publish(s.kvMsg(planKey(id), b), jetstream.WithMsgID("accept."+id)).Wait(ctx)
	if err != nil {
		return err
	}
	if !ack.Duplicate {
		return nil
	}
	// A duplicate by its message ID, but is the record there? The plan
	// may have finished since (its keys purged, its result stored), or
	// the store may have lost the record (the bucket purged, a rollback):
	// then the message ID lies, and the plan is written again without it
	// — never dropped as a duplicate of a record that no longer exists.
	if err := s.planAbsent(ctx, id); err != nil {
		return err
	}
	switch done, err := s.resultStored(ctx, rec.SessionID, id); {
	case err != nil:
		return err
	case done:
		return errPlanFinished
	}
	_, err = w.Publish(s.kvMsg(planKey(id), b)).Wait(ctx)
	return err
}

// planAbsent reads the plan's key: nil when it is not there,
// jetstream.ErrKeyExists when it is, or the read's error.
func (s *store) planAbsent(ctx context.Context, id string) error {
	switch _, err := s.kv.Get(ctx, planKey(id)); {
	case err == nil:
		return jetstream.ErrKeyExists
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil
	default:
		return err
	}
}

// errPlanFinished: the plan was accepted before and has finished (its
// result is stored).
var errPlanFinished = errors.New("the plan was accepted before and has finished")

// getPlan reads a plan record; jetstream.ErrKeyNotFound when there is none.
func (s *store) getPlan(ctx context.Context, plan string) (planfsm.Record, error) {
	var rec planfsm.Record
	e, err := s.kv.Get(ctx, planKey(plan))
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return rec, fmt.Errorf("decode plan record %s: %w", plan, err)
	}
	return rec, nil
}

// putTool writes a tool record through the partition's writer, without
// waiting for the server; the Write says when it is stored.
func (s *store) putTool(plan, tool string, rec *planfsm.Tool, w *partition.Writer) (*partition.Write, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode tool record %s of plan %s: %w", tool, plan, err)
	}
	return w.Publish(s.kvMsg(toolKey(plan, tool), b)), nil
}

// putPlan writes a plan record through the partition's writer, without
// waiting for the server.
func (s *store) putPlan(plan string, rec planfsm.Record, w *partition.Writer) (*partition.Write, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode plan record %s: %w", plan, err)
	}
	return w.Publish(s.kvMsg(planKey(plan), b)), nil
}

// purgeMarkerTTL is how long a finished plan's purge markers stay in the
// bucket: long enough for a watcher that reconnects to see the keys go,
// short enough that markers cannot fill the bucket. A marker takes about
// 170 bytes; at an hour, 440 keys purged per second (a sustained 220
// one-tool plans/s) would have filled the default 256 MiB bucket with
// markers, and every plan state write after it would be refused. At a
// minute, it takes 26,000 keys/s, beyond what a scheduler finishes.
const purgeMarkerTTL = time.Minute

// purge removes every key of a finished plan, key by key: each key gets a
// purge marker (a rollup of its subject, so its earlier revisions go) that
// expires after purgeMarkerTTL. Only the plan's own subjects are written,
// so the scheduler needs no grant to purge a whole store (it has none in
// deploy/nats/accounts.conf). tools are the plan's tool IDs; nil lists the
// plan's tool keys in the bucket (a record too broken to say).
func (s *store) purge(ctx context.Context, plan string, tools []string) error {
	var keys []string
	if tools == nil {
		lister, err := s.kv.ListKeysFiltered(ctx, toolsFilter(plan))
		if err != nil {
			return fmt.Errorf("list tool keys of plan %s: %w", plan, err)
		}
		for k := range lister.Keys() {
			keys = append(keys, k)
		}
		// The lister ends its subscription once it has listed every key:
		// stopping it then fails ("invalid subscription") though nothing
		// went wrong.
		_ = lister.Stop()
	} else {
		for _, t := range tools {
			keys = append(keys, toolKey(plan, t))
		}
	}
	keys = append(keys, planKey(plan)) // last: a plan key without tools is a finished plan's
	var acks []jetstream.PubAckFuture
	for _, k := range keys {
		m := s.kvMsg(k, nil)
		m.Header.Set("KV-Operation", "PURGE")
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		m.Header.Set("Nats-TTL", purgeMarkerTTL.String())
		f, err := s.js.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("purge %s of plan %s: %w", k, plan, err)
		}
		acks = append(acks, f)
	}
	for i, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("purge %s of plan %s: %w", keys[i], plan, err)
		case <-ctx.Done():
			return fmt.Errorf("purge plan %s: %w", plan, ctx.Err())
		}
	}
	return nil
}

// resultStored reports whether the plan's Execution Result is in
// NARRATORIA_RESULTS. A stored result is the one fact about a finished
// plan that a rolled-back store cannot take back: the result is a write on
// a stream the scheduler never deletes from, while the purge of the plan's
// keys is a delete, which nats-server may forget when it is killed
// (docs/architecture.md, "What the store may forget"). A plan whose result
// is stored is finished, whatever its keys say.
func (s *store) resultStored(ctx context.Context, session, plan string) (bool, error) {
	subj, err := s.subj.Results(session, plan)
	if err != nil {
		return false, err
	}
	_, err = s.results.GetLastMsgForSubject(ctx, subj)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	default:
		return false, fmt.Errorf("look up the result of plan %s: %w", plan, err)
	}
}

// approval reads the last decision stored for a plan's tool; ok is false
// when there is none.
// With tenants only the plan's own tenant's decisions count: they are the
// ones stored under its tenant token.
func (s *store) approval(ctx context.Context, session, plan, tool string) (body []byte, at time.Time, ok bool, err error) {
	subj, err := s.subj.ForSession(session).Approvals(plan, tool)
	if err != nil {
		return nil, time.Time{}, false, err
	}
	m, err := s.approvals.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, time.Time{}, false, nil
	}
	if err != nil {
		return nil, time.Time{}, false, fmt.Errorf("read approval of %s/%s: %w", plan, tool, err)
	}
	return m.Data, m.Time, true, nil
}

// readIdle is how long a read of the plan records may receive nothing
// before it is started again (bus.ReadKV).
const readIdle = 2 * time.Second

// listPlans reads every plan record (for the list of plans in flight).
func (s *store) listPlans(ctx context.Context) (map[string]planfsm.Record, error) {
	entries, err := bus.ReadKV(ctx, s.kv, []string{"p.>"}, readIdle)
	if err != nil {
		return nil, fmt.Errorf("read plan records: %w", err)
	}
	plans := map[string]planfsm.Record{}
	for _, e := range entries {
		var rec planfsm.Record
		if json.Unmarshal(e.Value(), &rec) == nil {
			plans[e.Key()[2:]] = rec
		}
	}
	return plans, nil
}

// loadAll reads every persisted plan with its tools.
func (s *store) loadAll(ctx context.Context) (map[string]planfsm.Record, map[string]map[string]*planfsm.Tool, error) {
	entries, err := bus.ReadKV(ctx, s.kv, []string{"p.>", "t.>"}, readIdle)
	if err != nil {
		return nil, nil, fmt.Errorf("read plan state: %w", err)
	}
	plans := map[string]planfsm.Record{}
	tools := map[string]map[string]*planfsm.Tool{}
	for _, e := range entries {
		key := e.Key()
		switch {
		case strings.HasPrefix(key, "p."):
			var rec planfsm.Record
			if json.Unmarshal(e.Value(), &rec) == nil {
				plans[key[2:]] = rec
			}
		case strings.HasPrefix(key, "t."):
			rest := key[2:]
			i := strings.IndexByte(rest, '.')
			if i < 0 {
				continue
			}
			var rec planfsm.Tool
			if json.Unmarshal(e.Value(), &rec) != nil {
				continue
			}
			plan, tool := rest[:i], rest[i+1:]
			if tools[plan] == nil {
				tools[plan] = map[string]*planfsm.Tool{}
			}
			tools[plan][tool] = &rec
		}
	}
	return plans, tools, nil
}
