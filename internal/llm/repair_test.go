package llm_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/llm"
)

// TestExtractJSON: the forms small models give a structured answer in —
// a markdown fence, words before or after, an answer cut off — come out
// as the JSON object, with the repairs named; a clean answer has none.
func TestExtractJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, in, want string
		repairs        []string
	}{
		{"clean", `{"a":1}`, `{"a":1}`, nil},
		{"fence", "```json\n{\"a\":1}\n```", `{"a":1}`, []string{llm.RepairFence}},
		{"bare fence", "```\n{\"a\":[1,2]}\n```", `{"a":[1,2]}`, []string{llm.RepairFence}},
		{"fence after words", "Sure! Here is the plan:\n```json\n{\"a\":1}\n```\nHope it helps.", `{"a":1}`, []string{llm.RepairProse, llm.RepairFence}},
		{"words before", `Here is your plan: {"a":"x}"}`, `{"a":"x}"}`, []string{llm.RepairProse}},
		{"words after", `{"a":{"b":2}} I chose the dice because you attack.`, `{"a":{"b":2}}`, []string{llm.RepairProse}},
		{"truncated in a string", `{"narrative":"You swing","tools":[{"toolId":"r","input":{"formula":"1d2`, `{"narrative":"You swing","tools":[{"toolId":"r","input":{}}]}`,
			[]string{llm.RepairTruncated}},
		{"truncated after a key", `{"narrative":"You swing","tools":[{"toolId":"r","toolPath"`, `{"narrative":"You swing","tools":[{"toolId":"r"}]}`, []string{llm.RepairTruncated}},
		{"truncated after a comma", `{"a":1,"b":[1,2,`, `{"a":1,"b":[1,2]}`, []string{llm.RepairTruncated}},
		{"truncated after a value", `{"a":1,"b":[{"c":"d"}`, `{"a":1,"b":[{"c":"d"}]}`, []string{llm.RepairTruncated}},
		{"truncated in a number", `{"a":1,"b":12`, `{"a":1}`, []string{llm.RepairTruncated}},
		{"truncated in a literal", `{"a":1,"b":tr`, `{"a":1}`, []string{llm.RepairTruncated}},
		{"truncated in a fence", "```json\n{\"a\":{\"b\":\"c\"", `{"a":{"b":"c"}}`, []string{llm.RepairFence, llm.RepairTruncated}},
		{"escaped quote", `{"a":"say \"hi\" {"}`, `{"a":"say \"hi\" {"}`, nil},
		{"no object", `I cannot help with that.`, `I cannot help with that.`, nil},
	} {
		got, repairs := llm.ExtractJSON(c.in)
		require.Equal(t, c.want, got, c.name)
		require.Equal(t, c.repairs, repairs, c.name)
		if c.name != "no object" {
			require.True(t, json.Valid([]byte(got)), c.name)
		}
	}
}

// FuzzExtractJSON: whatever a model answers, ExtractJSON returns without
// panicking, and a repaired truncation is valid JSON.
func FuzzExtractJSON(f *testing.F) {
	for _, s := range []string{`{"a":1}`, "```json\n{\"a\":", `x {"a":[{"b":"c\"`, `{"a":"\`, `}{`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, repairs := llm.ExtractJSON(s)
		for _, r := range repairs {
			if r == llm.RepairTruncated && !json.Valid([]byte(got)) {
				t.Fatalf("a truncation repaired into invalid JSON: %q -> %q", s, got)
			}
		}
	})
}
