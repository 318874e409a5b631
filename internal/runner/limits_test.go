package runner

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// needRoot skips a test that runs scripts as users of their own.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running scripts as users of their own needs root")
	}
}

// openDir makes a test's temporary folder (and its parent, the test's
// own) reachable by the scripts' users, as a skills folder must be.
func openDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

// testPool is a pool of script users for one test, given back after it.
func testPool(t *testing.T) *UserPool {
	t.Helper()
	p := NewUserPool(0, 0)
	t.Cleanup(p.Close)
	return p
}

// donePrinter is a python line that ends an attempt with output.
const pyDone = `print(json.dumps({"version": "0", "type": "done", "ok": True, "output": out}), flush=True)`

func python(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "/usr/local/bin/python3"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("no python3 in /usr/bin: the hostile scripts of this test are python")
	return ""
}

// TestAttemptLimitsStopHostileScripts: each hostile script runs under the
// default limits as a user of its own (the worker is root) and fails with
// the limit it hit named; nothing it made survives the attempt, neither a
// process (one that left its process group included) nor its temporary
// folder.
func TestAttemptLimitsStopHostileScripts(t *testing.T) {
	needRoot(t)
	py := python(t)
	cases := []struct {
		name, body, code string
	}{
		{"allocates 3 GiB", "b = bytearray(3 << 30)\nout = {}", LimitMemory},
		{"writes 3 GiB", "f = open(os.environ['TMPDIR'] + '/big', 'wb')\nfor i in range(3 << 10):\n    f.write(bytes(1 << 20))\nout = {}", LimitFileSize},
	}
	pool := testPool(t)
	r := &ProcessRunner{Users: pool, Landlock: true, Limits: Limits{KillGrace: 200 * time.Millisecond}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := openDir(t)
			path := filepath.Join(dir, "hostile")
			require.NoError(t, os.WriteFile(path, []byte("#!"+py+"\nimport json, os, sys\nprint(json.dumps({'version':'0','type':'log','level':'info','message':os.environ['TMPDIR']}), flush=True)\n"+c.body+"\n"+pyDone+"\n"), 0o755))
			res := r.Run(context.Background(), invocation(dir, path, 60*time.Second), nil)
			require.Equal(t, messages.ToolFailed, res.State, "%+v", res)
			require.NotNil(t, res.Error)
			require.Equal(t, c.code, res.Error.Code, "%+v", res.Error)
			require.NotEmpty(t, res.Events)
			var first messages.LogEvent
			require.NoError(t, json.Unmarshal(res.Events[0], &first))
			require.NoDirExists(t, first.Message, "the attempt's temporary folder is removed")
		})
	}
}

// TestAttemptLimitsBoundProcesses: a script that starts 600 processes,
// each leaving the script's process group and session, gets fewer than its
// limit of processes, and none of them outlives the attempt.
func TestAttemptLimitsBoundProcesses(t *testing.T) {
	needRoot(t)
	py := python(t)
	pool := testPool(t)
	r := &ProcessRunner{Users: pool, Landlock: true, AttemptLimits: messages.ResourceLimits{Processes: 32}, Limits: Limits{KillGrace: 200 * time.Millisecond}}
	dir := openDir(t)
	path := filepath.Join(dir, "forks")
	body := `import json, os, time
n = 0
for i in range(600):
    try:
        pid = os.fork()
    except OSError:
        continue
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(120)
        os._exit(0)
    n += 1
out = {"started": n, "uid": os.getuid()}
` + pyDone
	require.NoError(t, os.WriteFile(path, []byte("#!"+py+"\n"+body+"\n"), 0o755))
	res := r.Run(context.Background(), invocation(dir, path, 60*time.Second), nil)
	require.Equal(t, messages.ToolSuccess, res.State, "%+v", res.Error)
	var out struct{ Started, UID int }
	require.NoError(t, json.Unmarshal(res.Done.Output, &out))
	t.Logf("the script started %d of 600 processes under a limit of 32, as user %d", out.Started, out.UID)
	require.Less(t, out.Started, 32)
	require.Positive(t, out.Started)
	require.NotZero(t, out.UID)
	// The kill is sent before Run returns; a process takes a moment to die.
	require.Eventually(t, func() bool { return len(testlog.LiveProcessesOf(out.UID)) == 0 }, testlog.Scaled(2*time.Second), 10*time.Millisecond,
		"no process of the attempt's user outlives it: %v", testlog.LiveProcessesOf(out.UID))
}

// TestAttemptLimitsKeepWellBehavedScripts: Node, Python and Go scripts
// that use a few hundred MiB and threads run under the default limits,
// as a user of their own and as the worker's user.
func TestAttemptLimitsKeepWellBehavedScripts(t *testing.T) {
	dir := openDir(t)
	gosrc := filepath.Join(t.TempDir(), "main.go")
	require.NoError(t, os.WriteFile(gosrc, []byte(`package main

import (
	"fmt"
	"sync"
)

func main() {
	var wg sync.WaitGroup
	bufs := make([][]byte, 8)
	for i := range bufs {
		wg.Add(1)
		go func() { defer wg.Done(); b := make([]byte, 40<<20); for j := range b { b[j] = 1 }; bufs[i] = b }()
	}
	wg.Wait()
	fmt.Println("{\"version\":\"0\",\"type\":\"done\",\"ok\":true}")
}
`), 0o644))
	gobin := filepath.Join(dir, "gowell")
	build := exec.Command("go", "build", "-o", gobin, gosrc)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	scripts := map[string]string{"go": gobin}
	if _, err := os.Stat("/usr/bin/node"); err == nil {
		p := filepath.Join(dir, "nodewell")
		require.NoError(t, os.WriteFile(p, []byte(`#!/usr/bin/node
const a = []; for (let i = 0; i < 30; i++) a.push(Buffer.alloc(10 << 20, 1));
const w = new Array(2e6).fill(0).map((_, i) => ({ i }));
console.log(JSON.stringify({ version: "0", type: "done", ok: w.length === 2e6 }));
`), 0o755))
		scripts["node"] = p
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		p := filepath.Join(dir, "pywell")
		require.NoError(t, os.WriteFile(p, []byte("#!/usr/bin/python3\nimport json, threading\nb = bytearray(300 << 20)\nts = [threading.Thread(target=lambda: sum(range(100000))) for _ in range(16)]\n[t.start() for t in ts]\n[t.join() for t in ts]\nprint(json.dumps({'version':'0','type':'done','ok':True}))\n"), 0o755))
		scripts["python"] = p
	}
	runners := map[string]*ProcessRunner{"worker's user": {Landlock: true}}
	if os.Geteuid() == 0 {
		runners["user of its own"] = &ProcessRunner{Landlock: true, Users: testPool(t)}
	}
	for rname, r := range runners {
		for sname, path := range scripts {
			t.Run(rname+"/"+sname, func(t *testing.T) {
				res := r.Run(context.Background(), invocation(dir, path, 60*time.Second), nil)
				require.Equal(t, messages.ToolSuccess, res.State, "%+v %s", res.Error, res.StderrTail)
			})
		}
	}
}
