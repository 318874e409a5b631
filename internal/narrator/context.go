package narrator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/narratoria/runtime/internal/planner"
	"github.com/narratoria/runtime/pkg/messages"
)

// contextDeadline bounds answering a context request: below the
// scheduler's default wait (5 s), so a slow model still leaves time for
// the rule-based answer.
const contextDeadline = 4 * time.Second

// contextQueueGroup is the queue group narrators serve context requests in.
const contextQueueGroup = "narratoria-narrator"

// onContext serves <prefix>.context.<session>: it answers with the tools
// the planner adds, an empty list when it has nothing to add, or an error
// naming the problem.
func (n *Narrator) onContext(r micro.Request) {
	var req messages.ContextRequest
	if err := json.Unmarshal(r.Data(), &req); err != nil || req.Plan == nil || req.PlanID == "" {
		problem := "a context request needs planId and plan"
		if err != nil {
			problem = "not a context request: " + err.Error()
		}
		n.m.contexts.WithLabelValues("invalid").Inc()
		n.log.Warn("narrator: invalid context request", slog.String("problem", problem))
		_ = r.RespondJSON(messages.ContextReply{Tools: []json.RawMessage{}, Error: problem})
		return
	}
	log := n.log.With(slog.String("sessionId", req.SessionID), slog.String("planId", req.PlanID), slog.Int("iteration", req.Iteration))
	ctx, cancel := context.WithTimeout(n.ctx, contextDeadline)
	defer cancel()
	tools, err := n.moreSteps(ctx, &req, log)
	reply := messages.ContextReply{Tools: make([]json.RawMessage, 0, len(tools))}
	if err != nil {
		reply.Error = err.Error()
		n.m.contexts.WithLabelValues("error").Inc()
	} else {
		for _, t := range tools {
			b, err := json.Marshal(t)
			if err != nil {
				reply.Error = fmt.Sprintf("encode tool %s: %v", t.ToolID, err)
				break
			}
			reply.Tools = append(reply.Tools, b)
		}
		outcome := "added"
		if len(tools) == 0 {
			outcome = "nothing"
		}
		n.m.contexts.WithLabelValues(outcome).Inc()
	}
	ids := make([]string, len(tools))
	for i, t := range tools {
		ids[i] = t.ToolID
	}
	log.Info("narrator: answered a request for more context", slog.String("toolId", req.ToolID),
		slog.String("suggestion", req.Suggestion), slog.Any("tools", ids), slog.String("error", reply.Error))
	_ = r.RespondJSON(reply)
}

// moreSteps asks the planner for more steps, falling back to the rule-based
// planner when it cannot answer, fails or answers tools that do not decode
// as plan tools.
func (n *Narrator) moreSteps(ctx context.Context, req *messages.ContextRequest, log *slog.Logger) ([]messages.Tool, error) {
	cr := planner.ContextRequest{Request: req, Catalogue: n.cat.Catalogue(req.SessionID, req.Plan.DisabledSkills)}
	if cp, ok := n.planner.(planner.ContextPlanner); ok && n.planner.Name() != n.rules.Name() {
		tools, err := cp.MoreSteps(ctx, cr)
		if err == nil {
			err = planner.CheckContextTools(req, tools)
		}
		if err == nil {
			return tools, nil
		}
		log.Warn("narrator: the planner could not add steps; using the rule-based planner", slog.String("planner", n.planner.Name()),
			slog.Any("error", err))
	}
	return n.rules.MoreSteps(ctx, cr)
}
