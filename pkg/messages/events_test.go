package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/narratoria/runtime/pkg/codec"
	"github.com/stretchr/testify/require"
)

func TestDecodeEventTypes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line string
		want Event
	}{
		{`{"version":"0","type":"log","level":"warn","message":"m","fields":{"k":1}}`, &LogEvent{Level: "warn", Message: "m", Fields: map[string]any{"k": float64(1)}}},
		{`{"version":"0","type":"state_patch","patch":{"a":{"b":null}}}`, &StatePatchEvent{Patch: map[string]any{"a": map[string]any{"b": nil}}}},
		{`{"version":"0","type":"asset","assetId":"i","kind":"image","mediaType":"image/png","path":"data/x.png"}`, &AssetEvent{AssetID: "i", Kind: "image", MediaType: "image/png", Path: "data/x.png"}},
		{`{"version":"0","type":"ui_event","event":"narrative_choice","payload":{"choices":[1]}}`, &UIEvent{Event: "narrative_choice", Payload: json.RawMessage(`{"choices":[1]}`)}},
		{`{"version":"0","type":"error","errorCode":"E","errorMessage":"bad"}`, &ErrorEvent{ErrorCode: "E", ErrorMessage: "bad"}},
		{`{"version":"0","type":"done","ok":true,"summary":"s","output":{"x":1},"needsMoreContext":true,"contextSuggestion":"more","extra":1}`,
			&DoneEvent{OK: true, Summary: "s", Output: json.RawMessage(`{"x":1}`), NeedsMoreContext: true, ContextSuggestion: "more"}},
	}
	for _, tt := range tests {
		ev, err := DecodeEvent([]byte(tt.line))
		require.NoError(t, err, tt.line)
		require.Equal(t, tt.want, ev, tt.line)
		line, err := EncodeEvent(ev)
		require.NoError(t, err)
		again, err := DecodeEvent(line)
		require.NoError(t, err)
		require.Equal(t, ev, again, "EncodeEvent round-trips")
	}
}

func TestDecodeEventErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line string
		kind ProtocolErrorKind
		msg  string
	}{
		{`not json`, ProtocolNotJSON, "not JSON"},
		{`{"version":"0",`, ProtocolNotJSON, "not JSON"},
		{"{\"version\":\"0\",\"type\":\"log\",\"level\":\"info\",\"message\":\"\xff\"}", ProtocolNotJSON, "UTF-8"},
		{`[1,2]`, ProtocolNotObject, "not an object"},
		{`42`, ProtocolNotObject, "not an object"},
		{`"str"`, ProtocolNotObject, "not an object"},
		{`{"type":"done","ok":true}`, ProtocolBadVersion, `missing "version"`},
		{`{"version":"1","type":"done","ok":true}`, ProtocolBadVersion, `version "1" is not supported`},
		{`{"version":0,"type":"done","ok":true}`, ProtocolBadField, "version"},
		{`{"version":"0"}`, ProtocolUnknownType, `missing "type"`},
		{`{"version":"0","type":"teleport"}`, ProtocolUnknownType, `unknown event type "teleport"`},
		{`{"version":"0","type":"log","message":"m"}`, ProtocolBadField, `missing "level"`},
		{`{"version":"0","type":"log","level":"loud","message":"m"}`, ProtocolBadField, "level \"loud\""},
		{`{"version":"0","type":"log","level":"info","message":3}`, ProtocolBadField, "log event"},
		{`{"version":"0","type":"state_patch","patch":[1]}`, ProtocolBadField, "state_patch event"},
		{`{"version":"0","type":"state_patch"}`, ProtocolBadField, `missing "patch"`},
		{`{"version":"0","type":"asset","assetId":"a","kind":"k","mediaType":"m"}`, ProtocolBadField, `missing "path"`},
		{`{"version":"0","type":"ui_event"}`, ProtocolBadField, `missing "event"`},
		{`{"version":"0","type":"error","errorCode":"E"}`, ProtocolBadField, `missing "errorMessage"`},
		{`{"version":"0","type":"done"}`, ProtocolBadField, `missing "ok"`},
		{`{"version":"0","type":"done","ok":"yes"}`, ProtocolBadField, "done event"},
		{`{"version":"0","type":"done","ok":true,"output":[1]}`, ProtocolBadField, `"output" must be an object`},
		// A schema reader sees a log line; encoding/json alone would apply a patch.
		{`{"version":"0","type":"log","level":"info","message":"m","Type":"state_patch","patch":{"admin":true}}`, ProtocolBadField, `key "Type" at the top level must be spelled "type"`},
		{`{"version":"0","Type":"state_patch","patch":{"admin":true}}`, ProtocolBadField, `must be spelled "type"`},
		{`{"version":"0","type":"log","type":"state_patch","patch":{}}`, ProtocolBadField, `duplicate key "type"`},
		{`{"version":"0","type":"state_patch","patch":{"gold":1,"gold":999999}}`, ProtocolBadField, `duplicate key "gold" at patch`},
		{`{"version":"0","type":"done","OK":true}`, ProtocolBadField, `must be spelled "ok"`},
		{`{"version":"0","type":"log","level":"","message":"m"}`, ProtocolBadField, `level ""`},
	}
	for _, tt := range tests {
		_, err := DecodeEvent([]byte(tt.line))
		require.Error(t, err, tt.line)
		require.True(t, errors.Is(err, ErrProtocol), tt.line)
		var pe *ProtocolError
		require.True(t, errors.As(err, &pe), tt.line)
		require.Equal(t, tt.kind, pe.Kind, tt.line)
		require.Contains(t, pe.Error(), tt.msg, tt.line)
	}
}

