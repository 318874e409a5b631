package messages

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const planID = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"

// planWith builds a plan document whose tools are the given JSON objects.
func planWith(extra string, tools ...string) string {
	if extra != "" {
		extra = "," + extra
	}
	return fmt.Sprintf(`{"requestId":%q,"tools":[%s]%s}`, planID, strings.Join(tools, ","), extra)
}

// planRuleCase is one rule of DecodePlan: a document and the problem it
// must produce.
type planRuleCase struct {
	name      string
	doc       string
	limits    PlanLimits
	wantField string
	wantMsg   string
	reason    string
}

// planRuleCases are the rule cases of TestDecodePlanRules; the validator
// agreement test runs them too.
func planRuleCases() []planRuleCase {
	ok := `{"toolId":"a","toolPath":"dice/roll"}`
	return []planRuleCase{
		{"missing requestId", `{"tools":[]}`, PlanLimits{}, "", "missing required field(s) requestId", ReasonInvalidPlan},
		{"duplicate requestId", fmt.Sprintf(`{"requestId":%q,"tools":[],"requestId":%q}`, planID, planID), PlanLimits{}, "", `duplicate key "requestId"`, ReasonInvalidPlan},
		{"duplicate key in a tool", planWith("", `{"toolId":"a","toolPath":"dice/roll","toolPath":"memory/recall"}`), PlanLimits{}, "tools[0]", `duplicate key "toolPath" at tools[0]`, ReasonInvalidPlan},
		{"duplicate key in an input", planWith("", `{"toolId":"a","toolPath":"dice/roll","input":{"n":1,"n":2}}`), PlanLimits{}, "tools[0].input", `duplicate key "n"`, ReasonInvalidPlan},
		{"key in another case", planWith("", `{"toolId":"a","ToolPath":"dice/roll"}`), PlanLimits{}, "tools[0]", `key "ToolPath" at tools[0] must be spelled "toolPath"`, ReasonInvalidPlan},
		{"requestId not a UUID", `{"requestId":"nope","tools":[]}`, PlanLimits{}, "requestId", "does not match pattern", ReasonInvalidPlan},
		{"missing tools", fmt.Sprintf(`{"requestId":%q}`, planID), PlanLimits{}, "", "missing required field(s) tools", ReasonInvalidPlan},
		{"tools not an array", fmt.Sprintf(`{"requestId":%q,"tools":{}}`, planID), PlanLimits{}, "tools", "must be array", ReasonInvalidPlan},
		{"missing toolId", planWith("", `{"toolPath":"dice/roll"}`), PlanLimits{}, "tools[0]", "missing required field(s) toolId", ReasonInvalidPlan},
		{"toolId with a space", planWith("", `{"toolId":"a b","toolPath":"dice/roll"}`), PlanLimits{}, "tools[0].toolId", "does not match pattern", ReasonInvalidPlan},
		{"toolId too long", planWith("", `{"toolId":"`+strings.Repeat("x", 65)+`","toolPath":"dice/roll"}`), PlanLimits{}, "tools[0].toolId", "does not match pattern", ReasonInvalidPlan},
		{"toolId with a dot", planWith("", `{"toolId":"a.b","toolPath":"dice/roll"}`), PlanLimits{}, "tools[0].toolId", "does not match pattern", ReasonInvalidPlan},
		{"missing toolPath", planWith("", `{"toolId":"a"}`), PlanLimits{}, "tools[0]", "missing required field(s) toolPath", ReasonInvalidPlan},
		{"absolute toolPath", planWith("", ok, `{"toolId":"b","toolPath":"/etc/passwd"}`), PlanLimits{}, "tools[1].toolPath", "absolute paths are not allowed", ReasonInvalidPlan},
		{"toolPath with ..", planWith("", `{"toolId":"a","toolPath":"dice/../../x"}`), PlanLimits{}, "tools[0].toolPath", `".." is not allowed`, ReasonInvalidPlan},
		{"toolPath empty segment", planWith("", `{"toolId":"a","toolPath":"dice//roll"}`), PlanLimits{}, "tools[0].toolPath", "empty path segment", ReasonInvalidPlan},
		{"toolPath backslash", planWith("", `{"toolId":"a","toolPath":"dice\\roll"}`), PlanLimits{}, "tools[0].toolPath", "backslashes", ReasonInvalidPlan},
		{"toolPath bad skill", planWith("", `{"toolId":"a","toolPath":"Dice/roll"}`), PlanLimits{}, "tools[0].toolPath", "must match ^[a-z0-9-]{1,64}$", ReasonInvalidPlan},
		{"toolPath wrong form", planWith("", `{"toolId":"a","toolPath":"dice/x/y"}`), PlanLimits{}, "tools[0].toolPath", "must be <skill>/<script>", ReasonInvalidPlan},
		{"maxRetries over 10", planWith("", ok, ok, `{"toolId":"c","toolPath":"dice/roll","retryPolicy":{"maxRetries":11}}`), PlanLimits{}, "tools[2].retryPolicy.maxRetries", "must be <= 10 (got 11)", ReasonInvalidPlan},
		{"maxRetries negative", planWith("", `{"toolId":"a","toolPath":"dice/roll","retryPolicy":{"maxRetries":-1}}`), PlanLimits{}, "tools[0].retryPolicy.maxRetries", "must be >= 0", ReasonInvalidPlan},
		{"backoffMs negative", planWith("", `{"toolId":"a","toolPath":"dice/roll","retryPolicy":{"backoffMs":-1}}`), PlanLimits{}, "tools[0].retryPolicy.backoffMs", "must be >= 0", ReasonInvalidPlan},
		{"tool timeoutMs zero", planWith("", `{"toolId":"a","toolPath":"dice/roll","timeoutMs":0}`), PlanLimits{}, "tools[0].timeoutMs", "must be >= 1", ReasonInvalidPlan},
		{"input not an object", planWith("", `{"toolId":"a","toolPath":"dice/roll","input":[1]}`), PlanLimits{}, "tools[0].input", "must be object", ReasonInvalidPlan},
		{"dependencies not tokens", planWith("", `{"toolId":"a","toolPath":"dice/roll","dependencies":["x y"]}`), PlanLimits{}, "tools[0].dependencies[0]", "does not match pattern", ReasonInvalidPlan},
		{"required not a bool", planWith("", `{"toolId":"a","toolPath":"dice/roll","required":"yes"}`), PlanLimits{}, "tools[0].required", "must be boolean", ReasonInvalidPlan},
		{"generationAttempt zero", planWith(`"metadata":{"generationAttempt":0}`, ok), PlanLimits{}, "metadata.generationAttempt", "must be >= 1", ReasonInvalidPlan},
		{"parentPlanId not a UUID", planWith(`"metadata":{"parentPlanId":"p"}`, ok), PlanLimits{}, "metadata.parentPlanId", "", ReasonInvalidPlan},
		{"plan timeoutMs zero", planWith(`"timeoutMs":0`, ok), PlanLimits{}, "timeoutMs", "must be >= 1", ReasonInvalidPlan},
		{"disabledSkills bad name", planWith(`"disabledSkills":["Bad Name"]`, ok), PlanLimits{}, "disabledSkills[0]", "does not match pattern", ReasonInvalidPlan},
		{"tool uses a disabled skill", planWith(`"disabledSkills":["dice"]`, ok), PlanLimits{}, "tools[0].toolPath", `uses skill "dice", which the plan's disabledSkills lists`, ReasonInvalidPlan},
		{"bare $", planWith("", `{"toolId":"a","toolPath":"dice/roll","input":{"x":"$"}}`), PlanLimits{}, "tools[0].input", `is not a reference`, ReasonInvalidPlan},
		{"$ref with empty segment", planWith("", `{"toolId":"a","toolPath":"dice/roll","input":{"x":"$b..c"}}`), PlanLimits{}, "tools[0].input", "empty path segment", ReasonInvalidPlan},
		{"$ref with a space", planWith("", `{"toolId":"a","toolPath":"dice/roll","input":{"x":"$a b"}}`), PlanLimits{}, "tools[0].input", "is not a reference", ReasonInvalidPlan},
		{"too large", planWith("", ok), PlanLimits{MaxBytes: 50}, "", "the limit is 50 (limits.maxPlanBytes)", ReasonInvalidPlan},
		{"too many tools", planWith("", ok, ok, ok), PlanLimits{MaxTools: 2}, "tools", "plan has 3 tools; the limit is 2 (limits.maxPlanTools)", ReasonInvalidPlan},
		{"not JSON", `{"requestId":`, PlanLimits{}, "", "plan is not valid JSON", ReasonInvalidJSON},
		{"trailing data", planWith("", ok) + " {}", PlanLimits{}, "", "plan is not valid JSON", ReasonInvalidJSON},
		{"not an object", `[1,2]`, PlanLimits{}, "", "plan must be a JSON object", ReasonInvalidPlan},
	}
}

