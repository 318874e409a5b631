package narrator

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/planner"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/health"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestPermanentFailureProbedAfterCooldown: a skill in permanentFailure is
// left out of a session's plans until its cool-down is over; then the next
// prompt probes it, and its success makes the skill healthy again (issue
// 30, item 4). Before, it stayed out until a session reset.
func TestPermanentFailureProbedAfterCooldown(t *testing.T) {
	testlog.Long(t, "waits out a skill's cool-down")
	t.Parallel()
	e := newPipeline(t, []skillDef{{name: "oracle", script: "ask", fn: done(true, `{"narration":"The oracle speaks."}`),
		examples: []string{"I ask the oracle about the future", "I consult the oracle"}}})
	e.nar = e.startNarrator(t, Config{}, nil)
	ctx := context.Background()
	kv, err := e.srv.JS.KeyValue(ctx, messages.BucketHealth)
	require.NoError(t, err)
	// As three failures while degraded left it, with its cool-down set.
	probeAt := time.Now().Add(testlog.Budget(2 * time.Second))
	b, _ := json.Marshal(health.Status{State: health.PermanentFailure, Reason: "3 more consecutive failures while degraded",
		Since: time.Now(), ProbeAt: probeAt})
	_, err = kv.Put(ctx, "h1.oracle", b)
	require.NoError(t, err)
	// The narrator sees it (its health watch) before the first prompt.
	require.Eventually(t, func() bool {
		return !has(e.nar.cat.Catalogue("h1", nil), "oracle")
	}, testlog.Budget(5*time.Second), 10*time.Millisecond, "the narrator sees the skill in permanentFailure")

	n, _ := e.narrate(t, `{"sessionId":"h1","text":"I ask the oracle about the future"}`)
	require.NotNil(t, n, "narrated")
	require.NotContains(t, n.Text, "The oracle speaks.", "left out during its cool-down")

	time.Sleep(time.Until(probeAt))
	n, _ = e.narrate(t, `{"sessionId":"h1","text":"I ask the oracle about the future"}`)
	require.NotNil(t, n, "narrated")
	require.Contains(t, n.Text, "The oracle speaks.", "probed once its cool-down is over")
	require.Eventually(t, func() bool {
		entry, err := kv.Get(ctx, "h1.oracle")
		if err != nil {
			return false
		}
		var st health.Status
		require.NoError(t, json.Unmarshal(entry.Value(), &st))
		return st.State == health.Healthy && st.ProbeAt.IsZero()
	}, testlog.Budget(10*time.Second), 20*time.Millisecond, "the probe's success made the skill healthy")
}

// has reports whether the catalogue offers skill.
func has(c *planner.Catalogue, skill string) bool {
	return slices.ContainsFunc(c.Skills, func(s planner.CatalogueSkill) bool { return s.Entry.Name == skill })
}
