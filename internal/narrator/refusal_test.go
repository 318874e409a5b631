package narrator

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
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
	// the plans stream; see docs/decisions/).
	e := newEnv(t, Config{LeaseTTL: 15 * time.Second}, nil)
	ctx := t.Context()
	// Its fences are raised (in the plans stream) before the stream fills.
	require.Eventually(t, e.nar.OwnsAll, testlog.Budget(10*time.Second), 10*time.Millisecond)
	st, err := e.srv.JS.Stream(ctx, messages.StreamPlans)
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	// The plans stream is a work queue: what it holds now are the fences,
	// which stay; full at that count, it takes no plan.
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Positive(t, info.State.Msgs, "the fences")
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

// TestIntakeNeverFills: every stream at 48 KiB (the plans stream 96 KiB),
// and 128 prompts of about 2 KB over 16 sessions — several times what any
// stream holds. The intake
// streams (prompts, plans) are work queues, so what was narrated leaves
// them and intake never stops: every prompt is narrated with its tools,
// none refused. The history streams (narrations, results, events) reach
// their limit and drop their oldest messages, as they should.
func TestIntakeNeverFills(t *testing.T) {
	t.Parallel()
	if os.Getenv("NARRATORIA_LONG") == "" {
		t.Skip("fills every stream (make test-long)")
	}
	e := newEnv(t, Config{}, nil)
	// Below the configurable minimum (1 MiB), set on the server directly
	// once every component has provisioned.
	for _, name := range []string{messages.StreamNarrations, messages.StreamResults, messages.StreamEvents, messages.StreamPrompts, messages.StreamPlans} {
		st, err := e.srv.JS.Stream(t.Context(), name)
		require.NoError(t, err)
		cfg := st.CachedInfo().Config
		cfg.MaxBytes = 48 << 10
		switch name {
		case messages.StreamEvents:
			cfg.MaxBytes = 24 << 10 // its messages are smaller
		case messages.StreamPlans:
			// A round's 16 plans (about 2.5 KB each, the prompt's words in
			// their inputs) sit there until a loaded scheduler accepts them:
			// 48 KiB was refused once under a loaded make test. 96 KiB is
			// still a third of what goes through.
			cfg.MaxBytes = 96 << 10
		}
		_, err = e.srv.JS.UpdateStream(t.Context(), cfg)
		require.NoError(t, err)
	}
	const sessions, each = 16, 8
	sub, err := e.srv.NC.SubscribeSync("narratoria.narrations.>")
	require.NoError(t, err)
	require.NoError(t, sub.SetPendingLimits(-1, -1))
	padding := strings.Repeat("and the bones rattle ", 90)
	// Steady load: a round of one prompt per session at a time (32 KB in
	// flight), the next once the round is narrated — a backlog larger than
	// a stream would rightly be refused.
	fallbacks := 0
	for p := range each {
		for s := range sessions {
			e.publish(t, fmt.Sprintf("fill%02d", s), fmt.Sprintf(`{"text":"I roll the bones %s","promptId":"p%d"}`, padding, p))
		}
		for range sessions {
			m, err := sub.NextMsg(testlog.Budget(60 * time.Second))
			require.NoError(t, err, "every prompt narrated")
			var n messages.Narration
			require.NoError(t, json.Unmarshal(m.Data, &n))
			if n.Fallback {
				fallbacks++
				t.Logf("%s/%s fallback: %+v", n.SessionID, n.PromptID, n.Trace)
			}
		}
	}
	require.Zero(t, fallbacks, "no prompt refused or narrated from the template")
	for _, name := range []string{messages.StreamNarrations, messages.StreamResults, messages.StreamEvents, messages.StreamPrompts, messages.StreamPlans} {
		st, err := e.srv.JS.Stream(t.Context(), name)
		require.NoError(t, err)
		info, err := st.Info(t.Context())
		require.NoError(t, err)
		t.Logf("%s: %d messages, %d bytes of %d, first sequence %d", name, info.State.Msgs, info.State.Bytes, info.Config.MaxBytes, info.State.FirstSeq)
		switch name {
		case messages.StreamPrompts, messages.StreamPlans:
			require.Less(t, info.State.Bytes, uint64(32<<10), "%s keeps only what waits (and the fences)", name)
		default:
			require.Greater(t, info.State.FirstSeq, uint64(1), "%s reached its limit and dropped its oldest", name)
		}
	}
}
