package messages

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The plan scan (planscan.go, and planscan_gen.go generated from the
// schema) is the Plan JSON Schema written out as code. These
// tests hold it to the generic validator (jsonschema on
// schemas/plan.schema.json) on every plan document the tests know, on the
// fuzz corpus, and on thousands of generated and mutated plans: for each
// document both must agree on whether it is JSON, on every problem (field
// and message), on the decoded Plan, and DecodePlan must return exactly
// what the generic path returns.

// agreement counts what the documents of one test exercised.
type agreement struct {
	notJSON, invalid, valid, validExact int
}

// checkAgree runs both validators over doc and fails t on any difference.
func checkAgree(t testing.TB, doc []byte, a *agreement) {
	t.Helper()
	p, probs, exact, ok := scanPlan(doc, false)
	if ok != json.Valid(doc) {
		t.Fatalf("JSON: scan says valid=%v, encoding/json says valid=%v, for %s", ok, !ok, clip(doc))
	}
	decodeAgrees(t, doc)
	qp, qprobs, qexact, qok := scanPlan(doc, true)
	if quickUse, fullUse := qok && qexact && len(qprobs) == 0, ok && exact && len(probs) == 0; quickUse != fullUse {
		t.Fatalf("quick scan takes the plan: %v, full scan: %v, for %s", quickUse, fullUse, clip(doc))
	} else if quickUse && !reflect.DeepEqual(qp, p) {
		t.Fatalf("quick and full scans decode differently for %s", clip(doc))
	}
	if !ok {
		a.notJSON++
		return
	}
	v, err := decodeForSchema(doc)
	if err != nil {
		// json.Valid and decodeForSchema use the same scanner.
		t.Fatalf("decodeForSchema: %v, for %s", err, clip(doc))
	}
	s, err := CompiledSchema(SchemaPlan)
	require.NoError(t, err)
	want := sortedProblems(ValidateSchema(s, v))
	got := sortedProblems(probs)
	if !equalProblems(got, want) {
		t.Fatalf("problems differ for %s\nscan:    %v\ngeneric: %v", clip(doc), got, want)
	}
	if len(probs) > 0 {
		a.invalid++
		return
	}
	a.valid++
	if !exact {
		return
	}
	a.validExact++
	var q Plan
	if err := json.Unmarshal(doc, &q); err != nil {
		t.Fatalf("scan says exact, json.Unmarshal fails: %v, for %s", err, clip(doc))
	}
	if !reflect.DeepEqual(p, &q) {
		t.Fatalf("decoded plans differ for %s\nscan:   %+v\nstdlib: %+v", clip(doc), *p, q)
	}
}

// decodeAgrees checks that DecodePlan returns what the generic path
// returns, plan and error, under two sets of limits.
func decodeAgrees(t testing.TB, doc []byte) {
	t.Helper()
	for _, limits := range []PlanLimits{{MaxBytes: 64 << 20}, {MaxBytes: 64 << 20, MaxTools: 2}} {
		gotP, gotErr := DecodePlan(doc, limits)
		wantP, wantErr := decodePlanGeneric(doc, limits.WithDefaults())
		if !reflect.DeepEqual(gotP, wantP) {
			t.Fatalf("DecodePlan plan differs for %s\ngot:  %+v\nwant: %+v", clip(doc), gotP, wantP)
		}
		if !reflect.DeepEqual(gotErr, wantErr) {
			t.Fatalf("DecodePlan error differs for %s\ngot:  %v\nwant: %v", clip(doc), gotErr, wantErr)
		}
	}
}

func sortedProblems(ps []Problem) []Problem {
	out := append([]Problem(nil), ps...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Field != out[j].Field {
			return out[i].Field < out[j].Field
		}
		return out[i].Message < out[j].Message
	})
	return out
}

func equalProblems(a, b []Problem) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func clip(doc []byte) string {
	if len(doc) > 400 {
		return strconv.Quote(string(doc[:400])) + fmt.Sprintf("… (%d bytes)", len(doc))
	}
	return strconv.Quote(string(doc))
}

// Documents the tests already know --

