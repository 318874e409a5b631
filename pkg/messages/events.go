package messages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/narratoria/runtime/pkg/codec"
	"unicode/utf8"
)

// ProtocolVersion is the only version of the tool protocol (docs/spec.md §5); every
// event line must carry "version": "0".
const ProtocolVersion = "0"

// EventType names a protocol event.
type EventType string

// The six protocol event types of docs/spec.md §5.
const (
	EventLog        EventType = "log"
	EventStatePatch EventType = "state_patch"
	EventAsset      EventType = "asset"
	EventUI         EventType = "ui_event"
	EventError      EventType = "error"
	EventDone       EventType = "done"
)

// Event is one decoded protocol event: *LogEvent, *StatePatchEvent,
// *AssetEvent, *UIEvent, *ErrorEvent or *DoneEvent.
type Event interface {
	// Type returns the event's type.
	Type() EventType
}

// Log levels a log event may carry.
const (
	LogDebug = "debug"
	LogInfo  = "info"
	LogWarn  = "warn"
	LogError = "error"
)

// LogEvent is a script's log line.
type LogEvent struct {
	// Level is debug, info, warn or error.
	Level string `json:"level"`
	// Message is the log message.
	Message string `json:"message"`
	// Fields are optional structured attributes.
	Fields map[string]any `json:"fields,omitempty"`
}

// StatePatchEvent carries a patch deep-merged into the session state (§6.3).
type StatePatchEvent struct {
	// Patch is the object to merge; null values delete keys.
	Patch map[string]any `json:"patch"`
}

// AssetEvent announces a file the script produced.
type AssetEvent struct {
	// AssetID identifies the asset within the tool.
	AssetID string `json:"assetId"`
	// Kind is a free category such as "image" or "audio".
	Kind string `json:"kind"`
	// MediaType is the MIME type, e.g. "image/svg+xml".
	MediaType string `json:"mediaType"`
	// Path is the file, relative to the skill folder or absolute.
	Path string `json:"path"`
	// Metadata is optional.
	Metadata map[string]any `json:"metadata,omitempty"`
}

