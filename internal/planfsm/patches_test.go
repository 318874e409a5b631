package planfsm

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/narratoria/runtime/internal/plancheck"
	"github.com/narratoria/runtime/pkg/dag"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestChainPatchesInOrder: along a chain, each tool is dispatched with
// the staged patches of every succeeded ancestor, in order, whether few
// tools stage patches (looked at one by one) or many (a walk of the
// graph); the two agree at every step.
func TestChainPatchesInOrder(t *testing.T) {
	for _, every := range []int{13, 2} { // 3 patched tools of 40, then 20
		p := &messages.Plan{RequestID: "00000000-0000-4000-8000-000000000002", Metadata: messages.PlanMetadata{GenerationAttempt: 1}}
		for i := range 40 {
			tl := messages.Tool{ToolID: fmt.Sprintf("t%d", i), ToolPath: "s/x", Required: true, Input: json.RawMessage(`{}`)}
			if i > 0 {
				tl.Dependencies = []string{fmt.Sprintf("t%d", i-1)}
			}
			p.Tools = append(p.Tools, tl)
		}
		g, err := dag.Build(plancheck.Nodes(p))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1_000_000, 0).UTC()
		scripts := make([]Script, len(p.Tools))
		for i := range scripts {
			scripts[i] = Script{Skill: "s", Name: "x", TimeoutMs: 1000}
		}
		m, err := New(Config{Concurrency: 1}, Record{SessionID: "s", AcceptedAt: now, Deadline: now.Add(time.Hour), Scripts: scripts, Phase: PhaseRunning}, p, g)
		if err != nil {
			t.Fatal(err)
		}
		var want []map[string]any
		effects, _ := m.Step(Started{Now: now})
		for i := range 40 {
			var d *Dispatch
			for _, e := range effects {
				if x, ok := e.(Dispatch); ok {
					d = &x
				}
			}
			if d == nil || d.Index != i {
				t.Fatalf("every %d: tool %d not dispatched: %v", every, i, effects)
			}
			if fmt.Sprint(d.Patches) != fmt.Sprint(want) || fmt.Sprint(m.ancestorPatchesScan(i)) != fmt.Sprint(want) {
				t.Fatalf("every %d: tool %d dispatched with %v, want %v", every, i, d.Patches, want)
			}
			o := &messages.Outcome{ToolID: p.Tools[i].ToolID, Attempt: d.Attempt, State: messages.ToolSuccess, Output: json.RawMessage(`{}`)}
			if i%every == 0 {
				o.Events = []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"version":"0","type":"state_patch","patch":{"k%d":%d}}`, i, i))}
				want = append(want, map[string]any{fmt.Sprintf("k%d", i): float64(i)})
			}
			now = now.Add(time.Millisecond)
			effects, _ = m.Step(OutcomeArrived{Now: now, Outcome: o})
		}
		if n := len(m.patched); (every == 2) != (n > patchedScan) {
			t.Fatalf("every %d: %d patched tools; the test meant to take the other path", every, n)
		}
	}
}
