package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/history"
	"github.com/narratoria/runtime/internal/planfsm"
	"github.com/narratoria/runtime/pkg/codec"
	"github.com/narratoria/runtime/pkg/messages"
)

// controlWait bounds how long a control request waits for a plan's actor
// (it answers from its mailbox, between two steps).
const controlWait = 5 * time.Second

// checkAnswer is a plan actor's answer to an approval check.
type checkAnswer struct {
	err    error
	status messages.PlanStatus
}

// refuse answers a control request with an error and its code.
func (s *Scheduler) refuse(m *nats.Msg, code, format string, args ...any) {
	s.controlReply(m, messages.ControlReply{Error: fmt.Sprintf(format, args...), Code: code})
}

// controlTarget finds what a control request about plan is answered from:
// the actor running it here (a), or, for a plan that finished, its stored
// result (res). With neither, the request was answered already (a
// refusal), or it is another scheduler's to answer and this one stays
// silent. When this scheduler does not run the plan it answers only if
// the plan is in flight nowhere (no record in KV, or one whose result is
// out): from the result, or as unknown_plan. A plan of another tenant is,
// to the tenant asking, no plan at all.
func (s *Scheduler) controlTarget(m *nats.Msg, plan string) (a *actor, res *messages.ExecutionResult) {
	tenant := s.requestTenant(m.Subject)
	if a := s.actor(plan); a != nil && s.tenantOwns(tenant, a.session) {
		return a, nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, controlWait)
	defer cancel()
	rec, err := s.store.getPlan(ctx, plan)
	switch {
	case err == nil && !s.tenantOwns(tenant, rec.SessionID):
		s.m.badMessages.WithLabelValues("control").Inc()
		s.log.Warn("scheduler: control request for another tenant's plan refused", slog.String("tenant", tenant.String()), slog.String("planId", plan))
		if s.Owns(rec.SessionID) {
			s.unknownPlan(m, plan)
		}
	case errors.Is(err, jetstream.ErrKeyNotFound) || (err == nil && rec.Phase == planfsm.PhasePublished):
		return nil, s.finished(ctx, m, plan, tenant)
	case err == nil && s.Owns(rec.SessionID):
		// Ours, and its actor is being started (the plan was just accepted,
		// or is being recovered): wait for it rather than stay silent. Or
		// the actor just ended and the record's last write (published) is
		// about to land: read the record again now and then, so a finished
		// plan is answered at once, not after the whole wait.
		for i := 1; ctx.Err() == nil; i++ {
			if a := s.actor(plan); a != nil {
				return a, nil
			}
			bus.Sleep(ctx, 10*time.Millisecond)
			if i%5 == 0 {
				if rec, err := s.store.getPlan(ctx, plan); errors.Is(err, jetstream.ErrKeyNotFound) || (err == nil && rec.Phase == planfsm.PhasePublished) {
					break
				}
			}
		}
		return nil, s.finished(ctx, m, plan, tenant)
	}
	return nil, nil
}

// finished returns the stored result of a plan in flight nowhere, the
// tenant's own; without one it answers unknown_plan and returns nil.
func (s *Scheduler) finished(ctx context.Context, m *nats.Msg, plan string, tenant messages.Tenant) *messages.ExecutionResult {
	res, err := s.store.result(ctx, plan)
	switch {
	case err == nil && s.tenantOwns(tenant, res.SessionID):
		return res
	case err != nil && !errors.Is(err, jetstream.ErrMsgNotFound):
		s.controlReply(m, messages.ControlReply{Error: fmt.Sprintf("plan %s is not in flight, and its result cannot be read: %v", plan, err)})
		return nil
	}
	s.unknownPlan(m, plan)
	return nil
}

// unknownPlan refuses a request about a plan no scheduler runs and no
// result names.
func (s *Scheduler) unknownPlan(m *nats.Msg, plan string) {
	s.refuse(m, messages.ControlUnknownPlan, "unknown plan %s: no scheduler runs it and no result of it is stored (never accepted, or older than the history window)", plan)
}

// planEnded refuses an action on a finished plan, naming how it ended.
func (s *Scheduler) planEnded(m *nats.Msg, res *messages.ExecutionResult, what string) {
	how := messages.ResultState(res)
	if res.FailureReason != "" && how != res.FailureReason {
		how += " (" + res.FailureReason + ")"
	}
	s.refuse(m, messages.ControlPlanFinished, "plan %s already finished: %s at %s; %s", res.PlanID, how, res.FinishedAt.Format(time.RFC3339), what)
}

