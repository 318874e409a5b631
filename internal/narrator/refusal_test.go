package narrator

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestStoreRefusalsAnswerPrompts: with the plans stream full (discard-new,
// as a stream at its byte limit is), a prompt on the stream is answered at
// once with the template narration, its trace naming storage_refused and
// the logs the server's words — it does not hold its session's later
// prompts, retrying for ever — and once space returns prompts are narrated
// again.
func TestStoreRefusalsAnswerPrompts(t *testing.T) {
	t.Parallel()
	// A lease long enough that no partition moves while the stream is
	// full: a narrator taking one then cannot raise its fence (it lives in
	// the plans stream; see docs/decisions.md).
	e := newEnv(t, Config{LeaseTTL: 15 * time.Second}, nil)
	ctx := t.Context()
	// Its fences are raised (in the plans stream) before the stream fills.
	require.Eventually(t, e.nar.OwnsAll, testlog.Budget(10*time.Second), 10*time.Millisecond)
	st, err := e.srv.JS.Stream(ctx, messages.StreamPlans)
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	_, err = e.srv.JS.Publish(ctx, "narratoria.plans.filler", []byte(`{}`)) // at least one message
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	cfg.MaxMsgs, cfg.Discard = int64(info.State.Msgs), jetstream.DiscardNew
	_, err = e.srv.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)

	sub, err := e.srv.NC.SubscribeSync("narratoria.narrations.full")
	require.NoError(t, err)
	for i := range 2 {
		_, err = e.srv.JS.Publish(ctx, "narratoria.prompts.full", fmt.Appendf(nil, `{"text":"I roll the bones","promptId":"p%d"}`, i))
		require.NoError(t, err)
	}
	for i := range 2 {
		m, err := sub.NextMsg(testlog.Budget(20 * time.Second))
		require.NoError(t, err, "prompt %d answered", i)
		var n messages.Narration
		require.NoError(t, json.Unmarshal(m.Data, &n))
		require.Equal(t, fmt.Sprintf("p%d", i), n.PromptID, "in order")
		require.True(t, n.Fallback)
		require.NotEmpty(t, n.Trace)
		require.Equal(t, messages.ReasonStorageRefused, n.Trace[len(n.Trace)-1].FailureReason)
	}
	require.True(t, e.rec.Contains("the store refused a write the prompt needs", "maximum messages exceeded"))

	cfg.MaxMsgs = -1
	_, err = e.srv.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	_, err = e.srv.JS.Publish(ctx, "narratoria.prompts.full", []byte(`{"text":"I roll the bones","promptId":"p9"}`))
	require.NoError(t, err)
	m, err := sub.NextMsg(testlog.Budget(20 * time.Second))
	require.NoError(t, err)
	var n messages.Narration
	require.NoError(t, json.Unmarshal(m.Data, &n))
	require.False(t, n.Fallback, "space returned: narrated again")
}
