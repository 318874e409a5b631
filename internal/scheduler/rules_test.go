package scheduler

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

func starts(l *runLog) []string {
	runs := l.all()
	sort.Slice(runs, func(i, j int) bool { return runs[i].start.Before(runs[j].start) })
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.tool
	}
	return out
}

func TestOrderRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Concurrency: 4})
	t.Run("chain", func(t *testing.T) {
		e.log.runs = nil
		res := e.runPlan(t, "s1", plan(tool("c", []string{"b"}, stepInput{}), tool("b", []string{"a"}, stepInput{}), tool("a", nil, stepInput{})))
		require.True(t, res.Success, res.Message)
		require.Equal(t, []string{"a", "b", "c"}, starts(e.log))
		for _, pair := range [][2]string{{"a", "b"}, {"b", "c"}} {
			require.False(t, e.log.of(pair[1])[0].start.Before(e.log.of(pair[0])[0].end), "%s started before %s ended", pair[1], pair[0])
		}
	})
	t.Run("sequential with ties in array order", func(t *testing.T) {
		e.log.runs = nil
		res := e.runPlan(t, "s1", plan(tool("z", nil, stepInput{SleepMs: 20}), tool("y", nil, stepInput{SleepMs: 20}), tool("x", []string{"z"}, stepInput{})))
		require.True(t, res.Success, res.Message)
		// Kahn with ties by plan index: z, then x (ready, index 2) vs y (index 1) -> y first
		require.Equal(t, []string{"z", "y", "x"}, starts(e.log))
		runs := e.log.all()
		for i := range runs {
			for j := range runs {
				if i != j {
					overlap := runs[i].start.Before(runs[j].end) && runs[j].start.Before(runs[i].end)
					require.False(t, overlap, "sequential plan ran %s and %s together", runs[i].tool, runs[j].tool)
				}
			}
		}
	})
	t.Run("parallel diamond", func(t *testing.T) {
		e.log.runs = nil
		async := func(tl *messages.Tool) { tl.Async = true }
		p := plan(tool("a", nil, stepInput{}, async), tool("b", []string{"a"}, stepInput{SleepMs: 300}, async),
			tool("c", []string{"a"}, stepInput{SleepMs: 300}, async), tool("d", []string{"b", "c"}, stepInput{}, async))
		p.Parallel = true
		res := e.runPlan(t, "s1", p)
		require.True(t, res.Success, res.Message)
		a, b, c, d := e.log.of("a")[0], e.log.of("b")[0], e.log.of("c")[0], e.log.of("d")[0]
		require.False(t, b.start.Before(a.end))
		require.False(t, c.start.Before(a.end))
		require.True(t, b.start.Before(c.end) && c.start.Before(b.end), "b and c overlap")
		require.False(t, d.start.Before(b.end))
		require.False(t, d.start.Before(c.end))
		require.Equal(t, []string{"a", "b", "c", "d"}, []string{res.ToolResults[0].ToolID, res.ToolResults[1].ToolID, res.ToolResults[2].ToolID, res.ToolResults[3].ToolID})
	})
}

func maxOverlap(runs []run) int {
	type ev struct {
		at    time.Time
		delta int
	}
	var evs []ev
	for _, r := range runs {
		evs = append(evs, ev{r.start, 1}, ev{r.end, -1})
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at.Equal(evs[j].at) {
			return evs[i].delta < evs[j].delta
		}
		return evs[i].at.Before(evs[j].at)
	})
	cur, best := 0, 0
	for _, e := range evs {
		cur += e.delta
		best = max(best, cur)
	}
	return best
}

