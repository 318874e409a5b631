package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/narratoria/runtime/internal/plancheck"
	"github.com/narratoria/runtime/internal/planfsm"
	"github.com/narratoria/runtime/pkg/messages"
)

// contextReplyMsg carries a planner's answer (or the request's failure)
// back to the plan's actor, which validates it against the plan as it is.
type contextReplyMsg struct {
	n     int
	reply messages.ContextReply
	err   error
}

// requestContext asks a planner for more steps (§9.1) on
// <prefix>.context.<session>, without blocking the actor: the answer comes
// back as a contextReplyMsg. The machine's timer bounds the wait; the
// request's own deadline is the same.
func (a *actor) requestContext(ctx context.Context, e planfsm.RequestContext) {
	// The iteration was marked asked (persisted) first: only its owner asks.
	if err := a.settled(ctx); err != nil {
		a.mb.put(contextReplyMsg{n: e.N, err: err})
		return
	}
	req := messages.ContextRequest{PlanID: a.m.ID(), SessionID: a.session, Iteration: e.N, Prefix: planfsm.Prefix(e.N),
		ToolID: e.ToolID, Suggestion: e.Suggestion, Plan: a.m.Plan(), Completed: []messages.ContextTool{}, Failed: []messages.ContextTool{}}
	for i := range a.m.Len() {
		t := a.m.Tool(i)
		ct := messages.ContextTool{ToolID: a.m.ToolID(i), Skill: t.Skill, State: t.State}
		switch t.State {
		case messages.ToolSuccess:
			ct.Output = t.Output
			req.Completed = append(req.Completed, ct)
		case messages.ToolFailed, messages.ToolTimeout, messages.ToolSkipped:
			ct.Error = t.Error
			req.Failed = append(req.Failed, ct)
		case messages.ToolPending, messages.ToolRunning, messages.ToolRetrying, messages.ToolAwaitingApproval, messages.ToolCancelled:
			// neither completed nor failed yet
		}
	}
	if st, err := a.s.sessions.Get(ctx, a.session); err == nil {
		req.State = st
	} else {
		req.State = json.RawMessage("{}")
	}
	subj, err := a.s.subj.Context(a.session)
	if err != nil {
		a.mb.put(contextReplyMsg{n: e.N, err: err})
		return
	}
	body, err := json.Marshal(req)
	if err != nil {
		a.mb.put(contextReplyMsg{n: e.N, err: fmt.Errorf("encode context request: %w", err)})
		return
	}
	a.log.Info("scheduler: asking a planner for more context", slog.Int("iteration", e.N), slog.String("toolId", e.ToolID),
		slog.String("suggestion", e.Suggestion))
	n, timeout := e.N, a.s.cfg.ContextTimeout
	a.s.life.Go(func(sctx context.Context) {
		rctx, cancel := context.WithTimeout(sctx, timeout)
		defer cancel()
		m, err := a.s.nc.RequestWithContext(rctx, subj, body)
		if err != nil {
			a.mb.put(contextReplyMsg{n: n, err: fmt.Errorf("no answer from a planner on %s: %w", subj, err)})
			return
		}
		reply, err := messages.DecodeContextReply(m.Data)
		if err != nil {
			a.mb.put(contextReplyMsg{n: n, err: fmt.Errorf("the planner's answer is not a ContextReply: %w", err)})
			return
		}
		a.mb.put(contextReplyMsg{n: n, reply: *reply})
	})
}

// onContextReply validates a planner's answer like any plan (schema, IDs,
// cycles, references, registry) with its tool IDs prefixed, and gives the
// machine the tools to merge, or the reason there are none.
func (a *actor) onContextReply(ctx context.Context, m contextReplyMsg) {
	ev := planfsm.ContextAnswered{Now: time.Now(), N: m.n}
	switch {
	case m.err != nil:
		ev.Err = m.err.Error()
	case m.reply.Error != "":
		ev.Err = "the planner answered an error: " + m.reply.Error
	case len(m.reply.Tools) > 0:
		tools, scripts, err := a.s.contextTools(a.m.Plan(), m.n, m.reply.Tools)
		if err == nil {
			err = a.s.mergedRecordFits(a.m.Record(), tools, scripts)
		}
		if err != nil {
			ev.Err = "invalid answer: " + err.Error()
		} else {
			ev.Tools, ev.Scripts = tools, scripts
		}
	}
	a.step(ctx, ev)
}

