package e2e

import (
	"context"
	"encoding/json"
	"errors"
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
	s, rec := securedPipeline(t, func(o *server.Options) { o.MaxPayload = 8 << 20 })
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
	s, _ := securedPipeline(t, nil)
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

// floodResult is what a flood of JetStream publishes got back.
type floodResult struct {
	sent, stored int
	// refused counts each refusal by the words that name it.
	refused map[string]int
	took    time.Duration
}

// floodReasons are the words a refusal is counted under.
var floodReasons = []string{"names no session", "share of the prompts stream", "maximum messages per subject exceeded", "is not in flight",
	"must be spelled", "Permissions Violation", "no response", "timeout", "too many decisions at once"}

func (r floodResult) String() string {
	return fmt.Sprintf("%d sent in %s: %d stored, refused %v", r.sent, r.took.Round(time.Millisecond), r.stored, r.refused)
}

// flood publishes n messages with JetStream as fast as nc takes them
// (subject and body of each from at) and waits for every answer.
func flood(t *testing.T, ctx context.Context, nc *nats.Conn, n int, at func(i int) (string, []byte)) floodResult {
	t.Helper()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(testlog.Budget(20*time.Second)), jetstream.WithPublishAsyncMaxPending(512))
	require.NoError(t, err)
	res := floodResult{sent: n, refused: map[string]int{}}
	start := time.Now()
	futures := make([]jetstream.PubAckFuture, 0, n)
	for i := range n {
		subj, body := at(i)
		f, err := js.PublishAsync(subj, body)
		for errors.Is(err, jetstream.ErrTooManyStalledMsgs) && ctx.Err() == nil {
			// As many in flight as the client allows: wait for answers.
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(100 * time.Millisecond):
			}
			f, err = js.PublishAsync(subj, body)
		}
		if !assert(t, err == nil, "flood: %v", err) {
			return res
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
			res.stored++
		case err := <-f.Err():
			reason := err.Error()
			for _, r := range floodReasons {
				if strings.Contains(reason, r) {
					reason = r
					break
				}
			}
			res.refused[reason]++
		case <-ctx.Done():
			t.Fatal("the flood's answers did not all come")
		}
	}
	res.took = time.Since(start)
	return res
}

// victims are what another writer does while an attacker floods:
// narrate and submit in sessions of their own, approve a tool that waits.
// Each must succeed; it returns how long the slowest took.
type victims struct {
	c        *client.Client
	sessions []string
	// approve, when set, approves it (a plan waiting for approval).
	approve func(ctx context.Context) error
}

func (v victims) run(t *testing.T, ctx context.Context) time.Duration {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	slowest := time.Duration(0)
	note := func(start time.Time) {
		mu.Lock()
		slowest = max(slowest, time.Since(start))
		mu.Unlock()
	}
	for _, sess := range v.sessions {
		wg.Add(2)
		go func() {
			defer wg.Done()
			start := time.Now()
			n, err := v.c.Narrate(ctx, messages.Prompt{SessionID: sess, Text: "hello there"})
			if assert(t, err == nil, "%s narrates while the attacker floods: %v", sess, err) {
				assert(t, strings.Contains(n.Text, "An echo answers."), "%s narrated with its tool: %+v", sess, n)
			}
			note(start)
		}()
		go func() {
			defer wg.Done()
			start := time.Now()
			_, err := v.c.Submit(ctx, messages.Prompt{SessionID: sess + "-d", PromptID: "p-1", Text: "hello again"})
			assert(t, err == nil, "%s's durable prompt is accepted while the attacker floods: %v", sess, err)
			note(start)
		}()
	}
	if v.approve != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			assert(t, v.approve(ctx) == nil, "the approval is accepted while the attacker floods")
			note(start)
		}()
	}
	wg.Wait()
	return slowest
}

// gatedPlan publishes, with the narrator's credential, a plan of session
// whose one tool waits for approval, and returns its ID once it waits.
func gatedPlan(t *testing.T, ctx context.Context, nar *nats.Conn, c *client.Client, session string) string {
	t.Helper()
	plan := uuid.NewString()
	_, err := client.PublishRetry(ctx, mustJS(t, nar), &nats.Msg{Subject: "narratoria.plans." + session,
		Data: []byte(`{"requestId":"` + plan + `","tools":[{"toolId":"gate","toolPath":"echo/say","requiresApproval":true}]}`)}, client.PublishRetryDefault)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := c.PlanStatus(ctx, plan)
		return err == nil && len(st.Tools) == 1 && st.Tools[0].State == messages.ToolAwaitingApproval
	}, testlog.Budget(20*time.Second), 50*time.Millisecond, "the gated plan waits for approval")
	return plan
}

