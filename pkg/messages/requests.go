package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/narratoria/runtime/pkg/codec"
)

// Client messages are decoded exactly (§11): one JSON object in UTF-8,
// every key spelled as its schema spells it (a key that differs from a
// field only in case is refused, where encoding/json would take it for
// the field) and none repeated (encoding/json keeps the last, other
// readers the first), each field of its JSON kind (null is no string and
// no boolean), the required ones present. Keys that name no field are
// ignored, as the schemas allow them. Each message's schema is in
// Schemas (approval, session-reset, cancel-request, plan-list-request,
// context-reply, prompt); its fuzz target checks the decoder agrees.

// RequestError lists what is wrong with a message a client sent: an
// approval decision, a session reset, a plan control request or a
// planner's context reply.
type RequestError struct {
	// Kind names the message, e.g. "approval" or "session reset".
	Kind string
	// Problems name each field at fault.
	Problems []Problem
}

// Error implements error.
func (e *RequestError) Error() string { return "invalid " + e.Kind + ": " + joinProblems(e.Problems) }

// Unwrap returns ErrInvalidRequest.
func (e *RequestError) Unwrap() error { return ErrInvalidRequest }

// field is one member of a client message.
type field struct {
	name     string
	kind     jsonKind
	required bool
	// nullable lets the field be null too.
	nullable bool
}

// decodeExact decodes body (one JSON object) into v, a pointer to the
// message's struct, checking that its keys are exact and unique and its
// fields of their kind (fields), the required ones present. shape names
// and describes the message (`approval object {...}`) for the one problem
// a body that is no JSON object gets. It returns every problem found; none when v holds the
// message.
func decodeExact(body []byte, v any, shape string, fields []field) []Problem {
	b := bytes.TrimSpace(body)
	switch {
	case !utf8.Valid(b):
		return []Problem{{Message: "body is not valid UTF-8; it must be a JSON " + shape}}
	case len(b) == 0 || b[0] != '{':
		return []Problem{{Message: "body is not a JSON " + shape}}
	}
	if err := json.Unmarshal(b, new(json.RawMessage)); err != nil {
		return []Problem{{Message: "body is not a JSON " + shape + ": " + err.Error()}}
	}
	var topBuf [8]codec.TopKey
	top, err := codec.CheckKeysTop(b, v, topBuf[:0])
	var ke *codec.KeyError
	if errors.As(err, &ke) {
		return []Problem{{Field: ke.Path, Message: ke.Error()}}
	} else if err != nil {
		return []Problem{{Message: "body is not a JSON " + shape + ": " + err.Error()}}
	}
	var probs []Problem
	for _, f := range fields {
		first, ok := topFirst(top, f.name)
		switch {
		case !ok && f.required:
			probs = append(probs, Problem{Field: f.name, Message: "is required"})
		case ok && kindOf(first) != f.kind && !(f.nullable && kindOf(first) == kindNull):
			want := f.kind.String()
			if f.nullable {
				want += " or null"
			}
			probs = append(probs, Problem{Field: f.name, Message: fmt.Sprintf("must be %s (got %s)", want, kindOf(first))})
		}
	}
	if len(probs) > 0 {
		return probs
	}
	if err := json.Unmarshal(b, v); err != nil {
		return []Problem{{Message: "body is not a JSON " + shape + ": " + err.Error()}}
	}
	return nil
}

// topFirst returns the first byte of the value of the top-level member
// name, if there is one.
func topFirst(top []codec.TopKey, name string) (byte, bool) {
	for _, m := range top {
		if string(m.Key) == name {
			return m.First, true
		}
	}
	return 0, false
}

// kindOf is the kind of a JSON value from its first byte.
func kindOf(first byte) jsonKind {
	switch first {
	case '"':
		return kindString
	case 't', 'f':
		return kindBoolean
	case 'n':
		return kindNull
	case '{':
		return kindObject
	case '[':
		return kindArray
	}
	return kindNumber
}

// emptyBody says whether a request body is empty: the requests whose
// every field is optional read it as {}.
func emptyBody(b []byte) bool { return len(bytes.TrimSpace(b)) == 0 }

