package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// writeSkill writes a one-script skill whose script is body (sh).
func writeSkill(t *testing.T, dir, name, script, body string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, name, "scripts"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name, "skill.json"), []byte(`{"name":"`+name+`","version":"1.0.0","description":"`+name+`",
"scripts":[{"name":"`+script+`","path":"scripts/`+script+`"}]}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name, "scripts", script), []byte("#!/bin/sh\ncat > /dev/null\n"+body), 0o755))
}

// TestPlansInFlight: plan ls shows each plan's state, tools done, skills
// and age and filters by session, state and skill; plan status shows the
// tools done, how long an ended tool ran, and no approval wait for a tool
// whose decision is stored; a plan ID published again while its plan runs
// is refused at once, by name.
func TestPlansInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("runs narratoria up")
	}
	dir := testlog.OpenTempDir(t) // scripts run as a user of their own reach the skills
	skills := filepath.Join(dir, "skills")
	writeSkill(t, skills, "echo", "say", `echo '{"version":"0","type":"done","ok":true,"output":{"narration":"An echo answers."}}'`+"\n")
	writeSkill(t, skills, "nap", "sleep", "sleep 30\necho '{\"version\":\"0\",\"type\":\"done\",\"ok\":true}'\n")
	url := upInProcess(t, dir, skills)
	require.Eventually(t, func() bool {
		code, out, _ := run(t, "", "skills", "--nats-url", url)
		return code == 0 && strings.Contains(out, "echo") && strings.Contains(out, "nap")
	}, testlog.Budget(10*time.Second), 100*time.Millisecond)

	// Plan a: quick ends, zz times out (optional, no retry), gate waits
	// for approval. Plan b: one long nap.
	a, b := uuid.NewString(), uuid.NewString()
	planA := `{"requestId":"` + a + `","tools":[{"toolId":"quick","toolPath":"echo/say"},
		{"toolId":"zz","toolPath":"nap/sleep","timeoutMs":300,"required":false,"retryPolicy":{"maxRetries":0,"backoffMs":100}},
		{"toolId":"gate","toolPath":"echo/say","requiresApproval":true,"dependencies":["quick"]}]}`
	planB := `{"requestId":"` + b + `","tools":[{"toolId":"zz","toolPath":"nap/sleep"}]}`
	results := make(chan string, 2)
	for _, p := range []struct{ body, session string }{{planA, "lsa"}, {planB, "lsb"}} {
		go func() {
			code, out, errOut := run(t, p.body, "plan", "run", "--nats-url", url, "--session", p.session, "-")
			results <- strconv.Itoa(code) + " " + out + errOut
		}()
	}
	var st messages.PlanStatus
	require.Eventually(t, func() bool {
		code, out, _ := run(t, "", "plan", "status", "--json", "--nats-url", url, a)
		return code == 0 && json.Unmarshal([]byte(out), &st) == nil && len(st.Tools) == 3 &&
			st.Tools[1].State == messages.ToolTimeout && st.Tools[2].State == messages.ToolAwaitingApproval
	}, testlog.Budget(20*time.Second), 50*time.Millisecond, "plan a: zz timed out, gate waits")
	require.Eventually(t, func() bool {
		code, out, _ := run(t, "", "plan", "ls", "--nats-url", url, "--session", "lsb")
		return code == 0 && strings.Contains(out, b)
	}, testlog.Budget(10*time.Second), 50*time.Millisecond)

	// plan ls: a table with state, tools done, age and skills.
	code, out, errOut := run(t, "", "plan", "ls", "--nats-url", url)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `PLAN\s+SESSION\s+STATE\s+DONE\s+AGE\s+SKILLS`, out)
	require.Regexp(t, regexp.QuoteMeta(a)+`\s+lsa\s+awaiting_approval\s+2/3\s+\S+\s+echo,nap\n`, out)
	require.Regexp(t, regexp.QuoteMeta(b)+`\s+lsb\s+running\s+0/1\s+\S+\s+nap\n`, out)
	for _, f := range []struct {
		flags   []string
		in, out string
	}{
		{[]string{"--session", "lsb"}, b, a},
		{[]string{"--state", "awaiting_approval"}, a, b},
		{[]string{"--state", "running"}, b, a},
		{[]string{"--skill", "echo"}, a, b},
	} {
		code, out, errOut := run(t, "", append([]string{"plan", "ls", "--nats-url", url}, f.flags...)...)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, f.in, f.flags)
		require.NotContains(t, out, f.out, f.flags)
	}
	code, out, _ = run(t, "", "plan", "ls", "--nats-url", url, "--skill", "nope")
	require.Equal(t, 0, code)
	require.Contains(t, out, "no plan in flight")
	code, _, errOut = run(t, "", "plan", "ls", "--nats-url", url, "--state", "sleepy")
	require.Equal(t, 2, code, "an unknown state is a usage error")
	require.Contains(t, errOut, "--state")
	code, out, _ = run(t, "", "plan", "ls", "--nats-url", url, "--json", "--session", "lsa")
	require.Equal(t, 0, code)
	var rows []planRow
	require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
	require.Len(t, rows, 1)
	require.Equal(t, planRow{PlanID: a, SessionID: "lsa", State: "awaiting_approval", ToolsDone: 2, Tools: 3,
		Skills: []string{"echo", "nap"}, AcceptedAt: st.AcceptedAt}, rows[0])

	// plan status: progress, how long the timed-out tool ran, the wait.
	code, out, errOut = run(t, "", "plan", "status", "--nats-url", url, a)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "2/3 tools done")
	zz := regexp.MustCompile(`(?m)^  zz\s+timeout\s+attempt 1, ran (\d+) ms`).FindStringSubmatch(out)
	require.NotNil(t, zz, out)
	require.NotEqual(t, "0", zz[1], "the timed-out tool shows how long it ran")
	require.Regexp(t, `(?m)^  gate\s+awaiting_approval\s+attempt 0, waiting for approval until `, out)

	// The same plan ID again while its plan runs: refused at once, by name.
	code, out, errOut = run(t, planA, "plan", "run", "--nats-url", url, "--session", "lsa", "--timeout", "30s", "-")
	require.Equal(t, 1, code, out)
	require.Contains(t, errOut, "duplicate plan ID: plan "+a+" was already published (the plans stream dropped this copy")
	require.Contains(t, errOut, "--new-id")

	// A decision stored and not yet applied (status read just before the
	// approval, as a reader racing the scheduler sees it): the tool no
	// longer waits for anyone.
	code, _, errOut = run(t, "", "plan", "approve", "--nats-url", url, a, "gate", "--by", "gm")
	require.Equal(t, 0, code, errOut)
	nc, err := nats.Connect(url, nats.UserCredentials(upCreds(dir)))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var buf bytes.Buffer
	printStatus(&buf, &st, storedDecisions(ctx, js, messages.Subjects{}, &st), time.Now())
	require.Regexp(t, `(?m)^  gate\s+awaiting_approval\s+attempt 0, approved by gm \(the scheduler is applying the decision\)`, buf.String())
	require.NotContains(t, buf.String(), "waiting for approval until")

	// The approved gate runs and plan a ends; plan b is cancelled.
	code, _, errOut = run(t, "", "plan", "cancel", "--nats-url", url, b)
	require.Equal(t, 0, code, errOut)
	for range 2 {
		select {
		case r := <-results:
			require.True(t, strings.HasPrefix(r, "0 ") || strings.Contains(r, "cancelled"), r)
		case <-time.After(testlog.Budget(30 * time.Second)):
			t.Fatal("a plan's result did not come")
		}
	}
}

// TestPrintStatusRunTimes: a tool cancelled or lost mid-run has no run time
// from its script (executionTimeMs 0); plan status shows how long it ran
// from its history instead, and nothing for a tool that never ran.
func TestPrintStatusRunTimes(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st := &messages.PlanStatus{PlanID: "p", SessionID: "s", Phase: "running", Tools: []messages.ToolStatus{
		{ToolID: "cut", State: messages.ToolCancelled, Attempt: 1, History: []messages.ToolTransition{
			{State: messages.ToolRunning, At: at, Cause: "dispatch"},
			{State: messages.ToolCancelled, At: at.Add(1500 * time.Millisecond), Cause: "plan cancelled"}}},
		{ToolID: "twice", State: messages.ToolTimeout, Attempt: 2, History: []messages.ToolTransition{
			{State: messages.ToolRunning, At: at, Cause: "dispatch"},
			{State: messages.ToolRetrying, At: at.Add(200 * time.Millisecond), Cause: "attempt failed with retries left"},
			{State: messages.ToolRunning, At: at.Add(300 * time.Millisecond), Cause: "dispatch"},
			{State: messages.ToolTimeout, At: at.Add(700 * time.Millisecond), Cause: "attempt failed for good"}}},
		{ToolID: "live", State: messages.ToolRunning, Attempt: 1, History: []messages.ToolTransition{
			{State: messages.ToolRunning, At: at, Cause: "dispatch"}}},
		{ToolID: "never", State: messages.ToolSkipped, History: []messages.ToolTransition{
			{State: messages.ToolSkipped, At: at, Cause: "dependency failed"}}},
	}}
	var buf bytes.Buffer
	printStatus(&buf, st, nil, at.Add(2*time.Second))
	out := buf.String()
	require.Contains(t, out, "  3/4 tools done\n")
	require.Regexp(t, `(?m)^  cut\s+cancelled\s+attempt 1, ran 1500 ms$`, out)
	require.Regexp(t, `(?m)^  twice\s+timeout\s+attempt 2, ran 600 ms$`, out)
	require.Regexp(t, `(?m)^  live\s+running\s+attempt 1, running for 2000 ms$`, out)
	require.Regexp(t, `(?m)^  never\s+skipped\s+attempt 0$`, out)
}
