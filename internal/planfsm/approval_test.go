package planfsm

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/narratoria/runtime/internal/plancheck"
	"github.com/narratoria/runtime/pkg/dag"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestDecisionStoredInTimeSurvivesARecovery: a plan recovered after its
// approval wait's deadline passed (no scheduler ran meanwhile) gives the
// decision stored during the outage time to be read back: one stored
// before the deadline is applied, one stored after it ends the wait as
// timed out.
func TestDecisionStoredInTimeSurvivesARecovery(t *testing.T) {
	for _, c := range []struct {
		name     string
		storedIn time.Duration // after the wait began
		want     messages.ToolState
	}{{"in time", 4 * time.Second, messages.ToolPending}, {"too late", 6 * time.Second, messages.ToolFailed}} {
		t.Run(c.name, func(t *testing.T) {
			p := &messages.Plan{RequestID: "00000000-0000-4000-8000-000000000003", Metadata: messages.PlanMetadata{GenerationAttempt: 1},
				Tools: []messages.Tool{{ToolID: "ask", ToolPath: "s/x", Required: true, RequiresApproval: true, Input: json.RawMessage(`{}`)}}}
			g, err := dag.Build(plancheck.Nodes(p))
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{Concurrency: 1, ApprovalTimeout: 5 * time.Second}
			now := time.Unix(1_000_000, 0).UTC()
			rec := Record{SessionID: "s", AcceptedAt: now, Deadline: now.Add(time.Hour), Scripts: []Script{{Skill: "s", Name: "x", TimeoutMs: 1000}}, Phase: PhaseRunning}
			m, err := New(cfg, rec, p, g)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Step(Started{Now: now}); err != nil {
				t.Fatal(err)
			}
			waiting := m.Tool(0)
			if waiting.State != messages.ToolAwaitingApproval {
				t.Fatalf("the tool is %s, not waiting", waiting.State)
			}

			// The scheduler dies; the next one recovers the plan 10 s later,
			// after the wait's deadline.
			later := now.Add(10 * time.Second)
			r, err := Restore(cfg, m.Record(), p, g, map[string]*Tool{"ask": &waiting})
			if err != nil {
				t.Fatal(err)
			}
			effects, err := r.Step(Recovered{Now: later})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range effects {
				if a, ok := e.(ArmTimer); ok && a.Key.Kind == TimerApproval && a.At.Before(later.Add(approvalReadGrace)) {
					t.Fatalf("the recovered wait times out at %s, before its stored decision can be read back", a.At.Sub(later))
				}
			}
			// The decision read back from the approvals stream.
			if _, err := r.Step(ApprovalArrived{Now: later.Add(100 * time.Millisecond), ToolID: "ask",
				Approval: messages.Approval{Approved: true, By: "gm"}, StoredAt: now.Add(c.storedIn)}); err != nil {
				t.Fatal(err)
			}
			got := r.Tool(0)
			if got.State == messages.ToolAwaitingApproval {
				t.Fatalf("still waiting")
			}
			if c.want == messages.ToolFailed {
				if got.Error == nil || got.Error.Code != "approval_timeout" {
					t.Fatalf("a decision stored after the deadline: %s %+v, want approval_timeout", got.State, got.Error)
				}
				return
			}
			if !got.Approved {
				t.Fatalf("a decision stored in time was not applied: %s %+v", got.State, got.Error)
			}
		})
	}
}