// UIEvent is forwarded to the game client. A "narrative_choice" event carries
// {"choices": [...]} in its payload.
type UIEvent struct {
	// Event names the UI event, e.g. "narrative_choice" or "dice_roll".
	Event string `json:"event"`
	// Payload is optional and passed through untouched.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// UIEventProgress is the ui_event a script sends to say how far it is:
// payload {"percent": 0..100, "message"?: "..."}; skill workers forward it
// on the progress subject (§4.9).
const UIEventProgress = "progress"

// UIEventNarrativeChoice is the ui_event whose payload offers choices to the player.
const UIEventNarrativeChoice = "narrative_choice"

// ErrorEvent reports a problem; it does not end the invocation.
type ErrorEvent struct {
	// ErrorCode is a short machine-readable code.
	ErrorCode string `json:"errorCode"`
	// ErrorMessage is a human-readable message.
	ErrorMessage string `json:"errorMessage"`
	// Details is optional.
	Details map[string]any `json:"details,omitempty"`
}

// DoneEvent ends an invocation. Exactly one is expected.
type DoneEvent struct {
	// OK says whether the tool succeeded.
	OK bool `json:"ok"`
	// Summary is an optional one-line summary.
	Summary string `json:"summary,omitempty"`
	// Output is the tool's output for its dependents (a JSON object).
	Output json.RawMessage `json:"output,omitempty"`
	// NeedsMoreContext asks the scheduler for context re-planning (§9.1).
	NeedsMoreContext bool `json:"needsMoreContext,omitempty"`
	// ContextSuggestion says what context would help.
	ContextSuggestion string `json:"contextSuggestion,omitempty"`
}

// Type implements Event.
func (*LogEvent) Type() EventType { return EventLog }

// Type implements Event.
func (*StatePatchEvent) Type() EventType { return EventStatePatch }

// Type implements Event.
func (*AssetEvent) Type() EventType { return EventAsset }

// Type implements Event.
func (*UIEvent) Type() EventType { return EventUI }

// Type implements Event.
func (*ErrorEvent) Type() EventType { return EventError }

// Type implements Event.
func (*DoneEvent) Type() EventType { return EventDone }

// ToolOutput is what "$toolId" resolves to for a finished tool (§5): the done
// event's output if present, else {"summary": summary}.
func (d *DoneEvent) ToolOutput() json.RawMessage {
	if len(d.Output) > 0 && !bytes.Equal(bytes.TrimSpace(d.Output), []byte("null")) {
		return d.Output
	}
	b, _ := json.Marshal(map[string]string{"summary": d.Summary})
	return b
}

// ProtocolErrorKind classifies a protocol error.
type ProtocolErrorKind string

// The kinds of protocol error a line can have.
const (
	// ProtocolNotJSON: the line is not valid JSON (or not valid UTF-8).
	ProtocolNotJSON ProtocolErrorKind = "not_json"
	// ProtocolNotObject: the line is JSON but not an object.
	ProtocolNotObject ProtocolErrorKind = "not_object"
	// ProtocolBadVersion: "version" is missing or not "0".
	ProtocolBadVersion ProtocolErrorKind = "bad_version"
	// ProtocolUnknownType: "type" is missing or not one of the six types.
	ProtocolUnknownType ProtocolErrorKind = "unknown_type"
	// ProtocolBadField: a field of a known type is missing or has the wrong type.
	ProtocolBadField ProtocolErrorKind = "bad_field"
)

// ProtocolError is a line on a script's stdout that is not a valid event.
type ProtocolError struct {
	// Kind classifies the problem.
	Kind ProtocolErrorKind
	// Detail says what exactly is wrong, naming the field.
	Detail string
	// Line is the start of the offending line (at most 120 bytes).
	Line string
}

// Error implements error.
func (e *ProtocolError) Error() string {
	return fmt.Sprintf("protocol error (%s): %s; line: %q", e.Kind, e.Detail, e.Line)
}

// Unwrap returns ErrProtocol.
func (e *ProtocolError) Unwrap() error { return ErrProtocol }

func protoErr(kind ProtocolErrorKind, line []byte, format string, args ...any) *ProtocolError {
	l := line
	if len(l) > 120 {
		l = l[:120]
	}
	return &ProtocolError{Kind: kind, Detail: fmt.Sprintf(format, args...), Line: string(bytes.ToValidUTF8(l, []byte("\uFFFD")))}
}

type eventHeader struct {
	Version *string `json:"version"`
	Type    *string `json:"type"`
}

// DecodeEvent decodes one NDJSON line into its concrete event type. Unknown
// fields are ignored; keys are matched exactly, and a key repeated in any
// object, or spelled like a field in another case, is refused. A line that is not a JSON object, lacks version "0",
// has an unknown type or a missing/mistyped required field returns a
// *ProtocolError.
func DecodeEvent(line []byte) (Event, error) {
	line = bytes.TrimSpace(line)
	if !utf8.Valid(line) {
		return nil, protoErr(ProtocolNotJSON, line, "line is not valid UTF-8")
	}
	if len(line) == 0 || line[0] != '{' {
		if json.Valid(line) {
			return nil, protoErr(ProtocolNotObject, line, "line is JSON but not an object")
		}
		return nil, protoErr(ProtocolNotJSON, line, "line is not JSON")
	}
	var h eventHeader
	if err := codec.Unmarshal(line, &h); err != nil {
		if !json.Valid(line) {
			return nil, protoErr(ProtocolNotJSON, line, "line is not JSON: %v", err)
		}
		return nil, protoErr(ProtocolBadField, line, "version/type: %v", err)
	}
	if h.Version == nil {
		return nil, protoErr(ProtocolBadVersion, line, `missing "version" (must be %q)`, ProtocolVersion)
	}
	if *h.Version != ProtocolVersion {
		return nil, protoErr(ProtocolBadVersion, line, `version %q is not supported (must be %q)`, truncate(*h.Version, 20), ProtocolVersion)
	}
	if h.Type == nil {
		return nil, protoErr(ProtocolUnknownType, line, `missing "type"`)
	}
	var ev Event
	switch EventType(*h.Type) {
	case EventLog:
		ev = &LogEvent{}
	case EventStatePatch:
		ev = &StatePatchEvent{}
	case EventAsset:
		ev = &AssetEvent{}
	case EventUI:
		ev = &UIEvent{}
	case EventError:
		ev = &ErrorEvent{}
	case EventDone:
		ev = &DoneEvent{}
	default:
		return nil, protoErr(ProtocolUnknownType, line, "unknown event type %q", truncate(*h.Type, 40))
	}
	if err := codec.Unmarshal(line, ev); err != nil {
		return nil, protoErr(ProtocolBadField, line, "%s event: %v", *h.Type, err)
	}
	// Keys are exact and unique, as the schema reads them: encoding/json
	// would take "Type" for "type" and the last of two "patch" keys.
	var topBuf [8]codec.TopKey
	top, err := codec.CheckKeysTop(line, ev, topBuf[:0], "version", "type")
	if err != nil {
		return nil, protoErr(ProtocolBadField, line, "%s event: %v", *h.Type, err)
	}
	if err := checkEvent(ev, line, top); err != nil {
		return nil, err
	}
	return ev, nil
}

// checkEvent checks that the fields ev's type requires are present, each
// of its JSON kind (encoding/json cannot tell a missing field from a zero
// one), from the top-level members the key check read (top: keys are
// unique there, the key check refused a repeated one).
func checkEvent(ev Event, line []byte, top []codec.TopKey) error {
	first := func(field string) (byte, bool) {
		for _, m := range top {
			if string(m.Key) == field {
				return m.First, true
			}
		}
		return 0, false
	}
	need := func(field string, kind byte) error {
		c, ok := first(field)
		if !ok {
			return protoErr(ProtocolBadField, line, "%s event: missing %q", ev.Type(), field)
		}
		switch kind {
		case 's':
			if c != '"' {
				return protoErr(ProtocolBadField, line, "%s event: %q must be a string", ev.Type(), field)
			}
		case 'o':
			if c != '{' {
				return protoErr(ProtocolBadField, line, "%s event: %q must be an object", ev.Type(), field)
			}
		case 'b':
			if c != 't' && c != 'f' {
				return protoErr(ProtocolBadField, line, "%s event: %q must be a boolean", ev.Type(), field)
			}
		}
		return nil
	}
	var errs []error
	switch e := ev.(type) {
	case *LogEvent:
		errs = append(errs, need("level", 's'), need("message", 's'))
		switch e.Level {
		case LogDebug, LogInfo, LogWarn, LogError:
		default:
			errs = append(errs, protoErr(ProtocolBadField, line, "log event: level %q must be debug, info, warn or error", truncate(e.Level, 20)))
		}
	case *StatePatchEvent:
		errs = append(errs, need("patch", 'o'))
	case *AssetEvent:
		errs = append(errs, need("assetId", 's'), need("kind", 's'), need("mediaType", 's'), need("path", 's'))
	case *UIEvent:
		errs = append(errs, need("event", 's'))
	case *ErrorEvent:
		errs = append(errs, need("errorCode", 's'), need("errorMessage", 's'))
	case *DoneEvent:
		errs = append(errs, need("ok", 'b'))
		if c, ok := first("output"); ok && c != '{' && c != 'n' { // 'n' is null: the line decoded
			errs = append(errs, protoErr(ProtocolBadField, line, `done event: "output" must be an object`))
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// EncodeEvent renders an event as one protocol line (without the newline),
// with "version" and "type" set. Scripts written in Go and the in-process
// runner use it.
func EncodeEvent(ev Event) ([]byte, error) {
	body, err := codec.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("encode %s event: %w", ev.Type(), err)
	}
	head := fmt.Sprintf(`{"version":%q,"type":%q`, ProtocolVersion, ev.Type())
	if len(body) <= 2 { // "{}"
		return []byte(head + "}"), nil
	}
	out := make([]byte, 0, len(head)+len(body))
	out = append(out, head...)
	out = append(out, ',')
	out = append(out, body[1:]...)
	return out, nil
}
