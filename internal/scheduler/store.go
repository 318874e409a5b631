package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/planfsm"
)

// The scheduler's durable state lives in KV narratoria_plans:
//
//	p.<plan>          planfsm.Record, written when the plan is accepted and at each phase
//	t.<plan>.<tool>   planfsm.Tool, written at every transition of the tool
//	leader            the active scheduler's lease
//
// A finished plan's keys are purged in one call on the bucket's stream.
type store struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	stream jetstream.Stream
}

func planKey(plan string) string       { return "p." + plan }
func toolKey(plan, tool string) string { return "t." + plan + "." + tool }
func leaderKey() string                { return "leader" }
func toolsFilter(plan string) string   { return "t." + plan + ".>" }

// createPlan stores a new plan; it fails with jetstream.ErrKeyExists when
// the plan was accepted before (a redelivered plan message).
func (s *store) createPlan(ctx context.Context, id string, rec planfsm.Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode plan record: %w", err)
	}
	if _, err := s.kv.Create(ctx, planKey(id), b); err != nil {
		return err
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

// putToolAsync writes a tool record without waiting for the server: a KV
// put is a publish on the bucket's subject, so writes are pipelined and
// stay in order on the connection. The future says when it is stored.
func (s *store) putToolAsync(plan, tool string, rec *planfsm.Tool) (jetstream.PubAckFuture, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode tool record: %w", err)
	}
	f, err := s.js.PublishAsync("$KV."+s.kv.Bucket()+"."+toolKey(plan, tool), b)
	if err != nil {
		return nil, fmt.Errorf("persist tool %s of plan %s: %w", tool, plan, err)
	}
	return f, nil
}

// putPlanAsync writes a plan record without waiting for the server.
func (s *store) putPlanAsync(plan string, rec planfsm.Record) (jetstream.PubAckFuture, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode plan record: %w", err)
	}
	f, err := s.js.PublishAsync("$KV."+s.kv.Bucket()+"."+planKey(plan), b)
	if err != nil {
		return nil, fmt.Errorf("persist plan %s: %w", plan, err)
	}
	return f, nil
}

// purge removes every key of a finished plan.
func (s *store) purge(ctx context.Context, plan string) error {
	prefix := "$KV." + s.kv.Bucket() + "."
	if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(prefix+toolsFilter(plan))); err != nil {
		return fmt.Errorf("purge tools of plan %s: %w", plan, err)
	}
	if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(prefix+planKey(plan))); err != nil {
		return fmt.Errorf("purge plan %s: %w", plan, err)
	}
	return nil
}

// loadAll reads every persisted plan with its tools.
func (s *store) loadAll(ctx context.Context) (map[string]planfsm.Record, map[string]map[string]*planfsm.Tool, error) {
	plans := map[string]planfsm.Record{}
	tools := map[string]map[string]*planfsm.Tool{}
	w, err := s.kv.WatchFiltered(ctx, []string{"p.>", "t.>"}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, nil, fmt.Errorf("read plan state: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				return plans, tools, nil
			}
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
	}
}
