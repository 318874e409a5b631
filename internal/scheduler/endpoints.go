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

	"github.com/narratoria/runtime/internal/planfsm"

	"github.com/narratoria/runtime/pkg/messages"
)

// ServiceName is the scheduler's NATS micro service name.
const ServiceName = "narratoria-scheduler"

// Status is what the scheduler's status endpoint and micro stats report.
type Status struct {
	// ID is the scheduler's lease ID.
	ID string `json:"id"`
	// Active is true for the scheduler holding the lease.
	Active bool `json:"active"`
	// PlansInFlight counts plans being run.
	PlansInFlight int `json:"plansInFlight"`
}

// Status returns the scheduler's status.
func (s *Scheduler) Status() Status {
	return Status{ID: s.cfg.ID, Active: s.Leading(), PlansInFlight: s.InFlight()}
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

// subscribeLeader subscribes to what only the active scheduler answers:
// session resets and plan control.
func (s *Scheduler) subscribeLeader() ([]*nats.Subscription, error) {
	var subs []*nats.Subscription
	for subject, h := range map[string]nats.MsgHandler{
		s.subj.Prefix + ".sessions.*.reset": s.onReset,
		s.subj.Prefix + ".control.status.*": s.onPlanStatus,
		s.subj.Prefix + ".control.cancel.*": s.onPlanCancel,
		s.subj.PlanListSubject():            s.onPlanList,
	} {
		sub, err := s.nc.Subscribe(subject, h)
		if err != nil {
			for _, sub := range subs {
				_ = sub.Unsubscribe()
			}
			return nil, fmt.Errorf("subscribe to %s: %w", subject, err)
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

// inFlightActor finds the actor of the plan a control subject names, or
// answers the request with an error naming the problem.
func (s *Scheduler) inFlightActor(m *nats.Msg) *actor {
	plan := lastToken(m.Subject)
	if err := messages.CheckPlanID(plan); err != nil {
		s.m.badMessages.WithLabelValues("control").Inc()
		controlReply(m, messages.ControlReply{Error: err.Error()})
		return nil
	}
	a := s.actor(plan)
	if a == nil {
		controlReply(m, messages.ControlReply{Error: fmt.Sprintf("plan %s is not in flight (it finished, or was never accepted)", plan)})
	}
	return a
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
		controlReply(m, messages.ControlReply{Error: fmt.Sprintf("plan %s finished", lastToken(m.Subject))})
	case <-time.After(5 * time.Second):
		controlReply(m, messages.ControlReply{Error: "the plan's actor did not answer in time"})
	}
}

// onPlanCancel answers <prefix>.control.cancel.<plan> (§9.4).
func (s *Scheduler) onPlanCancel(m *nats.Msg) {
	var req messages.CancelRequest
	if len(strings.TrimSpace(string(m.Data))) > 0 {
		if err := json.Unmarshal(m.Data, &req); err != nil {
			s.m.badMessages.WithLabelValues("control").Inc()
			controlReply(m, messages.ControlReply{Error: fmt.Sprintf(`cancel body must be {} or {"by"?: string, "reason"?: string}: %v`, err)})
			return
		}
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

// onPlanList answers <prefix>.control.list (§9.4).
func (s *Scheduler) onPlanList(m *nats.Msg) {
	var req messages.PlanListRequest
	if len(strings.TrimSpace(string(m.Data))) > 0 {
		if err := json.Unmarshal(m.Data, &req); err != nil {
			s.m.badMessages.WithLabelValues("control").Inc()
			controlReply(m, messages.ControlReply{Error: fmt.Sprintf(`list body must be {} or {"sessionId": "..."}: %v`, err)})
			return
		}
	}
	list := messages.PlanList{Plans: []messages.PlanSummary{}}
	s.mu.Lock()
	for id, a := range s.actors {
		if req.SessionID == "" || a.session == req.SessionID {
			list.Plans = append(list.Plans, messages.PlanSummary{PlanID: id, SessionID: a.session})
		}
	}
	s.mu.Unlock()
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

// approvalBody is an approval decision as received: approved must be
// there (a missing field is an error, never a denial).
type approvalBody struct {
	Approved *bool  `json:"approved"`
	By       string `json:"by"`
	Reason   string `json:"reason"`
}

// onApprovalMsg takes one decision from NARRATORIA_APPROVALS (§9.3). The
// stream keeps it until the active scheduler applies it, so a decision sent
// during a failover is applied by the next leader. A decision that comes
// before its tool is ready is kept by the plan until it is.
func (s *Scheduler) onApprovalMsg(ctx context.Context, msg jetstream.Msg) {
	parts := strings.Split(msg.Subject(), ".")
	if len(parts) < 2 {
		_ = msg.Term()
		return
	}
	plan, tool := parts[len(parts)-2], parts[len(parts)-1]
	log := s.log.With(slog.String("planId", plan), slog.String("toolId", tool))
	reject := func(problem string) {
		s.m.badMessages.WithLabelValues("approval").Inc()
		log.Warn("scheduler: approval rejected", slog.String("problem", problem))
		_ = msg.Term()
	}
	if err := messages.CheckPlanID(plan); err != nil {
		reject(err.Error())
		return
	}
	if err := messages.CheckToken("toolId", tool); err != nil {
		reject(err.Error())
		return
	}
	var body approvalBody
	if err := json.Unmarshal(msg.Data(), &body); err != nil {
		reject(fmt.Sprintf(`approval must be {"approved": bool, "by"?: string, "reason"?: string}: %v`, err))
		return
	}
	if body.Approved == nil {
		reject(`approval has no "approved": it must be {"approved": true|false, "by"?: string, "reason"?: string}`)
		return
	}
	a := s.actor(plan)
	if a == nil {
		rec, err := s.store.getPlan(ctx, plan)
		var age time.Duration
		if md, merr := msg.Metadata(); merr == nil {
			age = time.Since(md.Timestamp)
		}
		switch {
		case err == nil && rec.Phase == planfsm.PhaseRunning:
			_ = msg.NakWithDelay(500 * time.Millisecond) // being recovered: try again shortly
		case err == nil: // finished
			log.Warn("scheduler: approval for a finished plan; dropped")
			_ = msg.Ack()
		case !errors.Is(err, jetstream.ErrKeyNotFound) || age < s.cfg.ApprovalTimeout:
			// Not readable, or the plan may not be accepted yet (a decision
			// can overtake its plan): try again until it is as old as an
			// approval wait can be.
			_ = msg.NakWithDelay(time.Second)
		default:
			log.Warn("scheduler: approval for a plan not in flight; dropped", slog.Duration("age", age))
			_ = msg.Ack()
		}
		return
	}
	ap := messages.Approval{Approved: *body.Approved, By: body.By, Reason: body.Reason}
	a.mb.put(approvalMsg{tool: tool, approval: ap, msg: msg, reply: func(err error) {
		if err != nil {
			s.m.badMessages.WithLabelValues("approval").Inc()
			log.Warn("scheduler: approval not applied", slog.Any("error", err))
			return
		}
		log.Info("scheduler: approval decision applied", slog.Bool("approved", ap.Approved), slog.String("by", ap.By))
	}})
}

// onReset handles narratoria.sessions.<session>.reset.
func (s *Scheduler) onReset(m *nats.Msg) {
	parts := strings.Split(m.Subject, ".")
	session := parts[len(parts)-2]
	if err := messages.CheckToken("sessionId", session); err != nil {
		s.m.badMessages.WithLabelValues("reset").Inc()
		respond(m, replyResult{Error: err.Error()})
		return
	}
	var req messages.SessionReset
	if len(strings.TrimSpace(string(m.Data))) > 0 {
		if err := json.Unmarshal(m.Data, &req); err != nil {
			s.m.badMessages.WithLabelValues("reset").Inc()
			respond(m, replyResult{Error: fmt.Sprintf(`reset body must be {} or {"clearState": true}: %v`, err)})
			return
		}
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
