package scheduler

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/embedded"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/planfsm"
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
	// (The plan carries both patches: its record, 106 KiB, leaves the
	// headroom the store needs under the 128 KiB maximum payload.)
	res := e.runPlan(t, "big", plan(tool("a", nil, stepInput{Patch: patch(52 << 10)}), tool("b", nil, stepInput{Patch: map[string]any{"c": strings.Repeat("y", 52<<10)}})))
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
	res = e.runPlan(t, "wide", plan(tool("a", nil, stepInput{Patch: patch(40 << 10)}), tool("b", nil, stepInput{Patch: map[string]any{"c": strings.Repeat("y", 40<<10)}}),
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
// server's "maximum bytes" (or the plans bucket's reserve); the logs say
// it; and once space returns (the full buckets purged) the next plans
// commit with no restart.
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
		// The server's words, or intake's for a plans bucket past its
		// reserve (TestPlansBucketFullRefusesAndHeals).
		require.True(t, strings.Contains(res.Message, "maximum bytes") || strings.Contains(res.Message, "plans bucket KV_narratoria_plans has no room"),
			"plan %d: %s", i, res.Message)
	}
	t.Logf("1 MiB stores: %d plans succeeded, %d refused with storage_refused; the slowest result came %s after its plan", ok, refused, slowest)
	require.Positive(t, refused, "the stores filled")
	require.LessOrEqual(t, slowest, testlog.Budget(10*time.Second), "every plan answered within 10 s")
	require.True(t, e.rec.Contains("maximum bytes") || e.rec.Contains("plan refused for want of room in the plans bucket"), "the logs say it")

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

// setPlansBucketBytes sets the plans bucket's byte limit, as an operator
// would with nats stream edit.
func setPlansBucketBytes(t *testing.T, srv *natstest.Server, n int64) {
	t.Helper()
	st, err := srv.JS.Stream(t.Context(), "KV_"+messages.BucketPlans)
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	cfg.MaxBytes = n
	_, err = srv.JS.UpdateStream(t.Context(), cfg)
	require.NoError(t, err)
}

// smallPlansBucket starts a scheduler and a worker on a server whose plans
// bucket holds n bytes, with a lease long enough that no partition moves
// while it is full (TestOneMebibyteStores says why), and counts the
// results published (resultsSeen).
func smallPlansBucket(t *testing.T, n int64) (*env, *natstest.Server, func() map[string]int) {
	t.Helper()
	srv := natstest.Start(t)
	e := newEnvOn(t, srv, Config{LeaseTTL: 15 * time.Second})
	setPlansBucketBytes(t, srv, n)
	return e, srv, resultsSeen(t, srv)
}

// resultsSeen counts the results published on each plan's subject, as a
// game server subscribed to them would receive them.
func resultsSeen(t *testing.T, srv *natstest.Server) func() map[string]int {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]int{}
	sub, err := srv.NC.Subscribe("narratoria.results.>", func(m *nats.Msg) {
		mu.Lock()
		seen[m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]]++
		mu.Unlock()
	})
	require.NoError(t, err)
	require.NoError(t, srv.NC.Flush())
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(seen)
	}
}