// DecodeApproval decodes an approval decision (§9.3), exactly: "approved"
// is required and a boolean (a body without it is refused, never read as
// a denial), "by" and "reason" are strings.
func DecodeApproval(b []byte) (*Approval, error) {
	var a Approval
	if probs := decodeExact(b, &a, `approval object {"approved": bool, "by"?: string, "reason"?: string}`, []field{
		{name: "approved", kind: kindBoolean, required: true}, {name: "by", kind: kindString}, {name: "reason", kind: kindString},
	}); len(probs) > 0 {
		return nil, &RequestError{Kind: "approval", Problems: probs}
	}
	return &a, nil
}

// DecodeSessionReset decodes a session reset's body, exactly: empty (read
// as {}), {} or {"clearState": bool}.
func DecodeSessionReset(b []byte) (*SessionReset, error) {
	var r SessionReset
	if emptyBody(b) {
		return &r, nil
	}
	if probs := decodeExact(b, &r, `session reset object, {} or {"clearState": bool}`, []field{{name: "clearState", kind: kindBoolean}}); len(probs) > 0 {
		return nil, &RequestError{Kind: "session reset", Problems: probs}
	}
	return &r, nil
}

// DecodeCancelRequest decodes a plan cancel request's body, exactly:
// empty (read as {}), or {"by"?: string, "reason"?: string}.
func DecodeCancelRequest(b []byte) (*CancelRequest, error) {
	var r CancelRequest
	if emptyBody(b) {
		return &r, nil
	}
	if probs := decodeExact(b, &r, `cancel request object, {} or {"by"?: string, "reason"?: string}`, []field{
		{name: "by", kind: kindString}, {name: "reason", kind: kindString},
	}); len(probs) > 0 {
		return nil, &RequestError{Kind: "cancel request", Problems: probs}
	}
	return &r, nil
}

// DecodePlanListRequest decodes a plan list request's body, exactly: empty
// (read as {}), or {"sessionId"?: string}, the session a subject token
// (an empty one is refused: leave the field out to list every session).
func DecodePlanListRequest(b []byte) (*PlanListRequest, error) {
	if emptyBody(b) {
		return &PlanListRequest{}, nil
	}
	var r struct {
		SessionID *string `json:"sessionId"`
	}
	probs := decodeExact(b, &r, `plan list request object, {} or {"sessionId": string}`, []field{{name: "sessionId", kind: kindString}})
	if len(probs) == 0 && r.SessionID != nil && !ValidToken(*r.SessionID) {
		probs = append(probs, Problem{Field: "sessionId", Message: (&TokenError{Kind: "sessionId", Value: truncate(*r.SessionID, 80)}).Error()})
	}
	if len(probs) > 0 {
		return nil, &RequestError{Kind: "plan list request", Problems: probs}
	}
	if r.SessionID == nil {
		return &PlanListRequest{}, nil
	}
	return &PlanListRequest{SessionID: *r.SessionID}, nil
}

// DecodeContextReply decodes a planner's answer to a context request
// (§9.1), exactly: {"tools"?: [tool objects] or null, "error"?: string} (no
// tools, or null: nothing to add). The tools themselves are checked as a
// plan's are, when they are merged.
func DecodeContextReply(b []byte) (*ContextReply, error) {
	var r ContextReply
	probs := decodeExact(b, &r, `context reply object {"tools"?: [tool, ...], "error"?: string}`, []field{
		{name: "tools", kind: kindArray, nullable: true}, {name: "error", kind: kindString},
	})
	for i, t := range r.Tools {
		if len(probs) == 0 && (len(t) == 0 || t[0] != '{') {
			probs = append(probs, Problem{Field: fmt.Sprintf("tools[%d]", i), Message: "must be object (got " + kindOf(firstByte(t)).String() + ")"})
		}
	}
	if len(probs) > 0 {
		return nil, &RequestError{Kind: "context reply", Problems: probs}
	}
	return &r, nil
}

// firstByte is b's first byte, 0 when b is empty.
func firstByte(b []byte) byte {
	if len(b) == 0 {
		return 0
	}
	return b[0]
}
