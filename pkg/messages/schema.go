package messages

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Schemas holds the project's JSON Schemas (draft 2020-12), one file per
// payload: plan, execution-result, event, manifest, progress, plan-status,
// prose-chunk, and the game server's payloads: what it sends (prompt,
// approval, session-reset, cancel-request, plan-list-request,
// context-reply) and what comes back (narration, health-transition,
// control-reply, session-reset-reply). They are also shipped in
// docs/schemas/ for users of other languages (the TypeScript client's
// types are generated from them).
//
//go:embed schemas/*.schema.json
var Schemas embed.FS

// Schema file names inside Schemas.
const (
	SchemaPlan     = "plan.schema.json"
	SchemaResult   = "execution-result.schema.json"
	SchemaEvent    = "event.schema.json"
	SchemaManifest = "manifest.schema.json"
	// SchemaProgress is the progress message (§4.9).
	SchemaProgress = "progress.schema.json"
	// SchemaPlanStatus is a plan control status (§9.4).
	SchemaPlanStatus = "plan-status.schema.json"
	// SchemaPrompt is a Prompt (§1), read by DecodePrompt.
	SchemaPrompt = "prompt.schema.json"
	// SchemaApproval is an approval decision (§9.3), read by DecodeApproval.
	SchemaApproval = "approval.schema.json"
	// SchemaSessionReset is a session reset's body, read by DecodeSessionReset.
	SchemaSessionReset = "session-reset.schema.json"
	// SchemaCancelRequest is a cancel request's body (§9.4), read by DecodeCancelRequest.
	SchemaCancelRequest = "cancel-request.schema.json"
	// SchemaPlanListRequest is a plan list request's body, read by DecodePlanListRequest.
	SchemaPlanListRequest = "plan-list-request.schema.json"
	// SchemaContextReply is a planner's context reply (§9.1), read by DecodeContextReply.
	SchemaContextReply = "context-reply.schema.json"
	// SchemaNarration is a Narration (§1), the answer to a prompt.
	SchemaNarration = "narration.schema.json"
	// SchemaHealthTransition is a skill's health transition (§6).
	SchemaHealthTransition = "health-transition.schema.json"
	// SchemaControlReply is a plan control request's reply (§9.4).
	SchemaControlReply = "control-reply.schema.json"
	// SchemaSessionResetReply is a session reset's reply.
	SchemaSessionResetReply = "session-reset-reply.schema.json"
	// SchemaProseChunk is a piece of streamed prose (§13).
	SchemaProseChunk = "prose-chunk.schema.json"
)

var (
	schemaMu    sync.Mutex
	schemaCache = map[string]*jsonschema.Schema{}
)

// schemaURL is the $id prefix of every embedded schema.
const schemaURL = "https://narratoria.dev/schemas/"

// CompiledSchema returns the compiled embedded schema of the given name
// (one of the Schema constants), compiling it once.
func CompiledSchema(name string) (*jsonschema.Schema, error) {
	schemaMu.Lock()
	defer schemaMu.Unlock()
	if s, ok := schemaCache[name]; ok {
		return s, nil
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	entries, err := fs.ReadDir(Schemas, "schemas")
	if err != nil {
		return nil, fmt.Errorf("read embedded schemas: %w", err)
	}
	for _, e := range entries {
		b, err := Schemas.ReadFile("schemas/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("read schema %s: %w", e.Name(), err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("parse schema %s: %w", e.Name(), err)
		}
		if err := c.AddResource(schemaURL+e.Name(), doc); err != nil {
			return nil, fmt.Errorf("add schema %s: %w", e.Name(), err)
		}
	}
	s, err := c.Compile(schemaURL + name)
	if err != nil {
		return nil, fmt.Errorf("compile schema %s: %w", name, err)
	}
	schemaCache[name] = s
	return s, nil
}

// CompileSchema compiles a user-supplied JSON Schema document (a skill's
// inputSchema or config-schema.json). name is used in error messages.
func CompileSchema(name string, doc []byte) (*jsonschema.Schema, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("parse schema %s: %w", name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	url := "mem:///" + name
	if err := c.AddResource(url, v); err != nil {
		return nil, fmt.Errorf("add schema %s: %w", name, err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("compile schema %s: %w", name, err)
	}
	return s, nil
}

// Problem is one validation finding: the field at fault (a JSON path such as
// "tools[2].retryPolicy.maxRetries"; empty for the whole document) and what is
// wrong with it.
type Problem struct {
	// Field is the path of the offending value.
	Field string `json:"field"`
	// Message says what is wrong.
	Message string `json:"message"`
}

// String renders "field: message".
func (p Problem) String() string {
	if p.Field == "" {
		return p.Message
	}
	return p.Field + ": " + p.Message
}

// ValidateSchema validates a decoded JSON value (from jsonschema.UnmarshalJSON
// or json.Decoder with UseNumber) against a compiled schema and returns every
// problem, each naming its field, sorted by field.
func ValidateSchema(s *jsonschema.Schema, v any) []Problem {
	err := s.Validate(v)
	if err == nil {
		return nil
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return []Problem{{Message: err.Error()}}
	}
	var out []Problem
	collectProblems(ve, &out)
	if len(out) == 0 {
		out = append(out, Problem{Message: ve.Error()})
	}
	sortProblems(out)
	return out
}

// sortProblems orders problems by field, keeping the order of each field's.
func sortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Field < ps[j].Field })
}

var printer = message.NewPrinter(language.English)

func collectProblems(e *jsonschema.ValidationError, out *[]Problem) {
	if len(e.Causes) == 0 {
		*out = append(*out, Problem{Field: segmentsToPath(e.InstanceLocation), Message: kindMessage(e.ErrorKind)})
		return
	}
	for _, c := range e.Causes {
		collectProblems(c, out)
	}
}

// kindMessage phrases the common schema findings as "must ..." sentences and
// falls back to the validator's own wording for the rest.
func kindMessage(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Maximum:
		return fmt.Sprintf("must be <= %s (got %s)", k.Want.RatString(), k.Got.RatString())
	case *kind.Minimum:
		return fmt.Sprintf("must be >= %s (got %s)", k.Want.RatString(), k.Got.RatString())
	case *kind.Type:
		return fmt.Sprintf("must be %s (got %s)", strings.Join(k.Want, " or "), k.Got)
	case *kind.Required:
		return fmt.Sprintf("missing required field(s) %s", strings.Join(k.Missing, ", "))
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters (got %d)", k.Want, k.Got)
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d characters (got %d)", k.Want, k.Got)
	}
	return k.LocalizedString(printer)
}

// segmentsToPath turns instance location segments ["tools","2","retryPolicy"]
// into "tools[2].retryPolicy".
func segmentsToPath(seg []string) string {
	var b strings.Builder
	for i, s := range seg {
		if isIndex(s) {
			b.WriteByte('[')
			b.WriteString(s)
			b.WriteByte(']')
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

func isIndex(s string) bool {
	if len(s) == 0 {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// decodeForSchema decodes JSON into the generic form the schema validator
// expects (numbers as json.Number).
func decodeForSchema(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	// Decoder.More is false before a stray '}' or ']': look at the rest.
	if len(bytes.TrimSpace(b[d.InputOffset():])) > 0 {
		return nil, fmt.Errorf("unexpected data after the JSON value")
	}
	return v, nil
}
