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
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// The scheduler's durable state lives in KV narratoria_plans:
//
//	p.<plan>          planfsm.Record, written when the plan is accepted and at each phase
//	t.<plan>          the plan's tool log: each message a JSON object of
//	                  planfsm.Tool records by tool ID (toollog.go)
//	fence.<p>         the fence of partition p's current owner (partitions.go)
//	t.<plan>.<tool>   a tool's record as versions before the tool log wrote it
//	                  (read, and purged, for plans in flight across an upgrade)
//
// The bucket keeps every message of a subject (its stream's
// MaxMsgsPerSubject is bus.BucketPerKeyEvery, set by provisioning), so a tool log
// holds each transition, and a recovery reads the last one of each tool
// (loadTools). Every plan and tool write goes through the partition's
// Writer, which stamps it with the owner's fence, so the server refuses it
// once another scheduler owns the partition, and keeps what is stored a
// prefix of what was written. A finished plan leaves two purge markers,
// on its tool log and on its record, whatever its number of tools (purge);
// its approval decisions (<prefix>.decisions.<plan>.<tool>) age out of
// NARRATORIA_APPROVALS.
type store struct {
	js        jetstream.JetStream
	kv        jetstream.KeyValue
	stream    jetstream.Stream
	approvals jetstream.Stream
	results   jetstream.Stream
	subj      messages.Subjects
	// room counts what is written to the bucket, for intake's check that
	// new plans leave the reserve alone (room.go).
	room *room
	// valueMax is the plans bucket's largest message (its stream's
	// max_msg_size; 0 or less: none).
	valueMax int32
	// headroom is what a plan record's write needs beyond the record as
	// accepted (RecordHeadroom).
	headroom int
}

func planKey(plan string) string    { return "p." + plan }
func toolLogKey(plan string) string { return "t." + plan }

// planOf is the plan whose record or tool log (of this or an earlier
// version) a subject of the bucket is; "" for another subject.
func (s *store) planOf(subject string) string {
	key, ok := strings.CutPrefix(subject, bus.KVSubject(s.kv.Bucket(), ""))
	if !ok {
		return ""
	}
	if plan, ok := strings.CutPrefix(key, planKey("")); ok {
		return plan
	}
	if rest, ok := strings.CutPrefix(key, toolLogKey("")); ok {
		plan, _, _ := strings.Cut(rest, ".")
		return plan
	}
	return ""
}

// legacyToolsFilter matches the one-key-per-tool records of earlier
// versions (t.<plan>.<tool>).
func legacyToolsFilter(plan string) string { return "t." + plan + ".>" }

// kvMsg builds a write of value to key (the partition's Writer stamps it
// with the owner's fence).
func (s *store) kvMsg(key string, value []byte) *nats.Msg {
	m := nats.NewMsg(bus.KVSubject(s.kv.Bucket(), key))
	m.Data = value
	if s.room != nil {
		s.room.add(len(value) + msgOverhead)
	}
	return m
}

// msgOverhead is about what the file store takes for a plan state message
// beyond its data: the subject, the headers (the writer's fence and ID
// headers among them), and the store's own bytes.
const msgOverhead = 256

// planMsg builds a write of a plan's record. It rolls the key up: the
// bucket keeps every message of a key (for the tool logs), and a plan's
// earlier records (one per phase, each with the whole plan) would stay
// until its purge, filling a full bucket sooner, where a purge marker is
// refused too.
func (s *store) planMsg(plan string, rec []byte) *nats.Msg {
	m := s.kvMsg(planKey(plan), rec)
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	return m
}