func TestToolOutput(t *testing.T) {
	t.Parallel()
	require.JSONEq(t, `{"a":1}`, string((&DoneEvent{Output: json.RawMessage(`{"a":1}`)}).ToolOutput()))
	require.JSONEq(t, `{"summary":"s"}`, string((&DoneEvent{Summary: "s"}).ToolOutput()))
	require.JSONEq(t, `{"summary":""}`, string((&DoneEvent{Output: json.RawMessage(`null`)}).ToolOutput()))
}

// TestEventSchemaAgrees checks the decoder and the shipped event schema
// accept exactly the same lines.
func TestEventSchemaAgrees(t *testing.T) {
	t.Parallel()
	s, err := CompiledSchema(SchemaEvent)
	require.NoError(t, err)
	lines := []string{
		`{"version":"0","type":"log","level":"info","message":"m"}`,
		`{"version":"0","type":"log","level":"verbose","message":"m"}`,
		`{"version":"0","type":"log","level":"info"}`,
		`{"version":"0","type":"state_patch","patch":{}}`,
		`{"version":"0","type":"state_patch","patch":1}`,
		`{"version":"0","type":"asset","assetId":"a","kind":"k","mediaType":"m","path":"p"}`,
		`{"version":"0","type":"asset","assetId":"a","kind":"k","mediaType":"m"}`,
		`{"version":"0","type":"ui_event","event":"e","payload":[1,2]}`,
		`{"version":"0","type":"ui_event","event":5}`,
		`{"version":"0","type":"error","errorCode":"c","errorMessage":"m","details":{}}`,
		`{"version":"0","type":"error","errorCode":"c"}`,
		`{"version":"0","type":"done","ok":false}`,
		`{"version":"0","type":"done","ok":true,"output":null}`,
		`{"version":"0","type":"done","ok":true,"output":"x"}`,
		`{"version":"0","type":"done"}`,
		`{"version":"1","type":"done","ok":true}`,
		`{"version":"0","type":"nope"}`,
		`{"type":"done","ok":true}`,
		`{"version":"0","type":"done","ok":true,"unknown":{"deep":[1]}}`,
	}
	for _, l := range lines {
		_, derr := DecodeEvent([]byte(l))
		v, err := decodeForSchema([]byte(l))
		require.NoError(t, err)
		schemaOK := s.Validate(v) == nil
		require.Equal(t, schemaOK, derr == nil, "decoder and schema disagree on %s (decoder: %v)", l, derr)
	}
}