func TestConcurrencyLimitAndExclusive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Concurrency: 2})
	async := func(tl *messages.Tool) { tl.Async = true }
	var tools []messages.Tool
	for _, id := range []string{"t1", "t2", "t3", "t4", "t5", "t6"} {
		tools = append(tools, tool(id, nil, stepInput{SleepMs: 150}, async))
	}
	p := plan(tools...)
	p.Parallel = true
	res := e.runPlan(t, "s1", p)
	require.True(t, res.Success)
	require.Equal(t, 2, maxOverlap(e.log.all()), "the concurrency limit is reached and never exceeded")

	e.log.runs = nil
	p = plan(tool("a1", nil, stepInput{SleepMs: 150}, async), tool("solo", nil, stepInput{SleepMs: 150}), tool("a2", nil, stepInput{SleepMs: 150}, async))
	p.Parallel = true
	res = e.runPlan(t, "s1", p)
	require.True(t, res.Success)
	solo := e.log.of("solo")[0]
	for _, r := range e.log.all() {
		if r.tool != "solo" {
			overlap := r.start.Before(solo.end) && solo.start.Before(r.end)
			require.False(t, overlap, "async:false tool ran together with %s", r.tool)
		}
	}
}

func TestRetryBackoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p := plan(tool("flaky", nil, stepInput{FailTimes: 3}, func(tl *messages.Tool) {
		tl.RetryPolicy = messages.RetryPolicy{MaxRetries: 3, BackoffMs: 100}
	}))
	res := e.runPlan(t, "s1", p)
	require.True(t, res.Success, res.Message)
	runs := e.log.of("flaky")
	require.Len(t, runs, 4)
	for i, want := range []time.Duration{100, 200, 400} {
		gap := runs[i+1].start.Sub(runs[i].end)
		require.GreaterOrEqual(t, gap, want*time.Millisecond, "retry %d waited %s", i+1, gap)
		require.Equal(t, i+2, runs[i+1].attempt)
	}
	require.Equal(t, 3, toolResult(t, res, "flaky").RetryCount)
	require.Len(t, toolResult(t, res, "flaky").Events, 4, "every attempt's events are kept")
}

func TestToolTimeoutAndPlanTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p := plan(tool("slow", nil, stepInput{Hang: true}, func(tl *messages.Tool) { tl.TimeoutMs = 300 }))
	t0 := time.Now()
	res := e.runPlan(t, "s1", p)
	require.False(t, res.Success)
	tr := toolResult(t, res, "slow")
	require.Equal(t, messages.ToolTimeout, tr.State)
	require.Equal(t, messages.ReasonTimeout, res.FailureReason)
	require.Less(t, time.Since(t0), testlog.Budget(10*time.Second))

	p = plan(tool("long", nil, stepInput{Hang: true}), tool("after", []string{"long"}, stepInput{}))
	p.TimeoutMs = 500
	t0 = time.Now()
	res = e.runPlan(t, "s2", p)
	require.GreaterOrEqual(t, time.Since(t0), 450*time.Millisecond)
	require.Less(t, time.Since(t0), testlog.Budget(10*time.Second))
	require.False(t, res.Success)
	require.Equal(t, messages.ReasonTimeout, res.FailureReason)
	require.Equal(t, messages.ToolTimeout, toolResult(t, res, "long").State)
	require.Equal(t, messages.ToolSkipped, toolResult(t, res, "after").State)
}

