package narrator

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/partition"
	"github.com/narratoria/runtime/internal/planner"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// counter is a skill that counts its runs per prompt text and can hold a
// run until the test opens its gate: the plan stays in flight as long as
// the test needs.
type counter struct {
	mu    sync.Mutex
	runs  map[string]int
	gates map[string]chan struct{}
}

func (c *counter) run(ctx context.Context, in messages.ScriptInput, emit func(messages.Event) error) error {
	var input struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(in.Input, &input)
	c.mu.Lock()
	c.runs[input.Text]++
	gate := c.gates[input.Text]
	c.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b, _ := json.Marshal(map[string]string{"narration": "counted " + input.Text})
	return emit(&messages.DoneEvent{OK: true, Output: b})
}

// hold makes runs for text wait until release.
func (c *counter) hold(text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gates[text] = make(chan struct{})
}

func (c *counter) release(text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g := c.gates[text]; g != nil {
		close(g)
		delete(c.gates, text)
	}
}

func (c *counter) count(text string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[text]
}

// counterPlanner plans one counter tool that gets the prompt's text.
type counterPlanner struct{}

func (counterPlanner) Name() string { return "rules" }
func (counterPlanner) Plan(_ context.Context, req planner.Request) (*messages.Plan, error) {
	input, _ := json.Marshal(map[string]string{"text": req.Text})
	return &messages.Plan{RequestID: uuid.NewString(), Narrative: "You: " + req.Text, DisabledSkills: []string{},
		Tools: []messages.Tool{{ToolID: "count", ToolPath: "counter/count", Input: input, Dependencies: []string{}, Required: true,
			RetryPolicy: messages.RetryPolicy{MaxRetries: 0, BackoffMs: 10}}}}, nil
}

// durableConfig has short waits, so a test that breaks the fix fails fast
// instead of hanging.
var durableConfig = Config{ShutdownGrace: 100 * time.Millisecond, AckWait: 2 * time.Second}

func newCounterEnv(t *testing.T) (*env, *counter) {
	t.Helper()
	c := &counter{runs: map[string]int{}, gates: map[string]chan struct{}{}}
	e := newPipeline(t, []skillDef{{name: "counter", script: "count", fn: c.run}})
	t.Cleanup(func() { // open every gate, so the worker stops at once
		c.mu.Lock()
		defer c.mu.Unlock()
		for text, g := range c.gates {
			close(g)
			delete(c.gates, text)
		}
	})
	return e, c
}

// crash ends a narrator the way SIGKILL does: its connection drops with no
// goodbye (no unsubscribe, ack, nak or reply reaches the server), then its
// goroutines are ended so none outlives the test. Stop is a no-op after it.
func crash(n *Narrator) {
	n.nc.Close()
	n.life.Stop(func() { n.stopRooms() }, func() {
		if n.svc != nil {
			_ = n.svc.Stop()
		}
	})
}

func (e *env) publish(t *testing.T, session, body string) {
	t.Helper()
	_, err := e.srv.JS.Publish(context.Background(), "narratoria.prompts."+session, []byte(body))
	require.NoError(t, err)
}

// stored counts the messages on subject in a stream.
func (e *env) stored(t *testing.T, stream, subject string) uint64 {
	t.Helper()
	st, err := e.srv.JS.Stream(context.Background(), stream)
	require.NoError(t, err)
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	require.NoError(t, err)
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// promptConsumer names the prompt consumer of a session's partition.
func (e *env) promptConsumer(session string) string {
	return fmt.Sprintf("%s-%d", promptsConsumer, messages.PartitionOf(session, e.srv.Bus.WithDefaults().Partitions))
}

// promptsSettled reports whether every stream prompt was acknowledged.
func (e *env) promptsSettled(t *testing.T) bool {
	t.Helper()
	st, err := e.srv.JS.Stream(context.Background(), messages.StreamPrompts)
	require.NoError(t, err)
	infos := st.ListConsumers(context.Background())
	seen, settled := 0, true
	for info := range infos.Info() { // read to the end: the lister's goroutine blocks on an unread page
		seen++
		settled = settled && info.NumAckPending == 0 && info.NumPending == 0
	}
	return settled && seen > 0 && infos.Err() == nil
}

// waitNarrated waits until want narrations of session are stored and no
// prompt is left unacknowledged, then returns the narrations in order.
func (e *env) waitNarrated(t *testing.T, session string, want int) []messages.Narration {
	t.Helper()
	subject := "narratoria.narrations." + session
	require.Eventually(t, func() bool {
		return e.stored(t, messages.StreamNarrations, subject) >= uint64(want) && e.promptsSettled(t)
	}, testlog.Budget(30*time.Second), 20*time.Millisecond)
	st, err := e.srv.JS.Stream(context.Background(), messages.StreamNarrations)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	var out []messages.Narration
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(context.Background(), seq)
		if err != nil || m.Subject != subject {
			continue
		}
		var n messages.Narration
		require.NoError(t, json.Unmarshal(m.Data, &n))
		out = append(out, n)
	}
	return out
}

