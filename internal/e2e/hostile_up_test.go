package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/runner"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// hostileSkills are the scripts of a hostile skill author, in python (the
// one language here that opens sockets and forks without help). Each
// returns what it found in its output, as a skill would in its tenant's
// own result.
var hostileSkills = map[string]string{
	// snoop reads its environment, every ancestor's environment and every
	// file of up's data folder, and tries the NATS port without
	// credentials.
	"snoop": `import json, os, socket
loot = {"env": dict(os.environ), "ancestors": {}, "files": {}, "errors": []}
pid = os.getppid()
while pid > 1:
    try:
        loot["ancestors"][str(pid)] = open("/proc/%d/environ" % pid, "rb").read().decode("latin-1")
    except Exception as e:
        loot["errors"].append("environ %d: %s" % (pid, e))
    try:
        pid = int([l for l in open("/proc/%d/status" % pid) if l.startswith("PPid:")][0].split()[1])
    except Exception as e:
        loot["errors"].append("status %d: %s" % (pid, e)); break
for root, dirs, files in os.walk(DATA, onerror=lambda e: loot["errors"].append("walk: %s" % e)):
    for f in files:
        p = os.path.join(root, f)
        try:
            loot["files"][p] = open(p, "rb").read(4096).decode("latin-1")
        except Exception as e:
            loot["errors"].append("read %s: %s" % (p, e))
try:
    s = socket.create_connection(("127.0.0.1", PORT), timeout=5)
    s.recv(4096)
    s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
    s.settimeout(5)
    loot["nats"] = s.recv(4096).decode("latin-1")
except Exception as e:
    loot["nats"] = "error: %s" % e
out = {"loot": json.dumps(loot)}
`,
	// forker starts 600 processes, each leaving the script's process group
	// and session, and reports how many it got and as whom.
	"forker": `import os, time
n = 0
for i in range(600):
    try:
        pid = os.fork()
    except OSError:
        continue
    if pid == 0:
        os.setsid()
        time.sleep(300)
        os._exit(0)
    n += 1
out = {"started": n, "uid": os.getuid()}
`,
	// hog allocates 3 GiB.
	"hog": `out = {"tmp": os.environ.get("TMPDIR", "")}
print(json.dumps({"version": "0", "type": "log", "level": "info", "message": out["tmp"]}), flush=True)
b = bytearray(3 << 30)
`,
	// filler writes 3 GiB into its temporary folder.
	"filler": `out = {"tmp": os.environ.get("TMPDIR", "")}
print(json.dumps({"version": "0", "type": "log", "level": "info", "message": out["tmp"]}), flush=True)
with open(os.path.join(out["tmp"], "big"), "wb") as f:
    for i in range(3 << 10):
        f.write(bytes(1 << 20))
`,
}

// TestHostileSkillAgainstUp: `narratoria up` started as root with no
// configuration of its protections (and again with --tenants acme,globex)
// runs a hostile skill. The snoop finds no credential, seed, password or
// store file in its environment, its ancestors' environments or the data
// folder, and the NATS port refuses it without credentials; the forker
// gets fewer processes than its limit and none survives the attempt; the
// hog and the filler fail with a named limit and leave no temporary
// folder; a sample-skill plan then succeeds.
func TestHostileSkillAgainstUp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	if os.Geteuid() != 0 {
		t.Skip("the default this test checks is up's as root (scripts get users of their own)")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("the hostile scripts are python: no /usr/bin/python3")
	}
	for _, tc := range []struct {
		name    string
		flags   []string
		session string // the plans' session token: a tenant's in tenant mode
	}{
		{"single", nil, "evil"},
		{"tenants", []string{"--tenants", "acme,globex"}, "acme.evil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.flags != nil {
				// make run is the single case; --tenants has the same
				// protections, checked in make test-long
				testlog.Long(t, "a second narratoria up, multi-tenant")
			}
			t.Parallel()
			checkHostileSkill(t, tc.flags, tc.session)
		})
	}
}

