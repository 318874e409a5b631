package client_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestRerunPlan: a finished plan runs again under a new ID, whole or one
// tool alone with the input it had (its reference to another tool's output
// resolved from the result); a plan with no stored result is named.
func TestRerunPlan(t *testing.T) {
	srv, c, _ := pipelineWithout(t)
	ctx := t.Context()
	b := tool("b", "step/run", false, "a")
	b["input"] = map[string]any{"heard": "$a.narration"}
	first := publishPlan(t, srv, "rr", tool("a", "teller/run", false), b)
	var res *messages.ExecutionResult
	require.Eventually(t, func() bool {
		var err error
		res, err = c.Result(ctx, first)
		return err == nil
	}, testlog.Budget(20*time.Second), 50*time.Millisecond)
	require.True(t, res.Success, "%+v", res)

	whole, session, err := c.RerunPlan(ctx, first, "")
	require.NoError(t, err)
	require.Equal(t, "rr", session)
	require.NotEqual(t, first, whole.RequestID)
	require.Len(t, whole.Tools, 2)
	require.Nil(t, whole.Metadata.ParentPlanID, "a fresh plan, not a replan")

	one, _, err := c.RerunPlan(ctx, first, "b")
	require.NoError(t, err)
	require.Len(t, one.Tools, 1)
	require.Empty(t, one.Tools[0].Dependencies)
	require.JSONEq(t, `{"heard":"The teller speaks."}`, string(one.Tools[0].Input), "the input it had, resolved")
	data, err := json.Marshal(one)
	require.NoError(t, err)
	_, err = srv.JS.Publish(ctx, "narratoria.plans."+session, data)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := c.Result(ctx, one.RequestID)
		return err == nil && r.Success
	}, testlog.Budget(20*time.Second), 50*time.Millisecond, "the tool ran again, alone")

	_, _, err = c.RerunPlan(ctx, first, "nope")
	require.ErrorContains(t, err, `no tool "nope"`)
	_, err = c.Result(ctx, uuid.NewString())
	require.ErrorIs(t, err, client.ErrNoResult)
}