// knownPlans are the plan documents of the other tests (this package's,
// internal/cli's) that are not in planRuleCases or fuzzPlanSeeds.
func knownPlans() []string {
	return []string{
		planWith(`"disabledSkills":["dice"]`,
			`{"toolId":"a","toolPath":"dice/roll"}`,
			`{"toolId":"b b","toolPath":"/x","retryPolicy":{"maxRetries":99}}`),
		planWith(`"unknownField":{"x":1}`,
			`{"toolId":"a","toolPath":"dice/roll","alsoUnknown":true}`,
			`{"toolId":"b","toolPath":"dice/roll","retryPolicy":{"maxRetries":1},"required":false,"async":true}`,
			`{"toolId":"c","toolPath":"dice/roll","retryPolicy":{"maxRetries":0,"backoffMs":0}}`),
		planWith(`"parallel":true,"metadata":{"generationAttempt":2,"parentPlanId":"`+planID+`"}`,
			`{"toolId":"a","toolPath":"dice/roll","input":{"n":1}}`),
		planWith("", `{"toolId":"a","toolPath":"dice/roll","input":`+strings.Repeat(`{"a":`, 100_000)+`1`+strings.Repeat(`}`, 100_000)+`}`),
		planWith("", `{"toolId":"a","toolPath":"dice/roll","input":`+strings.Repeat(`[`, 9_997)+strings.Repeat(`]`, 9_997)+`}`),
		planWith("", `{"toolId":"a","toolPath":"dice/roll","input":`+strings.Repeat(`[`, 9_998)+strings.Repeat(`]`, 9_998)+`}`),
		// What encoding/json decodes differently from the schema's view:
		// a repeated "tools" merges into the first one's tools, a folded
		// name is the field, 1.0 is no int64.
		planWith(`"tools":[{"toolId":"b","toolPath":"dice/roll"}]`, `{"toolId":"a","toolPath":"dice/roll","async":true,"input":{"x":1}}`),
		planWith("", `{"toolId":"a","toolPath":"dice/roll","TOOLID":"b"}`),
		planWith("", `{"toolId":"a","toolPath":"dice/roll","retryPolicy":{"maxRetries":1},"RetryPolicy":{"backoffMs":7}}`),
		planWith(`"timeoutMs":1.0`, `{"toolId":"a","toolPath":"dice/roll"}`),
		planWith(`"metadata":{"generationAttempt":1e1}`, `{"toolId":"a","toolPath":"dice/roll"}`),
		// internal/cli TestPlanValidate
		`{"requestId":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","tools":[
 {"toolId":"roll","toolPath":"dice-roller/roll-dice","input":{"formula":"1d20"}},
 {"toolId":"mem","toolPath":"memory/recall-memory","input":{"query":"lock"}},
 {"toolId":"tell","toolPath":"storyteller/narrate","dependencies":["roll","mem"],"input":{"prompt":"x","context":{"d":"$roll.total"}}}]}`,
		`{"requestId":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","tools":[
 {"toolId":"a","toolPath":"/bin/sh","retryPolicy":{"maxRetries":11}},
 {"toolId":"b","toolPath":"x/y","dependencies":["c"]},
 {"toolId":"c","toolPath":"x/y","dependencies":["b"]}]}`,
	}
}

// docPlans are the plan examples of docs/*.md (fenced JSON blocks with a
// requestId).
func docPlans(t testing.TB) []string {
	files, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	block := regexp.MustCompile("(?s)```json\n(.*?)```")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range block.FindAllSubmatch(b, -1) {
			if bytes.Contains(m[1], []byte(`"requestId"`)) {
				out = append(out, string(m[1]))
			}
		}
	}
	return out
}

// fuzzCorpus reads the stored inputs of a fuzz target
// (testdata/fuzz/<name>/*, "go test fuzz v1" files of one []byte).
func fuzzCorpus(t testing.TB, name string) [][]byte {
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", name, "*"))
	require.NoError(t, err)
	var out [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			if lit, ok := strings.CutPrefix(sc.Text(), "[]byte("); ok {
				s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
				require.NoError(t, err, f)
				out = append(out, []byte(s))
			}
		}
	}
	return out
}