// decided reports whether a narrator that was handed a prompt already in
// flight has either taken over the running attempt or planned its own.
func (e *env) decided(session string) bool {
	return e.rec.Contains("taking over the running attempt", "sessionId="+session) || len(e.plans(session)) > 1
}

// plans returns the plans published for session.
func (e *env) plans(session string) []messages.Plan { return e.published.of(session) }

// Bug 1: stopping the narrator mid-plan must not run the plan's tools
// again. The grace runs out while the tool is held; the narrator leaves
// the prompt unacked; the plan finishes while no narrator is alive; the
// next narrator finds the attempt record and the stored result.
func TestStopMidPlanResumesTheRunningPlan(t *testing.T) {
	t.Parallel()
	e, c := newCounterEnv(t)
	a := e.startNarrator(t, durableConfig, counterPlanner{})
	c.hold("stop me")
	e.publish(t, "sa", `{"text":"stop me"}`) // no promptId: the stream sequence stands for it
	require.Eventually(t, func() bool { return c.count("stop me") == 1 }, testlog.Budget(10*time.Second), 10*time.Millisecond)

	a.Stop()
	require.True(t, e.rec.Contains("grace period over"))
	c.release("stop me")
	require.Eventually(t, func() bool { return e.stored(t, messages.StreamResults, "narratoria.results.sa.>") == 1 },
		10*time.Second, 10*time.Millisecond, "the plan finished while no narrator was alive")

	e.startNarrator(t, durableConfig, counterPlanner{})
	nars := e.waitNarrated(t, "sa", 1)
	require.Len(t, nars, 1, "narrated exactly once")
	require.Equal(t, 1, c.count("stop me"), "the tool ran exactly once")
	plans := fetchPlans(t, e, "sa")
	require.Len(t, plans, 1, "the attempt was not planned again")
	require.Equal(t, plans[0].RequestID, nars[0].PlanID)
	require.Equal(t, 1, nars[0].Attempts)
	require.Contains(t, nars[0].Text, "counted stop me")
	require.True(t, e.rec.Contains("taking over the running attempt"))
}

// Stop lets a prompt being narrated finish within the grace: it is
// narrated and acked by the narrator that is stopping.
func TestStopLetsInFlightPromptsFinish(t *testing.T) {
	t.Parallel()
	e, c := newCounterEnv(t)
	cfg := durableConfig
	cfg.ShutdownGrace = 30 * time.Second
	a := e.startNarrator(t, cfg, counterPlanner{})
	c.hold("let me finish")
	e.publish(t, "sg", `{"text":"let me finish","promptId":"g1"}`)
	require.Eventually(t, func() bool { return c.count("let me finish") == 1 }, testlog.Budget(10*time.Second), 10*time.Millisecond)

	stopped := make(chan struct{})
	go func() { a.Stop(); close(stopped) }()
	require.Eventually(t, a.stopping, testlog.Budget(10*time.Second), 5*time.Millisecond)
	c.release("let me finish")
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not return after the prompt was narrated")
	}
	require.EqualValues(t, 1, e.stored(t, messages.StreamNarrations, "narratoria.narrations.sg"), "narrated before Stop returned")
	require.Eventually(t, func() bool { return e.promptsSettled(t) }, testlog.Budget(10*time.Second), 10*time.Millisecond, "and acked")
	require.Equal(t, 1, c.count("let me finish"))
}

