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

//go:generate go run ../../internal/gen/planscan

// The plan scan is the Plan JSON Schema written out as code: one pass over
// the document that checks it exactly as the generic validator checks it
// against schemas/plan.schema.json (same decision, same problems, same
// fields, same wording) and decodes it into a Plan on the way.
//
// This file is its schema-independent half: the JSON lexer and the
// helpers that read, check and report one value. The other half,
// planscan_gen.go, walks the plan's objects; internal/gen/planscan
// generates it from the schema and the json tags of Plan, so after any
// change to plan.schema.json run go generate ./pkg/messages (a test fails
// until the generated file is current).
//
// The generic path decodes the document twice (to `any` for the schema,
// then into the structs) and walks a tree of maps; for a 100,000-tool plan
// that was 90% of the time of `plancheck.Check`. The TestPlanScanAgrees*
// tests and FuzzPlanValidatorsAgree (planscan_test.go) hold the two
// validators to each other.
//
// DecodePlan uses the scan's Plan only when it is sure the generic path
// would have produced the very same value without any error: the document
// is valid JSON with nothing after it, valid against the schema, has no
// repeated or case-folded known field names (encoding/json merges and folds
// them) and no integer written as 1.0 or 1e2 or too large for its Go field
// (encoding/json refuses those). Otherwise DecodePlan takes the generic path,
// which also words every rejection.

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
	s.plan(p)
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

// members tracks the known fields of one object (at most maxMembers): which
// were seen, and the problems each one's value produced, so that a repeated
// field replaces the problems of its earlier value (the generic validator
// sees only the last value, like encoding/json's map decoding).
type members struct {
	seen  uint32
	start [maxMembers]int
	end   [maxMembers]int
}

// maxMembers is the most properties an object of the schema may have
// (internal/gen/planscan refuses more).
const maxMembers = 16

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

// required reports those of the object's required fields (indexes into
// names, in the schema's order) that m has not seen.
func (s *planScan) required(m *members, names []string, req ...int) {
	var missing []string
	for _, f := range req {
		if !m.has(f) {
			missing = append(missing, names[f])
		}
	}
	if len(missing) > 0 {
		s.problem(&kind.Required{Missing: missing})
	}
}

// expect reports whether the value ahead starts with c (an object's '{',
// an array's '['); if not, it skips the value and reports its type.
func (s *planScan) expect(c byte, want string) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		return true
	}
	s.mistyped(want)
	return false
}

// mistyped skips a value that is not of type want and reports it.
func (s *planScan) mistyped(want string) {
	if k := s.skip(); !s.bad {
		s.typeProblem(k, want)
	}
}

// growSample is how many elements an array of objects reads before grow
// sizes it.
const growSample = 64

// grow makes room in out, once growSample elements are read from the array
// that starts at start: appending to a slice that grows from nothing
// copies and clears every element several times on the way to 100,000.
// The slice grows to what the rest of the document holds if its elements
// are like these, but to at most one element per minSize bytes (the
// smallest valid element and a comma).
func grow[T any](s *planScan, out []T, start, minSize int) []T {
	rest := len(s.b) - s.i
	est := min(rest/max(1, (s.i-start)/growSample), rest/minSize)
	return slices.Grow(out, est+est/8)
}

// carve returns a list of n strings cut from a slab shared by the plan's
// arrays of strings: a plan of 100,000 tools then makes a few dozen
// allocations for their dependency lists, not 200,000. Each list's
// capacity is its length, so appending to one never writes into another's.
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

// carveList ends an array of strings read into s.list: the list, carved.
func (s *planScan) carveList() []string {
	out := s.carve(len(s.list))
	copy(out, s.list)
	return out
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

// integer reads an integer in [lo, hi] (no lower bound unless hasLo, no
// upper bound unless hasHi). It reports what the schema would, and clears
// exact when encoding/json would not decode the number into an int64 (1.0,
// 1e2, overflow). ok says v holds the value.
func (s *planScan) integer(lo int64, hasLo bool, hi int64, hasHi bool) (v int64, ok bool) {
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
			if hasLo && v < lo {
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
	if l := big.NewRat(lo, 1); hasLo && r.Cmp(l) < 0 {
		s.problem(&kind.Minimum{Got: r, Want: l})
	} else if h := big.NewRat(hi, 1); hasHi && r.Cmp(h) > 0 {
		s.problem(&kind.Maximum{Got: r, Want: h})
	}
	return 0, false
}

// length reports a string of v's length (in characters, as the schema
// counts) outside [lo, hi] (no upper bound unless hasHi).
func (s *planScan) length(v string, lo, hi int, hasHi bool) {
	if n := utf8.RuneCountInString(v); n < lo {
		s.problem(&kind.MinLength{Got: n, Want: lo})
	} else if hasHi && n > hi {
		s.problem(&kind.MaxLength{Got: n, Want: hi})
	}
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
