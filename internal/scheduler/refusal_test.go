package scheduler

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/embedded"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestStoreRefusalsEndPlans: a write the store refuses for good ends its
// plan at once with failureReason storage_refused, the server's words in
// the message and the logs, and a metric — never a retry for ever:
//   - a session state over scheduler.maxStateBytes is not committed;
//   - a full sessions bucket ("maximum bytes exceeded", which the server
//     answers with 503) fails the plans that would grow it, other sessions'
//     plans with no patches still succeed, and service resumes by itself
//     once space returns;
//   - a result over the maximum payload goes out short, saying so.
func TestStoreRefusalsEndPlans(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWith(t, embedded.Options{MaxPayload: 128 << 10})
	e := newEnvOn(t, srv, Config{MaxStateBytes: 100 << 10})
	ctx := t.Context()
	patch := func(n int) map[string]any { return map[string]any{"blob": strings.Repeat("x", n)} }
	state := func(session string) map[string]any {
		kv, err := e.srv.JS.KeyValue(ctx, messages.BucketSessions)
		require.NoError(t, err)
		entry, err := kv.Get(ctx, session)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(entry.Value(), &m))
		return m
	}

	// Over the session's limit.
	res := e.runPlan(t, "big", plan(tool("a", nil, stepInput{Patch: patch(60 << 10)}), tool("b", nil, stepInput{Patch: map[string]any{"c": strings.Repeat("y", 60<<10)}})))
	require.False(t, res.Success)
	require.False(t, res.CanReplan, "no other plan fares better")
	require.Equal(t, messages.ReasonStorageRefused, res.FailureReason)
	require.Contains(t, res.Message, "scheduler.maxStateBytes")
	require.False(t, res.StateCommitted)
	require.Nil(t, state("big"), "nothing committed")
	require.True(t, e.rec.Contains("the store refused the session state; the plan fails"))
	res = e.runPlan(t, "small", plan(tool("a", nil, stepInput{Patch: map[string]any{"a": 1}})))
	require.True(t, res.Success, "%s", res.Message)
	require.Equal(t, map[string]any{"a": float64(1)}, state("small"))

	// A result over the maximum payload: its patches (in the result twice:
	// as patches and as the state) make it large; the short one fits.
	res = e.runPlan(t, "wide", plan(tool("a", nil, stepInput{Patch: patch(45 << 10)}), tool("b", nil, stepInput{Patch: map[string]any{"c": strings.Repeat("y", 45<<10)}}),
		tool("c", nil, stepInput{Output: map[string]any{"o": strings.Repeat("z", 30<<10)}})))
	require.False(t, res.Success)
	require.Equal(t, messages.ReasonStorageRefused, res.FailureReason)
	require.Contains(t, res.Message, "maximum payload")
	require.Contains(t, res.Message, "short result")
	require.True(t, res.StateCommitted, "the state was committed before the result was refused, and the result says so")
	require.Len(t, res.ToolResults, 3)
	require.True(t, e.rec.Contains("the store refused the result; publishing a short one"))

	// A full sessions bucket: the server's own refusal.
	kvs, err := e.srv.JS.Stream(ctx, "KV_"+messages.BucketSessions)
	require.NoError(t, err)
	cfg := kvs.CachedInfo().Config
	cfg.MaxBytes = 256 << 10
	_, err = e.srv.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	var refused *messages.ExecutionResult
	for i := 0; i < 40 && refused == nil; i++ {
		r := e.runPlan(t, fmt.Sprintf("fill%d", i), plan(tool("a", nil, stepInput{Patch: patch(24 << 10)})))
		if !r.Success {
			refused = r
		}
	}
	require.NotNil(t, refused, "the bucket fills")
	require.Equal(t, messages.ReasonStorageRefused, refused.FailureReason)
	require.Contains(t, refused.Message, "maximum bytes exceeded")
	require.True(t, e.rec.Contains("maximum bytes exceeded"))
	res = e.runPlan(t, "nopatch", plan(tool("a", nil, stepInput{})))
	require.True(t, res.Success, "a plan that writes no state is unaffected: %s", res.Message)

	// Space returns: the next plan commits.
	require.NoError(t, kvs.Purge(ctx))
	res = e.runPlan(t, "after", plan(tool("a", nil, stepInput{Patch: patch(1 << 10)})))
	require.True(t, res.Success, "%s", res.Message)
	require.NotNil(t, state("after"))
}

// TestOneMebibyteStores: every stream and bucket at 1 MiB, and 160 plans
// over 40 sessions whose tools write 16 KiB of session state each — far
// more than fits. Every plan gets its result within 10 s of being sent
// (scaled on a slow machine): success, or storage_refused naming the
// server's "maximum bytes"; the logs say it; and once space returns (the
// full buckets purged) the next plans commit with no restart.
func TestOneMebibyteStores(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	srv.Bus.StreamMaxBytes, srv.Bus.BucketMaxBytes = 1<<20, 1<<20
	require.NoError(t, bus.Provision(t.Context(), srv.JS, srv.Bus))
	// A lease long enough that no partition moves while the stores are
	// full (as the narrator's refusal test): under a loaded run 3 s leases
	// lapse again and again (a step-down after 1.5 s without a renewal),
	// and each hand-over costs seconds; that is lease length against CPU
	// starvation, not what this test is about. A partition does move
	// while its stores are full (TestFenceRaisedOnAFullStream).
	e := newEnvOn(t, srv, Config{LeaseTTL: 15 * time.Second})
	const sessions, plans = 40, 160
	type sent struct {
		at  time.Time
		res <-chan *messages.ExecutionResult
	}
	var all []sent
	for i := range plans {
		p := plan(tool("a", nil, stepInput{Fill: 16 << 10}))
		all = append(all, sent{time.Now(), e.startPlan(t, fmt.Sprintf("mb%02d", i%sessions), p)})
	}
	ok, refused, slowest := 0, 0, time.Duration(0)
	for i, s := range all {
		res := <-s.res
		require.NotNil(t, res, "plan %d got a result", i)
		slowest = max(slowest, time.Since(s.at))
		if res.Success {
			ok++
			continue
		}
		refused++
		require.Equal(t, messages.ReasonStorageRefused, res.FailureReason, "plan %d: %s", i, res.Message)
		require.Contains(t, res.Message, "maximum bytes", "plan %d", i)
	}
	t.Logf("1 MiB stores: %d plans succeeded, %d refused with storage_refused; the slowest result came %s after its plan", ok, refused, slowest)
	require.Positive(t, refused, "the stores filled")
	require.LessOrEqual(t, slowest, testlog.Budget(10*time.Second), "every plan answered within 10 s")
	require.True(t, e.rec.Contains("maximum bytes"), "the logs say it")

	// Space returns: purge what filled; the next plans commit.
	for _, name := range []string{"KV_" + messages.BucketSessions, "KV_" + messages.BucketPlans} {
		st, err := srv.JS.Stream(t.Context(), name)
		require.NoError(t, err)
		require.NoError(t, st.Purge(t.Context()))
	}
	for i := range 4 {
		res := e.runPlan(t, fmt.Sprintf("mb-after%d", i), plan(tool("a", nil, stepInput{Patch: map[string]any{"k": "v"}})))
		require.True(t, res.Success, "%s", res.Message)
	}
}
