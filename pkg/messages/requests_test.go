package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/pkg/codec"
)

// TestDecodeRequestsExactly: every message a client sends is decoded with
// exact keys — a field's name in another case, a repeated key, a field of
// another kind (null included) is refused with a problem naming it — and
// what is well formed decodes to what it says.
func TestDecodeRequestsExactly(t *testing.T) {
	t.Parallel()
	type decode func([]byte) (any, error)
	approval := func(b []byte) (any, error) { return DecodeApproval(b) }
	reset := func(b []byte) (any, error) { return DecodeSessionReset(b) }
	cancel := func(b []byte) (any, error) { return DecodeCancelRequest(b) }
	list := func(b []byte) (any, error) { return DecodePlanListRequest(b) }
	reply := func(b []byte) (any, error) { return DecodeContextReply(b) }
	prompt := func(b []byte) (any, error) { return DecodePrompt(b, "s") }
	for _, c := range []struct {
		name    string
		decode  decode
		body    string
		want    any
		wantErr string
	}{
		{"approve", approval, `{"approved":true,"by":"gm","reason":"ok","extra":[1]}`, &Approval{Approved: true, By: "gm", Reason: "ok"}, ""},
		{"deny", approval, `{"approved":false}`, &Approval{}, ""},
		{"approval case variant", approval, `{"approved":false,"Approved":true}`, nil, `key "Approved" at the top level must be spelled "approved"`},
		{"approval case variant alone", approval, `{"APPROVED":true}`, nil, `must be spelled "approved"`},
		{"approval long s", approval, `{"approved":true,"reaſon":"x"}`, nil, `must be spelled "reason"`},
		{"approval repeated", approval, `{"approved":false,"approved":true}`, nil, `duplicate key "approved"`},
		{"approval missing", approval, `{"by":"gm"}`, nil, "approved: is required"},
		{"approval null", approval, `{"approved":null}`, nil, "approved: must be boolean (got null)"},
		{"approval string", approval, `{"approved":"yes"}`, nil, "approved: must be boolean (got string)"},
		{"approval by null", approval, `{"approved":true,"by":null}`, nil, "by: must be string (got null)"},
		{"approval not JSON", approval, `yes please`, nil, `body is not a JSON approval object {"approved": bool`},
		{"approval not UTF-8", approval, "{\"approved\":true,\"by\":\"\xff\"}", nil, "not valid UTF-8"},
		{"approval array", approval, `[true]`, nil, "body is not a JSON approval object"},
		{"approval trailing", approval, `{"approved":true} {}`, nil, "body is not a JSON approval object"},
		{"reset empty", reset, ``, &SessionReset{}, ""},
		{"reset clear", reset, `{"clearState":true}`, &SessionReset{ClearState: true}, ""},
		{"reset case variant", reset, `{"clearState":false,"ClearState":true}`, nil, `must be spelled "clearState"`},
		{"reset repeated", reset, `{"clearState":false,"clearState":true}`, nil, `duplicate key "clearState"`},
		{"reset string", reset, `{"clearState":"true"}`, nil, "clearState: must be boolean"},
		{"cancel empty", cancel, ` `, &CancelRequest{}, ""},
		{"cancel", cancel, `{"by":"gm","reason":"enough"}`, &CancelRequest{By: "gm", Reason: "enough"}, ""},
		{"cancel case variant", cancel, `{"Reason":"x"}`, nil, `must be spelled "reason"`},
		{"list session", list, `{"sessionId":"s1"}`, &PlanListRequest{SessionID: "s1"}, ""},
		{"list case variant", list, `{"sessionID":"s1"}`, nil, `must be spelled "sessionId"`},
		{"list bad session", list, `{"sessionId":"a.b"}`, nil, "sessionId: sessionId \"a.b\" must match"},
		{"list empty session", list, `{"sessionId":""}`, nil, "sessionId: sessionId \"\" must match"},
		{"reply", reply, `{"tools":[]}`, &ContextReply{Tools: []json.RawMessage{}}, ""},
		{"reply case variant", reply, `{"tools":[],"Tools":[{"toolId":"x"}]}`, nil, `must be spelled "tools"`},
		{"reply nested repeated", reply, `{"tools":[{"toolId":"a","toolId":"b"}]}`, nil, `duplicate key "toolId" at tools[0]`},
		{"reply tool not object", reply, `{"tools":[1]}`, nil, "tools[0]: must be object (got number)"},
		{"reply error alone", reply, `{"error":"no idea","tools":null}`, &ContextReply{Error: "no idea"}, ""},
		{"reply tools string", reply, `{"tools":"x"}`, nil, "tools: must be array or null (got string)"},
		{"prompt", prompt, `{"text":" hi ","promptId":"p1"}`, &Prompt{Text: "hi", PromptID: "p1", SessionID: "s"}, ""},
		{"prompt case variant", prompt, `{"text":"A","Text":"B"}`, nil, `must be spelled "text"`},
		{"prompt repeated", prompt, `{"text":"A","text":"B"}`, nil, `duplicate key "text"`},
		{"prompt missing text", prompt, `{"promptId":"p"}`, nil, "text: is required"},
		{"prompt null id", prompt, `{"text":"a","promptId":null}`, nil, "promptId: must be string (got null)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.decode([]byte(c.body))
			if c.wantErr != "" {
				require.ErrorContains(t, err, c.wantErr)
				if !errors.Is(err, ErrInvalidRequest) && !errors.Is(err, ErrInvalidPrompt) {
					t.Fatalf("%v is not a request or prompt error", err)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}

// agreeWithSchema checks one body against the decoder's verdict (err) and
// the message's schema: the decoder never accepts what the schema refuses,
// refuses everything that is not one JSON value in UTF-8 or repeats a key
// (which a schema cannot see), and refuses what the schema accepts only
// for a rule the schema cannot state (extra says which).
func agreeWithSchema(t *testing.T, schema string, body []byte, empty bool, err error, extra func(error) bool) {
	t.Helper()
	if err != nil && !errors.Is(err, ErrInvalidRequest) && !errors.Is(err, ErrInvalidPrompt) {
		t.Fatalf("%q: not a request or prompt error: %v", body, err)
	}
	trimmed := bytes.TrimSpace(body)
	if empty && len(trimmed) == 0 {
		if err != nil {
			t.Fatalf("an empty body is {}: %v", err)
		}
		return
	}
	v, derr := decodeForSchema(trimmed)
	if derr != nil || !utf8.Valid(trimmed) {
		if err == nil {
			t.Fatalf("decoder accepted %q, which is not one JSON value in UTF-8", body)
		}
		return
	}
	var ke *codec.KeyError
	if kerr := codec.CheckKeys(trimmed, nil); errors.As(kerr, &ke) {
		if err == nil {
			t.Fatalf("decoder accepted %q with a repeated key", body)
		}
		return
	}
	s, cerr := CompiledSchema(schema)
	if cerr != nil {
		t.Fatal(cerr)
	}
	verr := s.Validate(v)
	if err == nil && verr != nil {
		t.Fatalf("decoder accepted %q but the schema refuses it: %v", body, verr)
	}
	if err != nil && verr == nil && (extra == nil || !extra(err)) {
		t.Fatalf("the schema accepts %q but the decoder refuses it: %v", body, err)
	}
}

// requestSeeds are bodies every request fuzz target starts from.
var requestSeeds = []string{``, `{}`, `[]`, `null`, `{`, "\xff", `{"a":{"b":1,"b":2}}`, `{"x":null}`, `{} x`}

func addSeeds(f *testing.F, more ...string) {
	for _, s := range append(append([]string(nil), requestSeeds...), more...) {
		f.Add([]byte(s))
	}
}

func FuzzDecodeApproval(f *testing.F) {
	addSeeds(f, `{"approved":true}`, `{"approved":false,"Approved":true}`, `{"approved":null}`, `{"approved":true,"by":"x","reason":"y"}`,
		`{"approved":true,"BY":"x"}`, `{"approved":1}`, `{"appro\u0076ed":true}`, `{"approved":true,"reaſon":"k"}`)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := DecodeApproval(b)
		agreeWithSchema(t, SchemaApproval, b, false, err, nil)
	})
}

func FuzzDecodeSessionReset(f *testing.F) {
	addSeeds(f, `{"clearState":true}`, `{"clearState":false,"ClearState":true}`, `{"clearState":"yes"}`, `{"clearſtate":true}`)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := DecodeSessionReset(b)
		agreeWithSchema(t, SchemaSessionReset, b, true, err, nil)
	})
}

