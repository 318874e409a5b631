package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestSelfHealing: under the shipped least-privilege accounts, an operator
// deletes NARRATORIA_PLANS and the session bucket mid-run. The components
// cannot recreate them: they report themselves unready, naming what is
// missing, while prompts keep arriving durably. The operator provisions
// again; service resumes within 10 s, every prompt is narrated once, and
// 32 prompts over as many sessions sent then are each narrated in their
// first attempt within 5 s of the provisioning.
func TestSelfHealing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	s := startSecured(t, nil)
	log, rec := testlog.New(t)
	s.provision(t)
	_, sch, nar := s.pipeline(t, log)
	c, err := client.New(s.connect(t, "game", nil))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	narrated := map[string]int{}
	w, err := c.Watch("heal", func(u client.Update) {
		if u.Narration != nil {
			mu.Lock()
			narrated[u.Narration.PromptID]++
			mu.Unlock()
		}
	})
	require.NoError(t, err)
	defer func() { _ = w.Stop() }()
	_, err = c.Submit(ctx, messages.Prompt{SessionID: "heal", PromptID: "before", Text: "hello"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return narrated["before"] == 1 }, testlog.Budget(20*time.Second), 20*time.Millisecond)

	js, err := jetstream.New(s.connect(t, "operator", nil))
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(ctx, messages.StreamPlans))
	require.NoError(t, js.DeleteKeyValue(ctx, messages.BucketSessions))
	require.Eventually(t, func() bool {
		err := sch.Ready()
		return err != nil && strings.Contains(err.Error(), messages.StreamPlans) && strings.Contains(err.Error(), "KV_"+messages.BucketSessions)
	}, testlog.Budget(10*time.Second), 50*time.Millisecond, "the scheduler says what is missing")
	require.Eventually(t, func() bool { return nar.Ready() != nil }, testlog.Budget(10*time.Second), 50*time.Millisecond, "the narrator too")
	require.True(t, rec.Contains("is missing; run `narratoria provision`", "stream="+messages.StreamPlans))

	// Prompts sent during the outage are stored and wait.
	for i := range 3 {
		_, err = c.Submit(ctx, messages.Prompt{SessionID: "heal", PromptID: fmt.Sprintf("during-%d", i), Text: "hello"})
		require.NoError(t, err)
	}
	s.provision(t)
	healed := time.Now()
	// Prompts over 32 sessions (most partitions, each with a recreated
	// stream and fence) sent the moment provisioning returns: each is narrated in
	// its first attempt — none dropped as a duplicate, none waiting for a
	// retry — within 5 s.
	const after = 32
	type answer struct {
		n   *messages.Narration
		err error
	}
	answers := make(chan answer, after)
	for i := range after {
		go func() {
			n, err := c.Narrate(ctx, messages.Prompt{SessionID: fmt.Sprintf("heal-s%02d", i), Text: "and now"})
			answers <- answer{n, err}
		}()
	}
	slowest := time.Duration(0)
	for range after {
		a := <-answers
		require.NoError(t, a.err)
		require.Contains(t, a.n.Text, "An echo answers.")
		require.Equal(t, 1, a.n.Attempts, "%s narrated in its first attempt: %+v", a.n.SessionID, a.n.Trace)
		slowest = max(slowest, time.Since(healed))
	}
	t.Logf("%d prompts after re-provisioning: all narrated in attempt 1, the last %s after provisioning", after, slowest.Round(time.Millisecond))
	require.LessOrEqual(t, slowest, testlog.Budget(5*time.Second), "narrated within 5 s of re-provisioning")
	require.Eventually(t, func() bool { return sch.Ready() == nil && nar.Ready() == nil }, testlog.Budget(10*time.Second), 50*time.Millisecond)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return narrated["during-0"] >= 1 && narrated["during-1"] >= 1 && narrated["during-2"] >= 1
	}, testlog.Budget(10*time.Second), 50*time.Millisecond, "the prompts sent during the outage are narrated within 10 s")
	t.Logf("service resumed %s after provisioning", time.Since(healed).Round(time.Millisecond))

	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for id, k := range narrated {
		require.Equal(t, 1, k, "prompt %s narrated once", id)
	}
}
