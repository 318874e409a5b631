package llm

import (
	"encoding/json"
	"strings"
)

// Repairs ExtractJSON makes (the kind label of narratoria_llm_repairs_total).
const (
	// RepairFence: the JSON was in a markdown code fence.
	RepairFence = "fence"
	// RepairProse: words came before or after the JSON.
	RepairProse = "prose"
	// RepairTruncated: the JSON was cut off and has been closed, dropping
	// the element it was cut in.
	RepairTruncated = "truncated"
	// RepairKeys: keys had other names than the schema's (the caller's
	// repair, e.g. the planner's).
	RepairKeys = "keys"
)

// ExtractJSON finds the JSON object in a model's answer to a structured
// request and repairs what small models get wrong in its form: a markdown
// fence around it, words before or after it, and an answer cut off before
// its end (the last element, cut, is dropped and every open string,
// array and object closed). It returns the object's text — valid JSON
// unless the answer holds no repairable object — and the repairs made.
func ExtractJSON(answer string) (string, []string) {
	s := strings.TrimSpace(answer)
	var repairs []string
	if i := strings.Index(s, "```"); i >= 0 {
		rest := s[i+3:]
		// The fence's info string (json, JSON…) ends its first line.
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 && !strings.ContainsAny(rest[:nl], "{[") {
			rest = rest[nl+1:]
		}
		if j := strings.Index(rest, "```"); j >= 0 {
			rest = rest[:j]
		}
		if strings.TrimSpace(s[:i]) != "" {
			repairs = append(repairs, RepairProse)
		}
		s = strings.TrimSpace(rest)
		repairs = append(repairs, RepairFence)
	}
	start := strings.IndexByte(s, '{')
	if start < 0 {
		return s, repairs
	}
	if start > 0 && !contains(repairs, RepairProse) {
		repairs = append(repairs, RepairProse)
	}
	s = s[start:]
	if end := objectEnd(s); end > 0 {
		if strings.TrimSpace(s[end:]) != "" && !contains(repairs, RepairProse) {
			repairs = append(repairs, RepairProse)
		}
		return s[:end], repairs
	}
	if closed, ok := closeTruncated(s); ok {
		return closed, append(repairs, RepairTruncated)
	}
	return s, repairs
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// scan walks s (starting with '{') outside and inside strings, calling
// at for each byte outside a string with the depth after it; at returning
// true stops the walk. It reports whether the walk ended inside a string.
func scan(s string, at func(i, depth int) bool) (inString bool) {
	depth, esc := 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if inString {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		}
		if at(i, depth) {
			return false
		}
	}
	return inString
}

// objectEnd is the index after the object s starts with, 0 when it does
// not end.
func objectEnd(s string) int {
	end := 0
	scan(s, func(i, depth int) bool {
		if depth == 0 {
			end = i + 1
			return true
		}
		return false
	})
	return end
}

// closeTruncated closes an object cut off before its end: the whole text
// with its containers closed if it was cut right after a value ended, else
// the text up to each earlier comma or opening (outside strings), last
// first, closed likewise, until one is valid. A value cut in the middle (a
// string, a number, a literal) is dropped, never closed: half a value is
// not what the model meant.
func closeTruncated(s string) (string, bool) {
	t := strings.TrimRight(s, " \t\r\n")
	if end := t[len(t)-1]; end == '}' || end == ']' || end == '"' {
		if c := closeAll(t); json.Valid([]byte(c)) {
			return c, true
		}
	}
	var cuts []int
	scan(s, func(i, _ int) bool {
		if s[i] == ',' {
			cuts = append(cuts, i)
		} else if s[i] == '{' || s[i] == '[' {
			cuts = append(cuts, i+1)
		}
		return false
	})
	for k := len(cuts) - 1; k >= 0; k-- {
		if c := closeAll(s[:cuts[k]]); json.Valid([]byte(c)) {
			return c, true
		}
	}
	return "", false
}

// closeAll appends to s what closes its open string, arrays and objects.
func closeAll(s string) string {
	var stack []byte
	inString := scan(s, func(i, _ int) bool {
		switch s[i] {
		case '{':
			stack = append(stack, '}')
		case '[':
			stack = append(stack, ']')
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		}
		return false
	})
	var b strings.Builder
	b.WriteString(strings.TrimRight(s, " \t\r\n,"))
	if inString {
		b.WriteByte('"')
	}
	for i := len(stack) - 1; i >= 0; i-- {
		b.WriteByte(stack[i])
	}
	return b.String()
}
