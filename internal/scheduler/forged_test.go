package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestForgedOutcomeChangesNothing: an outcome for a running tool that does
// not carry its attempt's token — made by a holder of worker credentials
// that never took the job, with no token, a made-up one, or the right
// attempt's token moved to another attempt — is refused (logged, counted,
// terminated), whether it is stored on the outcomes stream or sent to the
// scheduler as a request (answered "-"); the session state and the plan's
// result are the real script's.
func TestForgedOutcomeChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p := plan(tool("a", nil, stepInput{SleepMs: 1500, Patch: map[string]any{"real": true}}))
	done := e.startPlan(t, "victim", p)
	require.Eventually(t, func() bool { return e.log.started(p.RequestID, "a") }, testlog.Budget(10*time.Second), 10*time.Millisecond)

	forge := func(attempt int, token string) {
		o := messages.Outcome{PlanID: p.RequestID, SessionID: "victim", ToolID: "a", Skill: "test", Script: "step", Attempt: attempt,
			Token: token, State: messages.ToolSuccess, Worker: "mallory", Output: json.RawMessage(`{"admin":true}`),
			Done: &messages.DoneEvent{OK: true, Output: json.RawMessage(`{"admin":true}`)},
			Events: []json.RawMessage{json.RawMessage(`{"version":"0","type":"state_patch","patch":{"admin":true,"gold":999999}}`),
				json.RawMessage(`{"version":"0","type":"done","ok":true,"output":{"admin":true}}`)}}
		b, err := json.Marshal(o)
		require.NoError(t, err)
		_, err = e.srv.JS.Publish(context.Background(), fmt.Sprintf("narratoria.outcomes.victim.%s.a", p.RequestID), b)
		require.NoError(t, err)
		// The scheduler's subject for outcomes as requests is in every job
		// it sends, so any worker knows it.
		reply, err := e.srv.NC.Request(e.sch.direct, b, testlog.Budget(5*time.Second))
		require.NoError(t, err)
		require.Equal(t, "-", string(reply.Data), "a forged outcome sent as a request is declined")
	}
	forge(1, "")
	forge(1, "bm90LWEtdG9rZW4")
	forge(2, e.sch.keys.token(p.RequestID, "a", "test", 1)) // the real attempt's token, on another attempt
	require.Eventually(t, func() bool {
		return e.rec.Count("outcome refused: its token is not the attempt's") == 6
	}, testlog.Budget(10*time.Second), 10*time.Millisecond)

	res := <-done
	require.NotNil(t, res)
	require.True(t, res.Success)
	require.JSONEq(t, `{"real":true}`, string(res.AggregatedState), "the real script's patch, not the forged one")
	require.NotContains(t, string(res.ToolResults[0].Output), "admin")
}