// createPlan stores a new plan's record (b, planfsm.EncodeRecord) through
// the partition's writer, behind its fence — under its acceptance's
// message ID (accept.<plan>) when withID, and then dup reports that the
// store took a write under that ID within its duplicate window and did not
// store this one. It fails with a partition.Refused error when another
// scheduler owns the partition now. (Intake writes without the ID only
// once its reads found neither result nor record after such a duplicate:
// the record the ID stands for is gone — the bucket purged, a store rolled
// back — planfsm.DecideIntake.)
func (s *store) createPlan(ctx context.Context, id string, b []byte, w *partition.Writer, withID bool) (dup bool, err error) {
	var opts []jetstream.PublishOpt
	if withID {
		opts = append(opts, jetstream.WithMsgID("accept."+id))
	}
	ack, err := w.Publish(s.planMsg(id, b), opts...).Wait(ctx)
	if err != nil {
		return false, err
	}
	return ack.Duplicate, nil
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

// RecordHeadroom is what a plan record's write needs beyond the record
// as accepted, for a scheduler allowing iterations context re-planning
// rounds per plan: the subject and headers of the write (the fence, the
// message ID, the rollup: under 1 KiB), and what the record may still
// gain, each bounded by the machine — a cancel reason and the store's
// refusal (planfsm.RecordTextMax each), context notes
// (planfsm.RecordNotesMax, a sentence each), and per round its
// suggestion and reason (RecordTextMax each) with its fields. The tools a
// round merges are checked when they come (recordFits).
func RecordHeadroom(iterations int) int {
	return 6<<10 + max(iterations, 0)*(2*planfsm.RecordTextMax+512)
}

// RecordTooLargeError says a plan's record is more than the store takes
// in one message: it could never be written, and the plan is refused at
// intake with storage_refused (or a re-planning round adds no tools)
// instead of a write sent again for ever.
type RecordTooLargeError struct {
	// Size is the record's size in bytes, with its headroom
	// (RecordHeadroom).
	Size int
	// Headroom is the part of Size kept for the write's headers and what
	// the record may still gain.
	Headroom int
	// Max is the most the store takes: the server's maximum payload or
	// the plans bucket's largest value, whichever is smaller.
	Max int64
	// Limit names what sets Max.
	Limit string
}

// Error implements error.
func (e *RecordTooLargeError) Error() string {
	return fmt.Sprintf("the plan's record would be %d bytes (with %d for the write's headers and what the record may gain), over the %d bytes the store takes in one message (%s)",
		e.Size, e.Headroom, e.Max, e.Limit)
}

// recordFits returns a *RecordTooLargeError when a plan record of size
// bytes, with its headroom, is more than one message of the plans bucket
// may hold: the server's maximum payload (maxPayload, from the
// connection) or the bucket's largest value.
func (s *store) recordFits(size int, maxPayload int64) error {
	limit, what := maxPayload, "the server's max_payload"
	if mv := int64(s.valueMax); mv > 0 && (limit <= 0 || mv < limit) {
		limit, what = mv, "the plans bucket's largest value, nats.bucketMaxBytes' max_msg_size"
	}
	if limit > 0 && int64(size+s.headroom) > limit {
		return &RecordTooLargeError{Size: size + s.headroom, Headroom: s.headroom, Max: limit, Limit: what}
	}
	return nil
}

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

// putToolLog appends tool records to the plan's tool log, as one message
// (encodeToolLog), through the partition's writer, without waiting for
// the server; the Write says when it is stored.
func (s *store) putToolLog(plan string, recs []toolRecord, w *partition.Writer) *partition.Write {
	return w.Publish(s.kvMsg(toolLogKey(plan), encodeToolLog(recs)))
}

// putPlan writes a plan record through the partition's writer, without
// waiting for the server.
func (s *store) putPlan(plan string, rec planfsm.Record, w *partition.Writer) (*partition.Write, error) {
	b, err := planfsm.EncodeRecord(&rec)
	if err != nil {
		return nil, fmt.Errorf("encode plan record %s: %w", plan, err)
	}
	return w.Publish(s.planMsg(plan, b)), nil
}

// purgeMarkerTTL is how long a finished plan's purge markers stay in the
// bucket: long enough for a watcher that reconnects to see the keys go,
// short enough that markers cannot fill the bucket. A marker takes about
// 170 bytes; at an hour, 440 keys purged per second (a sustained 220
// one-tool plans/s) would have filled the default 256 MiB bucket with
// markers, and every plan state write after it would be refused. At a
// minute, it takes 26,000 keys/s, beyond what a scheduler finishes.
const purgeMarkerTTL = time.Minute

// purge removes every key of a finished plan: its tool log and its record
// get a purge marker each (a rollup of the subject, so every earlier
// message of it goes) that expires after purgeMarkerTTL, so a watcher of
// the bucket sees the keys go. legacy says whether the plan may have tool
// records of an earlier version, one key per tool: those are listed and
// purged too. A full bucket refuses the markers (they are messages): the
// keys are then purged through the stream's purge request, one subject
// filter each, which stores nothing (purgeByRequest) — a full bucket is
// freed by the plans that finish in it, never waits for room to free room.
// Past half full (room.markersFit), no markers are sent at all: a minute of
// them from a steady flow of plans would hold a small bucket near its
// limit.
func (s *store) purge(ctx context.Context, plan string, legacy bool) error {
	if s.room != nil && !s.room.markersFit() {
		return s.purgeByRequest(ctx, plan)
	}
	err := s.purgeByMarkers(ctx, plan, legacy)
	if client.Refused(err) {
		return s.purgeByRequest(ctx, plan)
	}
	return err
}

// purgeByRequest purges the plan's keys with the plans stream's purge
// request, filtered by each key's subject (the legacy tool keys' by their
// wildcard). The scheduler's user may send it (deploy/nats/accounts.conf;
// docs/decisions/, "A full plans bucket frees itself").
func (s *store) purgeByRequest(ctx context.Context, plan string) error {
	b := s.kv.Bucket()
	for _, subj := range []string{bus.KVSubject(b, legacyToolsFilter(plan)), bus.KVSubject(b, toolLogKey(plan)), bus.KVSubject(b, planKey(plan))} {
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return fmt.Errorf("purge %s of plan %s by request: %w", subj, plan, err)
		}
	}
	return nil
}