func FuzzDecodeCancelRequest(f *testing.F) {
	addSeeds(f, `{"by":"gm"}`, `{"reason":"x","Reason":"y"}`, `{"by":7}`)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := DecodeCancelRequest(b)
		agreeWithSchema(t, SchemaCancelRequest, b, true, err, nil)
	})
}

func FuzzDecodePlanListRequest(f *testing.F) {
	addSeeds(f, `{"sessionId":"s1"}`, `{"sessionId":"a b"}`, `{"SessionId":"s1"}`, `{"sessionId":""}`)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := DecodePlanListRequest(b)
		agreeWithSchema(t, SchemaPlanListRequest, b, true, err, nil)
	})
}

func FuzzDecodeContextReply(f *testing.F) {
	addSeeds(f, `{"tools":[]}`, `{"tools":[{"toolId":"a"}]}`, `{"tools":[1]}`, `{"tools":null}`, `{"tools":[],"error":"e"}`, `{"Tools":[]}`)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := DecodeContextReply(b)
		agreeWithSchema(t, SchemaContextReply, b, false, err, nil)
	})
}

// FuzzDecodePromptAgreesWithSchema: DecodePrompt and the Prompt schema
// agree, but for the rules the schema cannot state: the text's length is
// judged once trimmed, and a sessionId must match the subject's.
func FuzzDecodePromptAgreesWithSchema(f *testing.F) {
	addSeeds(f, `{"text":"hi"}`, `{"text":"A","Text":"B"}`, `{"text":"   "}`, `{"text":"a","sessionId":"t"}`, `{"text":"a","promptId":"p q"}`,
		`{"text":"a","playerId":null}`, `{"text":"`+strings.Repeat("x", 4001)+`"}`)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := DecodePrompt(b, "s")
		agreeWithSchema(t, SchemaPrompt, b, false, err, func(err error) bool {
			var pe *PromptError
			if !errors.As(err, &pe) {
				return false
			}
			for _, p := range pe.Problems {
				trimRule := p.Field == "text" && (p.Message == "must not be empty" || strings.Contains(p.Message, "the limit is"))
				subjectRule := p.Field == "sessionId" && strings.Contains(p.Message, "does not match the subject's session")
				if !trimRule && !subjectRule {
					return false
				}
			}
			return true
		})
	})
}
