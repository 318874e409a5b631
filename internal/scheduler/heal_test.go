package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestPlansBucketPurgedDropsNoPlan: the plans bucket purged whole (every
// partition's fence and every plan record gone, as an operator's `nats kv
// purge` or a store rolled back does) while plans run: every plan sent
// after it, one per partition at least, still gets its result — none is
// dropped as a duplicate because its partition's marker vanished.
func TestPlansBucketPurgedDropsNoPlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	require.True(t, e.runPlan(t, "before", plan(tool("a", nil, stepInput{}))).Success)
	st, err := e.srv.JS.Stream(t.Context(), "KV_"+messages.BucketPlans)
	require.NoError(t, err)
	require.NoError(t, st.Purge(t.Context()))

	const n = 64 // sessions over every partition
	done := make([]<-chan *messages.ExecutionResult, n)
	for i := range n {
		done[i] = e.startPlan(t, fmt.Sprintf("after%d", i), plan(tool("a", nil, stepInput{})))
	}
	deadline := time.After(testlog.Budget(30 * time.Second))
	for i, d := range done {
		select {
		case res := <-d:
			require.NotNil(t, res, "plan %d answered", i)
			require.True(t, res.Success, "plan %d: %s", i, res.Message)
		case <-deadline:
			t.Fatalf("plan %d of %d got no result after the purge", i, n)
		}
	}
	require.True(t, e.rec.Contains("refused by the partition's fence", "is gone from KV_narratoria_plans"),
		"the log gives the real reason: the fence vanished, not another owner")
	// A plan message delivered again while its plan runs (an ack lost under
	// load) is rightly ignored as a duplicate: what the purge must not do is
	// leave a plan with no result, which the loop above checks.
}
