package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/llm/llmtest"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// freePort is a TCP port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// metric reads one series' value from a /metrics page (-1 when absent).
func metric(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	return -1
}

// writeTellerSkill writes a narration skill whose script says line.
func writeTellerSkill(t *testing.T, skills, line string) {
	t.Helper()
	dir := filepath.Join(skills, "teller", "scripts")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(skills, "teller", "skill.json"), []byte(`{"name":"teller","version":"1.0.0","description":"tells",
"capabilities":["narration"],"scripts":[{"name":"say","path":"scripts/say"}]}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "say"), []byte(`#!/bin/sh
cat > /dev/null
echo '{"version":"0","type":"done","ok":true,"output":{"narration":"`+line+`"}}'
`), 0o755))
}

// evalLive runs `narratoria eval` against up's live planner, whose model
// plans the storyteller alone: one of two prompts right.
func evalLive(t *testing.T, url, dir string) {
	t.Helper()
	labelled := filepath.Join(dir, "labelled.jsonl")
	require.NoError(t, os.WriteFile(labelled, []byte(`{"text":"I light the lamp","tools":[],"kind":"plain"}`+"\n"+
		`{"text":"I roll the dice","tools":["dice-roller/roll-dice"],"kind":"paraphrase"}`+"\n"), 0o644))
	code, out, errOut := run(t, "", "eval", "--nats-url", url, labelled)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "live")
	require.Contains(t, out, "50.0% (1)", "the model planned the storyteller only: one of two right")
	require.Contains(t, out, "want dice-roller/roll-dice")
}

// TestUpWithModel: `narratoria up --llm URL --llm-model NAME` against a
// fake OpenAI-compatible server started by the test. The model plans (its
// fenced answer repaired) and writes the prose: the final narration
// carries the model's prose; a piece of it reaches a game server on the
// live prose subject well before the narration when the model streams for
// 1.2 s; `narratoria prompt` prints it as it streams; the completion tokens
// the server reported appear in narratoria_llm_tokens_total on up's
// /metrics; `narratoria eval` measures the live planner; and with the
// server answering HTTP 500 the player still gets a narration.
func TestUpWithModel(t *testing.T) {
	if testing.Short() {
		t.Skip("runs narratoria up")
	}
	pieces := make([]string, 12)
	for i := range pieces {
		pieces[i] = fmt.Sprintf("Word%d ", i)
	}
	pieces[11] = "and the lamp flares."
	prose := strings.Join(pieces, "")
	const plan = "Sure! Here is the plan:\n```json\n" + `{"narrative":"The lamp waits.","tools":[{"toolId":"tell","toolPath":"teller/say","input":{}}]}` + "\n```"
	fake := llmtest.Start(t, func(c llmtest.Call) llmtest.Reply {
		if !c.Stream {
			return llmtest.Reply{Content: plan, Usage: &llmtest.Usage{Prompt: 900, Completion: 40}}
		}
		return llmtest.Reply{Chunks: pieces, Every: 100 * time.Millisecond, Usage: &llmtest.Usage{Prompt: 321, Completion: 57}}
	})
	dir := testlog.OpenTempDir(t)
	skills := filepath.Join(dir, "skills")
	writeTellerSkill(t, skills, "The teller lights the lamp.")
	port := freePort(t)
	url := upInProcess(t, dir, skills, "--llm", fake.URL, "--llm-model", "phi-3.5-mini-instruct", "--metrics-port", strconv.Itoa(port))
	metrics := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	require.Eventually(t, func() bool {
		code, out, _ := run(t, "", "skills", "--nats-url", url)
		return code == 0 && strings.Contains(out, "teller")
	}, testlog.Budget(10*time.Second), 100*time.Millisecond)

	// A game server watching the session.
	nc, err := nats.Connect(url, nats.UserCredentials(upCreds(dir)))
	require.NoError(t, err)
	defer nc.Close()
	c, err := client.New(nc)
	require.NoError(t, err)
	var mu sync.Mutex
	var firstProse, narrated time.Time
	var streamed strings.Builder
	w, err := c.Watch("m1", func(u client.Update) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case u.Prose != nil && u.Prose.Text != "" && firstProse.IsZero():
			firstProse = time.Now()
			streamed.WriteString(u.Prose.Text)
		case u.Prose != nil:
			streamed.WriteString(u.Prose.Text)
		case u.Narration != nil:
			narrated = time.Now()
		}
	})
	require.NoError(t, err)
	defer func() { _ = w.Stop() }()

	code, out, errOut := run(t, "", "prompt", "--nats-url", url, "--session", "m1", "I light the lamp")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, prose, "prompt printed the prose")
	require.Equal(t, 1, strings.Count(out, "and the lamp flares."), "the prose is printed once, as it streamed")
	var nar *messages.Narration
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return !narrated.IsZero() }, testlog.Budget(5*time.Second), 10*time.Millisecond)
	mu.Lock()
	ahead := narrated.Sub(firstProse)
	require.Equal(t, prose, streamed.String())
	mu.Unlock()
	t.Logf("the first piece of prose reached the game %s before the narration", ahead)
	require.GreaterOrEqual(t, ahead, 500*time.Millisecond, "prose streams to the game as it is written")

	// The narration itself carries the model's prose.
	code, out, errOut = run(t, "", "prompt", "--nats-url", url, "--session", "m2", "--json", "I light the lamp again")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &nar))
	require.Equal(t, prose, nar.Text)
	require.Equal(t, messages.ProseByModel, nar.Prose)

	// The tokens the server reported, on up's /metrics.
	require.Equal(t, 2*57.0, metric(t, metrics, `narratoria_llm_tokens_total{component="prose",kind="completion",tenant=""}`))
	require.Equal(t, 2*40.0, metric(t, metrics, `narratoria_llm_tokens_total{component="planner",kind="completion",tenant=""}`))
	require.Equal(t, 2.0, metric(t, metrics, `narratoria_llm_repairs_total{component="planner",kind="fence"}`))

	evalLive(t, url, dir)

	// The model fails: the player still gets a narration.
	fake.Script(func(llmtest.Call) llmtest.Reply {
		return llmtest.Reply{Status: http.StatusInternalServerError, Body: "model exploded"}
	})
	code, out, errOut = run(t, "", "prompt", "--nats-url", url, "--session", "m3", "--json", "I light the lamp once more")
	require.Equal(t, 0, code, errOut)
	nar = nil
	require.NoError(t, json.Unmarshal([]byte(out), &nar))
	require.False(t, nar.Fallback)
	require.Contains(t, nar.Text, "The teller lights the lamp.", "the rule planner planned and the template prose stands")
	require.Empty(t, nar.Prose)
	require.Equal(t, 1.0, metric(t, metrics, `narratoria_llm_failures_total{component="prose",kind="server_error"}`))
	require.Equal(t, 1.0, metric(t, metrics, `narratoria_llm_failures_total{component="planner",kind="server_error"}`))
}
