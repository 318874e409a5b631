package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/llm/llmtest"
	"github.com/narratoria/runtime/internal/testlog"
)

// TestPureEval: `narratoria eval` on the testdata prompts with the rule
// planner in process prints the report (valid %, right skills %, each
// tool's precision and recall, the share right by kind, planning time,
// every miss), and its exit code follows --min; --json prints the same.
func TestPureEval(t *testing.T) {
	testlog.WithoutRace(t)
	set := "../../testdata/planning/prompts.jsonl"
	code, out, errOut := run(t, "", "eval", "--planner", "rules", "--skills-dir", "../../skills", "--min", "80", set)
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{"prompts", "208", "valid plans", "100.0%", "right skills", "planning p50", "planning p99",
		"precision / recall", "dice-roller/roll-dice", "right, by kind", "paraphrase", "rules: ", " misses", "prompts.jsonl:", "want ", "got "} {
		require.Contains(t, out, want)
	}
	code, _, errOut = run(t, "", "eval", "--planner", "rules", "--skills-dir", "../../skills", "--min", "99.9", set)
	require.Equal(t, 1, code, "under --min")
	require.Contains(t, errOut, "under --min 99.9")

	code, out, errOut = run(t, "", "eval", "--planner", "rules", "--skills-dir", "../../skills", "--json", set)
	require.Equal(t, 0, code, errOut)
	var doc struct {
		Reports []struct {
			Source   string  `json:"source"`
			Cases    int     `json:"cases"`
			ValidPct float64 `json:"validPct"`
			RightPct float64 `json:"rightPct"`
			P99Ms    float64 `json:"p99Ms"`
			Skills   []struct {
				Skill     string   `json:"skill"`
				Precision *float64 `json:"precisionPct"`
				Recall    *float64 `json:"recallPct"`
			} `json:"skills"`
			Misses []struct {
				Where string   `json:"where"`
				Want  []string `json:"want"`
			} `json:"misses"`
		} `json:"reports"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	require.Len(t, doc.Reports, 1)
	r := doc.Reports[0]
	require.Equal(t, "rules", r.Source)
	require.Equal(t, 208, r.Cases)
	require.Equal(t, 100.0, r.ValidPct)
	require.GreaterOrEqual(t, r.RightPct, 90.0)
	require.Len(t, r.Misses, 208-int(r.RightPct*208/100+0.5))
	require.NotEmpty(t, r.Skills)
	require.NotNil(t, r.Skills[0].Precision)

	code, _, errOut = run(t, "", "eval", "--planner", "magic", set)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "must be live, rules or llm")
	code, _, _ = run(t, "", "eval")
	require.Equal(t, 2, code)
}

// TestEvalCompare: --compare rules,llm measures the rule planner and a
// model (a fake server answering every prompt with the dice) on the same
// set, side by side; TSV labels read like JSONL.
func TestEvalCompare(t *testing.T) {
	t.Parallel()
	fake := llmtest.Start(t, func(llmtest.Call) llmtest.Reply {
		return llmtest.Reply{Content: "```json\n" + `{"narrative":"You act.","tools":[{"toolId":"r","toolPath":"dice-roller/roll-dice","input":{"formula":"1d20"}}]}` + "\n```"}
	})
	dir := t.TempDir()
	tsv := filepath.Join(dir, "set.tsv")
	require.NoError(t, os.WriteFile(tsv, []byte(strings.Join([]string{
		"I swing my axe at the troll\tdice-roller/roll-dice\tparaphrase",
		"I stroll along the river bank\t\tplain",
		"# a comment",
		"Draw the harbour at dawn\tscene-art\tcommand",
	}, "\n")+"\n"), 0o644))
	code, out, errOut := run(t, "", "eval", "--compare", "rules,llm", "--skills-dir", "../../skills", "--llm-url", fake.URL, "--llm-model", "m", tsv)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `right skills\s+100\.0% \(3\)\s+33\.3% \(1\)`, out, "rules all right, the model (always the dice) one of three")
	require.Contains(t, out, "llm: 2 misses")
	require.Contains(t, out, "set.tsv:4 [command] \"Draw the harbour at dawn\"\n      want scene-art\n      got  dice-roller/roll-dice")
	require.Contains(t, out, "rules: 0 misses")
	code, _, errOut = run(t, "", "eval", "--planner", "llm", "--skills-dir", "../../skills", tsv)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--llm-url")
}