// planCorpus is every plan document the tests know.
func planCorpus(t testing.TB) [][]byte {
	docs := fuzzPlanSeeds()
	docs = append(docs, fuzzCorpus(t, "FuzzDecodePlan")...)
	docs = append(docs, fuzzCorpus(t, "FuzzPlanValidatorsAgree")...)
	for _, c := range planRuleCases() {
		docs = append(docs, []byte(c.doc))
	}
	for _, d := range knownPlans() {
		docs = append(docs, []byte(d))
	}
	for _, d := range docPlans(t) {
		docs = append(docs, []byte(d))
	}
	return docs
}

func TestPlanScanAgreesOnKnownPlans(t *testing.T) {
	t.Parallel()
	var a agreement
	docs := planCorpus(t)
	require.GreaterOrEqual(t, len(docs), 45)
	for _, doc := range docs {
		checkAgree(t, doc, &a)
	}
	t.Logf("%d documents: %+v", len(docs), a)
	require.Positive(t, a.validExact)
	require.Positive(t, a.invalid)
	require.Positive(t, a.notJSON)
}

// TestPlanScanAgreesOnGeneratedPlans: random plans, most with one to three
// mutations (a value replaced by one of another type or at a bound of its
// field, a field dropped, repeated or renamed, garbage added, bytes
// changed). The seed is fixed so that a failure replays.
func TestPlanScanAgreesOnGeneratedPlans(t *testing.T) {
	t.Parallel()
	n := 6000
	if testing.Short() {
		n = 1000
	}
	g := planGen{r: rand.New(rand.NewPCG(11, 2026))}
	var a agreement
	for i := range n {
		checkAgree(t, g.document(i), &a)
	}
	t.Logf("%d documents: %+v", n, a)
	// The generator must exercise every outcome, each often.
	require.Greater(t, a.validExact, n/10)
	require.Greater(t, a.invalid, n/4)
	require.Greater(t, a.notJSON, n/50)
	require.Greater(t, a.valid-a.validExact, n/200)
}

// TestPlanScanAgreesOnBigPlans covers a plan whose tools outgrow the
// first estimate of their number, in the shape of bench figure 8.
func TestPlanScanAgreesOnBigPlans(t *testing.T) {
	t.Parallel()
	var a agreement
	var sb strings.Builder
	sb.WriteString(`{"requestId":"` + planID + `","parallel":true,"tools":[`)
	for i := range 3000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		if i == 100 { // a big tool after the sample the estimate uses
			fmt.Fprintf(&sb, `{"toolId":"t%d","toolPath":"dice/roll","input":{"s":%q}}`, i, strings.Repeat("x", 1000))
			continue
		}
		deps := "[]"
		if i >= 10 {
			deps = fmt.Sprintf(`["t%d","t%d"]`, i-10, i-1-(i%7))
		}
		fmt.Fprintf(&sb, `{"toolId":"t%d","toolPath":"dice/roll","dependencies":%s}`, i, deps)
	}
	sb.WriteString(`]}`)
	checkAgree(t, []byte(sb.String()), &a)
	require.Equal(t, 1, a.validExact)
}

func FuzzPlanValidatorsAgree(f *testing.F) {
	for _, doc := range planCorpus(f) {
		if len(doc) < 64<<10 {
			f.Add(doc)
		}
	}
	g := planGen{r: rand.New(rand.NewPCG(5, 8))}
	for i := range 200 {
		f.Add(g.document(i))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var a agreement
		checkAgree(t, doc, &a)
	})
}

// The generator --

// jnode is a JSON value under construction: an object (members in order,
// repeats allowed), an array, or a literal. field names the schema field
// the value stands for, for values at its bounds.
type jnode struct {
	obj, arr bool
	keys     []string // key literals, quotes included
	vals     []*jnode
	raw      string
	field    string
}

func (n *jnode) render(b *strings.Builder) {
	switch {
	case n.obj:
		b.WriteByte('{')
		for i := range n.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(n.keys[i])
			b.WriteByte(':')
			n.vals[i].render(b)
		}
		b.WriteByte('}')
	case n.arr:
		b.WriteByte('[')
		for i, v := range n.vals {
			if i > 0 {
				b.WriteByte(',')
			}
			v.render(b)
		}
		b.WriteByte(']')
	default:
		b.WriteString(n.raw)
	}
}

