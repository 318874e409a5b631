package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// rerun answers POST /api/plans/{plan}/rerun and
// /api/plans/{plan}/tools/{tool}/rerun: a finished plan runs again under a
// new ID, whole or one tool alone with the input it had
// (client.RerunPlan). It answers the new plan's ID and session.
func (cs *Console) rerun(w http.ResponseWriter, r *http.Request) {
	plan, tool := r.PathValue("plan"), r.PathValue("tool")
	if err := messages.CheckPlanID(plan); err != nil {
		fail(w, fmt.Errorf("%w: %v", errBadRequest, err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	p, session, err := cs.c.RerunPlan(ctx, plan, tool)
	if errors.Is(err, client.ErrNoResult) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		return
	}
	if err != nil {
		fail(w, fmt.Errorf("%w: %v", errBadRequest, err))
		return
	}
	if !cs.subj.Tenants { // a tenant's console names its sessions without the tenant
		session = messages.LocalSession(session)
	}
	if err := cs.c.SubmitPlan(ctx, session, p); err != nil {
		fail(w, err)
		return
	}
	cs.log.Info("console: plan run again", "planId", plan, "toolId", tool, "newPlanId", p.RequestID, "by", cs.by(r))
	writeJSON(w, http.StatusOK, map[string]string{"planId": p.RequestID, "sessionId": session})
}

// inputs answers GET /api/results/{plan}/inputs: the input each tool of a
// finished plan ran with, references resolved (client.ResolvedInputs).
func (cs *Console) inputs(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	res, err := cs.c.Result(ctx, r.PathValue("plan"))
	switch {
	case errors.Is(err, client.ErrNoResult):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		return
	case errors.Is(err, messages.ErrInvalidPlanID):
		fail(w, fmt.Errorf("%w: %v", errBadRequest, err))
		return
	case err != nil:
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"inputs": client.ResolvedInputs(res)})
}