// Bug 2: a crash mid-plan. The next narrator, on a new connection, gets
// the unacked prompt at once (the consumer is rewound), finds the attempt
// record and waits for the plan that still runs.
func TestCrashMidPlanResumesTheRunningPlan(t *testing.T) {
	t.Parallel()
	e, c := newCounterEnv(t)
	a := e.startNarrator(t, durableConfig, counterPlanner{})
	c.hold("crash me")
	e.publish(t, "sb", `{"text":"crash me","promptId":"b1"}`)
	require.Eventually(t, func() bool { return c.count("crash me") == 1 }, testlog.Budget(10*time.Second), 10*time.Millisecond)

	crash(a)
	e.startNarrator(t, durableConfig, counterPlanner{})
	c.release("crash me")
	nars := e.waitNarrated(t, "sb", 1)
	require.Len(t, nars, 1, "narrated exactly once")
	require.Equal(t, 1, c.count("crash me"), "the tool ran exactly once")
	plans := fetchPlans(t, e, "sb")
	require.Len(t, plans, 1, "the attempt was not planned again")
	require.Equal(t, plans[0].RequestID, nars[0].PlanID)
	require.Equal(t, "b1", nars[0].PromptID)
	kv, err := e.srv.JS.KeyValue(context.Background(), messages.BucketInflight)
	require.NoError(t, err)
	_, err = kv.Get(context.Background(), "sb.b1")
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "the attempt record is gone once the narration is stored")
}

// A narrator that died between recording an attempt and publishing its
// plan left a record of a plan the scheduler never saw: the next narrator
// publishes that very plan (it is in no stream) instead of a new one,
// marked as published again.
func TestRecordedPlanNeverPublishedIsPublished(t *testing.T) {
	t.Parallel()
	e, c := newCounterEnv(t)
	plan, err := counterPlanner{}.Plan(context.Background(), planner.Request{SessionID: "sl", Text: "lost", Attempt: 1})
	require.NoError(t, err)
	plan.SessionID, plan.Metadata.GenerationAttempt, plan.TimeoutMs = "sl", 1, 10_000
	raw, err := json.Marshal(plan)
	require.NoError(t, err)
	now := time.Now().UTC()
	rec, err := json.Marshal(messages.PromptAttempt{Attempt: 1, PlanID: plan.RequestID, Plan: raw, DisabledSkills: []string{},
		Trace: []messages.AttemptTrace{}, ReceivedAt: now, StartedAt: now})
	require.NoError(t, err)
	kv, err := e.srv.JS.KeyValue(context.Background(), messages.BucketInflight)
	require.NoError(t, err)
	_, err = kv.Create(context.Background(), "sl.l1", rec)
	require.NoError(t, err)

	published, err := e.srv.NC.SubscribeSync("narratoria.plans.sl")
	require.NoError(t, err)
	e.startNarrator(t, durableConfig, counterPlanner{})
	e.publish(t, "sl", `{"text":"lost","promptId":"l1"}`)
	nars := e.waitNarrated(t, "sl", 1)
	require.Len(t, nars, 1)
	require.Equal(t, plan.RequestID, nars[0].PlanID, "the recorded plan was run")
	require.Len(t, fetchPlans(t, e, "sl"), 1)
	require.Equal(t, 1, c.count("lost"))
	require.True(t, e.rec.Contains("not waiting in the plans stream; publishing it again"))
	// Marked as published again, so a scheduler looks up its result first
	// (scheduler.TestRepublishedPlanOfAFinishedPlan).
	m, err := published.NextMsg(testlog.Budget(5 * time.Second))
	require.NoError(t, err)
	require.Equal(t, "1", m.Header.Get(messages.HeaderRepublished))
}

// Bug 2: after a crash, one session's prompts are still narrated in the
// order they were published, each once: the prompts the dead narrator held
// come back at once and before the ones published after the restart.
func TestCrashKeepsSessionOrder(t *testing.T) {
	t.Parallel()
	e, c := newCounterEnv(t)
	a := e.startNarrator(t, durableConfig, counterPlanner{})
	text := func(i int) string { return fmt.Sprintf("order %d", i) }
	prompt := func(i int) { e.publish(t, "so", fmt.Sprintf(`{"text":%q,"promptId":"p%d"}`, text(i), i)) }
	c.hold(text(3))
	for i := range 7 {
		prompt(i)
	}
	require.Eventually(t, func() bool {
		return e.stored(t, messages.StreamNarrations, "narratoria.narrations.so") == 3 && c.count(text(3)) == 1
	}, testlog.Budget(20*time.Second), 10*time.Millisecond)

	crash(a) // mid-plan of p3, with p4..p6 queued behind it
	e.startNarrator(t, durableConfig, counterPlanner{})
	for i := 7; i < 10; i++ {
		prompt(i)
	}
	c.release(text(3))
	nars := e.waitNarrated(t, "so", 10)
	got := make([]string, 0, len(nars))
	for _, n := range nars {
		got = append(got, n.PromptID)
	}
	require.Equal(t, []string{"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9"}, got, "in publish order, each once")
	for i := range 10 {
		require.Equal(t, 1, c.count(text(i)), "the tool of p%d ran once", i)
	}
}