func TestFailureSemantics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Concurrency: 4})
	async := func(tl *messages.Tool) { tl.Async = true }
	// a fails (required): b, c (transitive) skipped; x -> y independent complete
	p := plan(tool("a", nil, stepInput{FailTimes: 1}, async), tool("b", []string{"a"}, stepInput{}, async),
		tool("c", []string{"b"}, stepInput{}, async), tool("x", nil, stepInput{SleepMs: 100}, async), tool("y", []string{"x"}, stepInput{}, async))
	p.Parallel = true
	res := e.runPlan(t, "s1", p)
	require.False(t, res.Success)
	require.True(t, res.CanReplan)
	require.Equal(t, messages.ReasonToolFailure, res.FailureReason)
	require.Equal(t, []string{"a"}, res.FailedTools)
	require.Equal(t, []string{"test"}, res.DisabledSkills)
	require.Equal(t, messages.ToolFailed, toolResult(t, res, "a").State)
	for _, id := range []string{"b", "c"} {
		tr := toolResult(t, res, id)
		require.Equal(t, messages.ToolSkipped, tr.State)
		require.Equal(t, "dependency_failed", tr.Error.Code)
		require.Empty(t, e.log.of(id), "%s never ran", id)
	}
	require.Equal(t, messages.ToolSuccess, toolResult(t, res, "x").State)
	require.Equal(t, messages.ToolSuccess, toolResult(t, res, "y").State)

	// a non-required failure: the dependent runs and sees null
	e.log.runs = nil
	p = plan(tool("opt", nil, stepInput{FailTimes: 1}, func(tl *messages.Tool) { tl.Required = false }),
		tool("dep", []string{"opt"}, stepInput{}, func(tl *messages.Tool) { tl.Input = json.RawMessage(`{"prev":"$opt","field":"$opt.tool"}`) }))
	res = e.runPlan(t, "s1", p)
	require.True(t, res.Success, res.Message)
	dep := e.log.of("dep")
	require.Len(t, dep, 1)
	require.Contains(t, dep[0].input, "prev")
	require.Nil(t, dep[0].input["prev"])
	require.Nil(t, dep[0].input["field"])
	require.Equal(t, []string{"opt"}, res.FailedTools)
}

func TestReferences(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p := plan(
		tool("roll", nil, stepInput{Output: map[string]any{"total": 17, "rolls": []any{9, 8}, "meta": map[string]any{"die": "d20"}}}),
		tool("use", []string{"roll"}, stepInput{}, func(tl *messages.Tool) {
			tl.Input = json.RawMessage(`{"all":"$roll","total":"$roll.total","second":"$roll.rolls.1","die":"$roll.meta.die","missing":"$roll.nope","price":"$$5","nested":{"list":["$roll.total"]}}`)
		}))
	res := e.runPlan(t, "s1", p)
	require.True(t, res.Success, res.Message)
	in := e.log.of("use")[0].input
	require.EqualValues(t, 17, in["total"])
	require.EqualValues(t, 8, in["second"])
	require.Equal(t, "d20", in["die"])
	require.Nil(t, in["missing"])
	require.Equal(t, "$5", in["price"])
	require.EqualValues(t, 17, in["all"].(map[string]any)["total"])
	require.EqualValues(t, 17, in["nested"].(map[string]any)["list"].([]any)[0])
}