// controlPlan reads the plan ID of a control subject at token from the
// end (1: the last), answering an invalid one.
func (s *Scheduler) controlPlan(m *nats.Msg, fromEnd int) (string, bool) {
	toks := strings.Split(m.Subject, ".")
	plan := toks[len(toks)-fromEnd]
	if err := messages.CheckPlanID(plan); err != nil {
		s.m.badMessages.WithLabelValues("control").Inc()
		s.controlReply(m, messages.ControlReply{Error: err.Error()})
		return "", false
	}
	return plan, true
}

// onPlanStatus answers <prefix>.control.status.<plan> (§9.4): a plan in
// flight from its actor, a finished one from its stored result.
func (s *Scheduler) onPlanStatus(m *nats.Msg) {
	plan, ok := s.controlPlan(m, 1)
	if !ok {
		return
	}
	a, res := s.controlTarget(m, plan)
	if a != nil {
		reply := make(chan messages.PlanStatus, 1)
		a.mb.put(statusMsg{reply: reply})
		select {
		case st := <-reply:
			s.controlReply(m, messages.ControlReply{OK: true, Status: &st})
			return
		case <-a.done:
			ctx, cancel := context.WithTimeout(s.ctx, controlWait)
			res = s.finished(ctx, m, plan, s.requestTenant(m.Subject))
			cancel()
		case <-time.After(controlWait):
			s.controlReply(m, messages.ControlReply{Error: "the plan's actor did not answer in time"})
			return
		}
	}
	if res != nil {
		st := messages.StatusOfResult(res)
		s.controlReply(m, messages.ControlReply{OK: true, Status: &st})
	}
}

// onPlanCancel answers <prefix>.control.cancel.<plan> (§9.4).
func (s *Scheduler) onPlanCancel(m *nats.Msg) {
	req, err := messages.DecodeCancelRequest(m.Data)
	if err != nil {
		s.m.badMessages.WithLabelValues("control").Inc()
		s.log.Warn("scheduler: cancel request refused", slog.String("subject", m.Subject), slog.String("problem", err.Error()))
		s.controlReply(m, messages.ControlReply{Error: err.Error()})
		return
	}
	plan, ok := s.controlPlan(m, 1)
	if !ok {
		return
	}
	a, res := s.controlTarget(m, plan)
	if res != nil {
		s.planEnded(m, res, "there is nothing to cancel")
		return
	}
	if a == nil {
		return
	}
	reason := req.Reason
	if req.By != "" {
		reason = strings.TrimSpace("by " + req.By + " " + reason)
	}
	done := make(chan error, 1)
	a.mb.put(cancelMsg{reason: reason, reply: func(err error) { done <- err }})
	select {
	case err := <-done:
		switch {
		case errors.Is(err, planfsm.ErrPlanOver):
			s.refuse(m, messages.ControlPlanFinished, "plan %s already finished: there is nothing to cancel", plan)
		case err != nil:
			s.controlReply(m, messages.ControlReply{Error: err.Error()})
		default:
			s.controlReply(m, messages.ControlReply{OK: true})
		}
	case <-a.done:
		s.refuse(m, messages.ControlPlanFinished, "plan %s already finished: there is nothing to cancel", plan)
	case <-time.After(controlWait):
		s.controlReply(m, messages.ControlReply{Error: "the plan's actor did not answer in time"})
	}
}

