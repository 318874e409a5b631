package skillworker

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/embedded"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// runsOf reads the run log the counting script appends its plan ID to.
func runsOf(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return map[string]int{}
	}
	require.NoError(t, err)
	out := map[string]int{}
	for _, l := range strings.Fields(string(b)) {
		out[l]++
	}
	return out
}

// checkNoJobHeld: one worker of concurrency 2, six jobs whose scripts run
// longer than the ack wait, published at once, no fault. A worker that
// holds jobs it is not running lets them pass the ack wait and run twice;
// each must run exactly once.
func checkNoJobHeld(t *testing.T, sleep string, ackWait time.Duration) {
	h := newHarness(t)
	log := filepath.Join(h.dir, "slow", "data", "runs") // the skill's own data folder, which its scripts may write
	writeSkill(t, h.dir, "slow", map[string]string{
		"run": `read -r input; plan=$(printf '%s' "$input" | sed 's/.*"requestId":"\([^"]*\)".*/\1/'); echo "$plan" >> ` + log +
			"\nsleep " + sleep + "\n" + doneOK,
	}, "")
	h.worker(t, Config{Concurrency: 2, AckWait: ackWait}, Options{})
	var plans []string
	for range 6 {
		plans = append(plans, h.publish(t, messages.ToolJob{Skill: "slow", Script: "run", TimeoutMs: 60_000}).PlanID)
	}
	for _, p := range plans {
		o := h.outcome(t, p)
		require.Equal(t, messages.ToolSuccess, o.State, "%+v", o.Error)
		require.EqualValues(t, 1, o.Deliveries, "the job was never redelivered")
	}
	runs := runsOf(t, log)
	require.Len(t, runs, 6)
	for p, n := range runs {
		require.Equal(t, 1, n, "plan %s ran %d times", p, n)
	}
}

func TestNoJobHeldPastAckWait(t *testing.T) {
	t.Parallel()
	checkNoJobHeld(t, "2.5", time.Second)
}

// TestNoJobHeldLong is the operator's scenario at full size (make test-long):
// six 20 s scripts on a worker of concurrency 2 with the default ack wait.
func TestNoJobHeldLong(t *testing.T) {
	t.Parallel()
	if os.Getenv("NARRATORIA_LONG") == "" {
		t.Skip("set NARRATORIA_LONG=1 (make test-long)")
	}
	checkNoJobHeld(t, "20", 0)
}

// alive reports whether a process exists (and is not a zombie).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

// TestScriptsDieWithTheirWorker: a worker process killed with SIGKILL
// mid-script leaves no script behind — neither the script nor a child it
// started. The script reads its input first, as the protocol has it: a
// script is known to the reaper before it gets its input, and one that
// starts a child before reading it can leave that child behind when the
// worker dies in the moments between the script's start and that
// (docs/architecture.md, "What survives what"). Under a loaded make test
// this test's script once did, before it read its input.
func TestScriptsDieWithTheirWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the skillworker binary")
	}
	h := newHarness(t)
	// The script and its child are found by their command lines: as
	// root, each attempt has a PID namespace of its own, where the numbers
	// a script sees ($$, $!) are not the host's.
	nap := strconv.Itoa(6000 + rand.IntN(3000))
	started := filepath.Join(h.dir, "orphan", "data", "started") // the skill's own data folder, which its scripts may write
	writeSkill(t, h.dir, "orphan", map[string]string{"run": `cat > /dev/null
sleep ` + nap + ` &
echo started > ` + started + `
wait`}, "")
	bin := natstest.Build(t, "../../cmd/skillworker")
	cmd := exec.Command(bin, "--nats-url", h.srv.URL(), "--skills-dir", h.dir, "--concurrency", "1")
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	var once sync.Once
	kill := func() { once.Do(func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() }) }
	t.Cleanup(kill)
	kv, err := h.srv.JS.KeyValue(context.Background(), messages.BucketSkills)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e, err := kv.Get(context.Background(), "orphan")
		return err == nil && strings.Contains(string(e.Value()), `"workers":{"`)
	}, testlog.Budget(30*time.Second), 50*time.Millisecond)
	h.publish(t, messages.ToolJob{Skill: "orphan", Script: "run", TimeoutMs: 60_000})
	require.Eventually(t, func() bool { _, err := os.Stat(started); return err == nil }, testlog.Budget(30*time.Second), 20*time.Millisecond)
	children := running("sleep " + nap)
	require.Len(t, children, 1, "the child runs")
	script := parentOf(children[0])
	require.True(t, alive(script), "the script runs")
	kill()
	require.Eventually(t, func() bool { return len(running("sleep "+nap)) == 0 && !alive(script) }, testlog.Budget(10*time.Second), 50*time.Millisecond,
		"the script (%d) and its child died with the worker", script)
}