func raw(s, field string) *jnode { return &jnode{raw: s, field: field} }

func (n *jnode) set(key string, v *jnode) {
	n.keys = append(n.keys, strconv.Quote(key))
	n.vals = append(n.vals, v)
}

type planGen struct {
	r *rand.Rand
}

func (g *planGen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }
func (g *planGen) chance(p float64) bool    { return g.r.Float64() < p }

// values are literals of every JSON type, of the fields' bounds and
// patterns, and of the forms encoding/json and the schema see differently.
var values = []string{
	`null`, `true`, `false`, `0`, `-0`, `1`, `-1`, `2`, `10`, `11`, `1.0`, `1.5`, `1e1`, `1E+1`, `10e-1`, `0.1e1`,
	`3600000`, `3600001`, `86400000`, `86400001`, `2147483647`, `2147483648`,
	`9223372036854775807`, `9223372036854775808`, `-9223372036854775808`, `-9223372036854775809`,
	`99999999999999999999999`, `1e400`, `-1e400`, `1e-400`, `1e1000001`, `0.0000000001`,
	`""`, `"a"`, `"x y"`, `"a.b"`, `"$"`, `"$a"`, `"$$a"`, `"dice/roll"`, `"Dice/roll"`, `"/etc/passwd"`,
	`"dice/../x"`, `"dice//roll"`, `"dice\\roll"`, `"dice/x/y"`, `"skills/dice/scripts/roll.sh"`,
	`"` + planID + `"`, `"6BA7B810-9DAD-11D1-80B4-00C04FD430C8"`, `"6ba7b8109dad-11d1-80b4-00c04fd430c8"`,
	`"6ba7b810-9dad-11d1-80b4-00c04fd430c"`, `"6ba7b810-9dad-11d1-80b4-00c04fd430c8 "`, `"6ba7b810-9dad-11d1-80b4-00c04fd430cg"`,
	`"` + strings.Repeat("a", 64) + `"`, `"` + strings.Repeat("a", 65) + `"`, `"` + strings.Repeat("é", 64) + `"`,
	`"` + strings.Repeat("x", 512) + `"`, `"` + strings.Repeat("x", 513) + `"`, `"` + strings.Repeat("é", 512) + `"`, `"` + strings.Repeat("é", 513) + `"`,
	`"\u0061"`, `"\u0041b"`, `"a\u0000b"`, `"\ud800"`, `"\ud83d\ude00"`, "\"\xff\xfe\"", "\"a\xc3\"", `"\/"`, `"tab\there"`, `"é"`,
	`"my-skill"`, `"my_skill"`, `"A"`, `"-"`, `"_"`, `"0"`,
	`[]`, `[1]`, `["a"]`, `["a","b"]`, `["a",1]`, `[null]`, `["x y"]`, `["` + strings.Repeat("b", 65) + `"]`, `[[]]`, `[{}]`,
	`{}`, `{"a":1}`, `{"x":"$b"}`, `{"x":"$b..c"}`, `{"x":"$"}`, `{"x":["$$y",{"z":"$t.p"}]}`, `{"maxRetries":1}`, `{"backoffMs":5}`,
	`{"generationAttempt":2}`, `{"parentPlanId":null}`, `{"toolId":"a","toolPath":"dice/roll"}`, `{"a":{"b":{"c":[1,2,{"d":null}]}}}`,
}