// TestPlansBucketFullRefusesAndHeals: a burst of 400 two-tool plans into a
// 256 KiB plans bucket, far more than fits. A full bucket refuses the purge
// markers that would free it, and the scheduler may not purge it any other
// way, so a bucket filled by new plans stayed full: with 200 plans and
// 64 KiB, 140 plans got no result at all, and the next plan none either.
// Now intake admits a plan only with room for what the plans running are
// expected to write: every plan gets one result — success, or
// storage_refused naming the bucket — no refused plan runs a tool, every
// tool of the others runs once, and with no operator action the bucket
// frees itself and the next plans succeed. (The bucket is not smaller: the
// finished plans' purge markers, 170 bytes each for a minute, would fill
// it for that minute.)
func TestPlansBucketFullRefusesAndHeals(t *testing.T) {
	t.Parallel()
	e, _, seen := smallPlansBucket(t, 256<<10)
	type sent struct {
		p   *messages.Plan
		res <-chan *messages.ExecutionResult
	}
	var all []sent
	for i := range 400 {
		p := plan(tool("a", nil, stepInput{SleepMs: 100, Output: map[string]any{"o": strings.Repeat("z", 2<<10)}}), tool("b", []string{"a"}, stepInput{}))
		all = append(all, sent{p, e.startPlan(t, fmt.Sprintf("full%02d", i%40), p)})
	}
	ok, refused := map[string]bool{}, map[string]bool{}
	for i, s := range all {
		res := <-s.res
		require.NotNil(t, res, "plan %d got a result", i)
		if res.Success {
			ok[s.p.RequestID] = true
			continue
		}
		refused[s.p.RequestID] = true
		require.Equal(t, messages.ReasonStorageRefused, res.FailureReason, "plan %d: %s", i, res.Message)
		require.False(t, res.CanReplan)
		require.Contains(t, res.Message, "plans bucket KV_narratoria_plans has no room", "plan %d", i)
	}
	t.Logf("256 KiB plans bucket: %d plans succeeded, %d refused", len(ok), len(refused))
	require.NotEmpty(t, refused, "the bucket filled")
	require.NotEmpty(t, ok, "the plans accepted ran")
	runs := map[string]int{}
	for _, r := range e.log.all() {
		require.False(t, refused[r.plan], "a refused plan ran tool %s", r.tool)
		runs[r.plan+"/"+r.tool]++
	}
	for id := range ok {
		require.Equal(t, 1, runs[id+"/a"], "plan %s tool a", id)
		require.Equal(t, 1, runs[id+"/b"], "plan %s tool b", id)
	}
	require.True(t, e.rec.Contains("plan refused for want of room in the plans bucket"), "the logs say it")

	// No operator acts: the finished plans' purges free the bucket, and
	// new plans run again.
	require.Eventually(t, func() bool {
		return e.runPlan(t, "full-after", plan(tool("a", nil, stepInput{}))).Success
	}, testlog.Budget(15*time.Second), 100*time.Millisecond)
	for i := range 5 {
		res := e.runPlan(t, fmt.Sprintf("full-after%d", i), plan(tool("a", nil, stepInput{}), tool("b", []string{"a"}, stepInput{})))
		require.True(t, res.Success, "%s", res.Message)
	}
	for _, s := range all {
		require.Equal(t, 1, seen()[s.p.RequestID], "plan %s: one result", s.p.RequestID)
	}
}

// TestPlansBucketReserveExhausted breaks what the reserve assumes: that
// the plans running when intake stops can finish within the last 20 % of
// the bucket. Ten plans of five tools, each tool staging a 3 KiB state
// patch, take far more than a 64 KiB bucket: intake admits them by their
// records, small, as the first plans of a scheduler (nothing learned yet),
// then their tool logs fill it. Then the plans wait for room, each
// refused write sent again and logged as an error naming the store's
// refusal, and no result is made up (a plan sent meanwhile waits too when
// its partition's writes are stuck, or is refused at once); once an
// operator gives the bucket room, every plan ends with one result and no
// tool has run twice.
func TestPlansBucketReserveExhausted(t *testing.T) {
	testlog.Long(t, "fills a plans bucket past its reserve and waits for an operator")
	t.Parallel()
	e, srv, seen := smallPlansBucket(t, 64<<10)
	// A small plan, large tool records: each tool stages a 3 KiB patch.
	in := stepInput{Fill: 3 << 10}
	results := map[string]<-chan *messages.ExecutionResult{}
	for i := range 10 {
		p := plan(tool("a", nil, in), tool("b", nil, in), tool("c", nil, in), tool("d", nil, in), tool("e", []string{"a", "b", "c", "d"}, in))
		results[p.RequestID] = e.startPlan(t, fmt.Sprintf("exhaust%d", i), p)
	}
	require.Eventually(t, func() bool {
		return e.rec.Contains("the store refuses a plan state write; sending it again until it has room")
	}, testlog.Budget(20*time.Second), 50*time.Millisecond, "the running plans' writes are refused, and the logs say so as errors")
	require.True(t, e.rec.Contains("maximum bytes exceeded"), "in the server's words")
	late := plan(tool("a", nil, stepInput{}))
	results[late.RequestID] = e.startPlan(t, "exhaust-late", late)
	time.Sleep(testlog.Budget(time.Second))
	for id, c := range results {
		select {
		case res := <-c:
			// Only a refusal can come before there is room.
			require.NotNil(t, res, "plan %s", id)
			require.Equal(t, messages.ReasonStorageRefused, res.FailureReason, "plan %s: %s", id, res.Message)
			results[id] = nil
		default:
		}
	}

	// The operator gives the bucket room: every plan ends, once.
	setPlansBucketBytes(t, srv, 4<<20)
	for id, c := range results {
		if c == nil {
			continue
		}
		res := <-c
		require.NotNil(t, res, "plan %s got a result", id)
		if !res.Success {
			require.Equal(t, messages.ReasonStorageRefused, res.FailureReason, "plan %s: %s", id, res.Message)
		}
	}
	runs := map[string]int{}
	for _, r := range e.log.all() {
		runs[r.plan+"/"+r.tool]++
	}
	for k, n := range runs {
		require.Equal(t, 1, n, "%s ran %d times", k, n)
	}
	time.Sleep(testlog.Budget(500 * time.Millisecond)) // a second result would be on its way
	for id := range results {
		require.Equal(t, 1, seen()[id], "plan %s: one result", id)
	}
}

