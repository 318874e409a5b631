package narrator

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"time"

	"github.com/narratoria/runtime/internal/promptfsm"
	"github.com/narratoria/runtime/pkg/messages"
)

// Narration building: the narration a prompt's verdict calls for — the
// plan's result told, or the template — and the prompt's answer.

// build writes the narration a verdict calls for. From here on the
// prompt is finished even if the partition moves: its narration is
// claimed and published whoever owns the session now.
func (sh *promptShell) build(b promptfsm.Build) *messages.Narration {
	sh.ctx = context.WithoutCancel(sh.ctx)
	var nar *messages.Narration
	switch b.Verdict {
	case promptfsm.VerdictSuccess:
		plan, err := sh.plan(&messages.PromptAttempt{PlanID: b.Result.PlanID, Plan: b.Plan})
		if err != nil {
			plan = &messages.Plan{RequestID: b.Result.PlanID}
		}
		nar = buildNarration(sh.p, plan, b.Result, b.Attempt, b.Disabled, b.Trace)
		if sh.n.prose != nil {
			sh.n.prose.write(sh.n.ctx, sh.ctx, sh.p, b.Result, nar, sh.log)
		}
	default:
		if b.Reason == messages.ReasonStorageRefused {
			// The store refused a write the prompt needs for good (a
			// stream or bucket full, a message over its limit): trying
			// again would hold the session's later prompts for ever.
			sh.log.Error("narrator: the store refused a write the prompt needs; narrating the template", slog.Any("error", sh.refusal),
				slog.String("failureReason", messages.ReasonStorageRefused))
			sh.n.m.refused.Inc()
		}
		nar = fallbackNarration(sh.p, b.Disabled, b.Trace, b.State)
		nar.Cancelled = b.Verdict == promptfsm.VerdictCancelled && b.Result != nil && b.Result.FailureReason == messages.ReasonCancelled
	}
	nar.DurationMs = time.Since(b.ReceivedAt).Milliseconds()
	return nar
}

// finish counts and logs the prompt's answer.
func (sh *promptShell) finish(f promptfsm.Finish) *messages.Narration {
	n, nar := sh.n, f.Narration
	if f.Duplicate {
		n.m.prompts.WithLabelValues("duplicate").Inc()
		return nar
	}
	outcome := "narrated"
	if nar.Fallback {
		outcome = "fallback"
		n.m.fallbacks.Inc()
	}
	n.m.prompts.WithLabelValues(outcome).Inc()
	n.m.attempts.Observe(float64(nar.Attempts))
	sh.log.Info("narrator: narrated", slog.String("planId", nar.PlanID), slog.Int("attempts", nar.Attempts),
		slog.Bool("fallback", nar.Fallback), slog.Int64("ms", nar.DurationMs))
	return nar
}

// buildNarration assembles the narration of a successful plan (§8.4): the
// plan's narrative, then each successful tool's output.narration, in
// topological order (the order of the result's tool results).
func buildNarration(p *messages.Prompt, plan *messages.Plan, res *messages.ExecutionResult, attempts int, disabled []string, trace []messages.AttemptTrace) *messages.Narration {
	parts := []string{}
	if s := strings.TrimSpace(plan.Narrative); s != "" {
		parts = append(parts, s)
	}
	for _, tr := range res.ToolResults {
		if tr.State != messages.ToolSuccess || len(tr.Output) == 0 {
			continue
		}
		var out struct {
			Narration string `json:"narration"`
		}
		if json.Unmarshal(tr.Output, &out) == nil && strings.TrimSpace(out.Narration) != "" {
			parts = append(parts, strings.TrimSpace(out.Narration))
		}
	}
	nar := &messages.Narration{
		SessionID: p.SessionID, PromptID: p.PromptID, Prompt: p.Text, Text: strings.Join(parts, "\n\n"), PlanID: plan.RequestID,
		Attempts: attempts, Choices: []json.RawMessage{}, Assets: res.AggregatedAssets, UIEvents: res.UIEvents,
		State: res.AggregatedState, DisabledSkills: nonNil(disabled), Trace: trace,
	}
	if nar.Assets == nil {
		nar.Assets = []messages.Asset{}
	}
	if nar.UIEvents == nil {
		nar.UIEvents = []messages.UIEventRecord{}
	}
	for _, ev := range res.UIEvents {
		if ev.Event != messages.UIEventNarrativeChoice {
			continue
		}
		var payload struct {
			Choices []json.RawMessage `json:"choices"`
		}
		if json.Unmarshal(ev.Payload, &payload) == nil {
			nar.Choices = append(nar.Choices, payload.Choices...)
		}
	}
	if len(nar.State) == 0 {
		nar.State = json.RawMessage("{}")
	}
	return nar
}

// fallbackTemplates are the template narrations of §8.2.
var fallbackTemplates = []string{
	"The narrator pauses, considering your words: '%s'",
	"Your action '%s' echoes in the stillness...",
	"The story continues, though the path is unclear...",
}

func fallbackNarration(p *messages.Prompt, disabled []string, trace []messages.AttemptTrace, state json.RawMessage) *messages.Narration {
	h := fnv.New32a()
	_, _ = h.Write([]byte(p.SessionID + "\x00" + p.Text))
	tmpl := fallbackTemplates[int(h.Sum32())%len(fallbackTemplates)]
	text := tmpl
	if strings.Contains(tmpl, "%s") {
		text = fmt.Sprintf(tmpl, clip(p.Text, 300))
	}
	if len(state) == 0 {
		state = json.RawMessage("{}")
	}
	planID := ""
	if len(trace) > 0 {
		planID = trace[len(trace)-1].PlanID
	}
	return &messages.Narration{SessionID: p.SessionID, PromptID: p.PromptID, Prompt: p.Text, Text: text, PlanID: planID, Attempts: len(trace),
		Fallback: true, Choices: []json.RawMessage{}, Assets: []messages.Asset{}, UIEvents: []messages.UIEventRecord{},
		State: state, DisabledSkills: nonNil(disabled), Trace: trace}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// What the narrator needs in JetStream (see bus.Guard).
var (
	narratorStreams = []string{messages.StreamPrompts, messages.StreamNarrations, messages.StreamPlans, messages.StreamResults}
	narratorBuckets = []string{messages.BucketSkills, messages.BucketHealth, messages.BucketPrompts, messages.BucketInflight}
)

// clip cuts s to n runes, marking the cut with "…".
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
