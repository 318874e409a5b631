package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// object is a JSON object that keeps its keys' order: the generated field
// tables and switch cases follow the schema's order of properties, so the
// output does not depend on map iteration.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

// parseJSON decodes a JSON document into objects, []any, string,
// json.Number, bool and nil.
func parseJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	v, err := parseValue(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the schema")
	}
	return v, nil
}

func parseValue(d *json.Decoder) (any, error) {
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t {
	case json.Delim('{'):
		o := &object{vals: map[string]any{}}
		for d.More() {
			kt, err := d.Token()
			if err != nil {
				return nil, err
			}
			k := kt.(string)
			v, err := parseValue(d)
			if err != nil {
				return nil, err
			}
			if _, dup := o.vals[k]; dup {
				return nil, fmt.Errorf("key %q repeated", k)
			}
			o.keys = append(o.keys, k)
			o.vals[k] = v
		}
		_, err := d.Token() // '}'
		return o, err
	case json.Delim('['):
		a := []any{}
		for d.More() {
			v, err := parseValue(d)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := d.Token() // ']'
		return a, err
	}
	return t, nil
}

// schema is one schema object of the document and where it is, as a JSON
// pointer ("#/$defs/tool/properties/toolPath"), for error messages.
type schema struct {
	*object
	loc string
	// def names the $defs entry the schema is, if it was reached by $ref.
	def string
}

// annotations are keywords that do not take part in validation.
var annotations = []string{"$schema", "$id", "title", "description", "$comment", "examples"}

// only fails when s has a keyword other than the annotations and allowed.
func (s schema) only(allowed ...string) error {
	for _, k := range s.keys {
		if !slices.Contains(annotations, k) && !slices.Contains(allowed, k) {
			return fmt.Errorf("%s: keyword %q is not supported here (the generator knows %s)", s.loc, k, strings.Join(allowed, ", "))
		}
	}
	return nil
}

func (s schema) str(k string) (string, bool, error) {
	v, ok := s.get(k)
	if !ok {
		return "", false, nil
	}
	str, isStr := v.(string)
	if !isStr {
		return "", false, fmt.Errorf("%s: %s must be a string", s.loc, k)
	}
	return str, true, nil
}

// integer reads an integer keyword (minimum, maxLength …).
func (s schema) integer(k string) (int64, bool, error) {
	v, ok := s.get(k)
	if !ok {
		return 0, false, nil
	}
	n, isNum := v.(json.Number)
	if !isNum {
		return 0, false, fmt.Errorf("%s: %s must be a number", s.loc, k)
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %s %s is not an int64; the generator supports only those", s.loc, k, n)
	}
	return i, true, nil
}

// typ is the schema's one type ("" if it names none).
func (s schema) typ() (string, error) {
	v, ok := s.get("type")
	if !ok {
		return "", nil
	}
	t, isStr := v.(string)
	if !isStr {
		return "", fmt.Errorf("%s: type must be a single type name; type lists are not supported", s.loc)
	}
	return t, nil
}

// child returns the subschema under key k (and, for properties and $defs,
// under name).
func (s schema) child(v any, path string) (schema, error) {
	o, ok := v.(*object)
	if !ok {
		return schema{}, fmt.Errorf("%s/%s: a schema must be an object (boolean schemas are not supported)", s.loc, path)
	}
	return schema{object: o, loc: s.loc + "/" + path}, nil
}

// deref follows s's $ref, if it has one, to its $defs entry in root.
func (s schema) deref(root schema) (schema, error) {
	ref, ok, err := s.str("$ref")
	if err != nil || !ok {
		return s, err
	}
	if err := s.only("$ref"); err != nil {
		return schema{}, fmt.Errorf("%w; next to $ref only annotations are", err)
	}
	name, ok := strings.CutPrefix(ref, "#/$defs/")
	if !ok || strings.Contains(name, "/") {
		return schema{}, fmt.Errorf("%s: $ref %q: only #/$defs/<name> is supported", s.loc, ref)
	}
	defs, _ := root.get("$defs")
	do, _ := defs.(*object)
	if do == nil {
		return schema{}, fmt.Errorf("%s: $ref %q: the schema has no $defs", s.loc, ref)
	}
	v, ok := do.get(name)
	if !ok {
		return schema{}, fmt.Errorf("%s: $ref %q: no such definition", s.loc, ref)
	}
	d, err := root.child(v, "$defs/"+name)
	if err != nil {
		return schema{}, err
	}
	if _, ok := d.get("$ref"); ok {
		return schema{}, fmt.Errorf("%s: a $ref to a $ref is not supported", d.loc)
	}
	d.def = name
	return d, nil
}