func TestRejections(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxPlanTools: 50})
	valid := func(mod func(p *messages.Plan)) *messages.Plan {
		p := plan(tool("a", nil, stepInput{}), tool("b", []string{"a"}, stepInput{}))
		mod(p)
		return p
	}
	cases := []struct {
		name    string
		plan    *messages.Plan
		reason  string
		message string
	}{
		{"cycle", valid(func(p *messages.Plan) { p.Tools[0].Dependencies = []string{"b"} }), messages.ReasonCircularDependency, "cycle: a -> b -> a"},
		{"unknown dependency", valid(func(p *messages.Plan) { p.Tools[1].Dependencies = []string{"ghost"} }), messages.ReasonInvalidPlan, `depends on "ghost"`},
		{"duplicate ID", valid(func(p *messages.Plan) { p.Tools[1].ToolID = "a"; p.Tools[1].Dependencies = []string{} }), messages.ReasonInvalidPlan, `"a" is defined more than once`},
		{"unknown skill", valid(func(p *messages.Plan) { p.Tools[1].ToolPath = "nobody/step" }), messages.ReasonUnknownSkill, `skill "nobody" is not registered`},
		{"unknown script", valid(func(p *messages.Plan) { p.Tools[1].ToolPath = "test/nope" }), messages.ReasonUnknownSkill, `has no script`},
		{"traversal", valid(func(p *messages.Plan) { p.Tools[1].ToolPath = "test/../../etc/passwd" }), messages.ReasonInvalidPlan, `".." is not allowed`},
		{"absolute", valid(func(p *messages.Plan) { p.Tools[1].ToolPath = "/bin/sh" }), messages.ReasonInvalidPlan, "absolute paths are not allowed"},
		{"disabled skill", valid(func(p *messages.Plan) { p.DisabledSkills = []string{"test"} }), messages.ReasonInvalidPlan, `which the plan's disabledSkills lists`},
		{"too many tools", valid(func(p *messages.Plan) {
			for i := range 60 {
				p.Tools = append(p.Tools, tool("x"+string(rune('A'+i%26))+strings.Repeat("z", i/26), nil, stepInput{}))
			}
		}), messages.ReasonInvalidPlan, "limits.maxPlanTools"},
		{"non-ancestor ref", valid(func(p *messages.Plan) { p.Tools[0].Input = json.RawMessage(`{"x":"$b"}`) }), messages.ReasonInvalidPlan, `not an ancestor`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.log.runs = nil
			res := e.runPlan(t, "s1", c.plan)
			require.False(t, res.Success)
			require.True(t, res.CanReplan)
			require.Equal(t, c.reason, res.FailureReason, res.Message)
			require.Contains(t, res.Message, c.message)
			require.Empty(t, e.log.all(), "nothing ran")
		})
	}
	for _, c := range []struct{ body, reason string }{
		{"{oops", messages.ReasonInvalidJSON},
		{`{"requestId":"not-a-uuid","tools":[]}`, messages.ReasonInvalidPlan},
	} {
		body := c.body
		t.Run("no usable requestId "+body, func(t *testing.T) {
			// Nothing can be addressed to the plan: the problem is reported
			// on the session's unaddressed results, and logged.
			sub, err := e.srv.NC.SubscribeSync("narratoria.results.s1.unaddressed")
			require.NoError(t, err)
			defer sub.Unsubscribe()
			_, err = e.srv.JS.Publish(t.Context(), "narratoria.plans.s1", []byte(body))
			require.NoError(t, err)
			m, err := sub.NextMsg(10 * time.Second)
			require.NoError(t, err, "an answer on narratoria.results.s1.unaddressed")
			var res messages.ExecutionResult
			require.NoError(t, json.Unmarshal(m.Data, &res))
			require.False(t, res.Success)
			require.Empty(t, res.PlanID)
			require.Equal(t, "s1", res.SessionID)
			require.Equal(t, c.reason, res.FailureReason)
			require.Contains(t, res.Message, "no usable requestId")
			require.True(t, e.rec.Contains("invalid plan without a usable requestId"))
		})
	}
	t.Run("bad JSON with an id", func(t *testing.T) {
		res := e.runPlan(t, "s1", `{"requestId":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","tools":"nope"}`)
		require.Equal(t, messages.ReasonInvalidPlan, res.FailureReason)
		require.Contains(t, res.Message, "tools")
	})
}

func TestNarrativeOnlyPlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p := plan()
	p.Tools = []messages.Tool{} // nil would be "tools": null, which the schema rejects
	p.Narrative = "Nothing stirs."
	res := e.runPlan(t, "s1", p)
	require.True(t, res.Success)
	require.Empty(t, res.ToolResults)
	require.Equal(t, "Nothing stirs.", res.Narrative)
	require.JSONEq(t, `{}`, string(res.AggregatedState))
}

