package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSubjects(t *testing.T) {
	t.Parallel()
	s := Subjects{}
	must := func(v string, err error) string { require.NoError(t, err); return v }
	require.Equal(t, "narratoria.prompts.demo", must(s.Prompts("demo")))
	require.Equal(t, "narratoria.narrate", s.Narrate())
	require.Equal(t, "narratoria.narrations.demo", must(s.Narrations("demo")))
	require.Equal(t, "narratoria.plans.demo", must(s.Plans("demo")))
	require.Equal(t, "narratoria.results.demo."+planID, must(s.Results("demo", planID)))
	require.Equal(t, "narratoria.progress.demo."+planID, must(s.Progress("demo", planID)))
	require.Equal(t, "narratoria.events.demo."+planID+".roll_1", must(s.Events("demo", planID, "roll_1")))
	require.Equal(t, "narratoria.health.demo.dice-roller", must(s.Health("demo", "dice-roller")))
	require.Equal(t, "narratoria.approvals."+planID+".t", must(s.Approvals(planID, "t")))
	require.Equal(t, "narratoria.sessions.demo.reset", must(s.SessionReset("demo")))
	require.Equal(t, "narratoria.jobs.dice.>", must(s.Jobs("dice")))
	require.Equal(t, "narratoria.jobs.dice.6ba7b810-9dad-11d1-80b4-00c04fd430c8.t1", must(s.Job("dice", "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "t1")))
	require.Equal(t, "narratoria.outcomes.demo."+planID+".t", must(s.Outcomes("demo", planID, "t")))
	require.Equal(t, "narratoria.cancel."+planID, must(s.Cancel(planID)))
	require.Equal(t, "game.prompts.demo", must(Subjects{Prefix: "game"}.Prompts("demo")))
	require.Equal(t, "narratoria.events.>", s.All("events"))

	for _, bad := range []string{"", strings.Repeat("a", 65), "a.b", "a b", "*", ">", "é", "a\tb"} {
		_, err := s.Prompts(bad)
		require.True(t, errors.Is(err, ErrInvalidToken), "%q", bad)
		_, err = s.Events("demo", planID, bad)
		require.True(t, errors.Is(err, ErrInvalidToken), "%q", bad)
	}
	_, err := s.Results("demo", "not-a-uuid")
	require.True(t, errors.Is(err, ErrInvalidPlanID))
	require.True(t, ValidToken(strings.Repeat("a", 64)))
	require.True(t, ValidToken("A-z_0"))
}

func TestParseToolPath(t *testing.T) {
	t.Parallel()
	good := map[string]ToolRef{
		"dice/roll":                    {Skill: "dice", Script: "roll"},
		"dice/scripts/roll.sh":         {Skill: "dice", File: "roll.sh"},
		"skills/dice/scripts/roll.sh":  {Skill: "dice", File: "roll.sh"},
		"skills/dice/scripts/sub/x.sh": {Skill: "dice", File: "sub/x.sh"},
	}
	for in, want := range good {
		got, err := ParseToolPath(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
		again, err := ParseToolPath(got.String())
		require.NoError(t, err)
		require.Equal(t, got, again)
	}
	bad := map[string]string{
		"":                       "must not be empty",
		"/bin/sh":                "absolute paths",
		"dice/../x":              `".." is not allowed`,
		"dice//roll":             "empty path segment",
		"dice/./roll":            `"." segments`,
		`dice\roll`:              "backslashes",
		"dice/ro\x01ll":          "control characters",
		"Dice/roll":              "must match",
		"dice":                   "must be <skill>/<script>",
		"dice/a/b":               "must be <skill>/<script>",
		"skills/dice/x":          "must be <skill>/<script>",
		strings.Repeat("a", 600): "longer than 512",
	}
	for in, msg := range bad {
		_, err := ParseToolPath(in)
		require.Error(t, err, in)
		require.True(t, errors.Is(err, ErrInvalidToolPath))
		require.Contains(t, err.Error(), msg, in)
	}
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	require.Equal(t, 100*time.Millisecond, RetryDelay(100, 1))
	require.Equal(t, 200*time.Millisecond, RetryDelay(100, 2))
	require.Equal(t, 400*time.Millisecond, RetryDelay(100, 3))
	require.Equal(t, time.Duration(0), RetryDelay(100, 0))
	require.Equal(t, time.Duration(0), RetryDelay(0, 3))
	for _, d := range []time.Duration{RetryDelay(math.MaxInt64, 2), RetryDelay(100, 1000), RetryDelay(1<<40, 40)} {
		require.Greater(t, d, time.Duration(0), "saturates, never wraps")
	}
}

func TestDeepMerge(t *testing.T) {
	t.Parallel()
	obj := func(s string) map[string]any {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(s), &m))
		return m
	}
	cases := []struct{ target, patch, want string }{
		{`{"a":{"b":1,"c":2}}`, `{"a":{"c":3,"d":4}}`, `{"a":{"b":1,"c":3,"d":4}}`}, // seed 000 §6.1 example 1
		{`{"items":[1,2,3]}`, `{"items":[4,5]}`, `{"items":[4,5]}`},                 // example 2
		{`{"a":1,"b":2}`, `{"b":null}`, `{"a":1}`},                                  // example 3
		{`{"a":1}`, `{"b":2}`, `{"a":1,"b":2}`},                                     // example 4
		{`{"a":{"b":{"c":1,"d":2}}}`, `{"a":{"b":{"c":null}}}`, `{"a":{"b":{"d":2}}}`},
		{`{"a":{"b":1}}`, `{"a":5}`, `{"a":5}`},
		{`{"a":5}`, `{"a":{"b":1}}`, `{"a":{"b":1}}`},
		{`{}`, `{"gone":null}`, `{}`},
	}
	for _, c := range cases {
		got, _ := json.Marshal(DeepMerge(obj(c.target), obj(c.patch)))
		require.JSONEq(t, c.want, string(got), "%s + %s", c.target, c.patch)
	}
	patch := obj(`{"list":[1],"m":{"x":1}}`)
	got := DeepMerge(nil, patch)
	patch["list"].([]any)[0] = 99
	patch["m"].(map[string]any)["x"] = 99
	b, _ := json.Marshal(got)
	require.JSONEq(t, `{"list":[1],"m":{"x":1}}`, string(b), "the patch is copied, not aliased")
}

func TestRefs(t *testing.T) {
	t.Parallel()
	outputs := map[string]json.RawMessage{
		"a": json.RawMessage(`{"x":{"y":7},"list":["p","q"],"big":12345678901234567890}`),
	}
	get := func(id string) (json.RawMessage, bool) { o, ok := outputs[id]; return o, ok }
	in := json.RawMessage(`{"whole":"$a","deep":"$a.x.y","idx":"$a.list.1","miss":"$a.nope","failed":"$gone","lit":"$$5","esc":"\u0024a.x.y","arr":["$a.x.y",{"k":"$a.big"}],"plain":"hi"}`)
	refs, err := FindRefs(in, "tools[0].input")
	require.NoError(t, err)
	require.Len(t, refs, 8)
	out, err := ResolveRefs(in, get)
	require.NoError(t, err)
	require.JSONEq(t, `{"whole":{"x":{"y":7},"list":["p","q"],"big":12345678901234567890},"deep":7,"idx":"q","miss":null,"failed":null,
		"lit":"$5","esc":7,"arr":[7,{"k":12345678901234567890}],"plain":"hi"}`, string(out))
	require.Contains(t, string(out), "12345678901234567890", "numbers are kept exactly")
	plain := json.RawMessage(`{"n": 1, "s":"x"}`)
	same, err := ResolveRefs(plain, get)
	require.NoError(t, err)
	require.Equal(t, string(plain), string(same), "no refs: byte-identical")
	_, err = FindRefs(json.RawMessage(`{"x":"$"}`), "input")
	require.True(t, errors.Is(err, ErrBadReference))
}

func TestDecodePrompt(t *testing.T) {
	t.Parallel()
	p, err := DecodePrompt([]byte(`{"text":"  I look around  ","promptId":"p1"}`), "demo")
	require.NoError(t, err)
	require.Equal(t, "I look around", p.Text)
	require.Equal(t, "demo", p.SessionID)
	_, err = DecodePrompt([]byte(`{"text":"`+strings.Repeat("é", 4000)+`","sessionId":"s"}`), "")
	require.NoError(t, err, "4000 characters, counted as runes")
	bad := map[string]struct{ body, subject, msg string }{
		"empty":        {`{"text":""}`, "s", "text: must not be empty"},
		"whitespace":   {`{"text":"   "}`, "s", "text: must not be empty"},
		"4001":         {`{"text":"` + strings.Repeat("é", 4001) + `"}`, "s", "is 4001 characters; the limit is 4000"},
		"not JSON":     {`hi`, "", "not a JSON prompt"},
		"no session":   {`{"text":"x"}`, "", "sessionId: is required"},
		"bad session":  {`{"text":"x","sessionId":"a.b"}`, "", "must match"},
		"mismatch":     {`{"text":"x","sessionId":"a"}`, "b", `does not match the subject's session "b"`},
		"bad promptId": {`{"text":"x","promptId":"p p"}`, "s", "promptId"},
	}
	for name, c := range bad {
		_, err := DecodePrompt([]byte(c.body), c.subject)
		require.Error(t, err, name)
		require.True(t, errors.Is(err, ErrInvalidPrompt), name)
		require.Contains(t, err.Error(), c.msg, name)
	}
}

func TestResultMatchesSchema(t *testing.T) {
	t.Parallel()
	res := ExecutionResult{PlanID: planID, SessionID: "s", Success: false, CanReplan: true, FailureReason: ReasonToolFailure,
		FailedTools: []string{"a"}, DisabledSkills: []string{"dice"}, AttemptNumber: 1, ExecutionTimeMs: 12,
		ToolResults: []ToolResult{{ToolID: "a", Skill: "dice", State: ToolFailed, Output: json.RawMessage("null"), Events: []json.RawMessage{},
			RetryCount: 3, Error: &ToolError{Code: "exit_code", Message: "m", Category: CategoryToolFailure}}},
		AggregatedState: json.RawMessage(`{}`), AggregatedAssets: []Asset{{ToolID: "a", AssetID: "x", Kind: "image", MediaType: "image/svg+xml", Path: "/p"}},
		FinishedAt: time.Now()}
	b, err := json.Marshal(res)
	require.NoError(t, err)
	v, err := decodeForSchema(b)
	require.NoError(t, err)
	s, err := CompiledSchema(SchemaResult)
	require.NoError(t, err)
	require.NoError(t, s.Validate(v))
}

// TestProgressAndStatusMatchSchemas: what the scheduler sends validates.
func TestProgressAndStatusMatchSchemas(t *testing.T) {
	t.Parallel()
	pct := 40
	check := func(name string, v any) {
		t.Helper()
		b, err := json.Marshal(v)
		require.NoError(t, err)
		doc, err := decodeForSchema(b)
		require.NoError(t, err)
		s, err := CompiledSchema(name)
		require.NoError(t, err)
		require.NoError(t, s.Validate(doc), string(b))
	}
	check(SchemaProgress, Progress{PlanID: planID, ToolID: "a", State: string(ToolRunning), Attempt: 1, At: time.Now(), Progress: &pct, Message: "m"})
	check(SchemaProgress, Progress{PlanID: planID, State: PlanPausedForContext, At: time.Now()})
	check(SchemaPlanStatus, PlanStatus{PlanID: planID, SessionID: "s", Phase: "running", AcceptedAt: time.Now(), Deadline: time.Now(),
		AttemptNumber: 1, Tools: []ToolStatus{{ToolID: "a", Skill: "x", State: ToolAwaitingApproval, Dependencies: []string{}, WaitUntil: time.Now()}},
		Versions: []PlanVersion{{Version: 0, State: "original", ToolIDs: []string{"a"}}, {Version: 1, State: "asked", ToolIDs: []string{}, AskedBy: "a"}}})
	res := ExecutionResult{PlanID: planID, SessionID: "s", FailureReason: ReasonCancelled, FailedTools: []string{}, DisabledSkills: []string{},
		ToolResults: []ToolResult{}, AttemptNumber: 1, FinishedAt: time.Now()}
	p, err := DecodePlan([]byte(planWith("", `{"toolId":"a","toolPath":"dice/roll"}`)), PlanLimits{})
	require.NoError(t, err)
	res.OriginalPlan, res.FinalPlan = p, p
	check(SchemaResult, res)
	check(SchemaProseChunk, ProseChunk{PromptID: "p1", PlanID: planID, Seq: 1, Text: "The door "})
	check(SchemaProseChunk, ProseChunk{PromptID: "p1", PlanID: planID, Seq: 9, Text: "", Done: true, Fallback: true})
	bad, _ := json.Marshal(Progress{PlanID: planID, State: "sleeping", At: time.Now()})
	doc, _ := decodeForSchema(bad)
	s, _ := CompiledSchema(SchemaProgress)
	require.Error(t, s.Validate(doc), "an unknown state is refused")
}

// TestGamePayloadsMatchSchemas: the game server's payloads as the Go
// types write them validate against their schemas (the TypeScript
// client's types are generated from these), and what the schemas rule out
// is refused.
func TestGamePayloadsMatchSchemas(t *testing.T) {
	t.Parallel()
	validate := func(name string, b []byte) error {
		t.Helper()
		doc, err := decodeForSchema(b)
		require.NoError(t, err)
		s, err := CompiledSchema(name)
		require.NoError(t, err)
		return s.Validate(doc)
	}
	check := func(name string, v any) {
		t.Helper()
		b, err := json.Marshal(v)
		require.NoError(t, err)
		require.NoError(t, validate(name, b), string(b))
	}
	check(SchemaPrompt, Prompt{Text: "I look around", PromptID: "p-1", PlayerID: "ada", SessionID: "s1"})
	check(SchemaPrompt, Prompt{Text: "x"})
	sum := strings.Repeat("ab", 32)
	check(SchemaNarration, Narration{SessionID: "s1", PromptID: "p-1", Text: "t", PlanID: planID, Attempts: 1,
		Choices: []json.RawMessage{json.RawMessage(`"left"`)}, State: json.RawMessage(`{"a":1}`), DisabledSkills: []string{},
		Assets:   []Asset{{ToolID: "a", AssetID: "x", Kind: "image", MediaType: "image/svg+xml", Path: "/p", SHA256: sum, Size: 3, Object: AssetObjectName(sum)}},
		UIEvents: []UIEventRecord{{ToolID: "a", Event: "dice_roll", Payload: json.RawMessage(`{"total":3}`)}},
		Trace:    []AttemptTrace{{PlanID: planID, Success: false, FailedTools: []string{"a"}, FailureReason: ReasonToolFailure}}, DurationMs: 5})
	check(SchemaNarration, Narration{SessionID: "s1", PromptID: "p-1", Refused: "over quota"}) // a refusal: null lists
	check(SchemaNarration, Narration{SessionID: "s1", PromptID: "p-1", Cancelled: true, Fallback: true, State: json.RawMessage(`{}`)})
	check(SchemaNarration, Narration{SessionID: "s1", PromptID: "p-1", Text: "You kneel.", Prose: ProseByModel, State: json.RawMessage(`{}`)})
	check(SchemaHealthTransition, HealthTransition{SessionID: "s1", Skill: "dice", From: "healthy", To: "degraded", Input: "transient",
		Failures: 1, Reason: "timeout", At: time.Now()})
	check(SchemaApproval, Approval{Approved: true, By: "gm", Reason: "fine"})
	check(SchemaApproval, Approval{})
	check(SchemaControlReply, ControlReply{OK: true, List: &PlanList{Plans: []PlanSummary{{PlanID: planID, SessionID: "s1"}}}})
	check(SchemaControlReply, ControlReply{Error: "plan … is not in flight", Code: ControlNotInFlight})
	check(SchemaControlReply, ControlReply{OK: true, Status: &PlanStatus{PlanID: planID, SessionID: "s", Phase: "running", AcceptedAt: time.Now(),
		Deadline: time.Now(), AttemptNumber: 1, Tools: []ToolStatus{}, Versions: []PlanVersion{}}})
	check(SchemaCancelRequest, CancelRequest{By: "gm", Reason: "enough"})
	check(SchemaPlanListRequest, PlanListRequest{SessionID: "s1"})
	check(SchemaPlanListRequest, PlanListRequest{})
	check(SchemaSessionReset, SessionReset{ClearState: true})
	for _, reply := range []string{`{"ok":true,"changedSkills":2,"clearedState":true}`, `{"ok":true}`, `{"ok":false,"error":"sessionId \"a b\" must match"}`} {
		require.NoError(t, validate(SchemaSessionResetReply, []byte(reply)), reply)
	}
	for name, bad := range map[string]string{
		SchemaPrompt:            `{"text":"","sessionId":"s1"}`,
		SchemaApproval:          `{"by":"gm"}`,
		SchemaControlReply:      `{"ok":false,"code":"sleeping"}`,
		SchemaHealthTransition:  `{"sessionId":"s","skill":"d","from":"sick","to":"healthy","input":"reset","failures":0,"reason":"","at":"2026-01-01T00:00:00Z"}`,
		SchemaSessionResetReply: `{"changedSkills":1}`,
	} {
		require.Error(t, validate(name, []byte(bad)), "%s accepted %s", name, bad)
	}
}

// TestShippedSchemas keeps docs/schemas identical to the embedded schemas.
func TestShippedSchemas(t *testing.T) {
	t.Parallel()
	entries, err := Schemas.ReadDir("schemas")
	require.NoError(t, err)
	require.Len(t, entries, 17)
	for _, e := range entries {
		_, err := CompiledSchema(e.Name())
		require.NoError(t, err, e.Name())
		embedded, _ := Schemas.ReadFile("schemas/" + e.Name())
		shipped, err := os.ReadFile(filepath.Join("..", "..", "docs", "schemas", e.Name()))
		require.NoError(t, err, "docs/schemas/%s is missing: run make schemas", e.Name())
		require.True(t, bytes.Equal(embedded, shipped), "docs/schemas/%s differs from pkg/messages/schemas: run make schemas", e.Name())
	}
}

// fuzzPlanSeeds are the seeds of FuzzDecodePlan; the validator agreement
// test runs them too.
func fuzzPlanSeeds() [][]byte {
	return [][]byte{
		[]byte(planWith("", `{"toolId":"a","toolPath":"dice/roll","input":{"x":"$$1"}}`)),
		[]byte(`{"requestId":"x"}`),
		[]byte(`[]`),
	}
}

func FuzzDecodePlan(f *testing.F) {
	for _, seed := range fuzzPlanSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePlan(b, PlanLimits{})
		if err != nil {
			if !errors.Is(err, ErrInvalidPlan) {
				t.Fatalf("unexpected error type: %v", err)
			}
			return
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodePlan(again, PlanLimits{}); err != nil {
			t.Fatalf("a decoded plan does not decode again: %v", err)
		}
	})
}

func FuzzParseToolPath(f *testing.F) {
	for _, s := range []string{"dice/roll", "skills/a/scripts/b", "/x", "a/../b", "a//b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := ParseToolPath(s)
		if err != nil {
			return
		}
		if strings.HasPrefix(s, "/") || strings.Contains("/"+s+"/", "/../") || !ValidSkillName(ref.Skill) {
			t.Fatalf("accepted %q", s)
		}
		again, err := ParseToolPath(ref.String())
		if err != nil || again != ref {
			t.Fatalf("%q does not re-parse: %v", ref.String(), err)
		}
	})
}

