package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/planfsm"

	"github.com/narratoria/runtime/pkg/messages"
)

// ServiceName is the scheduler's NATS micro service name.
const ServiceName = "narratoria-scheduler"

// Status is what the scheduler's status endpoint and micro stats report.
type Status struct {
	// ID is the scheduler's instance ID.
	ID string `json:"id"`
	// Active is true while the scheduler owns at least one partition.
	Active bool `json:"active"`
	// PlansInFlight counts plans being run.
	PlansInFlight int `json:"plansInFlight"`
	// Partitions are the partitions it owns, sorted.
	Partitions []int `json:"partitions"`
	// PartitionCount is how many partitions there are in all.
	PartitionCount int `json:"partitionCount"`
}

// Status returns the scheduler's status.
func (s *Scheduler) Status() Status {
	owned := s.Owned()
	if owned == nil {
		owned = []int{}
	}
	return Status{ID: s.cfg.ID, Active: len(owned) > 0, PlansInFlight: s.InFlight(), Partitions: owned, PartitionCount: s.bus.Partitions}
}

func (s *Scheduler) startService() error {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:         ServiceName,
		Version:      s.opts.Version,
		Description:  "Runs Narratoria plans: one actor per plan, durable in JetStream",
		Metadata:     map[string]string{"scheduler": s.cfg.ID},
		StatsHandler: func(*micro.Endpoint) any { return s.Status() },
	})
	if err != nil {
		return fmt.Errorf("scheduler: micro service: %w", err)
	}
	err = svc.AddEndpoint("status", micro.HandlerFunc(func(r micro.Request) { _ = r.RespondJSON(s.Status()) }),
		micro.WithEndpointSubject(s.subj.Prefix+".scheduler."+sanitizeToken(s.cfg.ID)+".status"))
	if err != nil {
		_ = svc.Stop()
		return fmt.Errorf("scheduler: micro endpoint: %w", err)
	}
	context.AfterFunc(s.ctx, func() { _ = svc.Stop() })
	return nil
}

