package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/planfsm"
	"github.com/narratoria/runtime/pkg/messages"
)

// reuseStore keeps, in KV narratoria_reuse (TTL bus.ReuseTTLDefault), what
// lets a replan reuse what an earlier attempt of the same prompt already
// did (one action, one effect):
//
//	root.<plan>                        the first attempt (root) of the prompt plan serves
//	o.<session>.<root>.<inputKey>      a succeeded tool's outcome: script + resolved input
//
// Outcomes are recorded only when a plan fails and may be replanned (a
// plan that succeeds is never replanned), before its result is published;
// they are looked up only by later attempts (plans whose root is not
// themselves). Keys carry the session and the root, so reuse never
// crosses sessions or prompts.
type reuseStore struct {
	kv jetstream.KeyValue
}

// reusable is a recorded outcome.
type reusable struct {
	Plan      string              `json:"plan"`
	ToolID    string              `json:"toolId"`
	Output    json.RawMessage     `json:"output,omitempty"`
	Events    []json.RawMessage   `json:"events,omitempty"`
	EventsRef *messages.EventsRef `json:"eventsRef,omitempty"`
	Assets    []messages.Asset    `json:"assets,omitempty"`
}

func reuseKey(session, root, inputKey string) string {
	return "o." + session + "." + root + "." + inputKey
}

// root returns the first attempt of the prompt a plan with this parent
// serves: the parent's root, or the parent itself.
func (r *reuseStore) root(ctx context.Context, parent string) string {
	e, err := r.kv.Get(ctx, "root."+parent)
	if err != nil {
		return parent
	}
	return string(e.Value())
}

// setRoot records a plan's root for its own replans.
func (r *reuseStore) setRoot(ctx context.Context, plan, root string) error {
	_, err := r.kv.Put(ctx, "root."+plan, []byte(root))
	return err
}

// get finds a recorded outcome.
func (r *reuseStore) get(ctx context.Context, key string) (*reusable, bool) {
	e, err := r.kv.Get(ctx, key)
	if err != nil {
		return nil, false
	}
	var v reusable
	if json.Unmarshal(e.Value(), &v) != nil {
		return nil, false
	}
	return &v, true
}

// record stores the outcomes of a failed plan's succeeded tools (those
// whose script allows reuse and that did not reuse one themselves).
func (r *reuseStore) record(ctx context.Context, m *planfsm.Machine) error {
	rec := m.Record()
	if rec.Root == "" {
		return nil
	}
	var errs []error
	for i := range m.Len() {
		t := m.Tool(i)
		if t.State != messages.ToolSuccess || t.ReusedFrom != "" || t.InputKey == "" || m.Script(i).NoReuse {
			continue
		}
		v := reusable{Plan: m.ID(), ToolID: m.ToolID(i), Output: t.Output, Events: t.Events, Assets: t.Assets}
		if n := len(t.EventsRefs); n > 0 {
			v.EventsRef, v.Events = &t.EventsRefs[n-1], nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := r.kv.Put(ctx, reuseKey(rec.SessionID, rec.Root, t.InputKey), b); err != nil {
			errs = append(errs, fmt.Errorf("record reusable outcome of %s: %w", m.ToolID(i), err))
		}
	}
	return errors.Join(errs...)
}

// reuse answers a dispatch from an earlier attempt's recorded outcome
// when there is one: no job is sent, and the actor gets the outcome as if
// a worker had run the script. It reports whether it did.
func (a *actor) reuse(ctx context.Context, d planfsm.Dispatch) bool {
	rec := a.m.Record()
	if a.s.reuse == nil || rec.Root == "" || rec.Root == a.m.ID() || a.m.Script(d.Index).NoReuse || d.InputKey == "" {
		return false
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	v, ok := a.s.reuse.get(gctx, reuseKey(rec.SessionID, rec.Root, d.InputKey))
	cancel()
	if !ok {
		return false
	}
	sc := a.m.Script(d.Index)
	out := messages.Outcome{PlanID: a.m.ID(), SessionID: rec.SessionID, ToolID: a.m.ToolID(d.Index), Skill: sc.Skill, Script: sc.Name,
		Attempt: d.Attempt, State: messages.ToolSuccess, Output: v.Output, Events: v.Events, EventsRef: v.EventsRef, Assets: v.Assets,
		ExitCode: 0, StartedAt: time.Now(), ReusedFrom: v.Plan}
	a.log.Info("scheduler: outcome reused from an earlier attempt of the prompt", "toolId", out.ToolID, "from", v.Plan, "fromTool", v.ToolID)
	a.s.m.reused.Inc()
	a.mb.put(outcomeMsg{out: out})
	return true
}
