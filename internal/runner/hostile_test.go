package runner

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestHostileScripts runs scripts that break every rule they can; each must
// end on time with a clear error, and the runner must serve a normal script
// afterwards.
func TestHostileScripts(t *testing.T) {
	const done = `echo '{"version":"0","type":"done","ok":true}'`
	cases := []struct {
		name     string
		body     string
		timeout  time.Duration
		bigInput bool
		state    messages.ToolState
		code     string
		category string
		contains string
	}{
		{name: "no done", body: `echo '{"version":"0","type":"log","level":"info","message":"hm"}'`,
			state: messages.ToolFailed, code: "no_done", category: messages.CategoryToolFailure, contains: "without a done event"},
		{name: "done ok then exit 1", body: done + "\nexit 1",
			state: messages.ToolFailed, code: "exit_code", category: messages.CategoryToolFailure, contains: "exited with code 1"},
		{name: "invalid json line", body: `echo '{"version":"0","type":"log",'`,
			state: messages.ToolFailed, code: "protocol_error", category: messages.CategoryInvalidJSON, contains: "not JSON"},
		{name: "unknown event type", body: `echo '{"version":"0","type":"teleport"}'`,
			state: messages.ToolFailed, code: "protocol_error", category: messages.CategoryInvalidJSON, contains: `unknown event type "teleport"`},
		{name: "wrong version", body: `echo '{"version":"1","type":"done","ok":true}'`,
			state: messages.ToolFailed, code: "protocol_error", category: messages.CategoryInvalidJSON, contains: `version "1" is not supported`},
		{name: "10 MB line", body: `head -c 10485760 /dev/zero | tr '\0' 'a'; echo`,
			state: messages.ToolFailed, code: "line_too_long", category: messages.CategoryProcessError, contains: "limits.maxLineBytes"},
		{name: "endless output", body: `m=$(head -c 1000 /dev/zero | tr '\0' 'm'); while :; do echo "{\"version\":\"0\",\"type\":\"log\",\"level\":\"info\",\"message\":\"$m\"}"; done`,
			state: messages.ToolFailed, code: "stdout_limit", category: messages.CategoryProcessError, contains: "limits.maxStdoutBytes"},
		{name: "endless tiny events", body: `while :; do echo '{"version":"0","type":"log","level":"info","message":"more"}'; done`,
			state: messages.ToolFailed, code: "event_limit", category: messages.CategoryProcessError, contains: "limits.maxEvents"},
		{name: "oversized state patches", body: `m=$(head -c 100000 /dev/zero | tr '\0' 'p'); for i in 1 2 3; do echo "{\"version\":\"0\",\"type\":\"state_patch\",\"patch\":{\"k$i\":\"$m\"}}"; done; ` + done,
			state: messages.ToolFailed, code: "state_limit", category: messages.CategoryProcessError, contains: "limits.maxPatchBytes"},
		{name: "sleeps past its timeout", body: "sleep 30\n" + done, timeout: 500 * time.Millisecond,
			state: messages.ToolTimeout, code: "timeout", category: messages.CategoryTimeout, contains: "500ms timeout"},
		{name: "ignores SIGTERM", body: "trap '' TERM\nwhile :; do sleep 1; done", timeout: 300 * time.Millisecond,
			state: messages.ToolTimeout, code: "timeout", category: messages.CategoryTimeout, contains: "timeout"},
		{name: "background child keeps stdout open", body: "(sleep 30; echo late) &\necho $! > child.pid\n" + done,
			state: messages.ToolSuccess},
		{name: "background child ignoring SIGTERM keeps stdout open", body: "(trap '' TERM; sleep 30) &\necho $! > child.pid\n" + done,
			state: messages.ToolSuccess},
		{name: "never reads stdin", body: done, bigInput: true, state: messages.ToolSuccess},
		{name: "floods stderr", body: "head -c 5000000 /dev/zero | tr '\\0' 'e' >&2\necho 'last words' >&2\nexit 3",
			state: messages.ToolFailed, code: "exit_code", category: messages.CategoryToolFailure, contains: "code 3"},
		{name: "events after done", body: done + "\n" + `echo '{"version":"0","type":"log","level":"info","message":"ignored"}'` + "\necho garbage",
			state: messages.ToolSuccess},
		{name: "non-UTF-8 bytes", body: `printf '{"version":"0","type":"log","level":"info","message":"\377\376"}\n'`,
			state: messages.ToolFailed, code: "protocol_error", category: messages.CategoryInvalidJSON, contains: "UTF-8"},
	}
	r := &ProcessRunner{Limits: Limits{KillGrace: 300 * time.Millisecond}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // most wait for a timeout or a kill grace
			dir := t.TempDir()
			inv := invocation(dir, writeScript(t, dir, "x", c.body), c.timeout)
			if c.bigInput {
				inv.Input.Input = json.RawMessage(`{"blob":"` + strings.Repeat("z", 1<<20) + `"}`)
			}
			res := r.Run(context.Background(), inv, nil)
			require.Less(t, res.Duration, 15*time.Second, "the attempt ended on time")
			require.Equal(t, c.state, res.State, "%+v", res.Error)
			if c.code != "" {
				require.NotNil(t, res.Error)
				require.Equal(t, c.code, res.Error.Code)
				require.Equal(t, c.category, res.Error.Category)
				require.Contains(t, res.Error.Message, c.contains)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "child.pid")); err == nil {
				pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				require.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil }, testlog.Budget(5*time.Second), 20*time.Millisecond,
					"the background child was killed with the script's group")
			}
			if c.name == "floods stderr" {
				require.LessOrEqual(t, len(res.StderrTail), MaxStderrTailDefault)
				require.Contains(t, res.StderrTail, "last words")
				require.Contains(t, res.Error.Details["stderrTail"], "last words")
			}
		})
	}
	t.Run("missing script", func(t *testing.T) {
		dir := t.TempDir()
		res := r.Run(context.Background(), invocation(dir, filepath.Join(dir, "gone"), 0), nil)
		require.Equal(t, messages.ToolFailed, res.State)
		require.Equal(t, "spawn_failed", res.Error.Code)
		require.Contains(t, res.Error.Message, "does not exist")
	})
	t.Run("not executable", func(t *testing.T) {
		dir := t.TempDir()
		p := writeScript(t, dir, "x", done)
		require.NoError(t, os.Chmod(p, 0o644))
		res := r.Run(context.Background(), invocation(dir, p, 0), nil)
		require.Equal(t, messages.ToolFailed, res.State)
		require.Contains(t, res.Error.Message, "is not executable")
	})
	t.Run("a normal script still runs", func(t *testing.T) {
		dir := t.TempDir()
		res := r.Run(context.Background(), invocation(dir, writeScript(t, dir, "x", done), 0), nil)
		require.Equal(t, messages.ToolSuccess, res.State)
	})
}