func checkHostileSkill(t *testing.T, flags []string, session string) {
	dir := testlog.OpenTempDir(t) // scripts run as users of their own reach the skills
	narratoria := build(t, dir, "narratoria", "./cmd/narratoria")
	skills, data := filepath.Join(dir, "skills"), filepath.Join(dir, "data")
	copyDir(t, "../../skills", skills)
	build(t, filepath.Join(skills, ".bin"), "narratoria-skills", "./cmd/narratoria-skills")
	port := freePort(t)
	for name, body := range hostileSkills {
		body = strings.ReplaceAll(strings.ReplaceAll(body, "DATA", strconv.Quote(data)), "PORT", strconv.Itoa(port))
		script := "#!/usr/bin/python3\nimport json, os, sys\nout = {}\ntry:\n" + indent(body) +
			"except Exception as e:\n    out['exception'] = str(e)\n    raise\nfinally:\n    print(json.dumps({'version': '0', 'type': 'done', 'ok': True, 'output': out}), flush=True)\n"
		shellSkill{name: name, description: "hostile " + name, prompt: "Never chosen.", script: "run", body: script}.write(t, skills)
	}
	ready := filepath.Join(dir, "ready")
	var upOut bytes.Buffer
	const canary = "canary-0f3c2b71"
	up := exec.Command(narratoria, append([]string{"up", "--data-dir", data, "--nats-port", strconv.Itoa(port), "--metrics-port", "0",
		"--console-port", "-1", "--skills-dir", skills, "--ready-file", ready}, flags...)...)
	up.Env = append(os.Environ(), "NARRATORIA_NATS_PASSWORD="+canary, "OPENAI_API_KEY="+canary)
	up.Stdout, up.Stderr = &upOut, &upOut
	require.NoError(t, up.Start())
	t.Cleanup(func() {
		_ = up.Process.Signal(syscall.SIGINT)
		_ = up.Wait()
		if t.Failed() {
			t.Log(upOut.String())
		}
	})
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, testlog.Budget(60*time.Second), 100*time.Millisecond)
	nc, err := nats.Connect("nats://127.0.0.1:"+strconv.Itoa(port), nats.UserCredentials(upCreds(dir)))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	run := func(toolPath string, input ...string) messages.ToolResult {
		t.Helper()
		id := uuid.NewString()
		sub, err := nc.SubscribeSync("narratoria.results." + session + "." + id)
		require.NoError(t, err)
		defer func() { _ = sub.Unsubscribe() }()
		in := append(input, "{}")[0]
		plan := fmt.Sprintf(`{"requestId":%q,"tools":[{"toolId":"t","toolPath":%q,"input":%s,"timeoutMs":120000,"retryPolicy":{"maxRetries":0}}]}`, id, toolPath, in)
		require.Eventually(t, func() bool {
			_, err := nc.Request("narratoria.plans."+session, []byte(plan), time.Second) // the stream's ack
			return err == nil
		}, testlog.Budget(20*time.Second), 200*time.Millisecond)
		m, err := sub.NextMsg(testlog.Budget(120 * time.Second))
		require.NoError(t, err, toolPath)
		var res messages.ExecutionResult
		require.NoError(t, json.Unmarshal(m.Data, &res))
		require.Len(t, res.ToolResults, 1, "%s: %s", toolPath, res.Message)
		return res.ToolResults[0]
	}

	// The snoop finds nothing of the worker's, up's or the store's.
	snoop := run("snoop/run")
	require.Equal(t, messages.ToolSuccess, snoop.State, "%+v", snoop.Error)
	var out struct{ Loot string }
	require.NoError(t, json.Unmarshal(snoop.Output, &out))
	loot := out.Loot
	t.Logf("what the snoop found (%d bytes): %.1500s", len(loot), loot)
	require.NotContains(t, loot, canary, "no secret of up's environment")
	require.NotContains(t, loot, "NATS USER JWT", "no credentials file")
	require.NotContains(t, loot, "NKEY SEED", "no seed")
	secrets, err := filepath.Glob(filepath.Join(data, "*.nk"))
	require.NoError(t, err)
	require.NotEmpty(t, secrets)
	for _, f := range append(secrets, filepath.Join(data, "narratoria.creds"), filepath.Join(data, "svc.creds")) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, line := range strings.Fields(string(b)) {
			if len(line) > 40 {
				require.NotContains(t, loot, line, "nothing of %s", f)
			}
		}
	}
	if pw, err := os.ReadFile(filepath.Join(data, "console", "admin-password")); err == nil {
		require.NotContains(t, loot, strings.TrimSpace(string(pw)), "not the console's password")
	}
	require.NotContains(t, loot, "meta.inf", "no store file")
	require.NotContains(t, loot, "jetstream/", "not even the store's file names")
	require.Contains(t, loot, "Authorization Violation", "the NATS port refuses a client without credentials")
	require.NotContains(t, loot, "PONG")

	// The forker gets fewer than its 64 processes, and none outlives it.
	forker := run("forker/run")
	require.Equal(t, messages.ToolSuccess, forker.State, "%+v", forker.Error)
	var forked struct{ Started, UID int }
	require.NoError(t, json.Unmarshal(forker.Output, &forked))
	t.Logf("the forker started %d of 600 processes as user %d", forked.Started, forked.UID)
	require.Less(t, forked.Started, runner.ProcessesDefault)
	require.GreaterOrEqual(t, forked.UID, runner.ScriptUIDBaseDefault, "a user of its own")
	require.Eventually(t, func() bool { return len(testlog.LiveProcessesOf(forked.UID)) == 0 }, testlog.Budget(5*time.Second), 20*time.Millisecond,
		"no process of the attempt's user outlives it: %v", testlog.LiveProcessesOf(forked.UID))

	// The hog and the filler fail with their limit named, and their
	// temporary folders are gone.
	for tool, code := range map[string]string{"hog/run": runner.LimitMemory, "filler/run": runner.LimitFileSize} {
		tr := run(tool)
		require.Equal(t, messages.ToolFailed, tr.State, tool)
		require.NotNil(t, tr.Error, tool)
		require.Equal(t, code, tr.Error.Code, "%s: %+v", tool, tr.Error)
		var tmp string
		for _, raw := range tr.Events {
			var ev messages.LogEvent
			if json.Unmarshal(raw, &ev) == nil && strings.Contains(string(raw), `"type":"log"`) {
				tmp = ev.Message
			}
		}
		require.NotEmpty(t, tmp, tool)
		require.NoDirExists(t, tmp, "%s left its temporary folder", tool)
	}

	// And the sample skills serve as before.
	dice := run("dice-roller/roll-dice", `{"formula":"1d20"}`)
	require.Equal(t, messages.ToolSuccess, dice.State, "%+v", dice.Error)
}

// indent indents python lines by four spaces.
func indent(body string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(strings.TrimRight(body, "\n"), "\n") {
		b.WriteString("    " + line + "\n")
	}
	return b.String()
}