// mergedRecordFits says whether the plan's record, with a round's tools
// and scripts merged, is still one message the store takes
// (store.recordFits): tools that would make it more are refused, and the
// plan carries on without them, rather than a record write sent again for
// ever.
func (s *Scheduler) mergedRecordFits(rec planfsm.Record, tools []messages.Tool, scripts []planfsm.Script) error {
	b, err := planfsm.EncodeRecord(&rec)
	if err != nil {
		return fmt.Errorf("encode plan record: %w", err)
	}
	tb, err := json.Marshal(tools)
	if err != nil {
		return fmt.Errorf("encode merged tools: %w", err)
	}
	sb, err := json.Marshal(scripts)
	if err != nil {
		return fmt.Errorf("encode merged scripts: %w", err)
	}
	return s.store.recordFits(len(b)+len(tb)+len(sb), s.nc.MaxPayload())
}

// contextTools decodes the answer's tools (with the Plan schema's
// defaults), gives them the iteration's prefix, rewrites their
// dependencies and $refs between each other, and checks the plan they
// would make.
func (s *Scheduler) contextTools(current *messages.Plan, n int, raw []json.RawMessage) ([]messages.Tool, []planfsm.Script, error) {
	doc, err := json.Marshal(map[string]any{"requestId": current.RequestID, "tools": raw})
	if err != nil {
		return nil, nil, err
	}
	p, err := messages.DecodePlan(doc, s.cfg.limits())
	if err != nil {
		return nil, nil, err
	}
	prefix := planfsm.Prefix(n)
	rename := map[string]string{}
	for i := range p.Tools {
		id := p.Tools[i].ToolID
		if !strings.HasPrefix(id, prefix) {
			rename[id] = prefix + id
		}
	}
	for i := range p.Tools {
		t := &p.Tools[i]
		if r, ok := rename[t.ToolID]; ok {
			t.ToolID = r
		}
		for k, d := range t.Dependencies {
			if r, ok := rename[d]; ok {
				t.Dependencies[k] = r
			}
		}
		if t.Input, err = renameRefs(t.Input, rename); err != nil {
			return nil, nil, fmt.Errorf("tool %s: %w", t.ToolID, err)
		}
	}
	combined := *current
	combined.Tools = append(append([]messages.Tool{}, current.Tools...), p.Tools...)
	checked, err := plancheck.CheckPlan(&combined, s.resolver)
	if err != nil {
		return nil, nil, err
	}
	scripts := resolvedScripts(checked)[len(current.Tools):]
	return p.Tools, scripts, nil
}

// renameRefs rewrites "$id…" references to renamed tools in an input.
func renameRefs(input json.RawMessage, rename map[string]string) (json.RawMessage, error) {
	if len(rename) == 0 || len(input) == 0 {
		return input, nil
	}
	var v any
	if err := json.Unmarshal(input, &v); err != nil {
		return nil, err
	}
	var walk func(any) any
	walk = func(x any) any {
		switch x := x.(type) {
		case map[string]any:
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for k, e := range x {
				x[k] = walk(e)
			}
		case string:
			if strings.HasPrefix(x, "$") && !strings.HasPrefix(x, "$$") {
				id, rest, _ := strings.Cut(x[1:], ".")
				if r, ok := rename[id]; ok {
					if rest != "" {
						return "$" + r + "." + rest
					}
					return "$" + r
				}
			}
		}
		return x
	}
	return json.Marshal(walk(v))
}
