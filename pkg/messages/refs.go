package messages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Ref is a reference found in a tool's input (§9.2): the string
// "$toolId" or "$toolId.path.to.field".
type Ref struct {
	// ToolID is the referenced tool.
	ToolID string
	// Path are the field names (or array indexes) to follow in its output.
	Path []string
	// Field is where in the input the reference stands, e.g. "input.target.roll".
	Field string
}

// RefError says why a reference is malformed.
type RefError struct {
	// Field is where the reference stands.
	Field string
	// Value is the string.
	Value string
	// Why explains the problem.
	Why string
}

// Error implements error.
func (e *RefError) Error() string {
	return fmt.Sprintf("%s: %q %s", e.Field, truncate(e.Value, 80), e.Why)
}

// Unwrap returns ErrBadReference.
func (e *RefError) Unwrap() error { return ErrBadReference }

// MayHaveRefs reports whether a tool input may hold references; when it is
// false, FindRefs finds none and ResolveRefs returns the input as it is.
// It is a cheap test, for callers that would otherwise build a field name
// for every tool.
func MayHaveRefs(input json.RawMessage) bool { return mayHaveRefs(input) }

func mayHaveRefs(raw []byte) bool {
	if bytes.IndexByte(raw, '$') < 0 && bytes.IndexByte(raw, '\\') < 0 {
		return false // the common case, in one pass each
	}
	return bytes.Contains(raw, []byte(`"$`)) || bytes.Contains(raw, []byte(`\u0024`))
}

// parseRef interprets one string value. isRef is false for plain strings and
// for "$$" escapes (literal holds the unescaped string).
func parseRef(s, field string) (ref Ref, literal string, isRef bool, err error) {
	if !strings.HasPrefix(s, "$") {
		return Ref{}, s, false, nil
	}
	if strings.HasPrefix(s, "$$") {
		return Ref{}, s[1:], false, nil
	}
	parts := strings.Split(s[1:], ".")
	if !ValidToken(parts[0]) {
		return Ref{}, "", false, &RefError{Field: field, Value: s, Why: `is not a reference "$toolId[.field...]" (write "$$" for a literal "$")`}
	}
	for _, p := range parts[1:] {
		if p == "" {
			return Ref{}, "", false, &RefError{Field: field, Value: s, Why: "has an empty path segment"}
		}
	}
	return Ref{ToolID: parts[0], Path: parts[1:], Field: field}, "", true, nil
}

func decodeInput(raw json.RawMessage) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode input: %w", err)
	}
	return v, nil
}

// FindRefs lists every reference in a tool input, in a stable order (by field).
// field is the path prefix used in errors, e.g. "tools[3].input".
func FindRefs(input json.RawMessage, field string) ([]Ref, error) {
	if !mayHaveRefs(input) {
		return nil, nil
	}
	v, err := decodeInput(input)
	if err != nil {
		return nil, err
	}
	var refs []Ref
	var firstErr error
	walkStrings(v, field, func(s, f string) (any, bool) {
		r, _, isRef, err := parseRef(s, f)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if isRef {
			refs = append(refs, r)
		}
		return nil, false
	})
	if firstErr != nil {
		return nil, firstErr
	}
	sort.SliceStable(refs, func(i, j int) bool { return refs[i].Field < refs[j].Field })
	return refs, nil
}

// ResolveRefs replaces every reference in input with the referenced tool's
// output, or the field the path names in it (§9.2). output returns a tool's
// output; a missing tool, a null output (a failed non-required tool) or a
// missing field resolves to null. "$$" escapes become a literal "$".
func ResolveRefs(input json.RawMessage, output func(toolID string) (json.RawMessage, bool)) (json.RawMessage, error) {
	if !mayHaveRefs(input) {
		return input, nil
	}
	v, err := decodeInput(input)
	if err != nil {
		return nil, err
	}
	var firstErr error
	cache := map[string]any{}
	v = walkStrings(v, "input", func(s, f string) (any, bool) {
		r, lit, isRef, err := parseRef(s, f)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			return nil, false
		}
		if !isRef {
			return lit, lit != s
		}
		out, ok := cache[r.ToolID]
		if !ok {
			raw, found := output(r.ToolID)
			if found && len(raw) > 0 {
				out, err = decodeInput(raw)
				if err != nil {
					out = nil
				}
			}
			cache[r.ToolID] = out
		}
		return follow(out, r.Path), true
	})
	if firstErr != nil {
		return nil, firstErr
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode resolved input: %w", err)
	}
	return b, nil
}

func follow(v any, path []string) any {
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// walkStrings visits every string value (not object keys) depth-first; when
// fn returns replace=true the string is replaced by the returned value.
func walkStrings(v any, field string, fn func(s, field string) (any, bool)) any {
	switch x := v.(type) {
	case string:
		if nv, ok := fn(x, field); ok {
			return nv
		}
		return x
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			x[k] = walkStrings(x[k], field+"."+k, fn)
		}
		return x
	case []any:
		for i := range x {
			x[i] = walkStrings(x[i], field+"["+strconv.Itoa(i)+"]", fn)
		}
		return x
	default:
		return v
	}
}