func sanitizeToken(id string) string {
	b := []byte(id)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// Queue groups: one scheduler answers each list request; one checks each
// approval decision and stores it, or refuses it (decisions.go).
const (
	listQueueGroup     = "narratoria-scheduler-list"
	approvalQueueGroup = "narratoria-scheduler-approvals"
)

// subscribe subscribes to session resets, plan control and approvals.
// Every scheduler gets each of them; the one that owns the session's
// partition (or runs the plan) acts, the others stay silent — except that
// any of them says so when the plan is in flight nowhere. The plan list
// is read from KV by one of them.
func (s *Scheduler) subscribe() ([]*nats.Subscription, error) {
	// With tenants each of these subjects carries the tenant after its
	// kind (put there by the server's account import), and a session is
	// two tokens.
	p, t, session := s.subj.Prefix, "", "*"
	if s.subj.Tenants {
		t, session = ".*", "*.*"
	}
	approvals := p + ".approvals" + t + ".*.*"
	var subs []*nats.Subscription
	for _, c := range []struct {
		subject, queue string
		h              nats.MsgHandler
	}{
		{p + ".sessions." + session + ".reset", "", s.onReset},
		{p + ".control" + t + ".status.*", "", s.onPlanStatus},
		{p + ".control" + t + ".cancel.*", "", s.onPlanCancel},
		{approvals, "", s.onApproval},
		{approvals, approvalQueueGroup, s.onDecision},
		{p + ".control" + t + ".list", listQueueGroup, s.onPlanList},
		{s.direct, "", s.onDirectOutcome},
	} {
		sub, err := s.nc.QueueSubscribe(c.subject, c.queue, c.h) // no queue: a plain subscription
		if err != nil {
			for _, sub := range subs {
				_ = sub.Unsubscribe()
			}
			return nil, fmt.Errorf("subscribe to %s: %w", c.subject, err)
		}
		subs = append(subs, sub)
	}
	return subs, nil
}

func controlReply(m *nats.Msg, r messages.ControlReply) {
	if m.Reply == "" {
		return
	}
	b, _ := json.Marshal(r)
	_ = m.Respond(b)
}

// inFlightActor finds the actor of the plan a control subject names. When
// this scheduler does not run it, it answers only if the plan is in flight
// nowhere (no record in KV, or one whose result is out), naming the
// problem; the plan's owner answers otherwise. A bad plan ID is answered by every scheduler alike.
func (s *Scheduler) inFlightActor(m *nats.Msg) *actor {
	plan := lastToken(m.Subject)
	if err := messages.CheckPlanID(plan); err != nil {
		s.m.badMessages.WithLabelValues("control").Inc()
		controlReply(m, messages.ControlReply{Error: err.Error()})
		return nil
	}
	tenant := s.requestTenant(m.Subject)
	if a := s.actor(plan); a != nil && s.tenantOwns(tenant, a.session) {
		return a
	}
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	notInFlight := func() {
		controlReply(m, messages.ControlReply{Error: fmt.Sprintf("plan %s is not in flight (it finished, or was never accepted)", plan), Code: messages.ControlNotInFlight})
	}
	rec, err := s.store.getPlan(ctx, plan)
	switch {
	case err == nil && !s.tenantOwns(tenant, rec.SessionID):
		// Another tenant's plan is, to this tenant, no plan at all.
		s.m.badMessages.WithLabelValues("control").Inc()
		s.log.Warn("scheduler: control request for another tenant's plan refused", slog.String("tenant", tenant), slog.String("planId", plan))
		if s.Owns(rec.SessionID) {
			notInFlight()
		}
	case errors.Is(err, jetstream.ErrKeyNotFound) || (err == nil && rec.Phase == planfsm.PhasePublished):
		notInFlight()
	case err == nil && s.Owns(rec.SessionID):
		// Ours, and its actor is being started (the plan was just accepted,
		// or is being recovered): wait for it rather than stay silent. Or
		// the actor just ended and the record's last write (published) is
		// about to land: read the record again now and then, so a finished
		// plan is answered at once, not after the whole wait.
		for i := 1; ctx.Err() == nil; i++ {
			if a := s.actor(plan); a != nil {
				return a
			}
			bus.Sleep(ctx, 10*time.Millisecond)
			if i%5 == 0 {
				if rec, err := s.store.getPlan(ctx, plan); errors.Is(err, jetstream.ErrKeyNotFound) || (err == nil && rec.Phase == planfsm.PhasePublished) {
					break
				}
			}
		}
		notInFlight()
	}
	return nil
}

// onPlanStatus answers <prefix>.control.status.<plan> (§9.4).
func (s *Scheduler) onPlanStatus(m *nats.Msg) {
	a := s.inFlightActor(m)
	if a == nil {
		return
	}
	reply := make(chan messages.PlanStatus, 1)
	a.mb.put(statusMsg{reply: reply})
	select {
	case st := <-reply:
		controlReply(m, messages.ControlReply{OK: true, Status: &st})
	case <-a.done:
		controlReply(m, messages.ControlReply{Error: fmt.Sprintf("plan %s finished", lastToken(m.Subject)), Code: messages.ControlNotInFlight})
	case <-time.After(5 * time.Second):
		controlReply(m, messages.ControlReply{Error: "the plan's actor did not answer in time"})
	}
}

// onPlanCancel answers <prefix>.control.cancel.<plan> (§9.4).
func (s *Scheduler) onPlanCancel(m *nats.Msg) {
	req, err := messages.DecodeCancelRequest(m.Data)
	if err != nil {
		s.m.badMessages.WithLabelValues("control").Inc()
		s.log.Warn("scheduler: cancel request refused", slog.String("subject", m.Subject), slog.String("problem", err.Error()))
		controlReply(m, messages.ControlReply{Error: err.Error()})
		return
	}
	a := s.inFlightActor(m)
	if a == nil {
		return
	}
	reason := req.Reason
	if req.By != "" {
		reason = strings.TrimSpace("by " + req.By + " " + reason)
	}
	a.mb.put(cancelMsg{reason: reason, reply: func(err error) {
		if err != nil {
			controlReply(m, messages.ControlReply{Error: err.Error()})
			return
		}
		controlReply(m, messages.ControlReply{OK: true})
	}})
}

// onPlanList answers <prefix>.control.list (§9.4) from KV, so one
// scheduler lists the plans of every partition.
func (s *Scheduler) onPlanList(m *nats.Msg) {
	req, err := messages.DecodePlanListRequest(m.Data)
	if err != nil {
		s.m.badMessages.WithLabelValues("control").Inc()
		s.log.Warn("scheduler: plan list request refused", slog.String("subject", m.Subject), slog.String("problem", err.Error()))
		controlReply(m, messages.ControlReply{Error: err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	plans, err := s.store.listPlans(ctx)
	if err != nil {
		controlReply(m, messages.ControlReply{Error: err.Error()})
		return
	}
	list := messages.PlanList{Plans: []messages.PlanSummary{}}
	tenant := s.requestTenant(m.Subject)
	for id, rec := range plans {
		if !s.tenantOwns(tenant, rec.SessionID) {
			continue
		}
		if rec.Phase != planfsm.PhasePublished && (req.SessionID == "" || rec.SessionID == messages.Qualify(tenant, req.SessionID)) {
			list.Plans = append(list.Plans, messages.PlanSummary{PlanID: id, SessionID: rec.SessionID})
		}
	}
	slices.SortFunc(list.Plans, func(x, y messages.PlanSummary) int { return strings.Compare(x.PlanID, y.PlanID) })
	controlReply(m, messages.ControlReply{OK: true, List: &list})
}

// replyResult is the reply to an approval or a reset request.
type replyResult struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// ChangedSkills counts skills a reset made healthy again.
	ChangedSkills int `json:"changedSkills,omitempty"`
	// ClearedState is true when a reset emptied the session state.
	ClearedState bool `json:"clearedState,omitempty"`
}

func respond(m *nats.Msg, r replyResult) {
	if m.Reply == "" {
		return
	}
	b, _ := json.Marshal(r)
	_ = m.Respond(b)
}

// decodeApproval reads a decision exactly (messages.DecodeApproval:
// "approved" must be there, a missing field is an error, never a denial);
// problem names what is wrong with it.
func decodeApproval(b []byte) (ap messages.Approval, problem string) {
	a, err := messages.DecodeApproval(b)
	if err != nil {
		return ap, err.Error()
	}
	return *a, ""
}

// onApproval takes a decision as it is published on
// <prefix>.approvals.<plan>.<tool> (§9.3). Every scheduler sees it; the
// one running the plan applies it. One scheduler also stores it, once it
// checked it (onDecision: NARRATORIA_APPROVALS keeps the last decision per
// tool until the plan ends), and a plan reads it from there when its tool
// starts to wait, after a crash or after its partition moved — so a
// decision sent before the tool waits, or while the plan's partition
// moves, is applied when it can be.
func (s *Scheduler) onApproval(msg *nats.Msg) {
	parts := strings.Split(msg.Subject, ".")
	plan, tool := parts[len(parts)-2], parts[len(parts)-1]
	a := s.actor(plan)
	if a == nil || !s.tenantOwns(s.requestTenant(msg.Subject), a.session) {
		return // not running here: its owner, or its stored copy, takes it (or another tenant's: onDecision refuses it)
	}
	log := a.log.With(slog.String("toolId", tool))
	ap, problem := decodeApproval(msg.Data)
	if problem != "" || !messages.ValidToken(tool) {
		return // onDecision refuses it
	}
	a.mb.put(approvalMsg{tool: tool, approval: ap, reply: func(err error) {
		if err != nil {
			s.m.badMessages.WithLabelValues("approval").Inc()
			log.Warn("scheduler: approval not applied", slog.Any("error", err))
			return
		}
		log.Info("scheduler: approval decision applied", slog.Bool("approved", ap.Approved), slog.String("by", ap.By))
	}})
}

// onReset handles narratoria.sessions.<session>.reset. The owner of the
// session's partition answers (it holds the session's cached health and
// state).
func (s *Scheduler) onReset(m *nats.Msg) {
	// <prefix>.sessions.<session>.reset, the session two tokens with
	// tenants.
	session := strings.TrimSuffix(strings.TrimPrefix(m.Subject, s.subj.Prefix+".sessions."), ".reset")
	if err := s.subj.CheckSession(session); err != nil {
		s.m.badMessages.WithLabelValues("reset").Inc()
		respond(m, replyResult{Error: err.Error()})
		return
	}
	if !s.Owns(session) {
		return
	}
	req, err := messages.DecodeSessionReset(m.Data)
	if err != nil {
		s.m.badMessages.WithLabelValues("reset").Inc()
		s.log.Warn("scheduler: session reset refused", slog.String("sessionId", session), slog.String("problem", err.Error()))
		respond(m, replyResult{Error: err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	n, err := s.health.Reset(ctx, session)
	if err != nil {
		respond(m, replyResult{Error: err.Error()})
		return
	}
	res := replyResult{OK: true, ChangedSkills: n}
	if req.ClearState {
		if err := s.sessions.Clear(ctx, session); err != nil {
			respond(m, replyResult{Error: err.Error()})
			return
		}
		res.ClearedState = true
	}
	s.log.Info("scheduler: session reset", slog.String("sessionId", session), slog.Int("skillsHealed", n), slog.Bool("clearState", req.ClearState))
	respond(m, res)
}

// requestTenant returns the tenant of a request subject (the token after
// its kind), or "" without tenants.
func (s *Scheduler) requestTenant(subject string) string {
	if !s.subj.Tenants {
		return ""
	}
	toks := strings.Split(subject, ".")
	if k := s.subj.KindToken() + 1; k < len(toks) {
		return toks[k]
	}
	return ""
}

// tenantOwns reports whether session is one of tenant's (always, without
// tenants).
func (s *Scheduler) tenantOwns(tenant, session string) bool {
	return !s.subj.Tenants || (tenant != "" && messages.TenantOf(session) == tenant)
}
