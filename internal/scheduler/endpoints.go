package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

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
	// Queues is fair dispatch by skill: what this scheduler has admitted
	// to the work queue and holds back, by tenant, with recent waits.
	Queues []SkillQueue `json:"queues"`
}

// Status returns the scheduler's status.
func (s *Scheduler) Status() Status {
	owned := s.Owned()
	if owned == nil {
		owned = []int{}
	}
	return Status{ID: s.cfg.ID, Active: len(owned) > 0, PlansInFlight: s.InFlight(), Partitions: owned, PartitionCount: s.bus.Partitions, Queues: s.gate.queues()}
}

// endpoint is one request subject the scheduler serves, listed as an
// endpoint of its micro service (`nats micro info narratoria-scheduler`).
// queue "" means every scheduler gets each request (the one running the
// plan, or owning the session, answers); otherwise one of the queue
// answers.
type endpoint struct {
	name, subject, queue string
	h                    nats.MsgHandler
}

// endpoints are the public requests the scheduler serves: plan control
// (§9.4), approval checks and decisions (§9.3), session resets. With
// tenants each subject carries the tenant after its kind (put there by
// the server's account import), and a session is two tokens.
func (s *Scheduler) endpoints() []endpoint {
	p, t, session := s.subj.Prefix, "", "*"
	if s.subj.Tenants {
		t, session = ".*", "*.*"
	}
	c := p + ".control" + t
	return []endpoint{
		{"plan-status", c + ".status.*", "", s.onPlanStatus},
		{"plan-cancel", c + ".cancel.*", "", s.onPlanCancel},
		{"plan-list", c + ".list", listQueueGroup, s.onPlanList},
		{"approval-check", c + ".approval.*.*", "", s.onApprovalCheck},
		{"plan-history", c + ".history", historyQueueGroup, s.onHistory},
		{"skills", c + ".skills", skillsQueueGroup, s.onSkills},
		{"session-reset", p + ".sessions." + session + ".reset", "", s.onReset},
	}
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
	for _, e := range s.endpoints() {
		if err != nil {
			break
		}
		opts := []micro.EndpointOpt{micro.WithEndpointSubject(e.subject), micro.WithEndpointQueueGroupDisabled()}
		if e.queue != "" {
			opts[1] = micro.WithEndpointQueueGroup(e.queue)
		}
		h := e.h
		err = svc.AddEndpoint(e.name, micro.HandlerFunc(func(r micro.Request) { h(requestMsg(r)) }), opts...)
	}
	if err != nil {
		_ = svc.Stop()
		return fmt.Errorf("scheduler: micro endpoint: %w", err)
	}
	context.AfterFunc(s.ctx, func() { _ = svc.Stop() })
	return nil
}