// TestBadMessages sends malformed input to every subject the scheduler
// reads; each gets a clear error (reply or log) and the next plan still runs.
func TestBadMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	// an outcome that is not JSON, and one for a plan nobody runs
	_, err := e.srv.JS.Publish(t.Context(), "narratoria.outcomes.s1.6ba7b810-9dad-11d1-80b4-00c04fd430c8.t", []byte("garbage"))
	require.NoError(t, err)
	_, err = e.srv.JS.Publish(t.Context(), "narratoria.outcomes.s1.6ba7b810-9dad-11d1-80b4-00c04fd430c8.t",
		[]byte(`{"planId":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","toolId":"t","attempt":1,"state":"success"}`))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.rec.Contains("malformed outcome dropped") }, testlog.Budget(10*time.Second), 20*time.Millisecond)

	// approvals (checked by a scheduler before it stores them): a bad plan
	// ID, not JSON, no "approved", a case variant, a plan not in flight —
	// each refused, its publisher told why, and logged
	for _, c := range []struct{ subj, body, want string }{
		{"narratoria.approvals.not-a-uuid.t", `{"approved":true}`, "must be a UUID"},
		{"narratoria.approvals.6ba7b810-9dad-11d1-80b4-00c04fd430c8.t", `yes please`, "body is not a JSON approval object"},
		{"narratoria.approvals.6ba7b810-9dad-11d1-80b4-00c04fd430c8.t", `{"by":"gm"}`, "approved: is required"},
		{"narratoria.approvals.6ba7b810-9dad-11d1-80b4-00c04fd430c8.t", `{"approved":false,"Approved":true}`, `must be spelled \"approved\"`},
		{"narratoria.approvals.6ba7b810-9dad-11d1-80b4-00c04fd430c8.t", `{"approved":true}`, "is not in flight"},
	} {
		_, err := e.srv.JS.Publish(t.Context(), c.subj, []byte(c.body))
		require.ErrorContains(t, err, strings.ReplaceAll(c.want, `\"`, `"`))
		require.Eventually(t, func() bool { return e.rec.Contains("approval refused", c.want) }, testlog.Budget(10*time.Second), 20*time.Millisecond, c.want)
	}

	// a plan on a subject whose session token is not valid cannot be published
	// by the builders; sent raw it is dropped with a log line
	_, err = e.srv.JS.Publish(t.Context(), "narratoria.plans.bad!session", []byte(`{}`))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.rec.Contains("plan on a subject without a valid session") }, testlog.Budget(10*time.Second), 20*time.Millisecond)

	res := e.runPlan(t, "s1", plan(tool("a", nil, stepInput{})))
	require.True(t, res.Success, "the scheduler keeps working")
}

// TestNotTheSkillsFault: a plan deadline, an approval that timed out and a
// denial each end a required tool, but none is the skill's fault (§7):
// the skill is not disabled for the replan and its health is untouched.
func TestNotTheSkillsFault(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{ApprovalTimeout: 300 * time.Millisecond})
	gate := func(tl *messages.Tool) { tl.RequiresApproval = true }
	check := func(session string, res *messages.ExecutionResult) {
		t.Helper()
		require.NotNil(t, res)
		require.False(t, res.Success)
		require.NotContains(t, res.DisabledSkills, "test", "the skill stays available to the replan")
		require.Equal(t, "healthy", healthOf(t, e, session+".test"))
	}

	slow := plan(tool("slow", nil, stepInput{SleepMs: 3000}))
	slow.TimeoutMs = 300
	res := e.runPlan(t, "nf-deadline", slow)
	require.Equal(t, messages.ReasonTimeout, res.FailureReason)
	check("nf-deadline", res)

	res = e.runPlan(t, "nf-wait", plan(tool("g", nil, stepInput{}, gate)))
	check("nf-wait", res)

	p := plan(tool("g", nil, stepInput{}, gate))
	done := e.startPlan(t, "nf-deny", p)
	require.Eventually(t, func() bool {
		_, err := e.srv.JS.Publish(context.Background(), "narratoria.approvals."+p.RequestID+".g", []byte(`{"approved":false,"by":"gm"}`))
		return err == nil
	}, testlog.Budget(5*time.Second), 50*time.Millisecond)
	check("nf-deny", <-done)
}
