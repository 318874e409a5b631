package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestOutcomesTakenDirect: a scheduler takes the outcomes of its jobs as
// requests, so a plan run on one scheduler leaves no message on the
// outcomes stream. When the scheduler that sent a job is gone by the time
// its script ends, the worker stores the outcome on the stream and the
// partition's new owner finishes the plan; the script ran once.
func TestOutcomesTakenDirect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	res := <-e.startPlan(t, "direct", plan(tool("a", nil, stepInput{}), tool("b", []string{"a"}, stepInput{}), tool("c", []string{"b"}, stepInput{})))
	require.NotNil(t, res)
	require.True(t, res.Success)
	require.Zero(t, e.outcomesStored(t), "no outcome was stored on the stream")

	p := plan(tool("slow", nil, stepInput{SleepMs: 1500}))
	done := e.startPlan(t, "direct", p)
	require.Eventually(t, func() bool { return e.log.started(p.RequestID, "slow") }, testlog.Budget(10*time.Second), 10*time.Millisecond)
	e.sch.Stop() // hands its partitions over; its subject for outcomes goes with it
	e.scheduler(t, Config{})
	select {
	case res = <-done:
	case <-time.After(testlog.Budget(30 * time.Second)):
		t.Fatal("no result after the scheduler that sent the job stopped")
	}
	require.NotNil(t, res)
	require.True(t, res.Success, "%+v", res)
	require.Len(t, e.log.of("slow"), 1, "the script ran once")
	require.EqualValues(t, 1, e.outcomesStored(t), "the outcome went to the stream")
}

// outcomesStored counts the messages ever stored on the outcomes stream.
func (e *env) outcomesStored(t *testing.T) uint64 {
	t.Helper()
	st, err := e.srv.JS.Stream(context.Background(), messages.StreamOutcomes)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	return info.State.LastSeq
}

// TestToolLogGathersRecords: the tool records of a wide plan whose tools
// end together are written gathered, several to a message of the plan's
// tool log, so the plan stores fewer state messages than it has tools
// (one per tool, and a purge marker each, before the tool logs). It
// succeeds, each tool ran once, and its keys are purged.
func TestToolLogGathersRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Concurrency: 32})
	const n = 32
	var tools []messages.Tool
	for i := range n {
		tools = append(tools, tool(fmt.Sprintf("w%02d", i), nil, stepInput{SleepMs: 300}, func(tl *messages.Tool) { tl.Async = true }))
	}
	p := plan(tools...)
	p.Parallel = true
	st, err := e.srv.JS.Stream(context.Background(), "KV_"+messages.BucketPlans)
	require.NoError(t, err)
	before, err := st.Info(context.Background())
	require.NoError(t, err)
	res := e.runPlan(t, "gather", p)
	require.True(t, res.Success, res.Message)
	purgedKeys(t, e, p.RequestID)
	after, err := st.Info(context.Background())
	require.NoError(t, err)
	stored := after.State.LastSeq - before.State.LastSeq
	t.Logf("%d plan-state messages for %d tools", stored, n)
	require.Less(t, stored, uint64(n), "fewer plan-state messages than tools")
	for _, tl := range tools {
		require.Len(t, e.log.of(tl.ToolID), 1, "%s ran once", tl.ToolID)
	}
}
