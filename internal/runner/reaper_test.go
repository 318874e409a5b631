package runner

import (
	"context"
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

// running says whether pid is a live process (not a zombie).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

// TestReaperKillsGroupsWhenItsPipeCloses: the reaper's helper sees its
// stdin end as it would when the worker dies, and kills the running
// script's group, a background child of the script included. The next
// script gets a new helper.
func TestReaperKillsGroupsWhenItsPipeCloses(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "child")
	path := writeScript(t, dir, "x", `sleep 60 &
echo $! > `+pids+`
wait`)
	res := make(chan Result, 1)
	go func() {
		res <- (&ProcessRunner{}).Run(context.Background(), invocation(dir, path, 30*time.Second), nil)
	}()
	var child int
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(pids)
		child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return child > 0
	}, testlog.Budget(10*time.Second), 10*time.Millisecond)
	require.True(t, running(child))
	// The script can write its child's PID before the runner has told the
	// helper of its group: wait for that, or the pipe closed below is the
	// old helper's and the group goes to a new one.
	pgid, err := syscall.Getpgid(child)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		groups.mu.Lock()
		defer groups.mu.Unlock()
		return groups.live[pgid]
	}, testlog.Budget(5*time.Second), 5*time.Millisecond, "the helper told of the script's group")

	groups.mu.Lock()
	helper := groups.proc
	require.NoError(t, groups.pipe.Close()) // what the kernel does when the worker dies
	groups.mu.Unlock()
	// The helper exits on its own; the runner may reap it first (its "-"
	// line for the killed script finds the pipe closed).
	if _, err := helper.Wait(); err != nil {
		require.ErrorIs(t, err, syscall.ECHILD)
	}
	r := <-res
	require.Equal(t, messages.ToolFailed, r.State, "the script was killed")
	require.Eventually(t, func() bool { return !running(child) }, testlog.Budget(5*time.Second), 10*time.Millisecond, "the script's child died too")

	// The next script finds the pipe closed and starts a new helper.
	ok := writeScript(t, dir, "ok", `echo '{"version":"0","type":"done","ok":true}'`)
	require.Equal(t, messages.ToolSuccess, (&ProcessRunner{}).Run(context.Background(), invocation(dir, ok, 0), nil).State)
	groups.mu.Lock()
	defer groups.mu.Unlock()
	require.NotEqual(t, helper.Pid, groups.proc.Pid)
	require.True(t, running(groups.proc.Pid))
	require.Empty(t, groups.live, "finished scripts are forgotten")
}

// TestReaperReplacedWhenKilled: a helper killed by hand is replaced by the
// next script, and told of the groups still running.
func TestReaperReplacedWhenKilled(t *testing.T) {
	dir := t.TempDir()
	ok := writeScript(t, dir, "ok", `echo '{"version":"0","type":"done","ok":true}'`)
	require.Equal(t, messages.ToolSuccess, (&ProcessRunner{}).Run(context.Background(), invocation(dir, ok, 0), nil).State)
	groups.mu.Lock()
	old := groups.proc.Pid
	require.NoError(t, syscall.Kill(old, syscall.SIGKILL))
	groups.mu.Unlock()
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(old) + "/stat")
		return strings.Contains(string(b), ") Z ")
	}, testlog.Budget(5*time.Second), 10*time.Millisecond)
	require.Equal(t, messages.ToolSuccess, (&ProcessRunner{}).Run(context.Background(), invocation(dir, ok, 0), nil).State)
	groups.mu.Lock()
	defer groups.mu.Unlock()
	require.NotEqual(t, old, groups.proc.Pid)
	require.False(t, running(old), "the old helper was reaped")
}

// TestScriptWithoutShebang runs as a shell script, as a shell would run it.
func TestScriptWithoutShebang(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x")
	require.NoError(t, os.WriteFile(p, []byte(`echo '{"version":"0","type":"done","ok":true}'`+"\n"), 0o755))
	r := (&ProcessRunner{}).Run(context.Background(), invocation(dir, p, 0), nil)
	require.Equal(t, messages.ToolSuccess, r.State, "%+v", r.Error)
}
