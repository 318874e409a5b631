package skillworker

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestOutcomeSentDirect: a job naming where its scheduler takes outcomes
// (outcomeTo) has its outcome sent there as a request. Answered "+", the
// outcome is not stored on the outcomes stream and the job is acked;
// answered anything else, or not at all, it is stored there, as for a job
// without outcomeTo.
func TestOutcomeSentDirect(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeSkill(t, h.dir, "d", map[string]string{"run": doneOK}, "")
	var mu sync.Mutex
	direct := map[string]int{} // plan → outcomes received as requests
	for subj, answer := range map[string]string{"take": "+", "decline": "-"} {
		sub, err := h.srv.NC.Subscribe("narratoria.outcomes.direct."+subj, func(m *nats.Msg) {
			var o messages.Outcome
			require.NoError(t, json.Unmarshal(m.Data, &o))
			mu.Lock()
			direct[o.PlanID]++
			mu.Unlock()
			_ = m.Respond([]byte(answer))
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	stored := make(chan messages.Outcome, 10) // published for the outcomes stream
	sub, err := h.srv.NC.Subscribe("narratoria.outcomes.*.*.*", func(m *nats.Msg) {
		var o messages.Outcome
		if json.Unmarshal(m.Data, &o) == nil {
			stored <- o
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	w := h.worker(t, Config{WatchInterval: -1}, Options{Registerer: prometheus.NewRegistry()})

	taken := h.publish(t, messages.ToolJob{Skill: "d", Script: "run", OutcomeTo: "narratoria.outcomes.direct.take"})
	require.Eventually(t, func() bool { return h.jobsQueued(t) == 0 }, testlog.Budget(20*time.Second), 20*time.Millisecond, "the job was acked")
	mu.Lock()
	require.Equal(t, 1, direct[taken.PlanID])
	mu.Unlock()
	require.Equal(t, 1.0, directCount(t, w, "taken"))

	declined := h.publish(t, messages.ToolJob{Skill: "d", Script: "run", OutcomeTo: "narratoria.outcomes.direct.decline"})
	unanswered := h.publish(t, messages.ToolJob{Skill: "d", Script: "run", OutcomeTo: "narratoria.outcomes.direct.nobody"})
	plain := h.publish(t, messages.ToolJob{Skill: "d", Script: "run"})
	got := map[string]messages.ToolState{}
	for len(got) < 3 {
		select {
		case o := <-stored:
			got[o.PlanID] = o.State
		case <-time.After(testlog.Budget(20 * time.Second)):
			t.Fatalf("outcomes stored: %v", got)
		}
	}
	require.Equal(t, map[string]messages.ToolState{declined.PlanID: messages.ToolSuccess, unanswered.PlanID: messages.ToolSuccess,
		plain.PlanID: messages.ToolSuccess}, got, "the outcome taken directly is not stored")
	mu.Lock()
	require.Equal(t, 1, direct[declined.PlanID])
	mu.Unlock()
	require.Equal(t, 1.0, directCount(t, w, "declined"))
	require.Equal(t, 1.0, directCount(t, w, "unanswered"))
	require.Eventually(t, func() bool { return h.jobsQueued(t) == 0 }, testlog.Budget(20*time.Second), 20*time.Millisecond, "every job was acked")
}

// directCount reads the worker's count of outcomes sent directly with
// result.
func directCount(t *testing.T, w *Worker, result string) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, w.m.direct.WithLabelValues(result).Write(&m))
	return m.GetCounter().GetValue()
}
