package skillworker

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestAttemptNeverRunsTwiceOnAWorker: the store hands a finished job back
// (as nats-server does when it forgot the job's ack: the same job, stored
// again). The worker answers it from the outcome it remembers, acks it, and
// does not run the script again.
func TestAttemptNeverRunsTwiceOnAWorker(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	log := filepath.Join(h.dir, "count", "data", "runs") // the skill's own data folder, which its scripts may write
	writeSkill(t, h.dir, "count", map[string]string{
		"run": `read -r input; plan=$(printf '%s' "$input" | sed 's/.*"requestId":"\([^"]*\)".*/\1/'); echo "$plan" >> ` + log + "\n" + doneOK,
	}, "")
	h.worker(t, Config{}, Options{})
	j := h.publish(t, messages.ToolJob{Skill: "count", Script: "run"})
	first := h.outcome(t, j.PlanID)
	require.Equal(t, messages.ToolSuccess, first.State)
	h.publish(t, j) // the same attempt's job, back in the store
	again := h.outcome(t, j.PlanID)
	require.Equal(t, first, again, "the job is answered with the outcome of its run")
	require.Equal(t, map[string]int{j.PlanID: 1}, runsOf(t, log), "the script ran once")
	// The job was acked: nothing stays in the work queue.
	require.Eventually(t, func() bool { return h.jobsQueued(t) == 0 }, testlog.Budget(10*time.Second), 50*time.Millisecond, "the repeated job was acked")
	// A later attempt of the same tool is a new attempt: it runs.
	j.Attempt = 2
	h.publish(t, j)
	require.Equal(t, 2, h.outcome(t, j.PlanID).Attempt)
	require.Equal(t, map[string]int{j.PlanID: 2}, runsOf(t, log))
}

// TestRedeliveryWhileOutcomeIsStored: the ack wait passes while the worker
// still holds a finished script's outcome and cannot store it (the server
// is down longer than the ack wait). The job is delivered again when the
// server is back; the script does not run a second time.
func TestRedeliveryWhileOutcomeIsStored(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	h := newHarnessOn(t, srv)
	log := filepath.Join(h.dir, "count", "data", "runs") // the skill's own data folder, which its scripts may write
	writeSkill(t, h.dir, "count", map[string]string{
		"run": `read -r input; plan=$(printf '%s' "$input" | sed 's/.*"requestId":"\([^"]*\)".*/\1/'); echo "$plan" >> ` + log + "\nsleep 1\n" + doneOK,
	}, "")
	h.worker(t, Config{AckWait: time.Second}, Options{})
	j := h.publish(t, messages.ToolJob{Skill: "count", Script: "run"})
	require.Eventually(t, func() bool { return len(runsOf(t, log)) == 1 }, testlog.Budget(10*time.Second), 10*time.Millisecond, "the script started")
	// The outcome cannot be stored until the server is back, past the ack wait.
	srv.RestartAfter(t, 2*time.Second)
	var o messages.Outcome
	require.Eventually(t, func() bool {
		st, err := srv.JS.Stream(context.Background(), messages.StreamOutcomes)
		if err != nil {
			return false
		}
		m, err := st.GetLastMsgForSubject(context.Background(), srv.Bus.Subjects().Stored("narratoria.outcomes.s1."+j.PlanID+".t1", "s1", srv.Bus.Partitions))
		return err == nil && json.Unmarshal(m.Data, &o) == nil
	}, testlog.Budget(60*time.Second), 100*time.Millisecond, "the outcome was stored")
	require.Equal(t, messages.ToolSuccess, o.State)
	time.Sleep(3 * time.Second) // every redelivery has come
	require.Equal(t, map[string]int{j.PlanID: 1}, runsOf(t, log), "the script ran once")
}

