package narrator

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/narratoria/runtime/internal/llm"
	"github.com/narratoria/runtime/internal/planner"
	"github.com/narratoria/runtime/pkg/messages"
)

// dryPlans bounds the plan requests (<prefix>.planner.plan) a narrator
// answers at once.
const dryPlans = 8

// onPlanRequest serves <prefix>.planner.plan: the plan the configured
// planner makes for a prompt and whether it passes the narrator's checks,
// with the planning time — planned as a prompt's first attempt is, never
// published or run, and never replaced by the rule planner's when the
// model fails (the failure is the answer). `narratoria eval` measures a
// live deployment's planner with it.
func (n *Narrator) onPlanRequest(r micro.Request) {
	req, err := messages.DecodePlanRequest(r.Data())
	if err != nil {
		_ = r.Error("400", err.Error(), nil)
		return
	}
	text := req.Text
	session := cmp.Or(req.SessionID, "eval")
	if n.subj.Tenants && messages.TenantOf(session) == "" {
		session = "eval." + session
	}
	if err := n.subj.CheckSession(session); err != nil {
		_ = r.Error("400", "sessionId: "+err.Error(), nil)
		return
	}
	select {
	case n.dry <- struct{}{}:
	default:
		_ = r.Error("503", "busy: too many plan requests at once; send it again", nil)
		return
	}
	if !n.life.Go(func(ctx context.Context) {
		defer func() { <-n.dry }()
		_ = r.RespondJSON(n.dryPlan(ctx, session, text))
	}) {
		<-n.dry
		_ = r.Error("503", "the narrator is stopping", nil)
	}
}

// dryPlan plans text for session as a first attempt and checks the plan.
func (n *Narrator) dryPlan(ctx context.Context, session, text string) messages.PlanReply {
	cat := n.cat.Catalogue(session, nil)
	req := planner.Request{SessionID: session, Text: text, Attempt: 1, Catalogue: cat}
	gctx, cancel := context.WithTimeout(ctx, generationDeadline)
	defer cancel()
	t0 := time.Now()
	plan, err := n.planner.Plan(gctx, req)
	reply := messages.PlanReply{Planner: n.planner.Name(), Ms: float64(time.Since(t0).Microseconds()) / 1000,
		NarrationSkills: cat.NarrationSkills()}
	if err == nil {
		reply.Plan = plan
		err = n.checkPlan(plan, req)
	}
	if err != nil {
		reply.Error, reply.ErrorKind = err.Error(), planErrorKind(err)
		return reply
	}
	reply.Valid = true
	return reply
}

// planErrorKind classifies a planner's failure as the metrics do.
func planErrorKind(err error) string {
	switch {
	case llm.KindOf(err) != "":
		return llm.KindOf(err)
	case errors.Is(err, context.DeadlineExceeded):
		return llm.KindTimeout
	default: // the plan's checks refused it
		return "invalid_plan"
	}
}
