package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// Issue 45: no shared resource one client can fill, wipe or wedge. Each
// test here is an attack of the issue, made on a real server from the
// credential that made it, and what contains it.

// bigPlan is a plan of n tools of echo/say whose document is about size
// bytes: under every plan limit (8 MiB, 10,000 tools), but its record in
// the plans bucket — the plan and each tool's resolved script — is more
// than one message of the store may hold.
func bigPlan(id string, n, size int) []byte {
	var b strings.Builder
	b.WriteString(`{"requestId":"` + id + `","tools":[`)
	pad := strings.Repeat("x", max(size/n-58, 1))
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"toolId":"t%d","toolPath":"echo/say","input":{"p":"%s"}}`, i, pad)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// samePartition returns n session IDs, other than session, in session's
// partition.
func samePartition(session string, n int) []string {
	p := messages.PartitionOf(session, bus.PartitionsDefault)
	var out []string
	for i := 0; len(out) < n; i++ {
		if s := fmt.Sprintf("%s-%d", session, i); messages.PartitionOf(s, bus.PartitionsDefault) == p {
			out = append(out, s)
		}
	}
	return out
}

// TestPlanTooLargeForTheStore is attack 3: a 7.98 MB plan, under every
// plan limit, whose record in the plans bucket is more than the server's
// maximum payload, published with the narrator's credential (the role that
// publishes plans). It is refused at intake with storage_refused, its
// result published at once, and never sent again; the sessions of its
// partition — whose intake a write retried for ever would hold — and every
// other session keep being narrated.
func TestPlanTooLargeForTheStore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	// The shipped servers' maximum payload (deploy/nats/nats-*.conf).
	s := startSecured(t, func(o *server.Options) { o.MaxPayload = 8 << 20 })
	s.provision(t)
	log, rec := testlog.New(t)
	s.pipeline(t, log)
	ctx, cancel := context.WithTimeout(t.Context(), testlog.Budget(90*time.Second))
	defer cancel()
	c, err := client.New(s.connect(t, "game", nil))
	require.NoError(t, err)

	const session = "huge"
	op := s.connect(t, "operator", nil)
	results, err := op.SubscribeSync("narratoria.results." + session + ".>")
	require.NoError(t, err)
	plan := uuid.NewString()
	doc := bigPlan(plan, 10_000, 7_980_000)
	require.Less(t, len(doc), messages.MaxPlanBytesDefault, "under the plan size limit")
	nar := s.connect(t, "narrator", nil)
	_, err = client.PublishRetry(ctx, mustJS(t, nar), &nats.Msg{Subject: "narratoria.plans." + session, Data: doc}, client.PublishRetryDefault)
	require.NoError(t, err, "the plans stream takes it: it is under every limit at the door")

	m, err := results.NextMsg(testlog.Budget(30 * time.Second))
	require.NoError(t, err, "the plan gets its result at once")
	var res messages.ExecutionResult
	require.NoError(t, json.Unmarshal(m.Data, &res))
	require.Equal(t, plan, res.PlanID)
	require.False(t, res.Success)
	require.Equal(t, messages.ReasonStorageRefused, res.FailureReason, res.Message)
	require.Contains(t, res.Message, "over the")
	require.Contains(t, res.Message, "bytes the store takes in one message")
	t.Logf("a %d-byte plan of 10,000 tools: %s", len(doc), res.Message)

	// Its partition's sessions, and another, keep being narrated.
	var wg sync.WaitGroup
	for _, sess := range append(samePartition(session, 3), "elsewhere") {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := c.Narrate(ctx, messages.Prompt{SessionID: sess, Text: "hello there"})
			if assert(t, err == nil, "%s narrates: %v", sess, err) {
				assert(t, !n.Fallback && strings.Contains(n.Text, "An echo answers."), "%s narrated with its tool: %+v", sess, n)
			}
		}()
	}
	wg.Wait()
	_, err = results.NextMsg(time.Second)
	require.ErrorIs(t, err, nats.ErrTimeout, "one result, never a second")
	require.True(t, rec.Contains("plan refused at intake"), "the refusal is logged")
	require.False(t, rec.Contains("cannot persist plan"), "no write was sent for it")
}

// mustJS is a JetStream handle on nc.
func mustJS(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// rollup publishes body on subject with the header Nats-Rollup: how, as
// JetStream, and returns the server's answer.
func rollup(ctx context.Context, js jetstream.JetStream, subject, how string) error {
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgRollup, how)
	m.Data = []byte(`{}`)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := js.PublishMsg(pctx, m)
	return err
}

// storeState is what a store holds: its messages and subjects.
func storeState(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string) (msgs, subjects uint64) {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	return info.State.Msgs, info.State.NumSubjects
}

// TestRollupHeadersRefused is attack 2 on the shipped configuration: a
// Nats-Rollup header (all, or sub) on one key a role may write, which
// would wipe the whole store (or the key's history), from each untrusted
// role on each store it writes: a skill worker on the skill registry, the
// asset store (on an object's info and on its chunks), the events and the
// outcomes streams. Each is refused, and every store keeps every key.
func TestRollupHeadersRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	s := startSecured(t, nil)
	s.provision(t)
	log, _ := testlog.New(t)
	s.pipeline(t, log)
	ctx, cancel := context.WithTimeout(t.Context(), testlog.Budget(90*time.Second))
	defer cancel()
	c, err := client.New(s.connect(t, "game", nil))
	require.NoError(t, err)
	n, err := c.Narrate(ctx, messages.Prompt{SessionID: "r1", Text: "hello there"})
	require.NoError(t, err)
	require.Len(t, n.Assets, 1)
	pic := n.Assets[0]
	require.NotEmpty(t, pic.Object, "the picture is in the asset store")

	op := mustJS(t, s.connect(t, "operator", nil))
	worker := mustJS(t, s.connect(t, "worker_echo", nil))
	obsStream := "OBJ_" + messages.BucketAssets
	obsInfo, err := op.Stream(ctx, obsStream)
	require.NoError(t, err)
	meta, err := obsInfo.GetLastMsgForSubject(ctx, "$O."+messages.BucketAssets+".M.>")
	require.NoError(t, err)
	var oi jetstream.ObjectInfo
	require.NoError(t, json.Unmarshal(meta.Data, &oi))
	stores := []string{"KV_" + messages.BucketSkills, obsStream, messages.StreamEvents, messages.StreamOutcomes}
	before := map[string][2]uint64{}
	for _, st := range stores {
		m, sub := storeState(t, ctx, op, st)
		before[st] = [2]uint64{m, sub}
	}
	for _, a := range []struct{ subject, how string }{
		{"$KV." + messages.BucketSkills + ".echo", jetstream.MsgRollupAll},
		{"$KV." + messages.BucketSkills + ".echo", jetstream.MsgRollupSubject},
		{meta.Subject, jetstream.MsgRollupAll},
		{"$O." + messages.BucketAssets + ".C." + oi.NUID, jetstream.MsgRollupSubject},
		{"$O." + messages.BucketAssets + ".C." + oi.NUID, jetstream.MsgRollupAll},
		{"narratoria.events.r1." + n.PlanID + ".t", jetstream.MsgRollupAll},
		{"narratoria.outcomes.r1." + n.PlanID + ".t", jetstream.MsgRollupAll},
	} {
		err := rollup(ctx, worker, a.subject, a.how)
		require.ErrorContains(t, err, "rollup not permitted", "the worker's Nats-Rollup: %s on %s", a.how, a.subject)
	}
	for _, st := range stores {
		m, sub := storeState(t, ctx, op, st)
		require.Equal(t, before[st], [2]uint64{m, sub}, "%s keeps every key", st)
	}
	data, err := c.Asset(ctx, pic)
	require.NoError(t, err, "the picture is still there")
	require.Contains(t, string(data), echoPicture)
	n, err = c.Narrate(ctx, messages.Prompt{SessionID: "r1", Text: "hello again"})
	require.NoError(t, err)
	require.False(t, n.Fallback, "the registry still has the skill: %+v", n.Trace)
}
