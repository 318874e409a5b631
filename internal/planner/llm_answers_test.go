package planner

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/llm"
	"github.com/narratoria/runtime/internal/llm/llmtest"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestLLMSmallModelAnswers: what small models really answer a structured
// request with — JSON in a markdown fence, words before or after the JSON,
// JSON cut off (after a tool, or before any), keys named otherwise — is
// repaired into the plan meant, or refused as json (the narrator then
// plans with the rules); every repair and every refusal is counted.
func TestLLMSmallModelAnswers(t *testing.T) {
	t.Parallel()
	const roll = `{"toolId":"r","toolPath":"dice-roller/roll-dice","input":{"formula":"1d20"}}`
	for _, c := range []struct {
		name, answer string
		tools        []string // toolPaths of the plan; nil: refused
		repairs      []string
	}{
		{"clean", `{"narrative":"You swing.","tools":[` + roll + `]}`, []string{"dice-roller/roll-dice"}, nil},
		{"fenced", "```json\n{\"narrative\":\"You swing.\",\"tools\":[" + roll + "]}\n```", []string{"dice-roller/roll-dice"}, []string{llm.RepairFence}},
		{"words before", `Here is the plan you asked for: {"narrative":"You swing.","tools":[` + roll + `]}`, []string{"dice-roller/roll-dice"},
			[]string{llm.RepairProse}},
		{"words after", `{"narrative":"You swing.","tools":[` + roll + `]}` + "\n\nI chose the dice because the player attacks.", []string{"dice-roller/roll-dice"},
			[]string{llm.RepairProse}},
		{"cut after a tool", `{"narrative":"You swing.","tools":[` + roll + `,{"toolId":"tell","toolPath":"storyteller/narr`, []string{"dice-roller/roll-dice"},
			[]string{llm.RepairTruncated}},
		{"cut before any tool", `{"narrative":"You swing.","tools":[{"toolId":"r","toolPa`, nil, []string{llm.RepairTruncated}},
		{"wrong key names", `{"narration":"You swing.","steps":[{"id":"r","tool_path":"dice-roller/roll-dice","args":{"formula":"1d20"}},` +
			`{"id":"tell","skill":"storyteller","script":"narrate","depends_on":"r","arguments":{"prompt":"I swing"}}]}`,
			[]string{"dice-roller/roll-dice", "storyteller/narrate"}, []string{llm.RepairKeys}},
		{"not JSON at all", `I'm sorry, I can't make a plan for that.`, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.Start(t, func(llmtest.Call) llmtest.Reply { return llmtest.Reply{Content: c.answer} })
			reg := prometheus.NewRegistry()
			m := llm.NewMeter(reg)
			pl := NewLLMPlannerOn(llm.New(LLMConfig{BaseURL: srv.URL, Model: "m"}, llm.Options{Meter: m}))
			p, err := pl.Plan(context.Background(), Request{SessionID: "acme.s1", Text: "I swing my axe"})
			for _, r := range []string{llm.RepairFence, llm.RepairProse, llm.RepairTruncated, llm.RepairKeys} {
				want := 0.0
				for _, x := range c.repairs {
					if x == r {
						want = 1
					}
				}
				require.Equal(t, want, testlog.CounterSum(t, reg, "narratoria_llm_repairs_total", map[string]string{"component": "planner", "kind": r}), "repair %s", r)
			}
			if c.tools == nil {
				require.Equal(t, llm.KindJSON, llm.KindOf(err), "%v", err)
				require.Equal(t, 1.0, testlog.CounterSum(t, reg, "narratoria_llm_failures_total", map[string]string{"component": "planner", "kind": "json"}))
				return
			}
			require.NoError(t, err)
			var got []string
			for _, tool := range p.Tools {
				got = append(got, tool.ToolPath)
			}
			require.Equal(t, c.tools, got)
			require.Equal(t, "You swing.", p.Narrative)
			require.NoError(t, messages.CheckPlanID(p.RequestID))
			if c.name == "wrong key names" {
				require.Equal(t, []string{"r"}, p.Tools[1].Dependencies, "a dependency given as one string")
				require.JSONEq(t, `{"prompt":"I swing"}`, string(p.Tools[1].Input))
			}
			require.Equal(t, 0.0, testlog.CounterSum(t, reg, "narratoria_llm_failures_total", map[string]string{"component": "planner"}))
		})
	}
}

// TestLLMPlannerCountsTokens: the planner's calls are counted under
// component planner and the session's tenant.
func TestLLMPlannerCountsTokens(t *testing.T) {
	t.Parallel()
	srv := llmtest.Start(t, func(llmtest.Call) llmtest.Reply {
		return llmtest.Reply{Content: `{"narrative":"You wait.","tools":[]}`, Usage: &llmtest.Usage{Prompt: 900, Completion: 31}}
	})
	reg := prometheus.NewRegistry()
	pl := NewLLMPlannerOn(llm.New(LLMConfig{BaseURL: srv.URL, Model: "m"}, llm.Options{Meter: llm.NewMeter(reg)}))
	_, err := pl.Plan(context.Background(), Request{SessionID: "acme.s1", Text: "I wait"})
	require.NoError(t, err)
	require.Equal(t, 31.0, testlog.CounterSum(t, reg, "narratoria_llm_tokens_total", map[string]string{"component": "planner", "kind": "completion", "tenant": "acme"}))
	require.Equal(t, 900.0, testlog.CounterSum(t, reg, "narratoria_llm_tokens_total", map[string]string{"component": "planner", "kind": "prompt", "tenant": "acme"}))
	require.Equal(t, 1, testutil.CollectAndCount(reg, "narratoria_llm_call_seconds"))
}