// TestFullJobsStreamIsTheStoresFailure (issue 44): a job refused by a full
// jobs stream fails its attempt as the store's failure, not the skill's:
// the plan ends storage_refused, not replanned, its skill left out of
// disabledSkills; once the stream has room, plans run again.
func TestFullJobsStreamIsTheStoresFailure(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	e := newEnvOn(t, srv, Config{})
	// The stream holds only what it holds now (its partitions' fences).
	st, err := srv.JS.Stream(t.Context(), messages.StreamJobs)
	require.NoError(t, err)
	info, err := st.Info(t.Context())
	require.NoError(t, err)
	cfg := info.Config
	old := cfg.MaxMsgs
	cfg.MaxMsgs, cfg.Discard = int64(info.State.Msgs), jetstream.DiscardNew
	_, err = srv.JS.UpdateStream(t.Context(), cfg)
	require.NoError(t, err)
	res := e.runPlan(t, "fulljobs", plan(tool("a", nil, stepInput{})))
	require.False(t, res.Success)
	require.Equal(t, messages.ReasonStorageRefused, res.FailureReason, res.Message)
	require.False(t, res.CanReplan, "no other plan would fare better against a full store")
	require.Empty(t, res.DisabledSkills, "the skill did nothing wrong")
	require.Contains(t, res.Message, "the store refused the job")
	require.Equal(t, planfsm.CodeStorageRefused, res.ToolResults[0].Error.Code)
	require.Equal(t, messages.CategoryInfrastructure, res.ToolResults[0].Error.Category)
	require.Empty(t, e.log.all(), "no script ran")
	cfg.MaxMsgs = old
	_, err = srv.JS.UpdateStream(t.Context(), cfg)
	require.NoError(t, err)
	require.True(t, e.runPlan(t, "fulljobs", plan(tool("a", nil, stepInput{}))).Success, "room again: plans run")
}

// TestRecordTooLargeRefusedAtIntake: a plan under every plan limit whose
// record is more than one message of the store may hold (the server's
// maximum payload, here 128 KiB) is refused at intake with
// storage_refused, its result naming the sizes — never a write sent again
// for ever, which would hold its partition's intake — and the next plan of
// the same session runs.
func TestRecordTooLargeRefusedAtIntake(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWith(t, embedded.Options{MaxPayload: 128 << 10})
	e := newEnvOn(t, srv, Config{})
	// 120 KiB of input: the plan itself passes the door (128 KiB), its
	// record and its headroom do not.
	res := e.runPlan(t, "s", plan(tool("a", nil, stepInput{Output: map[string]any{"o": strings.Repeat("z", 120<<10)}})))
	require.False(t, res.Success)
	require.Equal(t, messages.ReasonStorageRefused, res.FailureReason)
	require.Contains(t, res.Message, "bytes the store takes in one message (the server's max_payload)")
	require.True(t, e.rec.Contains("plan refused at intake"))
	require.Equal(t, 1.0, testutil.ToFloat64(e.sch.m.refused.WithLabelValues("record", "")))
	res = e.runPlan(t, "s", plan(tool("a", nil, stepInput{})))
	require.True(t, res.Success, "the session's next plan runs: %s", res.Message)
}
