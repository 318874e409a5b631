// Package codec is the JSON codec of the hot path: the messages our own
// components write and read for every tool (jobs, outcomes, plan and tool
// records, progress, protocol events).
//
// It uses github.com/segmentio/encoding/json, a drop-in replacement for
// encoding/json that is 3-4 times faster on these messages (see
// BenchmarkCodec), and keeps encoding/json's semantics: every value it
// encodes is the JSON value encoding/json writes (the bytes differ at
// most in how a control character is escaped: "\u0008" for "\b"),
// whatever it decodes is what encoding/json decodes, and it refuses
// nothing encoding/json accepts — FuzzCodecAgrees checks all three on
// each message type. A
// decode that fails is done again with encoding/json, so errors (their
// text included) are encoding/json's.
//
// The fast codec does not know the "omitzero" option of Go 1.24: a type
// that uses it anywhere (the scheduler's plan and tool records) is coded
// by encoding/json.
//
// Anything that is not on the hot path keeps encoding/json.
package codec

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"

	fast "github.com/segmentio/encoding/json"
)

// Marshal returns the JSON encoding of v, as encoding/json.Marshal does.
func Marshal(v any) ([]byte, error) {
	if !fastFor(reflect.TypeOf(v)) {
		return json.Marshal(v)
	}
	b, err := fast.Marshal(v)
	if err != nil {
		return json.Marshal(v)
	}
	return b, nil
}

// Unmarshal decodes data into v (a non-nil pointer), as
// encoding/json.Unmarshal does.
func Unmarshal(data []byte, v any) error {
	if !fastFor(reflect.TypeOf(v)) {
		return json.Unmarshal(data, v)
	}
	if err := fast.Unmarshal(data, v); err == nil {
		return nil
	}
	// Start again from the zero value, so that what a failed decode leaves
	// in v is what encoding/json leaves.
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv.Elem().SetZero()
	}
	return json.Unmarshal(data, v)
}

// Fast says whether v's type is coded by the fast codec (otherwise by
// encoding/json).
func Fast(v any) bool { return fastFor(reflect.TypeOf(v)) }

// fastTypes caches, by type, whether the fast codec may code it.
var fastTypes sync.Map // reflect.Type -> bool

// fastFor says whether the fast codec codes values of type t the way
// encoding/json does: no field of t, or of a type inside it, has the
// "omitzero" option.
func fastFor(t reflect.Type) bool {
	if t == nil {
		return false
	}
	if ok, found := fastTypes.Load(t); found {
		return ok.(bool)
	}
	ok := !omitsZero(t, map[reflect.Type]bool{})
	fastTypes.Store(t, ok)
	return ok
}

// omitsZero says whether t or a type it holds has a field tagged omitzero.
func omitsZero(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return omitsZero(t.Elem(), seen)
	case reflect.Map:
		return omitsZero(t.Key(), seen) || omitsZero(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if tag, ok := f.Tag.Lookup("json"); ok && strings.Contains(tag, ",omitzero") {
				return true
			}
			if omitsZero(f.Type, seen) {
				return true
			}
		}
	}
	return false
}