// bounds are values at and around each field's bounds and pattern.
var bounds = map[string][]string{
	"requestId": {`"` + planID + `"`, `"` + planID[:35] + `"`, `"` + planID + `0"`, `"` + strings.ToUpper(planID) + `"`,
		`"` + strings.Replace(planID, "-", "_", 1) + `"`, `"` + strings.Replace(planID, "a", "g", 1) + `"`, `""`, `"\u0036ba7b810-9dad-11d1-80b4-00c04fd430c8"`},
	"parentPlanId": {`null`, `"` + planID + `"`, `"p"`, `""`, `1`, `{}`, `[]`, `true`},
	"sessionId":    {`""`, `"a"`, `"` + strings.Repeat("s", 64) + `"`, `"` + strings.Repeat("s", 65) + `"`, `"a b"`, `"a.b"`, `"é"`, `"A_-9"`},
	"toolId":       {`""`, `"a"`, `"` + strings.Repeat("t", 64) + `"`, `"` + strings.Repeat("t", 65) + `"`, `"a b"`, `"a*"`, `"\u0041"`},
	"token":        {`""`, `"t0"`, `"` + strings.Repeat("t", 64) + `"`, `"` + strings.Repeat("t", 65) + `"`, `"x y"`, `1`, `null`},
	"skillName":    {`""`, `"a"`, `"A"`, `"a_b"`, `"` + strings.Repeat("k", 64) + `"`, `"` + strings.Repeat("k", 65) + `"`, `"a-0"`},
	"toolPath": {`""`, `"a"`, `"` + strings.Repeat("p", 512) + `"`, `"` + strings.Repeat("p", 513) + `"`,
		`"` + strings.Repeat("é", 512) + `"`, `"` + strings.Repeat("é", 513) + `"`, `"\ud800"`, "\"\xff\""},
	"maxRetries":        {`-1`, `0`, `10`, `11`, `10.0`, `1e1`, `11.0`, `-0`, `0.5`, `9223372036854775808`},
	"backoffMs":         {`-1`, `0`, `3600000`, `3600001`, `3.6e6`, `3600000.5`},
	"toolTimeoutMs":     {`0`, `1`, `3600000`, `3600001`, `1.0`, `-0`, `0.0`},
	"planTimeoutMs":     {`0`, `1`, `86400000`, `86400001`, `8.64e7`, `86400000.0`, `1e400`},
	"generationAttempt": {`0`, `1`, `-1`, `2147483648`, `9223372036854775807`, `9223372036854775808`, `1e2`, `1.5`},
	"metadata":          {`{}`, `null`, `[]`, `{"generationAttempt":0}`, `{"parentPlanId":"x"}`},
	"retryPolicy":       {`{}`, `null`, `{"maxRetries":11,"backoffMs":-1}`, `[]`},
	"input":             {`{}`, `null`, `[]`, `"x"`, `{"x":"$"}`, `{"x":"$a b"}`, `{"x":"$b..c"}`},
	"dependencies":      {`[]`, `null`, `{}`, `["t0","t0"]`, `["x y"]`},
	"disabledSkills":    {`[]`, `null`, `["dice"]`, `["Dice"]`},
	"tools":             {`[]`, `null`, `{}`, `[1]`, `[{}]`, `[null]`},
	"tool":              {`{}`, `null`, `[]`, `{"toolId":"a"}`, `{"toolPath":"a/b"}`},
}

// keyVariant respells a field name: as names encoding/json matches to the
// field and the schema does not (case, Kelvin sign, long s), escaped (the
// same name to both), or as another name.
func (g *planGen) keyVariant(name string) string {
	switch g.r.IntN(7) {
	case 0:
		return strconv.Quote(strings.ToUpper(name[:1]) + name[1:])
	case 1:
		return strconv.Quote(strings.ToUpper(name))
	case 2:
		return strconv.Quote(strings.ToLower(name))
	case 3:
		return strconv.Quote(strings.NewReplacer("k", "\u212a", "K", "\u212a").Replace(name))
	case 4:
		return strconv.Quote(strings.NewReplacer("s", "\u017f", "S", "\u017f").Replace(name))
	case 5:
		return `"\u00` + strconv.FormatInt(int64(name[0]), 16) + name[1:] + `"`
	default:
		return strconv.Quote(name + "x")
	}
}

func (g *planGen) token() string {
	switch g.r.IntN(10) {
	case 0:
		return strings.Repeat("z", 1+g.r.IntN(64))
	case 1:
		return "A-_9"
	default:
		return "t" + strconv.Itoa(g.r.IntN(20))
	}
}

