package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/planfsm"
	"github.com/narratoria/runtime/pkg/messages"
)

// Decision intake (issue 45): NARRATORIA_APPROVALS takes no client's
// publish. A game server or an operator publishes a decision on
// <prefix>.approvals.<plan>.<tool> with JetStream, as before; one
// scheduler (queue group) takes it here and stores it on
// <prefix>.decisions.<plan>.<tool> only when it may count — the decision
// decoded exactly, the plan in flight and the publisher's (a tenant's own),
// the tool one of it that waits for approval — and answers with the
// stream's ack, or refuses it with a JetStream error naming why. So what
// the stream holds is bounded by the plans in flight (one decision per
// tool that waits, the last one), whoever floods it: a decision on a plan
// that does not exist is refused, never kept for a day.
//
// The scheduler running the plan applies a decision as it arrives
// (onApproval); the stored one is read when a tool starts to wait, after a
// failover or a partition move.

// Decision refusal codes.
const (
	decisionInvalid    = http.StatusBadRequest
	decisionNoPlan     = http.StatusNotFound
	decisionNotWaiting = http.StatusConflict
	decisionBusy       = http.StatusServiceUnavailable
)

// decisionsMax bounds the decisions one scheduler checks at once; one
// more is answered 503 (client.Approve sends it again).
const decisionsMax = 64

// gateTTL is how long the plan a decision names is remembered (in flight,
// whose, which tools wait) rather than read again.
const gateTTL = 10 * time.Second

// gate is what a decision's plan allows: its session (whose) and the
// tools that wait for approval.
type gate struct {
	session string
	tools   map[string]bool
	at      time.Time
}

// gates remembers plans decisions named, for gateTTL.
type gates struct {
	mu    sync.Mutex
	plans map[string]gate
}

// onDecision takes a decision published on <prefix>.approvals.…, one
// scheduler of the queue group each, on a goroutine of its own (at most
// decisionsMax at once).
func (s *Scheduler) onDecision(msg *nats.Msg) {
	select {
	case s.decisionSlots <- struct{}{}:
	default:
		s.refuseDecision(msg, "busy", decisionBusy, "the scheduler is checking too many decisions at once; send it again")
		return
	}
	if !s.life.Go(func(ctx context.Context) {
		defer func() { <-s.decisionSlots }()
		s.takeDecision(ctx, msg)
	}) {
		<-s.decisionSlots
	}
}

// takeDecision checks a decision and stores it, or refuses it.
func (s *Scheduler) takeDecision(ctx context.Context, msg *nats.Msg) {
	parts := strings.Split(msg.Subject, ".")
	plan, tool := parts[len(parts)-2], parts[len(parts)-1]
	tenant := s.requestTenant(msg.Subject)
	problem := ""
	if err := messages.CheckPlanID(plan); err != nil {
		problem = err.Error()
	} else if err := messages.CheckToken("toolId", tool); err != nil {
		problem = err.Error()
	} else if _, err := messages.DecodeApproval(msg.Data); err != nil {
		problem = err.Error()
	}
	if problem != "" {
		s.m.badMessages.WithLabelValues("approval").Inc()
		s.refuseDecision(msg, "invalid", decisionInvalid, problem)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	g, err := s.gateOf(rctx, plan)
	switch {
	case errors.Is(err, errNotInFlight) || (err == nil && !s.tenantOwns(tenant, g.session)):
		// Another tenant's plan is, to this tenant, no plan at all.
		s.refuseDecision(msg, "unknown_plan", decisionNoPlan, fmt.Sprintf("plan %s is not in flight (it finished, or was never accepted): no decision is kept for it", plan))
		return
	case err != nil:
		s.refuseDecision(msg, "store", decisionBusy, "the plan could not be read; send the decision again: "+err.Error())
		return
	case !g.tools[tool]:
		s.refuseDecision(msg, "not_waiting", decisionNotWaiting, fmt.Sprintf("plan %s has no tool %s that waits for approval (requiresApproval)", plan, tool))
		return
	}
	subj, _ := s.subj.Decisions(plan, tool)
	ack, err := s.js.Publish(rctx, subj, msg.Data)
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			s.refuseDecisionWith(msg, "store", apiErr.Code, apiErr.ErrorCode, apiErr.Description)
			return
		}
		s.refuseDecision(msg, "store", decisionBusy, "the decision was not stored; send it again: "+err.Error())
		return
	}
	s.m.decisions.WithLabelValues("stored").Inc()
	s.log.Info("scheduler: approval decision stored", slog.String("planId", plan), slog.String("toolId", tool), slog.String("tenant", tenant.String()))
	if msg.Reply != "" {
		b, _ := json.Marshal(ack)
		_ = msg.Respond(b)
	}
}

// errNotInFlight: the plan a decision names is not in flight.
var errNotInFlight = errors.New("plan not in flight")

// gateOf returns what plan allows, remembered for gateTTL: errNotInFlight
// when it is not in flight (no record, or its result published).
func (s *Scheduler) gateOf(ctx context.Context, plan string) (gate, error) {
	now := time.Now()
	s.gates.mu.Lock()
	g, ok := s.gates.plans[plan]
	s.gates.mu.Unlock()
	if ok && now.Sub(g.at) < gateTTL {
		return g, nil
	}
	rec, err := s.store.getPlan(ctx, plan)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || (err == nil && rec.Phase == planfsm.PhasePublished):
		return gate{}, errNotInFlight
	case err != nil:
		return gate{}, err
	}
	g = gate{session: rec.SessionID, tools: map[string]bool{}, at: now}
	var p struct {
		Tools []struct {
			ToolID           string `json:"toolId"`
			RequiresApproval bool   `json:"requiresApproval"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(rec.Plan, &p); err != nil {
		return gate{}, fmt.Errorf("decode plan %s: %w", plan, err)
	}
	for _, t := range p.Tools {
		if t.RequiresApproval {
			g.tools[t.ToolID] = true
		}
	}
	for _, it := range rec.Iterations {
		for _, t := range it.Tools {
			if t.RequiresApproval {
				g.tools[t.ToolID] = true
			}
		}
	}
	s.gates.mu.Lock()
	if len(s.gates.plans) >= 4096 {
		clear(s.gates.plans)
	}
	s.gates.plans[plan] = g
	s.gates.mu.Unlock()
	return g, nil
}

// refuseDecision answers a refused decision with a JetStream error (its
// publisher's js.Publish returns it), counts and logs it.
func (s *Scheduler) refuseDecision(msg *nats.Msg, outcome string, code int, problem string) {
	s.refuseDecisionWith(msg, outcome, code, 0, problem)
}

func (s *Scheduler) refuseDecisionWith(msg *nats.Msg, outcome string, code int, errCode jetstream.ErrorCode, problem string) {
	s.m.decisions.WithLabelValues(outcome).Inc()
	level := slog.LevelWarn
	if outcome == "unknown_plan" || outcome == "busy" {
		level = slog.LevelDebug // what a flood is made of: counted, not logged one by one
	}
	s.log.Log(context.Background(), level, "scheduler: approval refused", slog.String("subject", msg.Subject), slog.String("reason", outcome),
		slog.String("problem", problem))
	if msg.Reply == "" {
		return
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "err_code": errCode, "description": problem}})
	_ = msg.Respond(b)
}