// TestAttemptMemoryBounds: the memory keeps at most its size, for at most
// its TTL, and a forgotten claim runs again.
func TestAttemptMemoryBounds(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	a := newAttempts(2, time.Minute)
	a.now = func() time.Time { return now }
	for _, id := range []string{"a", "b", "c"} {
		_, ok := a.claim(id)
		require.True(t, ok, id)
		a.finish(id, "subj", []byte(id))
	}
	_, ok := a.claim("a")
	require.True(t, ok, "the oldest was dropped at the size limit")
	a.forget("a")
	prior, ok := a.claim("c")
	require.False(t, ok)
	require.Equal(t, []byte("c"), prior.data)
	now = now.Add(2 * time.Minute)
	_, ok = a.claim("c")
	require.True(t, ok, "expired after the TTL")
	_, ok = a.claim("c")
	require.False(t, ok, "a running attempt is not claimed twice")
}

// TestRedeliveredJobOfASettledAttempt: a worker stores a job's outcome and
// dies before its ack (its connection ends there). The job is redelivered
// to another worker, which asks the plan's scheduler (plan status) first:
// the tool already succeeded with that attempt, so the job is acked and
// the script does not run again. When the scheduler still waits for the
// attempt, the job runs.
func TestRedeliveredJobOfASettledAttempt(t *testing.T) {
	t.Parallel()
	for _, settled := range []bool{true, false} {
		t.Run(map[bool]string{true: "settled", false: "still-running"}[settled], func(t *testing.T) {
			h := newHarness(t)
			log := filepath.Join(h.dir, "count", "data", "runs") // the skill's own data folder, which its scripts may write
			writeSkill(t, h.dir, "count", map[string]string{
				"run": `read -r input; plan=$(printf '%s' "$input" | sed 's/.*"requestId":"\([^"]*\)".*/\1/'); echo "$plan" >> ` + log + "\n" + doneOK,
			}, "")
			// The plan's scheduler, as far as this test needs one.
			state := messages.ToolRunning
			if settled {
				state = messages.ToolSuccess
			}
			sub, err := h.srv.NC.Subscribe("narratoria.control.status.*", func(m *nats.Msg) {
				b, _ := json.Marshal(messages.ControlReply{OK: true, Status: &messages.PlanStatus{
					Tools: []messages.ToolStatus{{ToolID: "t1", State: state, Attempt: 1}}}})
				_ = m.Respond(b)
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sub.Unsubscribe() })
			nc := h.srv.Connect(t)
			first, err := New(nc, Config{SkillsDir: h.dir, Concurrency: 1, AckWait: time.Second, WatchInterval: -1, ShutdownGrace: time.Second},
				Options{Bus: h.srv.Bus, afterOutcome: func() { nc.Close() }}) // dies between the outcome and the ack
			require.NoError(t, err)
			require.NoError(t, first.Start(context.Background()))
			t.Cleanup(first.Stop)
			j := h.publish(t, messages.ToolJob{Skill: "count", Script: "run"})
			require.Equal(t, messages.ToolSuccess, h.outcome(t, j.PlanID).State)
			h.worker(t, Config{AckWait: time.Second, WatchInterval: -1}, Options{})
			if settled {
				require.Eventually(t, func() bool { return h.jobsQueued(t) == 0 }, testlog.Budget(20*time.Second), 50*time.Millisecond, "the redelivered job was acked")
				time.Sleep(time.Second)
				require.Equal(t, map[string]int{j.PlanID: 1}, runsOf(t, log), "the script ran once")
				return
			}
			require.Eventually(t, func() bool { return runsOf(t, log)[j.PlanID] == 2 }, testlog.Budget(20*time.Second), 50*time.Millisecond,
				"the attempt its scheduler still waits for runs again")
		})
	}
}

// jobsQueued counts the jobs the work queue still holds.
func (h *harness) jobsQueued(t *testing.T) uint64 {
	st, err := h.srv.JS.Stream(context.Background(), messages.StreamJobs)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	return info.State.Msgs
}