// purgeByMarkers purges the plan's keys with a purge marker each.
func (s *store) purgeByMarkers(ctx context.Context, plan string, legacy bool) error {
	var keys []string
	if legacy {
		lister, err := s.kv.ListKeysFiltered(ctx, legacyToolsFilter(plan))
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
	}
	keys = append(keys, toolLogKey(plan), planKey(plan)) // the record last: a plan key without tools is a finished plan's
	var acks []jetstream.PubAckFuture
	for _, k := range keys {
		m := bus.KVPurgeMsg(s.kv.Bucket(), k, purgeMarkerTTL)
		if s.room != nil {
			s.room.add(msgOverhead)
		}
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
// when there is none. Only a scheduler stores decisions, once it checked
// them (with tenants, that the plan is the publisher's: decisions.go).
func (s *store) approval(ctx context.Context, plan, tool string) (body []byte, at time.Time, ok bool, err error) {
	subj, err := s.subj.Decisions(plan, tool)
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

// loadAll reads every persisted plan with its tools; legacy names the
// plans with tool records of an earlier version (one key per tool).
func (s *store) loadAll(ctx context.Context) (plans map[string]planfsm.Record, tools map[string]map[string]*planfsm.Tool, legacy map[string]bool, err error) {
	entries, err := bus.ReadKV(ctx, s.kv, []string{"p.>"}, readIdle)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read plan state: %w", err)
	}
	plans = map[string]planfsm.Record{}
	for _, e := range entries {
		var rec planfsm.Record
		if json.Unmarshal(e.Value(), &rec) == nil {
			plans[e.Key()[2:]] = rec
		}
	}
	tools, legacy, err = s.loadTools(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	return plans, tools, legacy, nil
}

// keep sets a tool's record in tools.
func keep(tools map[string]map[string]*planfsm.Tool, plan, tool string, rec *planfsm.Tool) {
	if tools[plan] == nil {
		tools[plan] = map[string]*planfsm.Tool{}
	}
	tools[plan][tool] = rec
}

// loadToolsBatch is how many messages of the tool logs one fetch asks for.
const loadToolsBatch = 1024

// loadTools reads every tool log in the bucket, message by message in the
// order they were stored, and keeps each tool's last record: the state the
// plan's machine wrote last. A purge marker drops what its subject held.
// It reads the messages there when it starts (a later one ends it), and
// stops early when nothing more is stored. Records of earlier versions
// (t.<plan>.<tool>) are read alike, and their plans named in legacy.
func (s *store) loadTools(ctx context.Context) (map[string]map[string]*planfsm.Tool, map[string]bool, error) {
	tools := map[string]map[string]*planfsm.Tool{}
	legacy := map[string]bool{}
	info, err := s.stream.Info(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("read tool logs: %w", err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return tools, legacy, nil
	}
	prefix := bus.KVSubject(s.kv.Bucket(), "t.")
	cons, err := s.js.OrderedConsumer(ctx, s.stream.CachedInfo().Config.Name, jetstream.OrderedConsumerConfig{FilterSubjects: []string{prefix + ">"},
		InactiveThreshold: 5 * time.Second})
	if err != nil {
		return nil, nil, fmt.Errorf("read tool logs: %w", err)
	}
	for {
		batch, err := cons.FetchNoWait(loadToolsBatch)
		if err != nil {
			return nil, nil, fmt.Errorf("read tool logs: %w", err)
		}
		n, done := 0, false
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, nil, fmt.Errorf("read tool logs: %w", err)
			}
			done = done || md.Sequence.Stream >= last
			plan, tool, _ := strings.Cut(strings.TrimPrefix(m.Subject(), prefix), ".")
			purged := bus.KVDeleted(m.Headers())
			switch {
			case tool != "": // a record of an earlier version, one key per tool
				legacy[plan] = true
				if purged {
					delete(tools[plan], tool)
					continue
				}
				var rec planfsm.Tool
				if json.Unmarshal(m.Data(), &rec) == nil {
					keep(tools, plan, tool, &rec)
				}
			case purged: // the log's purge marker
				delete(tools, plan)
			default:
				recs, err := decodeToolLog(m.Data())
				if err != nil {
					continue
				}
				for tool, raw := range recs {
					var rec planfsm.Tool
					if json.Unmarshal(raw, &rec) == nil {
						keep(tools, plan, tool, &rec)
					}
				}
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, nil, fmt.Errorf("read tool logs: %w", err)
		}
		if done || n == 0 {
			return tools, legacy, nil
		}
	}
}