// onApprovalCheck answers <prefix>.control.approval.<plan>.<tool>
// (§9.3): whether a decision on the tool can be taken now, by the rules
// the plan's machine applies to one (planfsm.Machine.CheckDecision), with
// the tool's status and the input it would run with. Clients ask before
// they store a decision (pkg/client's Approve and Deny), so a decision on
// an unknown plan or tool, a tool not waiting, or a finished plan is
// refused with a code instead of being stored for nothing.
func (s *Scheduler) onApprovalCheck(m *nats.Msg) {
	plan, ok := s.controlPlan(m, 2)
	if !ok {
		return
	}
	tool := lastToken(m.Subject)
	if err := messages.CheckToken("toolId", tool); err != nil {
		s.m.badMessages.WithLabelValues("control").Inc()
		s.controlReply(m, messages.ControlReply{Error: err.Error()})
		return
	}
	a, res := s.controlTarget(m, plan)
	if res != nil {
		if !slices.ContainsFunc(res.ToolResults, func(t messages.ToolResult) bool { return t.ToolID == tool }) {
			s.refuse(m, messages.ControlUnknownTool, "plan %s has no tool %q (it finished)", plan, tool)
			return
		}
		s.planEnded(m, res, fmt.Sprintf("tool %q takes no decision", tool))
		return
	}
	if a == nil {
		return
	}
	reply := make(chan checkAnswer, 1)
	a.mb.put(checkMsg{tool: tool, reply: reply})
	select {
	case ans := <-reply:
		s.answerCheck(m, plan, tool, ans)
	case <-a.done:
		s.refuse(m, messages.ControlPlanFinished, "plan %s already finished: tool %q takes no decision", plan, tool)
	case <-time.After(controlWait):
		s.controlReply(m, messages.ControlReply{Error: "the plan's actor did not answer in time"})
	}
}

// answerCheck answers an approval check from the actor's answer.
func (s *Scheduler) answerCheck(m *nats.Msg, plan, tool string, ans checkAnswer) {
	switch {
	case errors.Is(ans.err, planfsm.ErrUnknownTool):
		s.refuse(m, messages.ControlUnknownTool, "plan %s has no tool %q", plan, tool)
	case errors.Is(ans.err, planfsm.ErrPlanOver):
		s.refuse(m, messages.ControlPlanFinished, "plan %s already finished: tool %q takes no decision", plan, tool)
	case errors.Is(ans.err, planfsm.ErrNotAwaitingApproval):
		s.refuse(m, messages.ControlNotAwaitingApproval, "%s", strings.TrimSuffix(ans.err.Error(), ": "+planfsm.ErrNotAwaitingApproval.Error()))
	case ans.err != nil:
		s.controlReply(m, messages.ControlReply{Error: ans.err.Error()})
	default:
		i := slices.IndexFunc(ans.status.Tools, func(t messages.ToolStatus) bool { return t.ToolID == tool })
		if i < 0 {
			s.refuse(m, messages.ControlUnknownTool, "plan %s has no tool %q", plan, tool)
			return
		}
		s.controlReply(m, messages.ControlReply{OK: true, Approval: &messages.ApprovalCheck{SessionID: ans.status.SessionID, Tool: ans.status.Tools[i]}})
	}
}