// FuzzDecodeEvent: the decoder and the shipped event schema agree on every
// line that is one JSON value with unique keys (the schema cannot see a
// repeated key: any such line, and any key spelled like a field in another
// case, the decoder refuses).
func FuzzDecodeEvent(f *testing.F) {
	for _, l := range []string{`{"version":"0","type":"done","ok":true}`, `{"version":"0","type":"log","level":"info","message":"x"}`, `[]`, `{`, "\xff",
		`{"version":"0","type":"log","level":"info","message":"x","Type":"state_patch","patch":{"gold":1}}`,
		`{"version":"0","type":"state_patch","patch":{"a":1},"patch":{"b":2}}`, `{"version":"0","type":"log","level":"","message":"m"}`,
		`{"version":"0","type":"done","ok":true,"output":{"a":{"b":1,"b":2}}}`, `{"version":"0","typ\u0065":"done","ok":true}`,
		`{"version":"0","type":"done","ok":true,"output":null}`, `{"version":"0","type":"done","ok":true,"output":[1]}`, `{"version":"0","type":"done","ok":"true"}`,
		`{"version":"0","type":"state_patch","patch":[]}`, `{"version":"0","type":"ui_event","ev\u0065nt":"x"}`, `{"version":"0","type":"error","errorCode":"e","errorMessage":7}`} {
		f.Add([]byte(l))
	}
	s, err := CompiledSchema(SchemaEvent)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := DecodeEvent(line)
		if err != nil && !errors.Is(err, ErrProtocol) {
			t.Fatalf("not a protocol error: %v", err)
		}
		trimmed := bytes.TrimSpace(line)
		v, derr := decodeForSchema(trimmed)
		if derr != nil || !utf8.Valid(trimmed) {
			if err == nil {
				t.Fatalf("decoder accepted %q, which is not one JSON value in UTF-8", line)
			}
			return
		}
		var ke *codec.KeyError
		if kerr := codec.CheckKeys(trimmed, nil); errors.As(kerr, &ke) {
			if err == nil {
				t.Fatalf("decoder accepted %q with a repeated key", line)
			}
			return
		}
		verr := s.Validate(v)
		if err == nil && verr != nil {
			t.Fatalf("decoder accepted %q (%T) but the schema rejects it: %v", line, ev, verr)
		}
		if err != nil && verr == nil && !caseSmuggled(trimmed) {
			t.Fatalf("schema accepts %q but the decoder rejects it: %v", line, err)
		}
	})
}

// caseSmuggled says whether a top-level key of line is a protocol field
// name in another case (the schema ignores it as unknown; the decoder
// refuses it).
func caseSmuggled(line []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(line, &m) != nil {
		return false
	}
	for k := range m {
		for _, f := range []string{"version", "type", "level", "message", "fields", "patch", "assetId", "kind", "mediaType", "path", "metadata",
			"event", "payload", "errorCode", "errorMessage", "details", "ok", "summary", "output", "needsMoreContext", "contextSuggestion"} {
			if k != f && strings.EqualFold(k, f) {
				return true
			}
		}
	}
	return false
}

func BenchmarkDecodeEvent(b *testing.B) {
	for name, line := range map[string]string{
		"log":  `{"version":"0","type":"log","level":"info","message":"rolling the dice for the player"}`,
		"done": `{"version":"0","type":"done","ok":true,"summary":"1d20 = 17","output":{"total":17,"rolls":[17],"formula":"1d20"}}`,
	} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			for b.Loop() {
				if _, err := DecodeEvent([]byte(line)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