func TestDecodePlanRules(t *testing.T) {
	t.Parallel()
	tests := planRuleCases()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := DecodePlan([]byte(tt.doc), tt.limits)
			require.Nil(t, p)
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrInvalidPlan))
			var perr *PlanError
			require.True(t, errors.As(err, &perr))
			require.Equal(t, tt.reason, perr.Reason)
			found := false
			for _, pr := range perr.Problems {
				if pr.Field == tt.wantField && strings.Contains(pr.Message, tt.wantMsg) {
					found = true
				}
			}
			require.True(t, found, "want %q: %q in %v", tt.wantField, tt.wantMsg, perr.Problems)
		})
	}
}

func TestDecodePlanReportsEveryProblem(t *testing.T) {
	t.Parallel()
	doc := planWith(`"disabledSkills":["dice"]`,
		`{"toolId":"a","toolPath":"dice/roll"}`,
		`{"toolId":"b b","toolPath":"/x","retryPolicy":{"maxRetries":99}}`)
	_, err := DecodePlan([]byte(doc), PlanLimits{})
	var perr *PlanError
	require.True(t, errors.As(err, &perr))
	fields := map[string]bool{}
	for _, p := range perr.Problems {
		fields[p.Field] = true
	}
	for _, f := range []string{"tools[0].toolPath", "tools[1].toolId", "tools[1].toolPath", "tools[1].retryPolicy.maxRetries"} {
		require.True(t, fields[f], "problem for %s in %v", f, perr.Problems)
	}
}