func FuzzResolveRefs(f *testing.F) {
	f.Add([]byte(`{"a":"$t.x","b":["$$z"]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		if !json.Valid(in) {
			return
		}
		_, _ = ResolveRefs(in, func(string) (json.RawMessage, bool) { return json.RawMessage(`{"x":1}`), true })
	})
}

func FuzzDecodePrompt(f *testing.F) {
	f.Add([]byte(`{"text":"hi","sessionId":"s"}`), "s")
	f.Fuzz(func(t *testing.T, b []byte, subject string) {
		p, err := DecodePrompt(b, subject)
		if err == nil && (!ValidToken(p.SessionID) || p.Text == "") {
			t.Fatalf("accepted an invalid prompt %+v", p)
		}
	})
}

func BenchmarkDecodePlan(b *testing.B) {
	for _, size := range []int{1_000, 10_000, 100_000} {
		var sb strings.Builder
		sb.WriteString(`{"requestId":"` + planID + `","tools":[`)
		for i := range size {
			if i > 0 {
				sb.WriteByte(',')
			}
			deps := "[]"
			if i > 0 {
				deps = fmt.Sprintf(`["t%d"]`, i-1)
			}
			fmt.Fprintf(&sb, `{"toolId":"t%d","toolPath":"dice/roll","dependencies":%s}`, i, deps)
		}
		sb.WriteString(`]}`)
		doc := []byte(sb.String())
		b.Run(fmt.Sprintf("chain/%d", size), func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			for b.Loop() {
				if _, err := DecodePlan(doc, PlanLimits{MaxTools: 1 << 20, MaxBytes: 1 << 30}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func ExampleDeepMerge() {
	state := map[string]any{"a": map[string]any{"b": 1, "c": 2}}
	patch := map[string]any{"a": map[string]any{"c": 3, "d": 4}}
	out, _ := json.Marshal(DeepMerge(state, patch))
	fmt.Println(string(out))
	// Output: {"a":{"b":1,"c":3,"d":4}}
}

func ExampleDecodeEvent() {
	ev, err := DecodeEvent([]byte(`{"version":"0","type":"done","ok":true,"output":{"total":17}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ev.Type(), string(ev.(*DoneEvent).ToolOutput()))
	_, err = DecodeEvent([]byte(`{"version":"0","type":"teleport"}`))
	fmt.Println(err)
	// Output:
	// done {"total":17}
	// protocol error (unknown_type): unknown event type "teleport"; line: "{\"version\":\"0\",\"type\":\"teleport\"}"
}

func ExampleDecodePlan() {
	_, err := DecodePlan([]byte(`{"requestId":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","tools":[{"toolId":"a","toolPath":"/bin/sh","retryPolicy":{"maxRetries":11}}]}`), PlanLimits{})
	for _, p := range err.(*PlanError).Problems {
		fmt.Println(p)
	}
	// Output:
	// tools[0].retryPolicy.maxRetries: must be <= 10 (got 11)
	// tools[0].toolPath: invalid toolPath "/bin/sh": absolute paths are not allowed; name a script as <skill>/<script>
}

func ExampleResolveRefs() {
	out, _ := ResolveRefs(json.RawMessage(`{"roll":"$dice.total","price":"$$5"}`), func(id string) (json.RawMessage, bool) {
		return json.RawMessage(`{"total":17}`), id == "dice"
	})
	fmt.Println(string(out))
	// Output: {"price":"$5","roll":17}
}

func ExampleSubjects_Events() {
	subj, _ := Subjects{}.Events("demo", "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "roll")
	fmt.Println(subj)
	// Output: narratoria.events.demo.6ba7b810-9dad-11d1-80b4-00c04fd430c8.roll
}

func FuzzDecodeManifest(f *testing.F) {
	f.Add([]byte(`{"name":"a","version":"1.0.0","description":"d","scripts":[{"name":"r","path":"scripts/r"}]}`))
	f.Add([]byte(`{"name":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("unexpected error type: %v", err)
			}
			return
		}
		if !ValidSkillName(m.Name) || len(m.Scripts) == 0 {
			t.Fatalf("accepted an invalid manifest: %+v", m)
		}
	})
}

// TestDecodePlanRequest: a plan request is read exactly; its text is
// trimmed and bounded, its session a session.
func TestDecodePlanRequest(t *testing.T) {
	t.Parallel()
	r, err := DecodePlanRequest([]byte(`{"text":"  I roll  ","sessionId":"acme.s1"}`))
	require.NoError(t, err)
	require.Equal(t, PlanRequest{Text: "I roll", SessionID: "acme.s1"}, *r)
	for _, bad := range []string{`{"text":" "}`, `{"Text":"I roll"}`, `{"text":"I roll","sessionId":"a b"}`, `{}`, `[]`,
		`{"text":"` + strings.Repeat("x", PromptTextMax+1) + `"}`} {
		_, err := DecodePlanRequest([]byte(bad))
		var re *RequestError
		require.ErrorAs(t, err, &re, bad)
	}
}