// parentOf is a process's parent, as the host numbers it.
func parentOf(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// running lists the live processes whose command line contains s.
func running(s string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), s) {
			out = append(out, pid)
		}
	}
	return out
}

// TestBigOutcomeEventsOnTheStream: a script printing 1.4 MB of events (a
// state patch among them), within every limit, whose outcome would not fit
// in one message once escaped: the outcome points at its events on the
// events stream instead of dropping them, and every one is there.
func TestBigOutcomeEventsOnTheStream(t *testing.T) {
	t.Parallel()
	h := newHarnessOn(t, natstest.StartWith(t, embedded.Options{MaxPayload: 1 << 20}))
	writeSkill(t, h.dir, "loud", map[string]string{"run": `i=0
while [ $i -lt 700 ]; do
  printf '{"version":"0","type":"log","level":"debug","message":"%s"}\n' '` + strings.Repeat(`\\\"`, 500) + `'
  i=$((i+1))
done
echo '{"version":"0","type":"state_patch","patch":{"heard":true}}'
` + doneOK}, "")
	h.worker(t, Config{}, Options{})
	j := h.publish(t, messages.ToolJob{Skill: "loud", Script: "run", TimeoutMs: 60_000})
	o := h.outcome(t, j.PlanID)
	require.Equal(t, messages.ToolSuccess, o.State, "%+v", o.Error)
	require.Zero(t, len(o.Events), "the events are not in the outcome")
	require.NotNil(t, o.EventsRef, "the outcome says where its events are")
	require.Equal(t, 702, o.EventsRef.Count)
	c, err := h.srv.JS.OrderedConsumer(t.Context(), o.EventsRef.Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{o.EventsRef.Subject}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: o.EventsRef.FirstSeq})
	require.NoError(t, err)
	patch := false
	for range o.EventsRef.Count {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		if strings.Contains(string(m.Data()), `"state_patch"`) {
			patch = true
		}
	}
	require.True(t, patch, "the state patch is on the stream")
}

// TestScriptProgressIsForwarded: a script's ui_event "progress" reaches the
// scheduler that sent the job (its outcomeTo) at once, as the running
// tool's progress, with the attempt's token and skill (the scheduler
// publishes it on the plan's progress subject once the token checks):
// nothing goes to the public progress subject from the worker itself.
func TestScriptProgressIsForwarded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeSkill(t, h.dir, "slowly", map[string]string{"run": `echo '{"version":"0","type":"ui_event","event":"progress","payload":{"percent":42,"message":"halfway"}}'
echo '{"version":"0","type":"ui_event","event":"progress","payload":{"percent":"lots"}}'
sleep 1
` + doneOK}, "")
	h.worker(t, Config{}, Options{})
	to := "narratoria.outcomes.direct.test-scheduler"
	sub, err := h.srv.NC.SubscribeSync(to)
	require.NoError(t, err)
	public, err := h.srv.NC.SubscribeSync("narratoria.progress.>")
	require.NoError(t, err)
	j := h.publish(t, messages.ToolJob{Skill: "slowly", Script: "run", OutcomeTo: to, Token: "attempt-token"})
	var m *nats.Msg
	for {
		m, err = sub.NextMsg(10 * time.Second)
		require.NoError(t, err)
		if m.Header.Get(messages.HeaderKind) == messages.KindProgress {
			break
		}
	}
	require.Equal(t, "attempt-token", m.Header.Get(messages.HeaderToken))
	require.Equal(t, "slowly", m.Header.Get(messages.HeaderSkill))
	var p messages.Progress
	require.NoError(t, json.Unmarshal(m.Data, &p))
	require.Equal(t, j.PlanID, p.PlanID)
	require.Equal(t, j.ToolID, p.ToolID)
	require.NotNil(t, p.Progress)
	require.Equal(t, 42, *p.Progress)
	require.Equal(t, "halfway", p.Message)
	for {
		m, err = sub.NextMsg(200 * time.Millisecond)
		if err != nil {
			break
		}
		require.NotEqual(t, messages.KindProgress, m.Header.Get(messages.HeaderKind), "a progress without a number is not forwarded")
	}
	_, err = public.NextMsg(100 * time.Millisecond)
	require.Error(t, err, "the worker publishes no progress itself")
}
