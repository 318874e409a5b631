package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// KeyError is what CheckKeys finds: a key that encoding/json would read in a
// way other readers of the same document (a JSON Schema validator, another
// language's parser, a human) do not.
type KeyError struct {
	// Path locates the object holding the key, e.g. "tools[2].retryPolicy"
	// ("" for the top level).
	Path string
	// Key is the offending key, as decoded.
	Key string
	// Field is, for a key that differs from a field only in case, the
	// field's exact name; "" for a duplicate.
	Field string
}

// Error implements error.
func (e *KeyError) Error() string {
	at := e.Path
	if at == "" {
		at = "the top level"
	}
	if e.Field != "" {
		return fmt.Sprintf("key %q at %s must be spelled %q (keys are case-sensitive)", trunc(e.Key), at, e.Field)
	}
	return fmt.Sprintf("duplicate key %q at %s", trunc(e.Key), at)
}

func trunc(s string) string {
	if len(s) <= 40 {
		return s
	}
	i := 40
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// ErrNotJSON is returned by CheckKeys for input that is not one JSON value.
var ErrNotJSON = errors.New("not JSON")

// CheckKeys reads the JSON document data as it would be decoded into v (a
// pointer, or a reflect.Type) and returns a *KeyError for the first key that
// encoding/json would read differently from the document's plain meaning:
//
//   - a key repeated in one object, at any depth (encoding/json keeps the
//     last, other parsers the first);
//   - a key of an object decoded into a struct that matches one of the
//     struct's fields only when case is ignored (encoding/json matches
//     "Type" to the field "type"; a JSON Schema does not).
//
// Keys that name no field at all are left to the caller (they are ignored
// on decode). top names fields of the top-level object that v's type does
// not have (an envelope's, read by another decode), held to the same rules.
// It is no validator: it returns ErrNotJSON for a malformed structure it
// meets, but may pass a bad literal or escape; decode before, or after.
func CheckKeys(data []byte, v any, top ...string) error {
	_, err := CheckKeysTop(data, v, nil, top...)
	return err
}

// TopKey is a member of the top-level object CheckKeysTop read: its key
// (unescaped) and the first byte of its value ('"', '{', '[', 't', 'f',
// 'n', or a number's first).
type TopKey struct {
	Key   []byte
	First byte
}

// CheckKeysTop is CheckKeys, and appends to keys the members of the
// top-level object as it reads them, so that a caller asking which fields
// are present, and of which JSON kind, need not decode the document again.
func CheckKeysTop(data []byte, v any, keys []TopKey, top ...string) ([]TopKey, error) {
	k := keyScan{b: data, top: top, keys: keys, wantKeys: true}
	err := k.check(v)
	return k.keys, err
}

// check reads the whole document.
func (k *keyScan) check(v any) error {
	var t reflect.Type
	switch x := v.(type) {
	case reflect.Type:
		t = x
	case nil:
	default:
		t = reflect.TypeOf(v)
	}
	k.path = k.pathBuf[:0]
	k.space()
	if err := k.value(t); err != nil {
		return err
	}
	k.space()
	if k.i != len(k.b) {
		return ErrNotJSON
	}
	return nil
}

type keyScan struct {
	b        []byte
	i        int
	top      []string
	keys     []TopKey // the top-level members read, when wantKeys
	wantKeys bool
	path     []pathSeg // where the scan is, rendered only for an error

	pathBuf [8]pathSeg
}

// pathSeg is a key (index -1) or an array index.
type pathSeg struct {
	key   []byte
	index int
}

// where renders the path, e.g. "tools[2].retryPolicy".
func (k *keyScan) where() string {
	var b strings.Builder
	for _, s := range k.path {
		if s.index >= 0 {
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.Write(s.key)
	}
	return b.String()
}

func (k *keyScan) space() {
	for k.i < len(k.b) {
		switch k.b[k.i] {
		case ' ', '\t', '\n', '\r':
			k.i++
		default:
			return
		}
	}
}

// value reads one value that decodes into t (nil: anything).
func (k *keyScan) value(t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if k.i >= len(k.b) || len(k.path) > maxDepth {
		return ErrNotJSON
	}
	switch k.b[k.i] {
	case '{':
		return k.object(t)
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && t != rawMessage {
			elem = t.Elem()
		}
		k.i++
		k.space()
		if k.i < len(k.b) && k.b[k.i] == ']' {
			k.i++
			return nil
		}
		for n := 0; ; n++ {
			k.space()
			if end, err := k.member(pathSeg{index: n}, elem, ']'); end || err != nil {
				return err
			}
		}
	case '"':
		_, err := k.str()
		return err
	default:
		// A number or a literal: everything up to a delimiter.
		start := k.i
		for k.i < len(k.b) {
			switch k.b[k.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if k.i == start {
					return ErrNotJSON
				}
				return nil
			}
			k.i++
		}
		if k.i == start {
			return ErrNotJSON
		}
		return nil
	}
}

// maxDepth is encoding/json's nesting limit: deeper input is not JSON it
// decodes.
const maxDepth = 10000

var rawMessage = reflect.TypeFor[json.RawMessage]()

func (k *keyScan) object(t reflect.Type) error {
	var fields *structFields
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = fieldsOf(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	k.i++ // '{'
	k.space()
	if k.i < len(k.b) && k.b[k.i] == '}' {
		k.i++
		return nil
	}
	// Most objects have a handful of keys: a slice beats a map.
	var seenBuf [16][]byte
	seen := seenBuf[:0]
	var seenMap map[string]struct{}
	for {
		k.space()
		if k.i >= len(k.b) || k.b[k.i] != '"' {
			return ErrNotJSON
		}
		key, err := k.str()
		if err != nil {
			return err
		}
		if seenMap != nil {
			if _, dup := seenMap[string(key)]; dup {
				return &KeyError{Path: k.where(), Key: string(key)}
			}
			seenMap[string(key)] = struct{}{}
		} else {
			for _, s := range seen {
				if bytes.Equal(s, key) {
					return &KeyError{Path: k.where(), Key: string(key)}
				}
			}
			if seen = append(seen, key); len(seen) > 32 {
				seenMap = make(map[string]struct{}, 2*len(seen))
				for _, s := range seen {
					seenMap[string(s)] = struct{}{}
				}
			}
		}
		k.space()
		if k.i >= len(k.b) || k.b[k.i] != ':' {
			return ErrNotJSON
		}
		k.i++
		k.space()
		vt := elem
		atTop := len(k.path) == 0
		if atTop && k.wantKeys && k.i < len(k.b) {
			k.keys = append(k.keys, TopKey{Key: key, First: k.b[k.i]})
		}
		topExact := atTop && k.isTop(key)
		if fields != nil {
			vt = nil
			if f, ok := fields.exact[string(key)]; ok {
				vt = f
			} else if name := fields.fold(key); name != "" && !topExact {
				return &KeyError{Path: k.where(), Key: string(key), Field: name}
			}
		}
		if atTop && !topExact {
			for _, name := range k.top {
				if bytes.EqualFold(key, []byte(name)) {
					return &KeyError{Path: k.where(), Key: string(key), Field: name}
				}
			}
		}
		if end, err := k.member(pathSeg{key: key, index: -1}, vt, '}'); end || err != nil {
			return err
		}
	}
}

// member reads the value of an array element or object member at seg and
// the ',' or close that follows; end says the close came.
func (k *keyScan) member(seg pathSeg, t reflect.Type, close byte) (end bool, err error) {
	k.path = append(k.path, seg)
	if err := k.value(t); err != nil {
		return false, err
	}
	k.path = k.path[:len(k.path)-1]
	k.space()
	if k.i >= len(k.b) {
		return false, ErrNotJSON
	}
	switch k.b[k.i] {
	case ',':
		k.i++
		return false, nil
	case close:
		k.i++
		return true, nil
	}
	return false, ErrNotJSON
}

// isTop says whether key is exactly one of the envelope's names.
func (k *keyScan) isTop(key []byte) bool {
	for _, name := range k.top {
		if string(key) == name {
			return true
		}
	}
	return false
}

// str reads a string and returns it decoded (a slice of the input when it
// has no escapes).
func (k *keyScan) str() ([]byte, error) {
	start := k.i
	k.i++ // '"'
	escaped := false
	for k.i < len(k.b) {
		switch k.b[k.i] {
		case '\\':
			escaped = true
			k.i += 2
			continue
		case '"':
			k.i++
			raw := k.b[start:k.i]
			if !escaped {
				return raw[1 : len(raw)-1], nil
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, ErrNotJSON
			}
			return []byte(s), nil
		}
		k.i++
	}
	return nil, ErrNotJSON
}

// structFields are the JSON names of a struct's fields.
type structFields struct {
	exact map[string]reflect.Type
}

// fold returns the field a key names when case is folded as encoding/json
// folds it (Unicode simple folding, so "ſ" is "s"), or "".
func (f *structFields) fold(key []byte) string {
	for name := range f.exact {
		if bytes.EqualFold([]byte(name), key) {
			return name
		}
	}
	return ""
}

var fieldCache sync.Map // reflect.Type -> *structFields

func fieldsOf(t reflect.Type) *structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*structFields)
	}
	f := &structFields{exact: map[string]reflect.Type{}}
	addFields(f, t, 0)
	fieldCache.Store(t, f)
	return f
}

// addFields adds t's fields, promoting those of embedded structs as
// encoding/json does (a shallower or tagged name wins; ties are dropped,
// which here only means a key is not type-checked below that field).
func addFields(f *structFields, t reflect.Type, depth int) {
	if depth > 8 {
		return
	}
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := sf.Type
		if sf.Anonymous && name == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				addFields(f, et, depth+1)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if _, ok := f.exact[name]; ok && depth > 0 {
			continue
		}
		f.exact[name] = ft
	}
}
