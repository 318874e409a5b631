package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/pkg/health"
	"github.com/narratoria/runtime/pkg/messages"
)

// healthStore applies pkg/health to every (session, skill) and records
// each transition in KV narratoria_health (key <session>.<skill>), on
// narratoria.health.<session>.<skill>, in the log and in metrics.
type healthStore struct {
	kv   jetstream.KeyValue
	nc   *nats.Conn
	subj messages.Subjects
	// policy is §7's table with the cool-down of scheduler.healthCooldown.
	policy health.Policy
	log    *slog.Logger
	m      *metrics

	mu    sync.Mutex
	cache map[string]healthValue // by <session>.<skill>
}

type healthValue struct {
	rev    uint64
	status health.Status
}

func newHealthStore(kv jetstream.KeyValue, nc *nats.Conn, subj messages.Subjects, policy health.Policy, log *slog.Logger, m *metrics) *healthStore {
	return &healthStore{kv: kv, nc: nc, subj: subj, policy: policy, log: log, m: m, cache: map[string]healthValue{}}
}

func (h *healthStore) get(ctx context.Context, key string) (healthValue, error) {
	h.mu.Lock()
	v, ok := h.cache[key]
	h.mu.Unlock()
	if ok {
		return v, nil
	}
	e, err := h.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		v = healthValue{status: health.Status{State: health.Healthy}}
	case err != nil:
		return healthValue{}, fmt.Errorf("read health %s: %w", key, err)
	default:
		v = healthValue{rev: e.Revision(), status: health.Status{State: health.Healthy}}
		if e.Operation() == jetstream.KeyValuePut {
			if err := json.Unmarshal(e.Value(), &v.status); err != nil || v.status.State == "" {
				v.status = health.Status{State: health.Healthy}
			}
		}
	}
	// The session's owner is the key's only writer, and the cache is
	// dropped when the partition moves (ForgetIf) or the session goes
	// idle: what was read, or found missing, stays true until this
	// scheduler writes it. A stale revision would only fail the next
	// write's compare-and-set, which reads again.
	h.mu.Lock()
	h.cache[key] = v
	h.mu.Unlock()
	return v, nil
}

// Status returns a skill's health in a session.
func (h *healthStore) Status(ctx context.Context, session, skill string) (health.Status, error) {
	v, err := h.get(ctx, session+"."+skill)
	return v.status, err
}

// Apply feeds one input and records the result. Only changes (of state or
// failure count) are written, and only after before (if given) says the
// writer may: it returns an error when the change must not be made.
func (h *healthStore) Apply(ctx context.Context, session, skill string, in health.Input, reason string,
	before func(context.Context) error) (health.Transition, error) {
	key := session + "." + skill
	var cas casRetry
	for {
		if err := cas.next(ctx); err != nil {
			return health.Transition{}, fmt.Errorf("write health %s: %w", key, err)
		}
		v, err := h.get(ctx, key)
		if err != nil {
			return health.Transition{}, err
		}
		next, tr := h.policy.Next(v.status, in, reason, time.Now().UTC())
		if next == v.status {
			return tr, nil
		}
		if before != nil {
			if err := before(ctx); err != nil {
				return tr, fmt.Errorf("write health %s: %w", key, err)
			}
			before = nil
		}
		raw, _ := json.Marshal(next)
		var rev uint64
		if v.rev == 0 {
			rev, err = h.kv.Create(ctx, key, raw)
		} else {
			rev, err = h.kv.Update(ctx, key, raw, v.rev)
		}
		if err != nil {
			if bus.IsConflict(err) {
				h.mu.Lock()
				delete(h.cache, key)
				h.mu.Unlock()
				continue
			}
			return tr, fmt.Errorf("write health %s: %w", key, err)
		}
		h.mu.Lock()
		h.cache[key] = healthValue{rev: rev, status: next}
		h.mu.Unlock()
		if tr.Changed {
			h.announce(session, skill, tr)
		}
		return tr, nil
	}
}

func (h *healthStore) announce(session, skill string, tr health.Transition) {
	h.m.health.WithLabelValues(string(tr.From), string(tr.To)).Inc()
	h.log.Info("scheduler: skill health changed", slog.String("sessionId", session), slog.String("skill", skill),
		slog.String("from", string(tr.From)), slog.String("to", string(tr.To)), slog.String("input", string(tr.Input)),
		slog.String("reason", tr.Reason))
	subj, err := h.subj.Health(session, skill)
	if err != nil {
		return
	}
	msg := messages.HealthTransition{SessionID: session, Skill: skill, From: string(tr.From), To: string(tr.To),
		Input: string(tr.Input), Failures: tr.Failures, Reason: tr.Reason, At: time.Now().UTC()}
	b, _ := json.Marshal(msg)
	_ = h.nc.Publish(subj, b)
}

// Reset makes every skill of the session healthy again.
func (h *healthStore) Reset(ctx context.Context, session string) (int, error) {
	keys, err := h.kv.ListKeysFiltered(ctx, session+".*")
	if err != nil {
		return 0, fmt.Errorf("list health of session %s: %w", session, err)
	}
	var names []string
	for k := range keys.Keys() {
		names = append(names, k)
	}
	changed := 0
	for _, key := range names {
		skill := strings.TrimPrefix(key, session+".")
		tr, err := h.Apply(ctx, session, skill, health.Reset, "session reset", nil)
		if err != nil {
			return changed, err
		}
		if tr.Changed {
			changed++
		}
	}
	return changed, nil
}

// Disabled lists the skills of a session in permanentFailure among names,
// but those past their cool-down (a probe may try them).
func (h *healthStore) Disabled(ctx context.Context, session string, names []string) []string {
	var out []string
	now := time.Now()
	for _, n := range names {
		st, err := h.Status(ctx, session, n)
		if err == nil && !st.Selectable(now) {
			out = append(out, n)
		}
	}
	return out
}

// ForgetIf drops the cached health of the sessions owns says yes to (a
// partition that moved away).
func (h *healthStore) ForgetIf(owns func(session string) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.cache {
		if i := strings.LastIndexByte(k, '.'); i > 0 && owns(k[:i]) {
			delete(h.cache, k)
		}
	}
}

// Forget drops a session's cached entries.
func (h *healthStore) Forget(session string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.cache {
		if strings.HasPrefix(k, session+".") {
			delete(h.cache, k)
		}
	}
}
