package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/embedded"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

func run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(args, Streams{In: strings.NewReader(stdin), Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "plan.json")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

const validPlan = `{"requestId":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","tools":[
 {"toolId":"roll","toolPath":"dice-roller/roll-dice","input":{"formula":"1d20"}},
 {"toolId":"mem","toolPath":"memory/recall-memory","input":{"query":"lock"}},
 {"toolId":"tell","toolPath":"storyteller/narrate","dependencies":["roll","mem"],"input":{"prompt":"x","context":{"d":"$roll.total"}}}]}`

func TestPlanValidate(t *testing.T) {
	code, out, errOut := run(t, "", "plan", "validate", writeFile(t, validPlan))
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "valid plan 6ba7b810-9dad-11d1-80b4-00c04fd430c8: 3 tools, 2 dependency levels, critical path 2 tools")

	code, out, _ = run(t, validPlan, "plan", "validate", "--json", "--skills-dir", "../../skills", "-")
	require.Equal(t, 0, code)
	var sum validateSummary
	require.NoError(t, json.Unmarshal([]byte(out), &sum))
	require.True(t, sum.Valid)
	require.Equal(t, []string{"roll", "mem", "tell"}, sum.Order)

	bad := `{"requestId":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","tools":[
 {"toolId":"a","toolPath":"/bin/sh","retryPolicy":{"maxRetries":11}},
 {"toolId":"b","toolPath":"x/y","dependencies":["c"]},
 {"toolId":"c","toolPath":"x/y","dependencies":["b"]}]}`
	code, _, errOut = run(t, "", "plan", "validate", writeFile(t, bad))
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "tools[0].retryPolicy.maxRetries: must be <= 10 (got 11)")
	require.Contains(t, errOut, "tools[0].toolPath:")
	require.Contains(t, errOut, "absolute paths are not allowed")

	code, _, errOut = run(t, "", "plan", "validate", writeFile(t, strings.Replace(bad, `"/bin/sh","retryPolicy":{"maxRetries":11}`, `"x/y"`, 1)))
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "cycle: b -> c -> b")
	require.Contains(t, errOut, "(circular_dependency)")

	code, _, errOut = run(t, "", "plan", "validate", "--skills-dir", "../../skills", writeFile(t, strings.Replace(validPlan, "memory/recall-memory", "memory/forget-all", 1)))
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `tools[1].toolPath: unknown skill: skill "memory" has no script "memory/forget-all"`)

	code, out, _ = run(t, "{not json", "plan", "validate", "--json", "-")
	require.Equal(t, 1, code)
	require.Contains(t, out, `"reason": "invalid_json"`)

	code, _, errOut = run(t, "", "plan", "validate", filepath.Join(t.TempDir(), "missing.json"))
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "cannot read plan file")
	code, _, _ = run(t, "", "plan", "validate")
	require.Equal(t, 2, code)
	code, _, errOut = run(t, "", "plan", "validate", "--frobnicate", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "unknown flag")
	code, _, _ = run(t, "", "nonsense")
	require.Equal(t, 2, code)
}

// echoSVG is the picture the echo skill of TestClientCommandsAgainstUp draws.
const echoSVG = `<svg xmlns="http://www.w3.org/2000/svg"><text>echo</text></svg>`

func TestClientCommandsAgainstUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs narratoria up")
	}
	dir := testlog.OpenTempDir(t) // scripts run as a user of their own reach the skills
	skills := filepath.Join(dir, "skills")
	writeEchoSkill(t, skills)
	require.NoError(t, os.MkdirAll(filepath.Join(skills, "nap", "scripts"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(skills, "nap", "skill.json"), []byte(`{"name":"nap","version":"1.0.0","description":"sleeps",
"scripts":[{"name":"sleep","path":"scripts/sleep"}]}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(skills, "nap", "scripts", "sleep"), []byte(`#!/bin/sh
cat > /dev/null
sleep 30
echo '{"version":"0","type":"done","ok":true}'
`), 0o755))
	url := upInProcess(t, dir, skills)
	require.Eventually(t, func() bool {
		code, out, _ := run(t, "", "skills", "--nats-url", url)
		return code == 0 && strings.Contains(out, "echo")
	}, testlog.Budget(10*time.Second), 100*time.Millisecond)

	checkPromptAndAssets(t, dir, url)
	checkMicroServices(t, dir, url)
	checkPlanRuns(t, url)
	planID := checkPlanControl(t, url)
	checkFinishedPlan(t, url, planID)
	checkStatusAndErrors(t, url)
}

// checkPromptAndAssets: prompt narrates with progress, and names the
// picture the script drew by its object, which asset get fetches.
func checkPromptAndAssets(t *testing.T, dir, url string) {
	code, out, errOut := run(t, "", "prompt", "--nats-url", url, "--session", "cli", "hello there")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "An echo answers.")
	require.Contains(t, out, "narrate")
	require.Contains(t, out, " 50% halfway", "prompt shows a script's progress")

	// The picture the script drew is an object any host can fetch, and
	// prompt names it so.
	sum := sha256.Sum256([]byte(echoSVG))
	object := messages.AssetObjectName(hex.EncodeToString(sum[:]))
	require.Contains(t, out, "Asset pic (image/svg+xml): "+object+" — narratoria asset get "+object)
	pic := filepath.Join(dir, "pic.svg")
	code, _, errOut = run(t, "", "asset", "get", "--nats-url", url, object, "-o", pic)
	require.Equal(t, 0, code, errOut)
	got, err := os.ReadFile(pic)
	require.NoError(t, err)
	require.Equal(t, echoSVG, string(got))
	require.Contains(t, errOut, "image/svg+xml")
	code, _, errOut = run(t, "", "asset", "get", "--nats-url", url, "sha256-"+strings.Repeat("0", 64))
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not in narratoria_assets")

}

// checkMicroServices: the components are NATS micro services with a
// version and stats.
func checkMicroServices(t *testing.T, dir, url string) {
	// the components are NATS micro services (what `nats micro ls` and `nats micro stats` show)
	nc, err := nats.Connect(url, nats.UserCredentials(upCreds(dir)))
	require.NoError(t, err)
	defer nc.Close()
	for _, svc := range []string{"narratoria-narrator", "narratoria-scheduler", "narratoria-skillworker"} {
		m, err := nc.Request("$SRV.PING."+svc, nil, 5*time.Second)
		require.NoError(t, err, svc)
		require.Contains(t, string(m.Data), svc)
		var info struct {
			Version string `json:"version"`
		}
		require.NoError(t, json.Unmarshal(m.Data, &info))
		require.NotEmpty(t, info.Version, "%s reports a version", svc)
	}
	m, err := nc.Request("$SRV.STATS.narratoria-skillworker", nil, 5*time.Second)
	require.NoError(t, err)
	var stats struct {
		Endpoints []struct {
			Data struct {
				Jobs   int     `json:"jobs"`
				Errors int     `json:"errors"`
				Avg    float64 `json:"averageMs"`
			} `json:"data"`
		} `json:"endpoints"`
	}
	require.NoError(t, json.Unmarshal(m.Data, &stats))
	require.NotEmpty(t, stats.Endpoints)
	require.GreaterOrEqual(t, stats.Endpoints[0].Data.Jobs, 1, "worker stats count jobs: %s", m.Data)

}

// checkPlanRuns: state, plan run of a plan that succeeds and of one that
// fails, plan explain from the registry, plan rerun.
func checkPlanRuns(t *testing.T, url string) {
	code, out, _ := run(t, "", "state", "--nats-url", url, "cli")
	require.Equal(t, 0, code)
	require.JSONEq(t, `{"said":true}`, out)

	finished := uuid.NewString()
	plan := `{"requestId":"` + finished + `","tools":[{"toolId":"s","toolPath":"echo/say"}]}`
	code, out, _ = run(t, plan, "plan", "run", "--nats-url", url, "--session", "cli", "-")
	require.Equal(t, 0, code)
	require.Contains(t, out, "succeeded")
	// plan explain asks the running deployment's registry (echo and nap,
	// not the sample skills of ./skills).
	code, out, errOut := run(t, "", "plan", "explain", "--nats-url", url, "hello there")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "skills from the registry")
	require.Contains(t, out, "echo")
	require.NotContains(t, out, "dice-roller")

	// The finished plan runs again under a new ID, whole or one tool.
	for _, args := range [][]string{{}, {"--tool", "s"}} {
		code, out, errOut = run(t, "", append([]string{"plan", "rerun", "--nats-url", url, finished}, args...)...)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "succeeded")
		require.Contains(t, errOut, "again as ")
	}
	failing := `{"requestId":"` + uuid.NewString() + `","tools":[{"toolId":"s","toolPath":"echo/nope"}]}`
	code, out, _ = run(t, failing, "plan", "run", "--nats-url", url, "--session", "cli", "-")
	require.Equal(t, 1, code)
	require.Contains(t, out, "unknown_skill")

}

// checkPlanControl: a plan in flight listed, its status, refusals of
// decisions it cannot take, approval, cancel, plan run shown live and
// waiting past --timeout for an approval; it returns the cancelled plan.
func checkPlanControl(t *testing.T, url string) string {
	// Plans in flight: list, status, approve a gate, cancel a sleeping plan.
	planID := uuid.NewString()
	slow := `{"requestId":"` + planID + `","tools":[{"toolId":"gate","toolPath":"echo/say","requiresApproval":true},
		{"toolId":"zz","toolPath":"nap/sleep","dependencies":["gate"]}]}`
	ran := make(chan string, 1)
	go func() {
		code, out, _ := run(t, slow, "plan", "run", "--nats-url", url, "--session", "ctl", "-")
		ran <- fmt.Sprint(code, " ", out)
	}()
	require.Eventually(t, func() bool {
		code, out, _ := run(t, "", "plan", "ls", "--nats-url", url, "--session", "ctl")
		return code == 0 && strings.Contains(out, planID)
	}, testlog.Budget(10*time.Second), 50*time.Millisecond)
	code, out, _ := run(t, "", "plan", "status", "--nats-url", url, planID)
	require.Equal(t, 0, code)
	require.Contains(t, out, "awaiting_approval")
	require.Contains(t, out, "version 0 original: gate, zz")
	// What takes no decision is refused, naming why; nothing is stored.
	code, _, errOut := run(t, "", "plan", "approve", "--nats-url", url, planID, "nosuchtool", "--by", "gm")
	require.Equal(t, 1, code, "approving an unknown tool fails")
	require.Contains(t, errOut, `plan `+planID+` has no tool "nosuchtool"`)
	code, _, errOut = run(t, "", "plan", "deny", "--nats-url", url, planID, "zz", "--by", "gm")
	require.Equal(t, 1, code, "denying a tool that needs no approval fails")
	require.Contains(t, errOut, `tool "zz" of plan `+planID+` requires no approval`)
	code, _, errOut = run(t, "", "plan", "approve", "--nats-url", url, uuid.NewString(), "gate")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "unknown plan")
	code, out, _ = run(t, "", "plan", "approve", "--nats-url", url, planID, "gate", "--by", "gm")
	require.Equal(t, 0, code, out)
	require.Eventually(t, func() bool {
		_, out, _ = run(t, "", "plan", "status", "--nats-url", url, planID)
		// The plan's own line says "running" from the start: wait for
		// the gate's history to show the approval.
		return strings.Contains(out, "pending (approved) → ") && strings.Contains(out, "running (dispatch)")
	}, testlog.Budget(10*time.Second), 50*time.Millisecond)
	// Each tool's history says how it got there.
	require.Contains(t, out, "awaiting_approval (requires approval) → ")
	require.Contains(t, out, "pending (approved) → ")
	require.Contains(t, out, "running (dispatch)")
	code, out, _ = run(t, "", "plan", "cancel", "--nats-url", url, planID, "--reason", "enough")
	require.Equal(t, 0, code, out)
	select {
	case r := <-ran:
		require.True(t, strings.HasPrefix(r, "1 "), r)
		require.Contains(t, r, "cancelled")
		// plan run showed the plan live: the gate's wait, how to decide,
		// each tool as it ran.
		require.Contains(t, r, "gate                     awaiting_approval — waiting for a decision: narratoria plan approve "+planID+" gate")
		require.Contains(t, r, "gate                     running")
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled plan's result did not come")
	}

	// A plan waiting for approval longer than --timeout is waited for (its
	// own deadline counts), and never blamed on the scheduler.
	waited := uuid.NewString()
	go func() {
		code, out, errOut := run(t, `{"requestId":"`+waited+`","tools":[{"toolId":"gate","toolPath":"echo/say","requiresApproval":true,"input":{"x":1}}]}`,
			"plan", "run", "--nats-url", url, "--session", "ctl", "--timeout", "1s", "-")
		ran <- fmt.Sprint(code, " ", out, errOut)
	}()
	require.Eventually(t, func() bool {
		code, out, _ := run(t, "", "plan", "status", "--nats-url", url, waited)
		return code == 0 && strings.Contains(out, "awaiting_approval")
	}, testlog.Budget(10*time.Second), 50*time.Millisecond)
	time.Sleep(2500 * time.Millisecond) // past --timeout
	code, _, errOut = run(t, "", "plan", "approve", "--nats-url", url, waited, "gate")
	require.Equal(t, 0, code, errOut)
	select {
	case r := <-ran:
		require.True(t, strings.HasPrefix(r, "0 "), r)
		require.Contains(t, r, `input: {"x":1}`)
		require.Contains(t, r, "succeeded")
		require.NotContains(t, r, "scheduler running")
	case <-time.After(testlog.Budget(20 * time.Second)):
		t.Fatal("plan run did not end after the approval")
	}
	return planID
}

// checkFinishedPlan: a finished plan's status from its result (exit 0),
// its tools refused a decision, it refused a cancel; history and ls --all.
func checkFinishedPlan(t *testing.T, url, planID string) {
	var code int
	var out, errOut string
	// The result goes out a moment before the plan's actor ends: status
	// may answer for the plan in between. Then it answers from the result:
	// exit 0, how it ended, each tool's end.
	require.Eventually(t, func() bool {
		code, out, _ = run(t, "", "plan", "status", "--nats-url", url, planID)
		return code == 0 && strings.Contains(out, " finished: cancelled")
	}, testlog.Budget(10*time.Second), 50*time.Millisecond, "a finished plan's status, from its result")
	// The cancel lands while the gate (a quick echo) runs, or just after it
	// ended, while zz sleeps: either way each tool says how it ended.
	if strings.Contains(out, "gate                     success") {
		require.Regexp(t, `(?m)^  zz\s+cancelled\s+attempt 1, ran \d+ ms — the plan was cancelled: enough`, out)
	} else {
		require.Regexp(t, `(?m)^  gate\s+cancelled\s+attempt 1, ran \d+ ms — the plan was cancelled: enough`, out)
		require.Regexp(t, `(?m)^  zz\s+cancelled\s+attempt 0`, out)
	}
	code, out, _ = run(t, "", "plan", "status", "--json", "--nats-url", url, planID)
	require.Equal(t, 0, code)
	var fin messages.PlanStatus
	require.NoError(t, json.Unmarshal([]byte(out), &fin), out)
	require.Equal(t, messages.PlanCancelled, fin.Result.State)
	require.Equal(t, messages.ReasonCancelled, fin.Result.FailureReason)
	// Its tools take no decision, and it cannot be cancelled again.
	code, _, errOut = run(t, "", "plan", "approve", "--nats-url", url, planID, "gate", "--by", "gm")
	require.Equal(t, 1, code, "approving a tool of a finished plan fails")
	require.Contains(t, errOut, "plan "+planID+" already finished: cancelled")
	code, _, errOut = run(t, "", "plan", "cancel", "--nats-url", url, planID)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "already finished")
	code, _, errOut = run(t, "", "plan", "status", "--nats-url", url, uuid.NewString())
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "unknown plan")
	// History: the finished plans, with the console's filters.
	code, out, errOut = run(t, "", "plan", "history", "--nats-url", url, "--session", "ctl", "--state", "cancelled")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, planID)
	require.Contains(t, out, "1 of 1 matching plan(s)")
	code, out, _ = run(t, "", "plan", "history", "--nats-url", url, "--state", "succeeded", "--json")
	require.Equal(t, 0, code)
	var page messages.HistoryPage
	require.NoError(t, json.Unmarshal([]byte(out), &page), out)
	require.NotEmpty(t, page.Plans)
	for _, p := range page.Plans {
		require.Equal(t, messages.PlanSucceeded, p.State)
		require.NotEqual(t, planID, p.PlanID)
	}
	code, out, _ = run(t, "", "plan", "ls", "--all", "--nats-url", url, "--session", "ctl", "--from", "1h")
	require.Equal(t, 0, code)
	require.Contains(t, out, "no plan in flight")
	require.Contains(t, out, planID)
	code, _, errOut = run(t, "", "plan", "cancel", "--nats-url", url, "not/a/plan")
	require.Equal(t, 2, code, errOut)

}

// checkStatusAndErrors: --prefix honoured, the partition map and storage,
// a session reset, a server that cannot be reached.
func checkStatusAndErrors(t *testing.T, url string) {
	// Another prefix reaches nothing here: the CLI honours --prefix.
	code, _, errOut := run(t, "", "plan", "ls", "--nats-url", url, "--prefix", "elsewhere")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "no active scheduler")

	// One `up` owns every partition, as scheduler and as narrator.
	code, out, _ := run(t, "", "status", "--nats-url", url, "--json")
	require.Equal(t, 0, code, out)
	var pm PartitionMap
	require.NoError(t, json.Unmarshal([]byte(out), &pm))
	require.Equal(t, 32, pm.Partitions)
	require.Len(t, pm.Groups, 2)
	for _, g := range pm.Groups {
		require.Len(t, g.Owners, 1, g.Group)
		require.Len(t, g.Owners[0].Partitions, 32, g.Group)
		require.Empty(t, g.Unowned, g.Group)
	}
	require.NotEmpty(t, pm.Storage)
	var sawPrompts, sawKeys bool
	for _, u := range pm.Storage {
		sawPrompts = sawPrompts || (u.Name == messages.StreamPrompts && u.MaxBytes > 0 && u.Discard == "new")
		sawKeys = sawKeys || u.Name == "KV "+messages.BucketKeys
		require.Positive(t, u.MaxMsgSize, u.Name)
	}
	require.True(t, sawPrompts, "the prompts stream's use against its budget: %+v", pm.Storage)
	require.True(t, sawKeys, "every bucket is listed")
	code, out, _ = run(t, "", "status", "--nats-url", url)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "32 partitions")
	require.Contains(t, out, "0-31")
	require.Contains(t, out, "storage: use against budget")
	require.Contains(t, out, "NARRATORIA_PROMPTS")

	code, out, _ = run(t, "", "session", "reset", "--nats-url", url, "--clear-state", "cli")
	require.Equal(t, 0, code)
	require.Contains(t, out, "state cleared")

	code, _, errOut = run(t, "", "skills", "--nats-url", "nats://127.0.0.1:1")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "cannot reach NATS at nats://127.0.0.1:1")
	require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line")
}

// writeEchoSkill writes the echo skill under skills: its script draws a
// picture (an asset), reports progress, patches the state and narrates
// "An echo answers.".
func writeEchoSkill(t *testing.T, skills string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(skills, "echo", "scripts"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(skills, "echo", "skill.json"), []byte(`{"name":"echo","version":"1.0.0","description":"echo","capabilities":["narration"],
"scripts":[{"name":"say","path":"scripts/say"}]}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(skills, "echo", "scripts", "say"), []byte(`#!/bin/sh
cat > /dev/null
mkdir -p data
printf '%s' '`+echoSVG+`' > data/echo.svg
echo '{"version":"0","type":"asset","assetId":"pic","kind":"image","mediaType":"image/svg+xml","path":"data/echo.svg"}'
echo '{"version":"0","type":"ui_event","event":"progress","payload":{"percent":50,"message":"halfway"}}'
echo '{"version":"0","type":"state_patch","patch":{"said":true}}'
echo '{"version":"0","type":"done","ok":true,"output":{"narration":"An echo answers."}}'
`), 0o755))
}

// upInProcess runs `narratoria up` in this process on skills, with its data
// and ready file under dir, an embedded nats-server on a free port and no
// metrics or console port, until the test ends; it returns the NATS URL.
func upInProcess(t *testing.T, dir, skills string, extra ...string) string {
	t.Helper()
	url, _ := upInProcessWith(t, dir, skills, extra...)
	return url
}

// upInProcessWith is upInProcess with more flags of up (later ones win);
// it also returns a function that stops up before the test ends.
func upInProcessWith(t *testing.T, dir, skills string, extra ...string) (string, func()) {
	t.Helper()
	ready := filepath.Join(dir, "ready")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		var out, errb bytes.Buffer
		root := NewRoot(Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
		root.SetArgs(append([]string{"up", "--data-dir", filepath.Join(dir, "data"), "--nats-port", "-1", "--metrics-port", "0", "--console-port", "0",
			"--skills-dir", skills, "--ready-file", ready}, extra...))
		if err := root.ExecuteContext(ctx); err != nil {
			t.Log(err)
			done <- 1
			return
		}
		done <- 0
	}()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, testlog.Budget(60*time.Second), 50*time.Millisecond)
	b, _ := os.ReadFile(ready)
	url, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	// up lets no client in without the credentials it wrote.
	t.Setenv("NARRATORIA_NATS_CREDSFILE", upCreds(dir))
	return url, stop
}