func (g *planGen) validPlan() *jnode {
	p := &jnode{obj: true}
	p.set("requestId", raw(strconv.Quote(g.pick(planID, "6BA7B810-9dad-11d1-80b4-00C04FD430C8")), "requestId"))
	tools := &jnode{arr: true, field: "tools"}
	for i := range g.r.IntN(5) {
		tools.vals = append(tools.vals, g.validTool(i))
	}
	p.set("tools", tools)
	if g.chance(0.3) {
		p.set("sessionId", raw(strconv.Quote(g.token()), "sessionId"))
	}
	if g.chance(0.3) {
		p.set("narrative", raw(strconv.Quote(g.pick("", "The troll roars.", "é\n\"")), "narrative"))
	}
	if g.chance(0.3) {
		p.set("parallel", raw(g.pick("true", "false"), "parallel"))
	}
	if g.chance(0.3) {
		ds := &jnode{arr: true, field: "disabledSkills"}
		for range g.r.IntN(3) {
			ds.vals = append(ds.vals, raw(strconv.Quote(g.pick("dice", "memory", "a-0", strings.Repeat("q", 64))), "skillName"))
		}
		p.set("disabledSkills", ds)
	}
	if g.chance(0.3) {
		md := &jnode{obj: true, field: "metadata"}
		if g.chance(0.6) {
			md.set("generationAttempt", raw(g.pick("1", "2", "3", "100"), "generationAttempt"))
		}
		if g.chance(0.6) {
			md.set("parentPlanId", raw(g.pick("null", strconv.Quote(planID)), "parentPlanId"))
		}
		p.set("metadata", md)
	}
	if g.chance(0.3) {
		p.set("timeoutMs", raw(g.pick("1", "60000", "86400000"), "planTimeoutMs"))
	}
	if g.chance(0.2) {
		p.set(g.pick("extra", "x-note", "Tools2"), raw(g.pick(values...), ""))
	}
	g.shuffle(p)
	return p
}

func (g *planGen) validTool(i int) *jnode {
	t := &jnode{obj: true, field: "tool"}
	t.set("toolId", raw(strconv.Quote(fmt.Sprintf("t%d", i)), "toolId"))
	t.set("toolPath", raw(strconv.Quote(g.pick("dice/roll", "dice-roller/roll-dice", "memory/scripts/recall.sh", "skills/dice/scripts/roll.sh")), "toolPath"))
	if g.chance(0.3) {
		t.set("description", raw(strconv.Quote(g.pick("", "roll", "é")), "description"))
	}
	if g.chance(0.4) {
		t.set("input", raw(g.pick(`{}`, `{"formula":"1d20"}`, `{ "a" : [ 1 , 2 ] }`, `{"x":"$t0.total"}`, `{"x":"$$lit"}`, `{"n":null}`), "input"))
	}
	if g.chance(0.4) && i > 0 {
		deps := &jnode{arr: true, field: "dependencies"}
		deps.vals = append(deps.vals, raw(strconv.Quote(fmt.Sprintf("t%d", g.r.IntN(i))), "token"))
		t.set("dependencies", deps)
	}
	for _, f := range []string{"required", "async", "requiresApproval"} {
		if g.chance(0.2) {
			t.set(f, raw(g.pick("true", "false"), f))
		}
	}
	if g.chance(0.3) {
		rp := &jnode{obj: true, field: "retryPolicy"}
		if g.chance(0.6) {
			rp.set("maxRetries", raw(g.pick("0", "3", "10"), "maxRetries"))
		}
		if g.chance(0.6) {
			rp.set("backoffMs", raw(g.pick("0", "100", "3600000"), "backoffMs"))
		}
		t.set("retryPolicy", rp)
	}
	if g.chance(0.2) {
		t.set("timeoutMs", raw(g.pick("1", "30000", "3600000"), "toolTimeoutMs"))
	}
	if g.chance(0.1) {
		t.set("unknown", raw(g.pick(values...), ""))
	}
	g.shuffle(t)
	return t
}

func (g *planGen) shuffle(n *jnode) {
	g.r.Shuffle(len(n.keys), func(i, j int) {
		n.keys[i], n.keys[j] = n.keys[j], n.keys[i]
		n.vals[i], n.vals[j] = n.vals[j], n.vals[i]
	})
}

// allNodes lists every value of the tree.
func allNodes(n *jnode, out []*jnode) []*jnode {
	out = append(out, n)
	for _, v := range n.vals {
		out = allNodes(v, out)
	}
	return out
}

