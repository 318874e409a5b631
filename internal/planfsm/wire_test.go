package planfsm

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/narratoria/runtime/pkg/codec"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestWireMatchesRecords: the wire types are the records field for field
// (names, tags, order; a time under omitzero becomes a pointer under
// omitempty), the fast codec codes them, and what EncodeTool and
// EncodeRecord write is what encoding/json writes of the records, byte
// for byte, whether every field is set or none is.
func TestWireMatchesRecords(t *testing.T) {
	sameFields(t, reflect.TypeFor[Tool](), reflect.TypeFor[toolWire]())
	sameFields(t, reflect.TypeFor[Record](), reflect.TypeFor[recordWire]())
	sameFields(t, reflect.TypeFor[Iteration](), reflect.TypeFor[iterationWire]())
	for _, v := range []any{toolWire{}, recordWire{}} {
		if !codec.Fast(v) {
			t.Fatalf("the fast codec does not code %T", v)
		}
	}
	var full Tool
	fill(reflect.ValueOf(&full).Elem(), 0)
	writesAsJSON(t, "EncodeTool", EncodeTool, Tool{}, full, Tool{State: "succeeded", Attempt: 1, RetryAt: full.RetryAt})
	var rec Record
	fill(reflect.ValueOf(&rec).Elem(), 0)
	noIter := rec
	noIter.Iterations, noIter.FinishedAt = nil, time.Time{}
	writesAsJSON(t, "EncodeRecord", EncodeRecord, Record{}, rec, noIter)
}

// writesAsJSON fails unless enc writes each value as encoding/json does.
func writesAsJSON[T any](t *testing.T, name string, enc func(*T) ([]byte, error), values ...T) {
	t.Helper()
	for _, v := range values {
		want, err := json.Marshal(&v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := enc(&v)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("%s wrote\n%s\nencoding/json writes\n%s", name, got, want)
		}
	}
}

// sameFields fails unless wire has rec's fields in rec's order, each
// named and tagged alike, of the same type but for what the wire types
// change.
func sameFields(t *testing.T, rec, wire reflect.Type) {
	t.Helper()
	if rec.NumField() != wire.NumField() {
		t.Fatalf("%s has %d fields, %s %d", rec, rec.NumField(), wire, wire.NumField())
	}
	changed := map[reflect.Type]reflect.Type{
		reflect.TypeFor[[]Iteration](): reflect.TypeFor[[]iterationWire](),
	}
	for i := range rec.NumField() {
		r, w := rec.Field(i), wire.Field(i)
		tag := r.Tag.Get("json")
		wantType := r.Type
		if strings.HasSuffix(tag, ",omitzero") {
			if r.Type != reflect.TypeFor[time.Time]() {
				t.Fatalf("%s.%s: only times may be omitzero in a record", rec, r.Name)
			}
			tag, wantType = strings.TrimSuffix(tag, ",omitzero")+",omitempty", reflect.TypeFor[*time.Time]()
		}
		if c, ok := changed[r.Type]; ok {
			wantType = c
		}
		if w.Name != r.Name || w.Tag.Get("json") != tag || w.Type != wantType {
			t.Fatalf("field %d: %s.%s %s `json:%q`, but %s.%s %s `json:%q`", i, rec, r.Name, r.Type, r.Tag.Get("json"),
				wire, w.Name, w.Type, w.Tag.Get("json"))
		}
	}
}

// fill sets every field of v, as deep as a few levels, to a value that is
// not zero.
func fill(v reflect.Value, depth int) {
	if depth > 4 {
		return
	}
	switch {
	case v.Type() == reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(time.Date(2026, 11, 27, 3, 4, 5, 6000, time.UTC).Add(time.Duration(depth) * time.Hour)))
		return
	case v.Type() == reflect.TypeFor[json.RawMessage]():
		v.Set(reflect.ValueOf(json.RawMessage(`{"a":[1,"b"]}`)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("s" + strings.Repeat("x", depth))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint8, reflect.Uint, reflect.Uint64:
		if v.CanInt() {
			v.SetInt(int64(depth + 2))
		} else {
			v.SetUint(uint64(depth + 2))
		}
	case reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		if e.Kind() == reflect.Interface {
			e.Set(reflect.ValueOf("v"))
		} else {
			fill(e, depth+1)
		}
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Interface:
		v.Set(reflect.ValueOf("v"))
	}
}

// FuzzMayPatchOrShow: every line DecodeEvent reads as a state patch or a
// ui event passes the filter succeeded reads events through, escapes in
// its type or not; a done or a log without either name does not.
func FuzzMayPatchOrShow(f *testing.F) {
	for _, s := range []string{
		`{"version":"0","type":"state_patch","patch":{"a":1}}`,
		`{"version":"0","type":"state\u005fpatch","patch":{"a":1}}`,
		`{"version":"0","type":"ui_event","event":"progress"}`,
		`{"version":"0","type":"\u0075i_event","event":"progress"}`,
		`{"type":"ui_event","version":"0","event":"x","payload":{"state_patch":1}}`,
		`{"version":"0","type":"done","ok":true,"output":{}}`,
		`{"version":"0","type":"log","level":"info","message":"hi"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := messages.DecodeEvent(line)
		if err != nil {
			return
		}
		switch ev.(type) {
		case *messages.StatePatchEvent, *messages.UIEvent:
			if !mayPatchOrShow(line) {
				t.Fatalf("the filter drops %s", line)
			}
		}
	})
	for _, s := range []string{`{"version":"0","type":"done","ok":true,"output":{}}`, `{"version":"0","type":"log","level":"info","message":"hi"}`} {
		if mayPatchOrShow([]byte(s)) {
			f.Fatalf("the filter keeps %s", s)
		}
	}
}