// requestMsg is a micro request as the handlers take it: its subject,
// reply subject, headers and body (answered through Scheduler.reply).
func requestMsg(r micro.Request) *nats.Msg {
	return &nats.Msg{Subject: r.Subject(), Reply: r.Reply(), Header: nats.Header(r.Headers()), Data: r.Data()}
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

// Queue groups: one scheduler answers each list, history or skills
// request; one checks each approval decision and stores it, or refuses it
// (decisions.go).
const (
	listQueueGroup     = "narratoria-scheduler-list"
	historyQueueGroup  = "narratoria-scheduler-history"
	skillsQueueGroup   = "narratoria-scheduler-skills"
	approvalQueueGroup = "narratoria-scheduler-approvals"
)

// subscribe subscribes to what is no request/reply endpoint: the
// approvals door (one scheduler checks and stores each decision), the
// decisions once stored (the plan's scheduler applies them) and the
// outcomes sent to this scheduler. The public requests are its micro
// service's endpoints (startService).
func (s *Scheduler) subscribe() ([]*nats.Subscription, error) {
	t := ""
	if s.subj.Tenants {
		t = ".*"
	}
	var subs []*nats.Subscription
	for _, c := range []struct {
		subject, queue string
		h              nats.MsgHandler
	}{
		// One subscription each: nats-server lets a connection answer a
		// request once per delivery it had, so a decision delivered twice
		// to this connection (a plain and a queue subscription) could not
		// be answered at all.
		{s.subj.Prefix + ".approvals" + t + ".*.*", approvalQueueGroup, s.onDecision},
		{s.subj.Prefix + ".decisions.*.*", "", s.onApproval},
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

// reply answers a request with v as JSON (nothing without a reply
// subject).
func (s *Scheduler) reply(m *nats.Msg, v any) {
	if m.Reply == "" {
		return
	}
	b, _ := json.Marshal(v)
	_ = s.nc.Publish(m.Reply, b)
}

// controlReply answers a control request.
func (s *Scheduler) controlReply(m *nats.Msg, r messages.ControlReply) { s.reply(m, r) }

// replyResult is the reply to an approval or a reset request.
type replyResult struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// ChangedSkills counts skills a reset made healthy again.
	ChangedSkills int `json:"changedSkills,omitempty"`
	// ClearedState is true when a reset emptied the session state.
	ClearedState bool `json:"clearedState,omitempty"`
}

func (s *Scheduler) respond(m *nats.Msg, r replyResult) { s.reply(m, r) }

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

// onApproval takes a decision as it is stored on
// <prefix>.decisions.<plan>.<tool> (§9.3) by the scheduler that checked it
// at the door (onDecision): every scheduler sees it, the one running the
// plan applies it. The stream keeps the last decision per tool until the
// plan ends, and a plan reads it from there when its tool starts to wait,
// after a crash or after its partition moved — so a decision sent before
// the tool waits, or while the plan's partition moves, is applied when it
// can be. Only schedulers publish there (the door checked the tenant).
func (s *Scheduler) onApproval(msg *nats.Msg) {
	parts := strings.Split(msg.Subject, ".")
	plan, tool := parts[len(parts)-2], parts[len(parts)-1]
	a := s.actor(plan)
	if a == nil {
		return // not running here: its owner, or its stored copy, takes it
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
		s.respond(m, replyResult{Error: err.Error()})
		return
	}
	if !s.Owns(session) {
		return
	}
	req, err := messages.DecodeSessionReset(m.Data)
	if err != nil {
		s.m.badMessages.WithLabelValues("reset").Inc()
		s.log.Warn("scheduler: session reset refused", slog.String("sessionId", session), slog.String("problem", err.Error()))
		s.respond(m, replyResult{Error: err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	n, err := s.health.Reset(ctx, session)
	if err != nil {
		s.respond(m, replyResult{Error: err.Error()})
		return
	}
	res := replyResult{OK: true, ChangedSkills: n}
	if req.ClearState {
		if err := s.sessions.Clear(ctx, session); err != nil {
			s.respond(m, replyResult{Error: err.Error()})
			return
		}
		res.ClearedState = true
	}
	s.log.Info("scheduler: session reset", slog.String("sessionId", session), slog.Int("skillsHealed", n), slog.Bool("clearState", req.ClearState))
	s.respond(m, res)
}

// requestTenant returns the tenant of a request subject (the token after
// its kind), or "" without tenants.
func (s *Scheduler) requestTenant(subject string) messages.Tenant {
	if !s.subj.Tenants {
		return ""
	}
	toks := strings.Split(subject, ".")
	if k := s.subj.KindToken() + 1; k < len(toks) {
		return messages.Tenant(toks[k])
	}
	return ""
}

// tenantOwns reports whether session is one of tenant's (always, without
// tenants, and for the service's own requests across tenants,
// messages.AllTenants).
func (s *Scheduler) tenantOwns(tenant messages.Tenant, session string) bool {
	return !s.subj.Tenants || tenant == messages.AllTenants || (tenant != "" && messages.TenantOf(session) == tenant)
}

// requestSession is the service's name of a session a request names: the
// tenant's session qualified with its tenant, or, across tenants, as
// given (<tenant>.<session>).
func requestSession(tenant messages.Tenant, session string) string {
	if tenant == messages.AllTenants {
		return session
	}
	return tenant.Qualify(session)
}

// statusesQuiet is how long Statuses waits for one more scheduler after
// the last answer.
const statusesQuiet = 150 * time.Millisecond

// Statuses asks every running scheduler for its Status (the micro
// service's stats, $SRV.STATS.narratoria-scheduler) and gathers the
// answers that come within a second, until want have (want ≤ 0: as many
// as come) or none came for statusesQuiet after the last, sorted by ID. A
// connection not allowed to ask gets none.
func Statuses(ctx context.Context, nc *nats.Conn, want int) []Status {
	out := []Status{}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return out
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$SRV.STATS."+ServiceName, inbox, nil); err != nil {
		return out
	}
	deadline := time.Now().Add(time.Second)
	for want <= 0 || len(out) < want {
		wait := time.Until(deadline)
		if wait <= 0 || ctx.Err() != nil {
			break
		}
		m, err := sub.NextMsg(wait)
		if err != nil {
			break
		}
		if quiet := time.Now().Add(statusesQuiet); quiet.Before(deadline) {
			deadline = quiet
		}
		var stats struct {
			Endpoints []struct {
				Data json.RawMessage `json:"data"`
			} `json:"endpoints"`
		}
		if json.Unmarshal(m.Data, &stats) != nil {
			continue
		}
		for _, ep := range stats.Endpoints {
			var st Status
			if json.Unmarshal(ep.Data, &st) == nil && st.ID != "" {
				out = append(out, st)
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.ID, b.ID) })
	return out
}
