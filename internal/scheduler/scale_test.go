package scheduler

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/partition"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// startNamedScheduler runs the scheduler binary with an ID and the default
// lease (3 s), its logs collected.
func startNamedScheduler(t *testing.T, bin, url, id string, env ...string) (*exec.Cmd, *testlog.Buffer) {
	t.Helper()
	out := &testlog.Buffer{}
	cmd := exec.Command(bin, "--nats-url", url)
	cmd.Env = append(os.Environ(), "NARRATORIA_SCHEDULER_ID="+id, "NARRATORIA_LOG_LEVEL=info")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr, cmd.Stdout = out, out
	require.NoError(t, cmd.Start())
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	})
	return cmd, out
}

// shares counts the partitions each scheduler owns, from the leases.
func shares(t *testing.T, e *env) map[string]int {
	t.Helper()
	kv, err := e.srv.JS.KeyValue(t.Context(), messages.BucketOwners)
	require.NoError(t, err)
	m, err := partition.Owners(t.Context(), kv, partitionGroup, e.srv.Bus.WithDefaults().Partitions)
	require.NoError(t, err)
	out := map[string]int{}
	for _, id := range m {
		out[id]++
	}
	return out
}

// TestPausedSchedulerNeverActsTwice: two scheduler processes share the
// partitions (16 each once the second joins). Under a steady flow of plans
// one is frozen with SIGSTOP past its lease: the other owns every
// partition within 5 s and finishes the frozen one's plans. The frozen one
// is then resumed (SIGCONT) with its stale state, timers and buffered
// messages: it notices it lost its leases and steps down, the partitions
// are shared again, and no tool of any plan ran twice.
func TestPausedSchedulerNeverActsTwice(t *testing.T) {
	testlog.Long(t, "a soak or chaos test") // chaos: builds the scheduler binary and pauses it past its lease
	e := newEnv(t, Config{})
	e.sch.Stop()
	bin := schedulerBinary(t)
	count := e.srv.Bus.WithDefaults().Partitions
	// The frozen one's view of the registry goes stale too: with a worker
	// TTL shorter than the freeze, every worker looks gone to it when it
	// resumes, until its watch catches up. It must not act on that view
	// (reject plans) once its leases have lapsed.
	a, aLog := startNamedScheduler(t, bin, e.srv.URL(), "sched-a", "NARRATORIA_SCHEDULER_WORKERTTL=4s")
	require.Eventually(t, func() bool { return shares(t, e)["sched-a"] == count }, testlog.Budget(20*time.Second), 50*time.Millisecond, "the first owns every partition")
	_, _ = startNamedScheduler(t, bin, e.srv.URL(), "sched-b")
	balanced := func() bool { s := shares(t, e); return s["sched-a"] == count/2 && s["sched-b"] == count/2 }
	require.Eventually(t, balanced, testlog.Budget(20*time.Second), 50*time.Millisecond, "a second joins: half each")

	const plans = 80
	var done []<-chan *messages.ExecutionResult
	var mu sync.Mutex
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := range plans {
			p := plan(tool("a", nil, stepInput{SleepMs: 150}), tool("b", []string{"a"}, stepInput{SleepMs: 150}),
				tool("c", []string{"b"}, stepInput{SleepMs: 150}))
			d := e.startPlan(t, fmt.Sprintf("pause-%d", i%40), p)
			mu.Lock()
			done = append(done, d)
			mu.Unlock()
			time.Sleep(60 * time.Millisecond)
		}
	}()
	time.Sleep(1500 * time.Millisecond) // plans in flight on both
	require.NoError(t, a.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	require.Eventually(t, func() bool { return shares(t, e)["sched-b"] == count }, testlog.Budget(15*time.Second), 20*time.Millisecond,
		"the other takes the frozen one's partitions over")
	took := time.Since(stopped)
	t.Logf("takeover of %d partitions took %s after SIGSTOP (lease TTL 3 s)", count/2, took.Round(10*time.Millisecond))
	require.Less(t, took, 5*time.Second, "a frozen scheduler's partitions move within 5 s")
	time.Sleep(time.Until(stopped.Add(8 * time.Second))) // frozen well past its lease
	require.NoError(t, a.Process.Signal(syscall.SIGCONT))
	<-published

	mu.Lock()
	all := done
	mu.Unlock()
	for _, d := range all {
		res := <-d
		require.NotNil(t, res, "no result")
		require.True(t, res.Success, res.Message)
	}
	runs := map[string]int{}
	for _, r := range e.log.all() {
		runs[r.plan+"/"+r.tool]++
	}
	for k, n := range runs {
		require.Equal(t, 1, n, "%s ran %d times", k, n)
	}
	require.Len(t, runs, 3*plans, "every tool of every plan ran")
	require.Eventually(t, balanced, testlog.Budget(20*time.Second), 50*time.Millisecond, "the resumed scheduler gets its share back")
	logs := aLog.String()
	require.True(t, strings.Contains(logs, "lease not renewed in time") || strings.Contains(logs, "refused by the partition's fence"),
		"the resumed scheduler noticed it had lost its partitions:\n%s", tail(logs, 3000))
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