// Bug 2: a request whose narrator died is retried with the same promptId
// (twice, the second while the first retry is in flight): the new narrator
// waits for the plan already running, and both retries get the same
// narration.
func TestRetriedRequestJoinsTheRunningPlan(t *testing.T) {
	t.Parallel()
	e, c := newCounterEnv(t)
	a := e.startNarrator(t, durableConfig, counterPlanner{})
	c.hold("retry me")
	body := []byte(`{"sessionId":"sd","text":"retry me","promptId":"q1"}`)
	request := func() *nats.Subscription {
		inbox := nats.NewInbox()
		sub, err := e.srv.NC.SubscribeSync(inbox)
		require.NoError(t, err)
		require.NoError(t, e.srv.NC.PublishRequest("narratoria.narrate", inbox, body))
		return sub
	}
	request() // never answered: its narrator crashes
	require.Eventually(t, func() bool { return c.count("retry me") == 1 }, testlog.Budget(10*time.Second), 10*time.Millisecond)

	crash(a)
	b := e.startNarrator(t, durableConfig, counterPlanner{})
	first := request()
	require.Eventually(t, func() bool { return e.decided("sd") }, testlog.Budget(10*time.Second), 10*time.Millisecond)
	second := request()
	require.Eventually(t, func() bool { return b.svc.Stats().Endpoints[0].NumRequests == 2 }, testlog.Budget(10*time.Second), 10*time.Millisecond)
	c.release("retry me")
	r1, err := first.NextMsg(30 * time.Second)
	require.NoError(t, err)
	r2, err := second.NextMsg(30 * time.Second)
	require.NoError(t, err)
	require.Empty(t, r1.Header.Get("Nats-Service-Error"))
	require.Equal(t, string(r1.Data), string(r2.Data), "both retries get the same narration")
	var nar messages.Narration
	require.NoError(t, json.Unmarshal(r1.Data, &nar))
	plans := fetchPlans(t, e, "sd")
	require.Len(t, plans, 1, "one plan")
	require.Equal(t, plans[0].RequestID, nar.PlanID)
	require.Equal(t, 1, c.count("retry me"), "the tool ran once")
}

// heldRequest starts a counter pipeline and a narrator whose plans may
// take two minutes, and sends a narrate request of text whose tool is held
// running; it returns once the tool runs, with the subscription the reply
// comes to.
func heldRequest(t *testing.T, session, text, promptID string) (*env, *counter, Config, *nats.Subscription) {
	t.Helper()
	e, c := newCounterEnv(t)
	cfg := durableConfig
	cfg.PlanTimeoutMs = 120_000
	e.startNarrator(t, cfg, counterPlanner{})
	c.hold(text)
	inbox := nats.NewInbox()
	sub, err := e.srv.NC.SubscribeSync(inbox)
	require.NoError(t, err)
	body := fmt.Sprintf(`{"sessionId":%q,"text":%q,"promptId":%q}`, session, text, promptID)
	require.NoError(t, e.srv.NC.PublishRequest("narratoria.narrate", inbox, []byte(body)))
	require.Eventually(t, func() bool { return c.count(text) == 1 }, testlog.Budget(10*time.Second), 10*time.Millisecond)
	return e, c, cfg, sub
}

// A retry that reaches a second live narrator while the first still
// narrates the prompt follows the first one's plan: one plan, and both
// answer with the same narration.
func TestSecondNarratorFollowsTheRunningAttempt(t *testing.T) {
	t.Parallel()
	// The tool is held until the second narrator follows: on a loaded
	// machine that outlasts the 10 s plan timeout, and a replan would make
	// a second plan.
	e, c, cfg, sub := heldRequest(t, "sf", "follow me", "f1")

	b := e.startNarrator(t, cfg, counterPlanner{})
	type answer struct {
		nar *messages.Narration
		err error
	}
	followed := make(chan answer, 1)
	go func() {
		nar, err := b.Narrate(context.Background(), &messages.Prompt{SessionID: "sf", Text: "follow me", PromptID: "f1"}, "")
		followed <- answer{nar, err}
	}()
	require.Eventually(t, func() bool { return e.decided("sf") }, testlog.Budget(10*time.Second), 10*time.Millisecond)
	c.release("follow me")
	msg, err := sub.NextMsg(30 * time.Second)
	require.NoError(t, err)
	require.Empty(t, msg.Header.Get("Nats-Service-Error"))
	var got answer
	select {
	case got = <-followed:
	case <-time.After(30 * time.Second):
		t.Fatal("the second narrator did not answer")
	}
	require.NoError(t, got.err)
	b2, err := json.Marshal(got.nar)
	require.NoError(t, err)
	require.JSONEq(t, string(msg.Data), string(b2), "both narrators answer with the same narration")
	require.Len(t, fetchPlans(t, e, "sf"), 1, "one plan")
	require.Equal(t, 1, c.count("follow me"), "the tool ran once")
}