// upCreds are the client credentials `narratoria up` wrote into its data
// folder under dir.
func upCreds(dir string) string { return filepath.Join(dir, "data", "narratoria.creds") }

// TestPurePlanExplain: scores, reasons and the plan, as text and JSON,
// from the sample skills on disk. The rule planner's scoring is pure
// computation: make test runs it without the race detector.
func TestPurePlanExplain(t *testing.T) {
	testlog.WithoutRace(t)
	code, out, errOut := run(t, "", "plan", "explain", "--skills-dir", "../../skills", "I swing my axe at the troll")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "✔ dice-roller")
	require.Contains(t, out, "closest example:")
	require.Contains(t, out, "score below the threshold")
	require.Contains(t, out, `"toolPath": "dice-roller/roll-dice"`)
	require.Contains(t, out, "Steps:\n1. read the prompt")
	require.Contains(t, out, "dice-roller: kept, score")
	code, out, _ = run(t, "", "plan", "explain", "--json", "--skills-dir", "../../skills", "Voglio tirare i dadi per aprire la serratura")
	require.Equal(t, 0, code)
	var ex struct {
		English bool `json:"english"`
		Steps   []struct {
			Name string   `json:"name"`
			Said []string `json:"said"`
		} `json:"steps"`
		Skills []struct {
			Skill  string `json:"skill"`
			Chosen bool   `json:"chosen"`
		} `json:"skills"`
		Plan struct {
			Tools []struct {
				ToolPath string `json:"toolPath"`
			} `json:"tools"`
		} `json:"plan"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &ex), out)
	require.False(t, ex.English)
	require.Len(t, ex.Steps, 7)
	require.Equal(t, "guard", ex.Steps[1].Name)
	require.Contains(t, strings.Join(ex.Steps[1].Said, "\n"), "not English")
	require.Len(t, ex.Plan.Tools, 1, "the storyteller alone")
	code, out, _ = run(t, "", "plan", "explain", "--skills-dir", "../../skills", "Je lance les dés")
	require.Equal(t, 0, code)
	require.Contains(t, out, "The prompt is in fr, read through its gloss as: I roll the dice")
	require.Contains(t, out, "✔ dice-roller")
	code, _, _ = run(t, "", "plan", "explain")
	require.Equal(t, 2, code)
}

// TestSkillsCheck: narratoria skills --check reports each skill on disk and
// each problem (exit 1 when there is one).
func TestSkillsCheck(t *testing.T) {
	code, out, _ := run(t, "", "skills", "--check", "../../skills")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "ok       storyteller")
	dir := t.TempDir()
	sd := filepath.Join(dir, "broken")
	require.NoError(t, os.MkdirAll(filepath.Join(sd, "scripts"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(sd, "scripts", "run"), []byte("#!/no/such/sh\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(sd, "skill.json"), []byte(`{"name":"broken","version":"1.0.0","description":"d","scripts":[{"name":"run","path":"scripts/run"}]}`), 0o644))
	code, out, _ = run(t, "", "skills", "--check", dir)
	require.Equal(t, 1, code)
	require.Contains(t, out, "problem")
	require.Contains(t, out, "/no/such/sh does not exist")

	// Every problem of a skill, not the first: two scripts at fault, and
	// its config against its schema.
	many := filepath.Join(dir, "many")
	require.NoError(t, os.MkdirAll(filepath.Join(many, "scripts"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(many, "scripts", "plain"), []byte("#!/bin/sh\n"), 0o644)) // not executable
	require.NoError(t, os.WriteFile(filepath.Join(many, "skill.json"), []byte(`{"name":"many","version":"1.0.0","description":"d",
"scripts":[{"name":"gone","path":"scripts/gone"},{"name":"plain","path":"scripts/plain"}]}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(many, "config.json"), []byte(`{"level":"high"}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(many, "config-schema.json"), []byte(`{"type":"object","properties":{"level":{"type":"integer"}},"required":["level","mode"]}`), 0o644))
	code, out, _ = run(t, "", "skills", "--check", dir)
	require.Equal(t, 1, code)
	for _, want := range []string{"many/scripts/gone:", "many/scripts/plain:", "many/config.json: does not match config-schema.json: level", "mode"} {
		require.Contains(t, out, want)
	}
	require.GreaterOrEqual(t, strings.Count(out, "problem  "+filepath.Base(dir)+"/many/"), 4, out)
}

// TestUpAdoptsTheStoreOfAnEarlierUp: a data folder of an up that ran its
// server without accounts (every stream in the global account) keeps its
// streams and messages under the up that requires credentials: they move
// to the service account's folder at start.
func TestUpAdoptsTheStoreOfAnEarlierUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs narratoria up")
	}
	dir := testlog.OpenTempDir(t)
	old, err := embedded.Start(embedded.Options{Port: -1, StoreDir: filepath.Join(dir, "data", "jetstream")})
	require.NoError(t, err)
	onc, err := nats.Connect(old.ClientURL())
	require.NoError(t, err)
	ojs, err := jetstream.New(onc)
	require.NoError(t, err)
	_, err = ojs.CreateStream(t.Context(), jetstream.StreamConfig{Name: "EARLIER", Subjects: []string{"earlier.>"}})
	require.NoError(t, err)
	_, err = ojs.Publish(t.Context(), "earlier.kept", []byte("kept across the upgrade"))
	require.NoError(t, err)
	onc.Close()
	old.Shutdown()
	old.WaitForShutdown()

	skills := filepath.Join(dir, "skills")
	require.NoError(t, os.MkdirAll(skills, 0o755))
	url := upInProcess(t, dir, skills)
	_, err = nats.Connect(url)
	require.Error(t, err, "no client gets in without credentials")
	nc, err := nats.Connect(url, nats.UserCredentials(upCreds(dir)))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(t.Context(), "EARLIER")
	require.NoError(t, err, "the earlier up's stream is there")
	m, err := st.GetLastMsgForSubject(t.Context(), "earlier.kept")
	require.NoError(t, err)
	require.Equal(t, "kept across the upgrade", string(m.Data))
	info, err := os.Stat(filepath.Join(dir, "data"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), info.Mode().Perm(), "the data folder is its owner's only")
	creds, err := os.Stat(upCreds(dir))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), creds.Mode().Perm())
}
