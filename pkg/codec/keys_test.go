package codec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type inner struct {
	Name string `json:"name"`
}

type outer struct {
	Type  string            `json:"type"`
	Items []inner           `json:"items"`
	Attrs map[string]any    `json:"attrs"`
	Raw   json.RawMessage   `json:"raw"`
	ByKey map[string]*inner `json:"byKey"`
}

func TestCheckKeys(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want string // "" = accepted; otherwise a substring of the error
	}{
		{`{"type":"a","items":[{"name":"x"}],"attrs":{"a":{"b":1}},"raw":{"x":[1,{"y":2}]}}`, ""},
		{`{"other":1,"Other":2}`, ""}, // unknown keys that differ are two keys
		{` {"type" : "a" } `, ""},
		{`[]`, ""},
		{`"x"`, ""},
		{`{"type":"a","type":"b"}`, `duplicate key "type" at the top level`},
		{`{"Type":"a"}`, `key "Type" at the top level must be spelled "type"`},
		{`{"TYPE":"a"}`, `must be spelled "type"`},
		{`{"items":[{"name":"a"},{"NAME":"b"}]}`, `key "NAME" at items[1] must be spelled "name"`},
		{`{"items":[{"name":"a","name":"b"}]}`, `duplicate key "name" at items[0]`},
		{`{"attrs":{"a":{"b":1,"b":2}}}`, `duplicate key "b" at attrs.a`},
		{`{"attrs":{"A":1,"a":2}}`, ""}, // map keys are exact
		{`{"raw":{"x":1,"x":1}}`, `duplicate key "x" at raw`},
		{`{"byKey":{"k":{"Name":"x"}}}`, `key "Name" at byKey.k must be spelled "name"`},
		{`{"t\u0079pe":"a","type":"b"}`, `duplicate key "type"`},
		{"{\"\u017fype\":1}", ""},               // no field folds to it: "ſype" is not "type"
		{"{\"items\":[{\"\u017fame\":1}]}", ""}, // nor here
		{"{\"items\":[{\"na\u212ae\":1}]}", ""},
		{"{\"attrs\":1,\"\u0061ttrs\":2}", `duplicate key "attrs"`},
	} {
		err := CheckKeys([]byte(c.doc), &outer{})
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.doc, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.doc, err, c.want)
		}
	}
	// Unicode simple folding, as encoding/json: "ſ" folds to "s", "K" (Kelvin) to "k".
	type folded struct {
		S string `json:"s"`
		K string `json:"k"`
	}
	for _, doc := range []string{"{\"\u017f\":1}", "{\"\u212a\":1}"} {
		var ke *KeyError
		if err := CheckKeys([]byte(doc), &folded{}); !errors.As(err, &ke) || ke.Field == "" {
			t.Errorf("%s: %v, want a case error", doc, err)
		}
	}
	if err := CheckKeys([]byte(`{"type":"a","Version":"0"}`), &inner{}, "version", "type"); err == nil || !strings.Contains(err.Error(), `spelled "version"`) {
		t.Errorf("an envelope field in another case: %v", err)
	}
	for _, bad := range []string{`{`, `{"a"}`, `{"a":}`, `[1,]`, `{"a":1}x`, `"x`, strings.Repeat("[", 20000) + strings.Repeat("]", 20000)} {
		if err := CheckKeys([]byte(bad), nil); !errors.Is(err, ErrNotJSON) {
			t.Errorf("%q: %v, want ErrNotJSON", bad, err)
		}
	}
}

// FuzzCheckKeys: on any input that encoding/json decodes into a map, a
// duplicate key (after unescaping) is found exactly when there is one; on
// any other input it does not panic (it is no validator).
func FuzzCheckKeys(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":{"a":2}}`, `{"a":1,"a":2}`, `{"\u0061":1,"a":2}`, `[{"x":{}},{"x":1,"y":[]}]`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := CheckKeys(data, nil)
		if !json.Valid(data) {
			return
		}
		if errors.Is(err, ErrNotJSON) && strings.Count(string(data), "[")+strings.Count(string(data), "{") <= maxDepth {
			t.Fatalf("valid JSON called not JSON: %q", data)
		}
		want := hasDuplicate(t, data)
		var ke *KeyError
		if got := errors.As(err, &ke); got != want {
			t.Fatalf("%q: duplicate found %v, want %v (%v)", data, got, want, err)
		}
	})
}

// hasDuplicate answers the fuzz target's question with encoding/json's
// tokenizer.
func hasDuplicate(t *testing.T, data []byte) bool {
	d := json.NewDecoder(strings.NewReader(string(data)))
	type frame struct {
		obj    bool
		keys   map[string]bool
		expect bool // next string token is a key
	}
	var stack []*frame
	for {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				if top != nil && top.obj {
					top.expect = true
				}
				stack = append(stack, &frame{obj: true, keys: map[string]bool{}, expect: true})
				continue
			case '[':
				if top != nil && top.obj {
					top.expect = true
				}
				stack = append(stack, &frame{})
				continue
			default:
				stack = stack[:len(stack)-1]
				continue
			}
		case string:
			if top != nil && top.obj && top.expect {
				if top.keys[v] {
					return true
				}
				top.keys[v] = true
				top.expect = false
				continue
			}
		}
		if top != nil && top.obj {
			top.expect = true
		}
	}
}
