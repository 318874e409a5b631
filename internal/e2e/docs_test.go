package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/skillworker"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestWritingSkillsDoc follows docs/writing-skills.md literally: it takes the
// manifest, prompt and script from the page's code blocks, writes them into
// the skills folder of a running worker, and runs the script through it.
func TestWritingSkillsDoc(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/writing-skills.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)## ([^\n]*)\n.*?```(?:json|markdown|sh)\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	byHeading := map[string]string{}
	for _, b := range blocks {
		if _, seen := byHeading[b[1]]; !seen {
			byHeading[b[1]] = b[2]
		}
	}
	manifest := byHeading["2. The manifest: `skills/weather/skill.json`"]
	prompt := byHeading["3. The prompt: `skills/weather/prompt.md`"]
	script := byHeading["4. The script: `skills/weather/scripts/describe`"]
	require.NotEmpty(t, manifest)
	require.NotEmpty(t, prompt)
	require.NotEmpty(t, script)

	srv := natstest.Start(t)
	log, _ := testlog.New(t)
	root := testlog.OpenTempDir(t) // the repository root of the doc's commands
	skills := filepath.Join(root, "skills")
	require.NoError(t, os.MkdirAll(skills, 0o755))
	w, err := skillworker.New(srv.Connect(t), skillworker.Config{SkillsDir: skills, WatchInterval: 100 * time.Millisecond},
		skillworker.Options{Logger: log, Bus: srv.Bus})
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(w.Stop)

	sh := func(script string) {
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
	}
	sh("mkdir -p skills/weather/scripts")                                                                       // step 1
	require.NoError(t, os.WriteFile(filepath.Join(root, "skills/weather/skill.json"), []byte(manifest), 0o644)) // step 2
	require.NoError(t, os.WriteFile(filepath.Join(root, "skills/weather/prompt.md"), []byte(prompt), 0o644))    // step 3
	require.NoError(t, os.WriteFile(filepath.Join(root, "skills/weather/scripts/describe"), []byte(script), 0o644))
	sh("chmod +x skills/weather/scripts/describe") // step 4
	require.Eventually(t, func() bool { return strings.Contains(strings.Join(w.Skills(), ","), "weather") }, testlog.Budget(10*time.Second), 50*time.Millisecond,
		"the worker picked the new skill up without a restart")

	sub, err := srv.NC.SubscribeSync("narratoria.outcomes.>")
	require.NoError(t, err)
	job, _ := json.Marshal(messages.ToolJob{PlanID: "6ba7b810-9dad-11d1-80b4-00c04fd430c8", SessionID: "demo", ToolID: "t1", Skill: "weather",
		Script: "describe", Attempt: 1, Input: json.RawMessage(`{"place":"the harbour"}`)})
	_, err = srv.JS.Publish(context.Background(), "narratoria.jobs.weather.6ba7b810-9dad-11d1-80b4-00c04fd430c8.t1", job)
	require.NoError(t, err)
	m, err := sub.NextMsg(30 * time.Second)
	require.NoError(t, err)
	var o messages.Outcome
	require.NoError(t, json.Unmarshal(m.Data, &o))
	require.Equal(t, messages.ToolSuccess, o.State, "%+v", o.Error)
	require.Contains(t, string(o.Output), "The sky is a clear, hard blue.")
}
