package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// pausedHelperEnv makes the test binary a worker of one attempt (in the
// folder the variable names) that a test can stop with SIGSTOP.
const pausedHelperEnv = "NARRATORIA_RUNNER_PAUSED_HELPER"

// runPausedHelper runs the script "run" of dir with the timeout of
// NARRATORIA_RUNNER_TIMEOUT, says "running" when it started, and prints
// the result's state, error code and duration as JSON.
func runPausedHelper(dir string) {
	timeout, _ := time.ParseDuration(os.Getenv("NARRATORIA_RUNNER_TIMEOUT"))
	inv := invocation(dir, filepath.Join(dir, "run"), timeout)
	var once sync.Once
	res := (&ProcessRunner{}).Run(context.Background(), inv, func(messages.Event, json.RawMessage) { once.Do(func() { fmt.Println("running") }) })
	code := ""
	if res.Error != nil {
		code = res.Error.Code
	}
	b, _ := json.Marshal(map[string]any{"state": res.State, "code": code, "ms": res.Duration.Milliseconds()})
	fmt.Println(string(b))
}

// TestPausedWorkerJudgesTimeByWhatItSaw: a worker stopped (SIGSTOP) while
// its script runs is continued after the script's timeout fell due. A
// script that ended during the pause succeeded: its exit wins over the
// timeout. A script still running gets the time the worker did not see:
// its timeout counts only while the worker could count it.
func TestPausedWorkerJudgesTimeByWhatItSaw(t *testing.T) {
	t.Parallel()
	pause := 4 * time.Second
	for _, c := range []struct {
		name, body string
		timeout    time.Duration
		state      messages.ToolState
	}{
		{"ended during the pause", "sleep 1", 2 * time.Second, messages.ToolSuccess},
		{"still running after it", "sleep 60", 2 * time.Second, messages.ToolTimeout},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeScript(t, dir, "run", `echo '{"version":"0","type":"log","level":"info","message":"up"}'
`+c.body+`
echo '{"version":"0","type":"done","ok":true}'`)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), pausedHelperEnv+"="+dir, "NARRATORIA_RUNNER_TIMEOUT="+c.timeout.String())
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			lines := bufio.NewScanner(out)
			require.True(t, lines.Scan(), "the helper started the script")
			require.Equal(t, "running", lines.Text())
			require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
			time.Sleep(pause)
			require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
			done := make(chan string, 1)
			go func() {
				for lines.Scan() {
					done <- lines.Text()
				}
				close(done)
			}()
			var res struct {
				State messages.ToolState
				Code  string
				MS    int64
			}
			select {
			case line := <-done:
				require.NoError(t, json.Unmarshal([]byte(line), &res), line)
			case <-time.After(testlog.Budget(60 * time.Second)):
				t.Fatal("no result from the helper")
			}
			t.Logf("%s: %s %s after %d ms (paused %s, timeout %s)", c.name, res.State, res.Code, res.MS, pause, c.timeout)
			require.Equal(t, c.state, res.State, "%+v", res)
			if c.state == messages.ToolTimeout {
				require.GreaterOrEqual(t, res.MS, (c.timeout + pause*3/4).Milliseconds(),
					"the pause did not count against the timeout: "+strconv.FormatInt(res.MS, 10))
			}
		})
	}
}