// onPlanList answers <prefix>.control.list (§9.4) from KV, so one
// scheduler lists the plans of every partition.
func (s *Scheduler) onPlanList(m *nats.Msg) {
	req, err := messages.DecodePlanListRequest(m.Data)
	if err != nil {
		s.m.badMessages.WithLabelValues("control").Inc()
		s.log.Warn("scheduler: plan list request refused", slog.String("subject", m.Subject), slog.String("problem", err.Error()))
		s.controlReply(m, messages.ControlReply{Error: err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	plans, err := s.store.listPlans(ctx)
	if err != nil {
		s.controlReply(m, messages.ControlReply{Error: err.Error()})
		return
	}
	list := messages.PlanList{Plans: []messages.PlanSummary{}}
	tenant := s.requestTenant(m.Subject)
	for id, rec := range plans {
		if !s.tenantOwns(tenant, rec.SessionID) {
			continue
		}
		if rec.Phase != planfsm.PhasePublished && (req.SessionID == "" || rec.SessionID == requestSession(tenant, req.SessionID)) {
			list.Plans = append(list.Plans, messages.PlanSummary{PlanID: id, SessionID: rec.SessionID})
		}
	}
	slices.SortFunc(list.Plans, func(x, y messages.PlanSummary) int { return strings.Compare(x.PlanID, y.PlanID) })
	s.controlReply(m, messages.ControlReply{OK: true, List: &list})
}

// historyIndex is the scheduler's index of finished plans, started at
// the first history request (most schedulers never get one) and kept
// following the results stream from then on.
type historyIndex struct {
	once sync.Once
	x    *history.Index
}

// historyWait bounds how long a history request waits for the index to
// catch up with the results stream; it then answers what it has, marked
// loading.
const historyWait = 5 * time.Second

// onHistory answers <prefix>.control.history: a page of finished plans,
// newest first, with the console's filters (history.Query), the tenant's
// own only.
func (s *Scheduler) onHistory(m *nats.Msg) {
	var req messages.HistoryRequest
	if len(strings.TrimSpace(string(m.Data))) > 0 {
		if err := json.Unmarshal(m.Data, &req); err != nil {
			s.m.badMessages.WithLabelValues("control").Inc()
			s.controlReply(m, messages.ControlReply{Error: fmt.Sprintf("history request must be a HistoryRequest object: %v", err)})
			return
		}
	}
	if err := history.CheckQuery(req); err != nil {
		s.controlReply(m, messages.ControlReply{Error: err.Error()})
		return
	}
	s.hist.once.Do(func() {
		s.hist.x = history.New(s.js, s.subj, s.log)
		s.hist.x.Start()
		context.AfterFunc(s.ctx, s.hist.x.Stop)
	})
	select {
	case <-s.hist.x.Caught():
	case <-time.After(historyWait):
	case <-s.ctx.Done():
		return
	}
	tenant := s.requestTenant(m.Subject)
	if tenant == messages.AllTenants {
		tenant = ""
	}
	page, err := s.hist.x.Search(history.Query{HistoryRequest: req, Tenant: tenant})
	if err != nil {
		s.controlReply(m, messages.ControlReply{Error: err.Error()})
		return
	}
	s.controlReply(m, messages.ControlReply{OK: true, History: &page})
}

// onSkills answers <prefix>.control.skills: the registry as this
// scheduler follows it (each skill, its scripts and live workers), with
// each skill's health in the session asked for (the tenant's own).
func (s *Scheduler) onSkills(m *nats.Msg) {
	var req messages.SkillsRequest
	if len(strings.TrimSpace(string(m.Data))) > 0 {
		if err := json.Unmarshal(m.Data, &req); err != nil {
			s.m.badMessages.WithLabelValues("control").Inc()
			s.controlReply(m, messages.ControlReply{Error: fmt.Sprintf(`skills request must be {} or {"sessionId": "..."}: %v`, err)})
			return
		}
	}
	tenant := s.requestTenant(m.Subject)
	session := ""
	if req.SessionID != "" {
		session = requestSession(tenant, req.SessionID)
		if err := s.subj.CheckSession(session); err != nil {
			s.controlReply(m, messages.ControlReply{Error: err.Error()})
			return
		}
	}
	if s.registry == nil {
		s.controlReply(m, messages.ControlReply{Error: "this scheduler does not follow the skill registry (scheduler.skipRegistryCheck)"})
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, controlWait)
	defer cancel()
	out := []messages.SkillSummary{}
	for _, e := range s.registry.snapshot() {
		v := messages.SkillSummary{Name: e.Name, Version: e.Version, Description: e.Description, Scripts: []messages.ScriptSummary{},
			Workers: []messages.WorkerSummary{}}
		for _, sc := range e.Scripts {
			v.Scripts = append(v.Scripts, messages.ScriptSummary{Name: sc.Name, Description: sc.Description})
		}
		for _, w := range s.registry.live(e) {
			v.Workers = append(v.Workers, messages.WorkerSummary{ID: w.ID, Concurrency: w.Concurrency, Running: w.Running, LastSeen: w.LastSeen})
		}
		if session != "" {
			v.Health = "healthy"
			if st, err := s.health.Status(ctx, session, e.Name); err == nil && st.State != "" {
				v.Health = string(st.State)
			}
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b messages.SkillSummary) int { return strings.Compare(a.Name, b.Name) })
	s.controlReply(m, messages.ControlReply{OK: true, Skills: out})
}

// result reads the stored result of a plan, whatever its session
// (a direct get of the last message on <prefix>.results.*.<plan>, the
// session two tokens with tenants); jetstream.ErrMsgNotFound when there
// is none.
func (st *store) result(ctx context.Context, plan string) (*messages.ExecutionResult, error) {
	subj := st.subj.Root() + ".results." + strings.Repeat("*.", st.subj.SessionTokens()) + plan
	m, err := st.results.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		return nil, err
	}
	var res messages.ExecutionResult
	if err := codec.Unmarshal(m.Data, &res); err != nil {
		return nil, fmt.Errorf("decode the result of plan %s: %w", plan, err)
	}
	return &res, nil
}