// On a server without the consumer reset API the prompt consumer is
// recreated at its ack floor; the narrator consumes it as it is (the
// deliver policy of an existing consumer cannot be updated).
func TestRecreatedPromptConsumer(t *testing.T) {
	t.Parallel()
	e, c := newCounterEnv(t)
	a := e.startNarrator(t, durableConfig, counterPlanner{})
	c.hold("r0")
	e.publish(t, "sr", `{"text":"r0","promptId":"r0"}`)
	e.publish(t, "sr", `{"text":"r1","promptId":"r1"}`)
	require.Eventually(t, func() bool { return c.count("r0") == 1 }, testlog.Budget(10*time.Second), 10*time.Millisecond)
	crash(a)

	name := e.promptConsumer("sr")
	cons, err := e.srv.JS.Consumer(context.Background(), messages.StreamPrompts, name)
	require.NoError(t, err)
	cfg := cons.CachedInfo().Config
	// what bus.Rewind does where the reset API is missing: the prompts
	// stream is a work queue, so the consumer is created again delivering
	// all (what is left is what was not acknowledged)
	require.NoError(t, e.srv.JS.DeleteConsumer(context.Background(), messages.StreamPrompts, name))
	cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	_, err = e.srv.JS.CreateConsumer(context.Background(), messages.StreamPrompts, cfg)
	require.NoError(t, err)
	b, err := New(e.srv.Connect(t), durableConfig, Options{Logger: e.log, Bus: e.srv.Bus, Planner: counterPlanner{}})
	require.NoError(t, err)
	require.NoError(t, b.Start(context.Background()))
	t.Cleanup(b.Stop)
	c.release("r0")
	nars := e.waitNarrated(t, "sr", 2)
	require.Equal(t, []string{"r0", "r1"}, []string{nars[0].PromptID, nars[1].PromptID})
	require.Equal(t, 1, c.count("r0"))
	info, err := e.srv.JS.Consumer(context.Background(), messages.StreamPrompts, name)
	require.NoError(t, err)
	require.Equal(t, jetstream.DeliverAllPolicy, info.CachedInfo().Config.DeliverPolicy)
}

func TestSessionQueueOrdersStreamPromptsBySequence(t *testing.T) {
	t.Parallel()
	var q sessionQueue
	for _, seq := range []uint64{5, 7, 0, 9, 8, 6} {
		q.add(&job{seq: seq})
	}
	got := make([]uint64, 0, len(q.pending))
	for _, j := range q.pending {
		got = append(got, j.seq)
	}
	// a request (0) keeps its place; stream prompts after it are ordered
	require.Equal(t, []uint64{5, 7, 0, 6, 8, 9}, got)
}

// TestRequestOutlivesALapsedLease: the narrator's lease on a session's
// partition is lost while a request for that session is in progress (its
// key deleted, as a lapse under load or a store that forgot it would). The
// requester still gets the narration — the prompt is handed on to the
// partition's next owner, here the same narrator — and the tool ran once.
func TestRequestOutlivesALapsedLease(t *testing.T) {
	t.Parallel()
	e, c, _, sub := heldRequest(t, "sl", "lapse me", "l1")

	owners, err := e.srv.JS.KeyValue(context.Background(), messages.BucketOwners)
	require.NoError(t, err)
	key := partition.LeaseKey(partitionGroup, messages.PartitionOf("sl", e.srv.Bus.Partitions))
	require.NoError(t, owners.Delete(context.Background(), key))
	require.Eventually(t, func() bool { return e.rec.Contains("stepping down") || e.rec.Contains("no longer leading") },
		testlog.Budget(10*time.Second), 10*time.Millisecond, "the narrator saw its lease go")
	c.release("lapse me")
	msg, err := sub.NextMsg(testlog.Budget(60 * time.Second))
	require.NoError(t, err)
	require.Empty(t, msg.Header.Get("Nats-Service-Error"), "the request is answered with its narration")
	var nar messages.Narration
	require.NoError(t, json.Unmarshal(msg.Data, &nar))
	require.Equal(t, "l1", nar.PromptID)
	require.Equal(t, 1, c.count("lapse me"), "the tool ran once")
}
