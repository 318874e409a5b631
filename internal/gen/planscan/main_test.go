package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const pkgDir = "../../../pkg/messages"

// run generates from the plan schema as edit changes it.
func run(t *testing.T, edit func(root *object)) (string, error) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pkgDir, "schemas", "plan.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		v, err := parseJSON(b)
		if err != nil {
			t.Fatal(err)
		}
		edit(v.(*object))
		if b, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	src, err := generate(config{schema: b, schemaName: "schemas/plan.schema.json", pkgDir: pkgDir, rootType: "Plan", out: "planscan_gen.go"})
	return string(src), err
}

// MarshalJSON writes o with its keys in order.
func (o *object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// at walks from o down the given keys.
func at(t *testing.T, o *object, path ...string) *object {
	t.Helper()
	for _, k := range path {
		next, ok := o.vals[k].(*object)
		if !ok {
			t.Fatalf("no object at %v", path)
		}
		o = next
	}
	return o
}

func set(o *object, k string, v any) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

func TestGeneratedFileIsCurrent(t *testing.T) {
	got, err := run(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(pkgDir, "planscan_gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatal("planscan_gen.go is stale: run go generate ./pkg/messages")
	}
}

// TestGeneratorFollowsSchema changes the schema's bounds and checks the
// generated code changes with them.
func TestGeneratorFollowsSchema(t *testing.T) {
	orig, err := run(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		edit       func(root *object)
		want, gone string
	}{
		{"maxRetries maximum", func(r *object) {
			set(at(t, r, "$defs", "tool", "properties", "retryPolicy", "properties", "maxRetries"), "maximum", json.Number("12"))
		}, "s.integer(0, true, 12, true)", "s.integer(0, true, 10, true)"},
		{"plan timeout maximum", func(r *object) {
			set(at(t, r, "properties", "timeoutMs"), "maximum", json.Number("1000"))
		}, "s.integer(1, true, 1000, true)", "s.integer(1, true, 86_400_000, true)"},
		{"backoffMs without maximum", func(r *object) {
			bo := at(t, r, "$defs", "tool", "properties", "retryPolicy", "properties", "backoffMs")
			delete(bo.vals, "maximum")
			bo.keys = bo.keys[:len(bo.keys)-1]
		}, "s.integer(0, true, 0, false)", "s.integer(0, true, 3_600_000, true)"},
		{"toolPath maxLength", func(r *object) {
			set(at(t, r, "$defs", "tool", "properties", "toolPath"), "maxLength", json.Number("100"))
		}, "s.length(v, 1, 100, true)", "s.length(v, 1, 512, true)"},
		{"input required", func(r *object) {
			set(at(t, r, "$defs", "tool"), "required", []any{"toolId", "toolPath", "input"})
		}, "s.required(&m, toolFields, 0, 1, 3)", "s.required(&m, toolFields, 0, 1)"},
		{"narrative pattern", func(r *object) {
			set(at(t, r, "properties", "narrative"), "pattern", "^[A-Za-z0-9_-]{1,64}$")
		}, "p.Narrative = v", "p.Narrative, _ = s.str()"},
	} {
		got, err := run(t, c.edit)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !strings.Contains(orig, c.gone) || strings.Contains(got, c.gone) {
			t.Errorf("%s: %q should be in the code from the real schema only", c.name, c.gone)
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("%s: the code does not have %q", c.name, c.want)
		}
	}
}

// TestGeneratorRefuses: a construct the generator has no code for is an
// error that names it.
func TestGeneratorRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(root *object)
		want string
	}{
		{"minItems", func(r *object) { set(at(t, r, "properties", "tools"), "minItems", json.Number("1")) }, `#/properties/tools: keyword "minItems" is not supported`},
		{"enum", func(r *object) { set(at(t, r, "properties", "narrative"), "enum", []any{"a"}) }, `#/properties/narrative: keyword "enum"`},
		{"additionalProperties", func(r *object) { set(at(t, r, "$defs", "tool"), "additionalProperties", false) }, "#/$defs/tool: additionalProperties other than true"},
		{"unknown pattern", func(r *object) { set(at(t, r, "properties", "narrative"), "pattern", "^x$") }, `pattern "^x$" has no Go check`},
		{"property without a field", func(r *object) { set(at(t, r, "properties"), "extra", &object{}) }, `#/properties/extra: no field of Go struct Plan`},
		{"type list", func(r *object) { set(at(t, r, "properties", "narrative"), "type", []any{"string", "null"}) }, "type lists are not supported"},
		{"number", func(r *object) { set(at(t, r, "properties", "timeoutMs"), "type", "number") }, `#/properties/timeoutMs: type "number" is not supported`},
		{"type mismatch", func(r *object) { set(at(t, r, "properties", "parallel"), "type", "string") }, "type string does not fit Go field Plan.Parallel bool"},
		{"fractional bound", func(r *object) { set(at(t, r, "properties", "timeoutMs"), "minimum", json.Number("0.5")) }, "minimum 0.5 is not an int64"},
		{"remote $ref", func(r *object) { set(at(t, r, "properties", "sessionId"), "$ref", "other.json#/x") }, `$ref "other.json#/x"`},
	} {
		_, err := run(t, c.edit)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got error %v, want one with %q", c.name, err, c.want)
		}
	}
}

func TestNames(t *testing.T) {
	for in, want := range map[string]string{"Metadata": "metadata", "ParentPlanID": "parentPlanID", "ID": "id", "URLPath": "urlPath", "retry": "retry"} {
		if got := lowerFirst(in); got != want {
			t.Errorf("lowerFirst(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[int64]string{0: "0", 10: "10", 1000: "1000", 86400000: "86_400_000", -3600000: "-3_600_000", 12345: "12_345"} {
		if got := num(in); got != want {
			t.Errorf("num(%d) = %q, want %q", in, got, want)
		}
	}
}