func TestDecodePlanDefaults(t *testing.T) {
	t.Parallel()
	p, err := DecodePlan([]byte(planWith(`"unknownField":{"x":1}`,
		`{"toolId":"a","toolPath":"dice/roll","alsoUnknown":true}`,
		`{"toolId":"b","toolPath":"dice/roll","retryPolicy":{"maxRetries":1},"required":false,"async":true}`,
		`{"toolId":"c","toolPath":"dice/roll","retryPolicy":{"maxRetries":0,"backoffMs":0}}`)), PlanLimits{})
	require.NoError(t, err)
	require.False(t, p.Parallel)
	require.Equal(t, []string{}, p.DisabledSkills)
	require.Equal(t, 1, p.Metadata.GenerationAttempt)
	require.Nil(t, p.Metadata.ParentPlanID)
	require.Equal(t, int64(60000), p.TimeoutMs)
	require.Equal(t, 60*time.Second, p.Timeout())
	a, b, c := p.Tools[0], p.Tools[1], p.Tools[2]
	require.True(t, a.Required)
	require.False(t, a.Async)
	require.Equal(t, RetryPolicy{MaxRetries: 3, BackoffMs: 100}, a.RetryPolicy)
	require.JSONEq(t, `{}`, string(a.Input))
	require.Equal(t, []string{}, a.Dependencies)
	require.Equal(t, RetryPolicy{MaxRetries: 1, BackoffMs: 100}, b.RetryPolicy, "a partial retryPolicy keeps the other default")
	require.False(t, b.Required)
	require.True(t, b.Async)
	require.Equal(t, RetryPolicy{MaxRetries: 0, BackoffMs: 0}, c.RetryPolicy, "explicit zeros are kept")
	require.Equal(t, "dice", a.Skill())
}

func TestHostilePlans(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString(`{"requestId":"` + planID + `","tools":[`)
	for i := range 100_000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"toolId":"t%d","toolPath":"dice/roll"}`, i)
	}
	b.WriteString(`]}`)
	big := []byte(b.String())
	_, err := DecodePlan(big, PlanLimits{MaxBytes: 64 << 20})
	require.ErrorContains(t, err, "plan has 100000 tools; the limit is 10000")
	start := time.Now()
	p, err := DecodePlan(big, PlanLimits{MaxBytes: 64 << 20, MaxTools: 200_000})
	require.NoError(t, err)
	require.Len(t, p.Tools, 100_000)
	t.Logf("decoded and validated 100k tools in %s", time.Since(start))

	huge := planWith("", `{"toolId":"a","toolPath":"dice/roll","input":{"s":"`+strings.Repeat("x", 10<<20)+`"}}`)
	_, err = DecodePlan([]byte(huge), PlanLimits{})
	require.ErrorContains(t, err, "limits.maxPlanBytes")
	p, err = DecodePlan([]byte(huge), PlanLimits{MaxBytes: 16 << 20})
	require.NoError(t, err)
	require.Greater(t, len(p.Tools[0].Input), 10<<20)

	nested := planWith("", `{"toolId":"a","toolPath":"dice/roll","input":`+strings.Repeat(`{"a":`, 100_000)+`1`+strings.Repeat(`}`, 100_000)+`}`)
	done := make(chan error, 1)
	go func() { _, err := DecodePlan([]byte(nested), PlanLimits{}); done <- err }()
	select {
	case err := <-done:
		require.Error(t, err)
		require.True(t, errors.Is(err, ErrInvalidPlan))
	case <-time.After(60 * time.Second):
		t.Fatal("deeply nested input hung the decoder")
	}
}

func TestPlanRoundTrip(t *testing.T) {
	t.Parallel()
	p, err := DecodePlan([]byte(planWith(`"parallel":true,"metadata":{"generationAttempt":2,"parentPlanId":"`+planID+`"}`,
		`{"toolId":"a","toolPath":"dice/roll","input":{"n":1}}`)), PlanLimits{})
	require.NoError(t, err)
	b, err := json.Marshal(p)
	require.NoError(t, err)
	again, err := DecodePlan(b, PlanLimits{})
	require.NoError(t, err)
	require.Equal(t, p, again)
}