// TestFloodsContained is attacks 1 and 5 from a game server's credential
// on the shipped configuration: the literal narratoria.prompts.> (which
// nothing consumes), thousands of decisions on plans that do not exist
// (which nothing would ever read), and one session's prompts, each sent as
// fast as the connection takes them, while the same game's other sessions
// narrate, submit and approve. Nothing is stored for the first two; the
// session holds nats.promptsPerSession prompts, the rest refused; every
// other session's prompt and the approval are accepted and narrated.
func TestFloodsContained(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	s, _ := securedPipeline(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), testlog.Budget(120*time.Second))
	defer cancel()
	game := s.connect(t, "game", nil)
	c, err := client.New(game)
	require.NoError(t, err)
	op := mustJS(t, s.connect(t, "operator", nil))
	plan := gatedPlan(t, ctx, s.connect(t, "narrator", nil), c, "gated")

	attacker := s.connect(t, "game", nil)
	var wg sync.WaitGroup
	var wildcard, decisions, session floodResult
	wg.Add(3)
	go func() {
		defer wg.Done()
		wildcard = flood(t, ctx, attacker, 2000, func(int) (string, []byte) { return "narratoria.prompts.>", []byte(`{"text":"to every session"}`) })
	}()
	go func() {
		defer wg.Done()
		decisions = flood(t, ctx, attacker, 2000, func(int) (string, []byte) {
			return "narratoria.approvals." + uuid.NewString() + ".t", []byte(`{"approved":true}`)
		})
	}()
	go func() {
		defer wg.Done()
		session = flood(t, ctx, attacker, 400, func(i int) (string, []byte) {
			return "narratoria.prompts.flood", fmt.Appendf(nil, `{"promptId":"f%d","text":"again and again"}`, i)
		})
	}()
	slowest := victims{c: c, sessions: []string{"v1", "v2", "v3"}, approve: func(ctx context.Context) error {
		return c.Approve(ctx, plan, "gate", "gm", "while the game floods")
	}}.run(t, ctx)
	wg.Wait()
	t.Logf("literal narratoria.prompts.>: %s", wildcard)
	t.Logf("decisions on plans that do not exist: %s", decisions)
	t.Logf("one session: %s", session)
	t.Logf("the other sessions' narrations, submissions and the approval: the slowest took %s", slowest.Round(time.Millisecond))
	require.Zero(t, wildcard.stored, "nothing stored under a literal wildcard")
	require.Equal(t, wildcard.sent, wildcard.refused["names no session"], "each refused at the door, saying why")
	require.Zero(t, decisions.stored, "no decision kept for a plan that does not exist")
	// Each refused, saying why: the plan is not in flight, or (the door's
	// backpressure: at most 64 checked at once per scheduler) it is busy.
	require.Positive(t, decisions.refused["is not in flight"], "checked and refused")
	require.Equal(t, decisions.sent, decisions.refused["is not in flight"]+decisions.refused["too many decisions at once"], "each refused, saying why")
	require.LessOrEqual(t, session.stored, 400)
	require.Positive(t, session.refused["maximum messages per subject exceeded"], "the session holds its share of the stream, no more")

	pst, err := op.Stream(ctx, messages.StreamPrompts)
	require.NoError(t, err)
	pinfo, err := pst.Info(ctx, jetstream.WithSubjectFilter(">"))
	require.NoError(t, err)
	for subj, n := range pinfo.State.Subjects {
		require.NotContains(t, subj, ">", "nothing stored under a wildcard")
		require.LessOrEqual(t, n, uint64(bus.PromptsPerSessionDefault), "%s holds at most its share", subj)
	}
	ast, err := op.Stream(ctx, messages.StreamApprovals)
	require.NoError(t, err)
	ainfo, err := ast.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, ainfo.State.Msgs, "the one decision stored is the game's on its waiting tool")
	res, err := c.PlanStatus(ctx, plan)
	if err == nil {
		require.NotEqual(t, messages.ToolAwaitingApproval, res.Tools[0].State, "the approval took effect")
	}
}
