package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/tracing"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/codec"
	"github.com/narratoria/runtime/pkg/messages"
)

// publishResult stores the result on NARRATORIA_RESULTS. The plan ID as
// message ID makes a republish after failover a duplicate JetStream drops.
// A result too large for one message loses its events first (they are on
// the events stream), then its outputs.
func (s *Scheduler) publishResult(ctx context.Context, res *messages.ExecutionResult) error {
	subj, err := s.subj.Results(res.SessionID, res.PlanID)
	if err != nil {
		return err
	}
	b, err := codec.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	limit := int(s.nc.MaxPayload()) - 4096
	if len(b) > limit {
		for i := range res.ToolResults {
			res.ToolResults[i].Events = []json.RawMessage{}
		}
		b, _ = codec.Marshal(res)
	}
	if len(b) > limit {
		for i := range res.ToolResults {
			res.ToolResults[i].Output = json.RawMessage("null")
		}
		res.Message = "result too large for one message: events and outputs left out"
		b, _ = codec.Marshal(res)
	}
	m := &nats.Msg{Subject: subj, Data: b, Header: nats.Header{}}
	m.Header.Set(messages.HeaderResultState, messages.ResultState(res))
	if res.FailureReason != "" {
		m.Header.Set(messages.HeaderResultReason, res.FailureReason)
	}
	m.Header.Set(messages.HeaderResultSkills, strings.Join(messages.ResultSkills(res), ","))
	m.Header.Set(messages.HeaderResultDuration, strconv.FormatInt(res.ExecutionTimeMs, 10))
	tracing.Inject(ctx, m)
	if _, err := client.PublishRetry(ctx, s.js, m, client.PublishRetryDefault, jetstream.WithMsgID("result."+res.PlanID)); err != nil {
		return fmt.Errorf("publish result of plan %s: %w", res.PlanID, err)
	}
	return nil
}

// invalidResult is the result of a plan rejected at intake.
func invalidResult(planID, session string, attempt int, perr *messages.PlanError) *messages.ExecutionResult {
	msg := perr.Error()
	if len(msg) > 4000 {
		msg = msg[:4000] + "…"
	}
	res := failedResult(planID, session, attempt, perr.Reason, msg)
	res.CanReplan, res.Problems = true, perr.Problems
	return res
}

// failedResult is the result of a plan that failed without running (or
// without the scheduler knowing what ran): no tool results, the empty
// state. It may not be replanned unless the caller says so.
func failedResult(planID, session string, attempt int, reason, msg string) *messages.ExecutionResult {
	return &messages.ExecutionResult{
		PlanID: planID, SessionID: session, FailureReason: reason, Message: msg,
		FailedTools: []string{}, DisabledSkills: []string{}, ToolResults: []messages.ToolResult{},
		AggregatedState: json.RawMessage("{}"), AggregatedAssets: []messages.Asset{},
		AttemptNumber: max(attempt, 1), FinishedAt: time.Now().UTC(),
	}
}
