package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/pkg/codec"
	"github.com/narratoria/runtime/pkg/messages"
)

// ErrNoResult is matched by Result's error when no result of the plan is
// stored: it is still running, never ran, or is older than the history
// window.
var ErrNoResult = errors.New("no result stored")

// Result reads the stored Execution Result of a finished plan from
// NARRATORIA_RESULTS (a direct get: no consumer, and a tenant's client
// reaches its own results through its account's import of that API).
func (c *Client) Result(ctx context.Context, planID string) (*messages.ExecutionResult, error) {
	if err := messages.CheckPlanID(planID); err != nil {
		return nil, err
	}
	subj := "$JS.API.DIRECT.GET." + messages.StreamResults + "." + c.subj.Root() + ".results.*." + planID
	if c.subj.Tenants {
		subj = "$JS.API.DIRECT.GET." + messages.StreamResults + "." + c.subj.Root() + ".results.*.*." + planID
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	m, err := c.nc.RequestWithContext(ctx, subj, nil)
	if err != nil {
		return nil, fmt.Errorf("look up the result of plan %s: %w", planID, err)
	}
	switch m.Header.Get("Status") {
	case "":
	case "404":
		return nil, fmt.Errorf("plan %s: %w (still running, never run, or older than the history window)", planID, ErrNoResult)
	default:
		return nil, fmt.Errorf("look up the result of plan %s: %s %s", planID, m.Header.Get("Status"), m.Header.Get("Description"))
	}
	var res messages.ExecutionResult
	if err := codec.Unmarshal(m.Data, &res); err != nil {
		return nil, fmt.Errorf("decode the result of plan %s: %w", planID, err)
	}
	return &res, nil
}

// RerunPlan builds, from a finished plan's result, a plan that runs it
// again under a new ID: the whole plan as it was submitted, or with toolID
// only that tool, alone, with the input it had (its references to other
// tools' outputs resolved from the result). The caller publishes it on
// the session's plans subject (the second result). A plan's ID runs once,
// so running it again always takes a new ID.
func (c *Client) RerunPlan(ctx context.Context, planID, toolID string) (*messages.Plan, string, error) {
	res, err := c.Result(ctx, planID)
	if err != nil {
		return nil, "", err
	}
	// The whole plan as submitted; a tool from the plan as it ended
	// (context re-planning may have added it).
	src := cmp.Or(res.OriginalPlan, res.FinalPlan)
	if toolID != "" {
		src = cmp.Or(res.FinalPlan, res.OriginalPlan)
	}
	if src == nil {
		return nil, "", fmt.Errorf("plan %s: its result carries no plan to run again (%s)", planID, res.FailureReason)
	}
	p := *src
	// A fresh plan, not a replan of the first: no lineage.
	p.RequestID, p.Metadata = uuid.NewString(), messages.PlanMetadata{GenerationAttempt: 1}
	if toolID == "" {
		return &p, res.SessionID, nil
	}
	i := slices.IndexFunc(p.Tools, func(t messages.Tool) bool { return t.ToolID == toolID })
	if i < 0 {
		return nil, "", fmt.Errorf("plan %s has no tool %q", planID, toolID)
	}
	input, ok := ResolvedInputs(res)[toolID]
	if !ok {
		return nil, "", fmt.Errorf("tool %s of plan %s: its input refers to outputs the result does not have", toolID, planID)
	}
	t := p.Tools[i]
	t.Input, t.Dependencies = input, []string{}
	p.Tools = []messages.Tool{t}
	return &p, res.SessionID, nil
}

// ErrDuplicatePlan is matched by SubmitPlan's error when the plans stream
// dropped the plan as a repeat of one published before under the same ID:
// a plan ID runs once.
var ErrDuplicatePlan = errors.New("duplicate plan ID")

// SubmitPlan publishes a plan on the session's plans subject (JetStream,
// message ID plan.<requestId>) and returns once it is stored; its result
// comes on <prefix>.results.<session>.<plan> (Result reads it later).
func (c *Client) SubmitPlan(ctx context.Context, session string, p *messages.Plan) error {
	subj, err := c.subj.Plans(session)
	if err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode plan %s: %w", p.RequestID, err)
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	ack, err := PublishRetry(ctx, c.js, &nats.Msg{Subject: subj, Data: b}, PublishRetryDefault, jetstream.WithMsgID("plan."+p.RequestID))
	if err != nil {
		return fmt.Errorf("publish plan %s: %w", p.RequestID, err)
	}
	if ack.Duplicate {
		return fmt.Errorf("plan %s: %w (the plans stream dropped it as a repeat)", p.RequestID, ErrDuplicatePlan)
	}
	return nil
}

// ResolvedInputs are the inputs each tool of a finished plan ran with: its
// input in the plan, its references to other tools' outputs resolved from
// the result (a tool whose references cannot be resolved, e.g. one that
// never ran, is left out).
func ResolvedInputs(res *messages.ExecutionResult) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	plan := cmp.Or(res.FinalPlan, res.OriginalPlan)
	if plan == nil {
		return out
	}
	outputs := map[string]json.RawMessage{}
	for _, tr := range res.ToolResults {
		outputs[tr.ToolID] = tr.Output
	}
	for _, t := range plan.Tools {
		in, err := messages.ResolveRefs(t.Input, func(id string) (json.RawMessage, bool) {
			o, ok := outputs[id]
			return o, ok
		})
		if err == nil {
			out[t.ToolID] = in
		}
	}
	return out
}
