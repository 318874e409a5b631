package messages

import (
	"bytes"
	"encoding/json"
	"math/big"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// This file is the Plan JSON Schema written out by hand: one pass over the
// document that checks it exactly as the generic validator checks it
// against schemas/plan.schema.json (same decision, same problems, same
// fields, same wording) and decodes it into a Plan on the way.
//
// The generic path decodes the document twice (to `any` for the schema,
// then into the structs) and walks a tree of maps; for a 100,000-tool plan
// that was 90% of the time of `plancheck.Check`. The TestPlanScanAgrees*
// tests and FuzzPlanValidatorsAgree (planscan_test.go) hold the two
// validators to each other; any change to plan.schema.json must be made
// here too, and those tests fail until it is.
//
// DecodePlan uses the scan's Plan only when it is sure the generic path
// would have produced the very same value without any error: the document
// is valid JSON with nothing after it, valid against the schema, has no
// repeated or case-folded known field names (encoding/json merges and folds
// them) and no integer written as 1.0 or 1e2 or too large for its Go field
// (encoding/json refuses those). Otherwise DecodePlan takes the generic path,
// which also words every rejection.

// Patterns of plan.schema.json, as the generic validator quotes them.
const (
	patternUUID      = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
	patternToken     = "^[A-Za-z0-9_-]{1,64}$"
	patternSession   = "^([a-z0-9][a-z0-9-]{0,31}\\.)?[A-Za-z0-9_-]{1,64}$"
	patternSkillName = "^[a-z0-9-]{1,64}$"
)

// maxJSONDepth is encoding/json's nesting limit: deeper documents are not
// valid JSON to it.
const maxJSONDepth = 10000

// jsonKind is the JSON type of a value, as the schema validator names it.
type jsonKind uint8

const (
	kindNull jsonKind = iota
	kindBoolean
	kindNumber
	kindString
	kindArray
	kindObject
)

var kindNames = [...]string{"null", "boolean", "number", "string", "array", "object"}

func (k jsonKind) String() string { return kindNames[k] }

// pathSeg is one step of the location of a value: an object key or, when
// index >= 0, an array index.
type pathSeg struct {
	key   string
	index int
}

// planScan holds the state of one scan.
type planScan struct {
	b     []byte
	i     int
	depth int
	// bad is set on the first syntax error (the document is not JSON to
	// encoding/json) or, in a quick scan, on the first sign that the
	// generic path must decide; the scan then stops.
	bad bool
	// exact stays true while the decoded Plan is what encoding/json
	// would produce, without error.
	exact bool
	// quick stops the scan (as if b were not JSON) at the first problem or
	// inexact field: DecodePlan then takes the generic path anyway.
	quick bool
	probs []Problem
	path  []pathSeg
	// paths interns toolPath values: plans repeat a few scripts many times.
	paths map[string]string
	// slab is where carve cuts dependency lists from; list collects one
	// list's strings.
	slab, list []string
	// scratch holds a decoded key that had escapes.
	scratch []byte
}

// scanPlan checks b against the Plan JSON Schema and decodes it. ok is
// false when b is not JSON to encoding/json (the other results are then
// meaningless). probs are the schema problems, as ValidateSchema reports
// them (sorted by field). exact says p is what json.Unmarshal would give,
// without error; it is meaningful only when probs is empty.
//
// With quick set the scan stops early, returning ok false, as soon as it
// knows the answer is not (valid, exact): DecodePlan's use.
func scanPlan(b []byte, quick bool) (p *Plan, probs []Problem, exact, ok bool) {
	s := &planScan{b: b, exact: true, quick: quick}
	p = s.document()
	if s.bad {
		return nil, nil, false, false
	}
	sortProblems(s.probs)
	return p, s.probs, s.exact, true
}

func (s *planScan) document() *Plan {
	p := &Plan{}
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '{' {
		s.plan(p)
	} else if k := s.skip(); !s.bad {
		s.typeProblem(k, "object")
	}
	s.ws()
	if s.i != len(s.b) {
		s.bad = true
	}
	return p
}

// Problems --

func (s *planScan) field() string {
	var b []byte
	for i, seg := range s.path {
		if seg.index >= 0 {
			b = append(b, '[')
			b = strconv.AppendInt(b, int64(seg.index), 10)
			b = append(b, ']')
			continue
		}
		if isIndex(seg.key) {
			b = append(b, '[')
			b = append(b, seg.key...)
			b = append(b, ']')
			continue
		}
		if i > 0 {
			b = append(b, '.')
		}
		b = append(b, seg.key...)
	}
	return string(b)
}

func (s *planScan) problem(k jsonschema.ErrorKind) {
	if s.quick {
		s.bad = true
		return
	}
	s.probs = append(s.probs, Problem{Field: s.field(), Message: kindMessage(k)})
}

// inexact notes that encoding/json would decode the document differently.
func (s *planScan) inexact() {
	s.exact = false
	if s.quick {
		s.bad = true
	}
}

func (s *planScan) typeProblem(got jsonKind, want string) {
	s.problem(&kind.Type{Got: got.String(), Want: []string{want}})
}

func (s *planScan) push(key string) { s.path = append(s.path, pathSeg{key: key, index: -1}) }
func (s *planScan) pushIndex(i int) { s.path = append(s.path, pathSeg{index: i}) }
func (s *planScan) pop()            { s.path = s.path[:len(s.path)-1] }
func (s *planScan) fail() jsonKind  { s.bad = true; return kindNull }
func (s *planScan) peek() (byte, bool) {
	if s.i < len(s.b) {
		return s.b[s.i], true
	}
	return 0, false
}

// members tracks the known fields of one object: which were seen, and the
// problems each one's value produced, so that a repeated field replaces the
// problems of its earlier value (the generic validator sees only the last
// value, like encoding/json's map decoding).
type members struct {
	seen  uint32
	start [16]int
	end   [16]int
}

// begin notes that field f starts at the current problem count and, for a
// repeat, drops the earlier value's problems.
func (m *members) begin(s *planScan, f int) {
	if m.seen&(1<<f) != 0 {
		s.inexact() // encoding/json merges a repeated object into the first
		a, z := m.start[f], m.end[f]
		if n := z - a; n > 0 {
			s.probs = append(s.probs[:a], s.probs[z:]...)
			for g := range m.start {
				if m.seen&(1<<g) != 0 && m.start[g] >= z {
					m.start[g] -= n
					m.end[g] -= n
				}
			}
		}
	}
	m.seen |= 1 << f
	m.start[f] = len(s.probs)
}

func (m *members) finish(s *planScan, f int) { m.end[f] = len(s.probs) }

func (m *members) has(f int) bool { return m.seen&(1<<f) != 0 }

// unknownKey handles a key that is not a field of the schema: encoding/json
// would still decode it into a struct field whose name folds to it.
func (s *planScan) unknownKey(key []byte, names []string) {
	for _, n := range names {
		if bytes.EqualFold(key, []byte(n)) {
			s.inexact()
		}
	}
	s.skip()
}

// The plan --

var planFields = []string{"requestId", "sessionId", "narrative", "tools", "parallel", "disabledSkills", "metadata", "timeoutMs"}

func (s *planScan) plan(p *Plan) {
	*p = Plan{TimeoutMs: PlanTimeoutDefault.Milliseconds(), Metadata: PlanMetadata{GenerationAttempt: 1}}
	var m members
	for key := range s.object() {
		f := fieldIndex(planFields, key)
		if f < 0 {
			s.unknownKey(key, planFields)
			continue
		}
		m.begin(s, f)
		s.push(planFields[f])
		switch f {
		case 0:
			if v, ok := s.str(); ok {
				p.RequestID = v
				if !validUUID(v) {
					s.problem(&kind.Pattern{Got: v, Want: patternUUID})
				}
			}
		case 1:
			p.SessionID = s.session()
		case 2:
			p.Narrative, _ = s.str()
		case 3:
			p.Tools = s.tools()
		case 4:
			p.Parallel = s.boolean()
		case 5:
			p.DisabledSkills = s.skillNames()
		case 6:
			s.metadata(&p.Metadata)
		case 7:
			if v, ok := s.integer(1, 86_400_000, true); ok {
				p.TimeoutMs = v
			}
		}
		s.pop()
		m.finish(s, f)
	}
	if s.bad {
		return
	}
	s.required(m.has(0), "requestId", m.has(3), "tools")
	if p.DisabledSkills == nil {
		p.DisabledSkills = []string{}
	}
	if p.Tools == nil {
		p.Tools = []Tool{}
	}
}

// required reports the missing ones of two required fields.
func (s *planScan) required(has1 bool, name1 string, has2 bool, name2 string) {
	if has1 && has2 {
		return
	}
	var missing []string
	if !has1 {
		missing = append(missing, name1)
	}
	if !has2 {
		missing = append(missing, name2)
	}
	s.problem(&kind.Required{Missing: missing})
}

var metadataFields = []string{"generationAttempt", "parentPlanId"}

func (s *planScan) metadata(md *PlanMetadata) {
	if c, _ := s.peek(); c != '{' {
		s.typeProblem(s.skip(), "object")
		return
	}
	var m members
	for key := range s.object() {
		f := fieldIndex(metadataFields, key)
		if f < 0 {
			s.unknownKey(key, metadataFields)
			continue
		}
		m.begin(s, f)
		s.push(metadataFields[f])
		switch f {
		case 0:
			v, ok := s.integer(1, 0, false)
			if ok && int64(int(v)) != v {
				s.inexact() // encoding/json: overflows a 32-bit int
			}
			if ok && v != 0 {
				md.GenerationAttempt = int(v)
			}
		case 1:
			md.ParentPlanID = s.parentPlanID()
		}
		s.pop()
		m.finish(s, f)
	}
}

// parentPlanID checks anyOf [null, UUID string], reporting both branches'
// problems when neither holds, as the generic validator does.
func (s *planScan) parentPlanID() *string {
	c, _ := s.peek()
	if c != '"' {
		k := s.skip()
		if k != kindNull && !s.bad {
			s.typeProblem(k, "null")
			s.typeProblem(k, "string")
		}
		return nil
	}
	v := s.stringValue()
	if !validUUID(v) {
		s.typeProblem(kindString, "null")
		s.problem(&kind.Pattern{Got: v, Want: patternUUID})
	}
	return &v
}

func (s *planScan) skillNames() []string {
	if c, _ := s.peek(); c != '[' {
		s.typeProblem(s.skip(), "array")
		return nil
	}
	out := []string{}
	for i := range s.array() {
		s.pushIndex(i)
		if v, ok := s.str(); ok {
			if !validSkillName(v) {
				s.problem(&kind.Pattern{Got: v, Want: patternSkillName})
			}
			out = append(out, v)
		}
		s.pop()
	}
	return out
}

// The tools --

var toolFields = []string{"toolId", "toolPath", "description", "input", "dependencies", "required", "async", "retryPolicy", "timeoutMs", "requiresApproval"}

func (s *planScan) tools() []Tool {
	if c, _ := s.peek(); c != '[' {
		s.typeProblem(s.skip(), "array")
		return nil
	}
	// Appending to a slice that grows from nothing copies and clears every
	// Tool several times on the way to 100,000. So once 64 tools are read,
	// the slice grows to what the rest of the document holds if its tools
	// are like these, but to at most one tool per 30 bytes (the smallest
	// tool, {"toolId":"a","toolPath":"b"}, and a comma).
	const sample = 64
	start := s.i
	out := make([]Tool, 0, 4)
	for i := range s.array() {
		if i == sample {
			rest := len(s.b) - s.i
			est := min(rest/max(1, (s.i-start)/sample), rest/30)
			out = slices.Grow(out, est+est/8)
		}
		s.pushIndex(i)
		out = append(out, Tool{})
		s.tool(&out[len(out)-1])
		s.pop()
	}
	return out
}

func (s *planScan) tool(t *Tool) {
	*t = Tool{Required: true, RetryPolicy: RetryPolicy{MaxRetries: MaxRetriesDefault, BackoffMs: BackoffMsDefault}}
	if c, _ := s.peek(); c != '{' {
		s.typeProblem(s.skip(), "object")
		return
	}
	var m members
	for key := range s.object() {
		f := fieldIndex(toolFields, key)
		if f < 0 {
			s.unknownKey(key, toolFields)
			continue
		}
		m.begin(s, f)
		s.push(toolFields[f])
		switch f {
		case 0:
			t.ToolID = s.token()
		case 1:
			if v, ok := s.internedStr(); ok {
				t.ToolPath = v
				if n := utf8.RuneCountInString(v); n < 1 {
					s.problem(&kind.MinLength{Got: n, Want: 1})
				} else if n > 512 {
					s.problem(&kind.MaxLength{Got: n, Want: 512})
				}
			}
		case 2:
			t.Description, _ = s.str()
		case 3:
			if c, _ := s.peek(); c != '{' {
				s.typeProblem(s.skip(), "object")
				break
			}
			start := s.i
			s.skip()
			t.Input = bytes.Clone(s.b[start:s.i])
		case 4:
			t.Dependencies = s.tokens()
		case 5:
			t.Required = s.boolean()
		case 6:
			t.Async = s.boolean()
		case 7:
			s.retryPolicy(&t.RetryPolicy)
		case 8:
			t.TimeoutMs, _ = s.integer(1, 3_600_000, true)
		case 9:
			t.RequiresApproval = s.boolean()
		}
		s.pop()
		m.finish(s, f)
	}
	if s.bad {
		return
	}
	s.required(m.has(0), "toolId", m.has(1), "toolPath")
	if t.Dependencies == nil {
		t.Dependencies = []string{}
	}
	if len(t.Input) == 0 {
		t.Input = json.RawMessage("{}")
	}
}

var retryFields = []string{"maxRetries", "backoffMs"}

func (s *planScan) retryPolicy(rp *RetryPolicy) {
	if c, _ := s.peek(); c != '{' {
		s.typeProblem(s.skip(), "object")
		return
	}
	var m members
	for key := range s.object() {
		f := fieldIndex(retryFields, key)
		if f < 0 {
			s.unknownKey(key, retryFields)
			continue
		}
		m.begin(s, f)
		s.push(retryFields[f])
		switch f {
		case 0:
			if v, ok := s.integer(0, MaxRetriesLimit, true); ok {
				rp.MaxRetries = int(v)
			}
		case 1:
			if v, ok := s.integer(0, 3_600_000, true); ok {
				rp.BackoffMs = v
			}
		}
		s.pop()
		m.finish(s, f)
	}
}

func (s *planScan) tokens() []string {
	if c, _ := s.peek(); c != '[' {
		s.typeProblem(s.skip(), "array")
		return nil
	}
	s.list = s.list[:0]
	for i := range s.array() {
		s.pushIndex(i)
		s.list = append(s.list, s.token())
		s.pop()
	}
	out := s.carve(len(s.list))
	copy(out, s.list)
	return out
}

// carve returns a list of n strings cut from a slab shared by the plan's
// tools: a plan of 100,000 tools then makes a few dozen allocations for
// their dependency lists, not 200,000. Each list's capacity is its length,
// so appending to one never writes into another's.
func (s *planScan) carve(n int) []string {
	if n == 0 {
		return []string{}
	}
	if len(s.slab)+n > cap(s.slab) {
		s.slab = make([]string, 0, max(n, 16, min(2*cap(s.slab), 4096)))
	}
	i := len(s.slab)
	s.slab = s.slab[:i+n]
	return s.slab[i : i+n : i+n]
}

// Typed values --

// str reads a string value, or reports a type problem and skips the value.
func (s *planScan) str() (string, bool) {
	if c, _ := s.peek(); c != '"' {
		if k := s.skip(); !s.bad {
			s.typeProblem(k, "string")
		}
		return "", false
	}
	return s.stringValue(), true
}

// token reads a string that must match ^[A-Za-z0-9_-]{1,64}$.
func (s *planScan) token() string {
	v, ok := s.str()
	if ok && !ValidToken(v) {
		s.problem(&kind.Pattern{Got: v, Want: patternToken})
	}
	return v
}

// session reads a session ID: a token, or in a multi-tenant deployment
// <tenant>.<token> (messages.Subjects.Tenants).
func (s *planScan) session() string {
	v, ok := s.str()
	if ok && !ValidSession(v) {
		s.problem(&kind.Pattern{Got: v, Want: patternSession})
	}
	return v
}

func (s *planScan) boolean() bool {
	switch c, _ := s.peek(); c {
	case 't':
		s.literal("true")
		return true
	case 'f':
		s.literal("false")
		return false
	}
	if k := s.skip(); !s.bad {
		s.typeProblem(k, "boolean")
	}
	return false
}

// integer reads an integer in [lo, hi] (no upper bound unless hasHi). It
// reports what the schema would, and clears exact when encoding/json
// would not decode the number into an int64 (1.0, 1e2, overflow). ok says
// v holds the value.
func (s *planScan) integer(lo, hi int64, hasHi bool) (v int64, ok bool) {
	c, _ := s.peek()
	if c != '-' && (c < '0' || c > '9') {
		if k := s.skip(); !s.bad {
			s.typeProblem(k, "integer")
		}
		return 0, false
	}
	lit := s.number()
	if s.bad {
		return 0, false
	}
	plain := !bytes.ContainsAny(lit, ".eE")
	if plain {
		if v, err := strconv.ParseInt(string(lit), 10, 64); err == nil {
			if v < lo {
				s.problem(&kind.Minimum{Got: big.NewRat(v, 1), Want: big.NewRat(lo, 1)})
			} else if hasHi && v > hi {
				s.problem(&kind.Maximum{Got: big.NewRat(v, 1), Want: big.NewRat(hi, 1)})
			}
			return v, true
		}
	}
	// 1.0, 1e2, or beyond int64: valid integers to the schema if their
	// value is whole, but encoding/json does not decode them into an int64.
	s.inexact()
	if s.bad {
		return 0, false
	}
	r, isNum := new(big.Rat).SetString(string(lit))
	if !isNum || !r.IsInt() {
		s.typeProblem(kindNumber, "integer")
		return 0, false
	}
	if l := big.NewRat(lo, 1); r.Cmp(l) < 0 {
		s.problem(&kind.Minimum{Got: r, Want: l})
	} else if h := big.NewRat(hi, 1); hasHi && r.Cmp(h) > 0 {
		s.problem(&kind.Maximum{Got: r, Want: h})
	}
	return 0, false
}

// internedStr is str for values that repeat (toolPath): a plain string
// seen before is not allocated again.
func (s *planScan) internedStr() (string, bool) {
	if c, _ := s.peek(); c != '"' {
		return s.str()
	}
	start := s.i
	lit, plain := s.stringSpan()
	if s.bad || !plain {
		s.i = start
		return s.str()
	}
	if v, ok := s.paths[string(lit[1:len(lit)-1])]; ok {
		return v, true
	}
	v := string(lit[1 : len(lit)-1])
	if s.paths == nil {
		s.paths = map[string]string{}
	}
	if len(s.paths) < 1024 {
		s.paths[v] = v
	}
	return v, true
}

// validUUID reports whether v matches patternUUID.
func validUUID(v string) bool {
	if len(v) != 36 {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

func fieldIndex(names []string, key []byte) int {
	for i, n := range names {
		if string(key) == n {
			return i
		}
	}
	return -1
}

// JSON syntax, as encoding/json's scanner accepts it --

func (s *planScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// object consumes an object and yields each key, with the scan standing
// at the member's value; the loop body must consume the value.
func (s *planScan) object() func(yield func([]byte) bool) {
	return func(yield func([]byte) bool) {
		if !s.enter() {
			return
		}
		s.i++ // '{'
		s.ws()
		if c, _ := s.peek(); c == '}' {
			s.i++
			s.depth--
			return
		}
		for !s.bad {
			if c, _ := s.peek(); c != '"' {
				s.fail()
				return
			}
			key := s.key()
			s.ws()
			if c, _ := s.peek(); c != ':' || s.bad {
				s.fail()
				return
			}
			s.i++
			s.ws()
			if !yield(key) {
				return
			}
			if s.bad {
				return
			}
			s.ws()
			c, _ := s.peek()
			switch c {
			case ',':
				s.i++
				s.ws()
			case '}':
				s.i++
				s.depth--
				return
			default:
				s.fail()
				return
			}
		}
	}
}

// array consumes an array and yields each index, with the scan standing at
// the element; the loop body must consume the element.
func (s *planScan) array() func(yield func(int) bool) {
	return func(yield func(int) bool) {
		if !s.enter() {
			return
		}
		s.i++ // '['
		s.ws()
		if c, _ := s.peek(); c == ']' {
			s.i++
			s.depth--
			return
		}
		for n := 0; !s.bad; n++ {
			if !yield(n) || s.bad {
				return
			}
			s.ws()
			c, _ := s.peek()
			switch c {
			case ',':
				s.i++
				s.ws()
			case ']':
				s.i++
				s.depth--
				return
			default:
				s.fail()
				return
			}
		}
	}
}

func (s *planScan) enter() bool {
	s.depth++
	if s.depth > maxJSONDepth {
		s.bad = true
	}
	return !s.bad
}

// skip consumes any value and returns its kind.
func (s *planScan) skip() jsonKind {
	c, ok := s.peek()
	if !ok {
		return s.fail()
	}
	switch {
	case c == '{':
		for range s.object() {
			s.skip()
		}
		return kindObject
	case c == '[':
		for range s.array() {
			s.skip()
		}
		return kindArray
	case c == '"':
		s.stringSpan()
		return kindString
	case c == 't':
		s.literal("true")
		return kindBoolean
	case c == 'f':
		s.literal("false")
		return kindBoolean
	case c == 'n':
		s.literal("null")
		return kindNull
	case c == '-' || '0' <= c && c <= '9':
		s.number()
		return kindNumber
	}
	return s.fail()
}

func (s *planScan) literal(lit string) {
	if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return
	}
	s.fail()
}

// number consumes -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? and
// returns it.
func (s *planScan) number() []byte {
	start := s.i
	b := s.b
	digits := func() int {
		n := 0
		for s.i < len(b) && '0' <= b[s.i] && b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(b) && b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(b) && b[s.i] == '0':
		s.i++
	case digits() == 0:
		s.fail()
		return nil
	}
	if s.i < len(b) && b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			s.fail()
			return nil
		}
	}
	if s.i < len(b) && (b[s.i] == 'e' || b[s.i] == 'E') {
		s.i++
		if s.i < len(b) && (b[s.i] == '+' || b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			s.fail()
			return nil
		}
	}
	return b[start:s.i]
}

// stringSpan consumes a string and returns its literal (quotes included)
// and whether it is plain: no escapes and only printable ASCII, so its
// bytes are its value.
func (s *planScan) stringSpan() (lit []byte, plain bool) {
	b := s.b
	start := s.i
	s.i++ // '"'
	plain = true
	for s.i < len(b) {
		for s.i < len(b) && plainByte[b[s.i]] {
			s.i++
		}
		if s.i == len(b) {
			break
		}
		c := b[s.i]
		switch {
		case c == '"':
			s.i++
			return b[start:s.i], plain
		case c == '\\':
			plain = false
			s.i++
			if s.i >= len(b) {
				s.fail()
				return nil, false
			}
			switch b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for range 4 {
					if s.i >= len(b) || !isHex(b[s.i]) {
						s.fail()
						return nil, false
					}
					s.i++
				}
			default:
				s.fail()
				return nil, false
			}
		case c < 0x20:
			s.fail()
			return nil, false
		case c >= utf8.RuneSelf:
			plain = false
			s.i++
		default:
			s.i++
		}
	}
	s.fail()
	return nil, false
}

// plainByte marks the bytes a string literal holds as they are: printable
// ASCII but the quote and the backslash.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// stringValue consumes a string and returns its value as encoding/json
// decodes it (escapes resolved, invalid UTF-8 replaced).
func (s *planScan) stringValue() string {
	lit, plain := s.stringSpan()
	if s.bad {
		return ""
	}
	if plain {
		return string(lit[1 : len(lit)-1])
	}
	var v string
	if err := json.Unmarshal(lit, &v); err != nil {
		s.fail()
	}
	return v
}

// key consumes an object key and returns its value; the slice is valid
// until the next key.
func (s *planScan) key() []byte {
	lit, plain := s.stringSpan()
	if s.bad {
		return nil
	}
	if plain {
		return lit[1 : len(lit)-1]
	}
	var v string
	if err := json.Unmarshal(lit, &v); err != nil {
		s.fail()
	}
	s.scratch = append(s.scratch[:0], v...)
	return s.scratch
}