// mutate changes one random value of the tree.
func (g *planGen) mutate(root *jnode) {
	all := allNodes(root, nil)
	n := all[g.r.IntN(len(all))]
	switch k := g.r.IntN(10); {
	case k < 5 || !n.obj && !n.arr: // replace the value
		*n = jnode{raw: g.pick(values...), field: n.field}
		if b := bounds[n.field]; len(b) > 0 && g.chance(0.6) {
			n.raw = g.pick(b...)
		} else if g.chance(0.1) { // deeper garbage
			n.raw = strings.Repeat(`[`, 3) + g.pick(values...) + strings.Repeat(`]`, 3)
		}
	case n.obj && len(n.keys) > 0 && k < 7: // drop a member
		i := g.r.IntN(len(n.keys))
		n.keys = append(n.keys[:i], n.keys[i+1:]...)
		n.vals = append(n.vals[:i], n.vals[i+1:]...)
	case n.obj && len(n.keys) > 0 && k < 8: // repeat a member, with the same or another value
		i := g.r.IntN(len(n.keys))
		v := n.vals[i]
		if g.chance(0.5) {
			v = raw(g.pick(values...), "")
		}
		n.keys = append(n.keys, n.keys[i])
		n.vals = append(n.vals, v)
	case n.obj && len(n.keys) > 0 && k < 9: // rename a member
		i := g.r.IntN(len(n.keys))
		if name, err := strconv.Unquote(n.keys[i]); err == nil && name != "" {
			n.keys[i] = g.keyVariant(name)
		}
	case n.arr:
		if len(n.vals) > 0 && g.chance(0.5) {
			n.vals = n.vals[:len(n.vals)-1]
		} else {
			n.vals = append(n.vals, raw(g.pick(values...), ""))
		}
	default: // add an unknown member
		n.keys = append(n.keys, strconv.Quote(g.pick("zz", "", "toolId2", "déjà")))
		n.vals = append(n.vals, raw(g.pick(values...), ""))
	}
}

// document returns the i-th generated document: every third a valid plan
// as generated, the others mutated, some with a few bytes changed.
func (g *planGen) document(i int) []byte {
	p := g.validPlan()
	if i%3 != 0 {
		for range 1 + g.r.IntN(3) {
			g.mutate(p)
		}
	}
	var b strings.Builder
	if g.chance(0.05) {
		b.WriteString(g.pick(" ", "\n\t", "\r\n "))
	}
	p.render(&b)
	doc := []byte(b.String())
	if g.chance(0.05) {
		doc = append(doc, g.pick(" ", "\n", " x", "]", "}", "{}", "\x00")...)
	}
	if i%3 != 0 && g.chance(0.08) {
		const junk = "{}[]\",:0-eE.\\ \x01\xffnt"
		for range 1 + g.r.IntN(2) {
			j := g.r.IntN(len(doc))
			switch g.r.IntN(3) {
			case 0:
				doc = append(doc[:j], doc[j+1:]...)
			case 1:
				doc[j] = junk[g.r.IntN(len(junk))]
			default:
				doc = append(doc[:j], append([]byte{doc[j]}, doc[j:]...)...)
			}
		}
	}
	return doc
}

// BenchmarkDecodePlanScanVsGeneric compares DecodePlan (the plan scan) with the generic
// path it replaces, on plans of 3 and 1,000 tools.
func BenchmarkDecodePlanScanVsGeneric(b *testing.B) {
	for _, n := range []int{3, 1000} {
		tools := make([]string, n)
		for i := range tools {
			deps := "[]"
			if i > 0 {
				deps = fmt.Sprintf(`["t%d"]`, i-1)
			}
			tools[i] = fmt.Sprintf(`{"toolId":"t%d","toolPath":"dice/roll","dependencies":%s,"input":{"formula":"1d20"},"retryPolicy":{"maxRetries":2}}`, i, deps)
		}
		doc := []byte(planWith(`"parallel":true`, tools...))
		for _, path := range []struct {
			name   string
			decode func([]byte, PlanLimits) (*Plan, error)
		}{{"scan", DecodePlan}, {"generic", decodePlanGeneric}} {
			b.Run(fmt.Sprintf("%s/%d", path.name, n), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(doc)))
				limits := PlanLimits{}.WithDefaults()
				for b.Loop() {
					if _, err := path.decode(doc, limits); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
