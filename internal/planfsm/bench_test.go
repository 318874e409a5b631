package planfsm

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/narratoria/runtime/internal/plancheck"
	"github.com/narratoria/runtime/pkg/dag"
	"github.com/narratoria/runtime/pkg/messages"
)

// BenchmarkOneToolPlan: a one-tool plan's machine from its start to its
// result (what figure 1's scheduler steps through).
func BenchmarkOneToolPlan(b *testing.B) {
	p := &messages.Plan{RequestID: "00000000-0000-4000-8000-000000000002", Metadata: messages.PlanMetadata{GenerationAttempt: 1},
		Tools: []messages.Tool{{ToolID: "t0", ToolPath: "s/x", Required: true, Input: json.RawMessage(`{}`)}}}
	g, err := dag.Build(plancheck.Nodes(p))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1_000_000, 0).UTC()
	done := json.RawMessage(`{"version":"0","type":"done","ok":true,"output":{"narration":"ok"}}`)
	b.ReportAllocs()
	for b.Loop() {
		m, err := New(Config{Concurrency: 1}, Record{SessionID: "s", AcceptedAt: now, Deadline: now.Add(time.Hour),
			Scripts: []Script{{Skill: "s", Name: "x", TimeoutMs: 1000}}, Phase: PhaseRunning}, p, g)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.Step(Started{Now: now}); err != nil {
			b.Fatal(err)
		}
		o := &messages.Outcome{ToolID: "t0", Attempt: 1, State: messages.ToolSuccess, Output: json.RawMessage(`{"narration":"ok"}`),
			Events: []json.RawMessage{done}}
		if _, err := m.Step(OutcomeArrived{Now: now, Outcome: o}); err != nil {
			b.Fatal(err)
		}
	}
}
