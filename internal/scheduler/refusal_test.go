package scheduler

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strconv"
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
	"github.com/narratoria/runtime/pkg/client"
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
	e, srv := oneMebibyteStores(t)
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

// oneMebibyteStores starts a scheduler and a worker on a server whose
// every stream and bucket holds 1 MiB, with a lease long enough that no
// partition moves while the stores are full (as the narrator's refusal
// test): under a loaded run 3 s leases lapse again and again (a step-down
// after 1.5 s without a renewal), and each hand-over costs seconds; that is
// lease length against CPU starvation, not what these tests are about. A
// partition does move while its stores are full
// (TestFenceRaisedOnAFullStream).
func oneMebibyteStores(t *testing.T) (*env, *natstest.Server) {
	t.Helper()
	srv := natstest.Start(t)
	srv.Bus.StreamMaxBytes, srv.Bus.BucketMaxBytes = 1<<20, 1<<20
	require.NoError(t, bus.Provision(t.Context(), srv.JS, srv.Bus))
	return newEnvOn(t, srv, Config{LeaseTTL: 15 * time.Second}), srv
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
// markers that would free it: once, a bucket filled by new plans stayed
// full (with 200 plans and 64 KiB, 140 plans got no result at all, and the
// next plan none either). Now every plan gets one result — success, or
// storage_refused: refused at intake (naming the bucket), or ended when
// the store refused its state — no plan refused at intake runs a tool, no
// tool runs twice, every tool of the plans that succeed runs, and with no
// operator action the bucket frees itself and the next plans succeed.
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
	ok, refused, ended := map[string]bool{}, map[string]bool{}, 0
	for i, s := range all {
		res := <-s.res
		require.NotNil(t, res, "plan %d got a result", i)
		if res.Success {
			ok[s.p.RequestID] = true
			continue
		}
		require.Equal(t, messages.ReasonStorageRefused, res.FailureReason, "plan %d: %s", i, res.Message)
		require.False(t, res.CanReplan)
		switch {
		case strings.Contains(res.Message, "plans bucket KV_narratoria_plans has no room"),
			strings.Contains(res.Message, "the plan's record was refused") && strings.Contains(res.Message, "maximum bytes exceeded"):
			refused[s.p.RequestID] = true // at intake
		default:
			// Accepted, then its state refused by the full bucket.
			require.Contains(t, res.Message, "the store refused the plan's state", "plan %d", i)
			ended++
		}
	}
	t.Logf("256 KiB plans bucket: %d plans succeeded, %d refused at intake, %d ended when the store refused their state", len(ok), len(refused), ended)
	require.NotEmpty(t, refused, "the bucket filled")
	require.NotEmpty(t, ok, "the plans accepted ran")
	runs := map[string]int{}
	for _, r := range e.log.all() {
		require.False(t, refused[r.plan], "a plan refused at intake ran tool %s", r.tool)
		runs[r.plan+"/"+r.tool]++
	}
	for k, n := range runs {
		require.Equal(t, 1, n, "%s ran %d times", k, n)
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
// records, small, then their tool logs fill it. Once, their writes were
// sent again until an operator gave the bucket room, and a plan sent
// meanwhile waited too. Now the plans whose state the store refuses end
// at once, storage_refused in the server's words, their keys purged by
// request; with no operator, every plan ends with one result, no tool runs
// twice, the late plan gets a result, and the plans after succeed.
func TestPlansBucketReserveExhausted(t *testing.T) {
	testlog.Long(t, "fills a plans bucket past its reserve")
	t.Parallel()
	e, _, seen := smallPlansBucket(t, 64<<10)
	// A small plan, large tool records: each tool stages a 3 KiB patch.
	in := stepInput{Fill: 3 << 10}
	results := map[string]<-chan *messages.ExecutionResult{}
	for i := range 10 {
		p := plan(tool("a", nil, in), tool("b", nil, in), tool("c", nil, in), tool("d", nil, in), tool("e", []string{"a", "b", "c", "d"}, in))
		results[p.RequestID] = e.startPlan(t, fmt.Sprintf("exhaust%d", i), p)
	}
	require.Eventually(t, func() bool {
		return e.rec.Contains("the store refused a plan state write; the plan fails")
	}, testlog.Budget(20*time.Second), 50*time.Millisecond, "the running plans' writes are refused, and the logs say so as errors")
	require.True(t, e.rec.Contains("maximum bytes exceeded"), "in the server's words")
	late := plan(tool("a", nil, stepInput{}))
	results[late.RequestID] = e.startPlan(t, "exhaust-late", late)
	refused := 0
	for id, c := range results {
		res := <-c
		require.NotNil(t, res, "plan %s got a result", id)
		if !res.Success {
			require.Equal(t, messages.ReasonStorageRefused, res.FailureReason, "plan %s: %s", id, res.Message)
			refused++
		}
	}
	require.Positive(t, refused)
	runs := map[string]int{}
	for _, r := range e.log.all() {
		runs[r.plan+"/"+r.tool]++
	}
	for k, n := range runs {
		require.Equal(t, 1, n, "%s ran %d times", k, n)
	}
	require.Eventually(t, func() bool {
		return e.runPlan(t, "exhaust-after", plan(tool("a", nil, stepInput{}))).Success
	}, testlog.Budget(15*time.Second), 100*time.Millisecond, "the bucket freed itself")
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

// TestFullPlansBucketFreesItself (issue 46): with every store capped at
// 1 MiB, a burst of plans with small records and large outputs (48 KiB
// each, held while a second tool runs) fills the plans bucket. A full
// bucket refuses the plans' tool logs and the purge markers that would
// free it: the plans whose state it refuses end (storage_refused, one
// result each, no tool run twice) and the finished plans' keys are purged
// by request — so, with no operator, ordinary plans are admitted again
// within 10 s of the bucket having room, and no plan is refused at intake
// while the bucket is under half full. (An earlier gate learned a growth
// figure from finished plans: after such a burst it refused 283 of 300
// ordinary plans in a bucket 1–11 % full; before it, the full bucket
// stayed full.)
func TestFullPlansBucketFreesItself(t *testing.T) {
	t.Parallel()
	e, srv := oneMebibyteStores(t)
	seen := resultsSeen(t, srv)
	plansBucket, err := srv.JS.Stream(t.Context(), "KV_"+messages.BucketPlans)
	require.NoError(t, err)
	// A refusal at intake says how full the bucket was; none may come
	// under half full.
	noRoom := regexp.MustCompile(`has no room for new plans: (\d+) of (\d+) bytes used`)
	checkRefusal := func(what string, res *messages.ExecutionResult) {
		require.Equal(t, messages.ReasonStorageRefused, res.FailureReason, "%s: %s", what, res.Message)
		require.False(t, res.CanReplan)
		if m := noRoom.FindStringSubmatch(res.Message); m != nil {
			used, _ := strconv.ParseInt(m[1], 10, 64)
			limit, _ := strconv.ParseInt(m[2], 10, 64)
			require.GreaterOrEqual(t, 2*used, limit, "%s refused at intake with the bucket under half full: %s", what, res.Message)
		} else {
			// The store's own refusal (the bucket full when the write came):
			// the plan's state as it ran, or its record at intake.
			require.True(t, strings.Contains(res.Message, "the store refused the plan's state") ||
				strings.Contains(res.Message, "the plan's record was refused") && strings.Contains(res.Message, "maximum bytes exceeded"), "%s: %s", what, res.Message)
		}
	}

	type sent struct {
		id  string
		res <-chan *messages.ExecutionResult
	}
	var burst []sent
	burstAt := time.Now()
	for i := range 60 {
		p := plan(tool("a", nil, stepInput{Big: 48 << 10}), tool("b", []string{"a"}, stepInput{SleepMs: 1500}))
		burst = append(burst, sent{p.RequestID, e.startPlan(t, fmt.Sprintf("burst%02d", i), p)})
	}
	// Meanwhile the bucket's size is watched: full past half, then the
	// moment it has room again (under half full).
	var mu sync.Mutex
	var fullAt, roomAt time.Time
	watch := make(chan struct{})
	go func() {
		defer close(watch)
		for stop := time.Now().Add(testlog.Budget(60 * time.Second)); time.Now().Before(stop); time.Sleep(20 * time.Millisecond) {
			info, err := plansBucket.Info(t.Context())
			if err != nil {
				continue
			}
			half := 2*int64(info.State.Bytes) >= info.Config.MaxBytes
			mu.Lock()
			switch {
			case half && fullAt.IsZero():
				fullAt = time.Now()
			case !half && !fullAt.IsZero() && roomAt.IsZero():
				roomAt = time.Now()
			}
			done := !roomAt.IsZero()
			mu.Unlock()
			if done {
				return
			}
		}
	}()
	// Ordinary plans, one after another from the burst on, with no
	// operator acting: after the bucket has room, one is admitted within
	// 10 s.
	var admittedAt time.Time
	for n := 0; ; n++ {
		res := e.runPlan(t, fmt.Sprintf("after%d", n%8), plan(tool("a", nil, stepInput{})))
		require.NotNil(t, res)
		mu.Lock()
		room := roomAt
		mu.Unlock()
		if res.Success && !room.IsZero() {
			admittedAt = time.Now()
			break
		}
		if !res.Success {
			checkRefusal(fmt.Sprintf("ordinary plan %d", n), res)
		}
		select {
		case <-watch:
			mu.Lock()
			room = roomAt
			mu.Unlock()
			require.False(t, room.IsZero(), "the bucket never had room again (full since %v)", !fullAt.IsZero())
		default:
		}
	}
	<-watch
	require.False(t, fullAt.IsZero(), "the burst filled the bucket past half")
	t.Logf("bucket past half full %s into the burst, under half again %s later; an ordinary plan admitted %s after that",
		fullAt.Sub(burstAt).Round(time.Millisecond), roomAt.Sub(fullAt).Round(time.Millisecond), admittedAt.Sub(roomAt).Round(time.Millisecond))
	require.LessOrEqual(t, admittedAt.Sub(roomAt), testlog.Budget(10*time.Second), "admitted again within 10 s of the bucket having room")

	ok, refusedAtIntake, refusedState := 0, 0, 0
	for i, s := range burst {
		res := <-s.res
		require.NotNil(t, res, "burst plan %d got a result", i)
		if res.Success {
			ok++
			continue
		}
		checkRefusal(fmt.Sprintf("burst plan %d", i), res)
		if noRoom.MatchString(res.Message) {
			refusedAtIntake++
		} else {
			refusedState++
		}
	}
	t.Logf("burst of 60 into a 1 MiB plans bucket: %d succeeded, %d refused at intake, %d ended when the store refused their state", ok, refusedAtIntake, refusedState)
	require.Positive(t, refusedState, "the bucket filled under the running plans")
	require.Positive(t, ok, "the plans that fitted ran")
	require.True(t, e.rec.Contains("the store refused a plan state write; the plan fails"), "the logs say it")

	// And from then on, every ordinary plan is admitted, 20 at once.
	var after []sent
	for i := range 20 {
		p := plan(tool("a", nil, stepInput{}))
		after = append(after, sent{p.RequestID, e.startPlan(t, fmt.Sprintf("ordinary%02d", i), p)})
	}
	for i, s := range after {
		res := <-s.res
		require.NotNil(t, res)
		require.True(t, res.Success, "ordinary plan %d: %s", i, res.Message)
	}

	runs := map[string]int{}
	for _, r := range e.log.all() {
		runs[r.plan+"/"+r.tool]++
	}
	for k, n := range runs {
		require.Equal(t, 1, n, "%s ran %d times", k, n)
	}
	for _, s := range append(burst, after...) {
		require.Equal(t, 1, seen()[s.id], "plan %s: one result", s.id)
	}
}

// TestPurgeFromAFullBucket: a finished plan's keys leave a plans bucket
// full to the last byte, which refuses the purge markers (messages too):
// the scheduler purges them with the stream's purge request, filtered by
// their subjects, which stores nothing. Without it such a bucket stayed
// full for good.
func TestPurgeFromAFullBucket(t *testing.T) {
	t.Parallel()
	srv, kv, _, s := plansStore(t, 16<<10)
	ctx := t.Context()
	for _, k := range []string{planKey("done"), toolLogKey("done"), planKey("other")} {
		_, err := kv.Put(ctx, k, make([]byte, 1<<10))
		require.NoError(t, err)
	}
	n := 0
	for size := 4 << 10; size >= 1; size /= 2 {
		for {
			if _, err := kv.Put(ctx, fmt.Sprintf("fill.%d", n), make([]byte, size)); err != nil {
				require.True(t, client.Refused(err), "%v", err)
				break
			}
			n++
		}
	}
	_, err := srv.JS.PublishMsg(ctx, bus.KVPurgeMsg(messages.BucketPlans, planKey("done"), time.Minute))
	require.True(t, client.Refused(err), "the full bucket refuses a purge marker: %v", err)

	require.NoError(t, s.purge(ctx, "done", false))
	for _, k := range []string{planKey("done"), toolLogKey("done")} {
		_, err := kv.Get(ctx, k)
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "%s purged", k)
	}
	_, err = kv.Get(ctx, planKey("other"))
	require.NoError(t, err, "another plan's key stays")
	_, err = kv.Put(ctx, "fill.after", make([]byte, 1<<10))
	require.NoError(t, err, "the bucket has room again")
}

// TestPurgeMarkersOnlyUnderHalf: finished plans' purge markers stay a
// minute, so a steady flow of plans keeps a minute of them in the plans
// bucket — about 800 KiB at 40 plans a second, which held a 1 MiB bucket
// at the intake gate's 80% for good in a slow run of
// TestFullPlansBucketFreesItself. Under half full a finished plan's keys
// get markers (a watcher sees them go); past it they are purged by
// request, which stores nothing.
func TestPurgeMarkersOnlyUnderHalf(t *testing.T) {
	t.Parallel()
	srv, kv, st, s := plansStore(t, 64<<10)
	ctx := t.Context()
	marked := func(plan string) bool {
		seq, err := bus.LastSeq(ctx, srv.NC, st.CachedInfo().Config.Name, bus.KVSubject(messages.BucketPlans, planKey(plan)))
		require.NoError(t, err)
		return seq > 0
	}
	finish := func(plan string) {
		t.Helper()
		for _, k := range []string{planKey(plan), toolLogKey(plan)} {
			_, err := kv.Put(ctx, k, make([]byte, 512))
			require.NoError(t, err)
		}
		s.room = newRoom(st)
		s.room.read(ctx)
		require.NoError(t, s.purge(ctx, plan, false))
		_, err := kv.Get(ctx, planKey(plan))
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound)
	}

	finish("early")
	require.True(t, marked("early"), "under half full, the keys go with markers")

	_, err := kv.Put(ctx, "fill", make([]byte, 36<<10))
	require.NoError(t, err)
	finish("late")
	require.False(t, marked("late"), "past half full, the keys go by request: no marker stored")
}

// plansStore starts a server whose plans bucket takes maxBytes and returns
// it with the bucket, its stream and a store over them.
func plansStore(t *testing.T, maxBytes int64) (*natstest.Server, jetstream.KeyValue, jetstream.Stream, *store) {
	t.Helper()
	srv := natstest.Start(t)
	setPlansBucketBytes(t, srv, maxBytes)
	kv, err := srv.JS.KeyValue(t.Context(), messages.BucketPlans)
	require.NoError(t, err)
	st, err := srv.JS.Stream(t.Context(), "KV_"+messages.BucketPlans)
	require.NoError(t, err)
	return srv, kv, st, &store{js: srv.JS, kv: kv, stream: st}
}
