package messages

import (
	"fmt"
	"strings"
)

// ToolRef is a parsed toolPath (§3): the skill and either a script name from
// the manifest or a file under the skill's scripts/ folder.
type ToolRef struct {
	// Skill is the skill name (the tool's skill).
	Skill string
	// Script is the manifest script name, for the "<skill>/<script>" form.
	Script string
	// File is the path under scripts/, for the "<skill>/scripts/<file>" and
	// "skills/<skill>/scripts/<file>" forms (e.g. "roll.sh" or "sub/x.sh").
	File string
}

// String renders the canonical form, "<skill>/<script>" or "<skill>/scripts/<file>".
func (r ToolRef) String() string {
	if r.File != "" {
		return r.Skill + "/scripts/" + r.File
	}
	return r.Skill + "/" + r.Script
}

// ParseToolPath parses a toolPath. It never touches the disk; whether the
// script exists is the registry's business. Absolute paths, "..", ".",
// empty segments, backslashes and control characters are rejected.
func ParseToolPath(p string) (ToolRef, error) {
	bad := func(why string) (ToolRef, error) {
		return ToolRef{}, fmt.Errorf("%w %q: %s", ErrInvalidToolPath, truncate(p, 120), why)
	}
	switch {
	case p == "":
		return bad("must not be empty")
	case len(p) > 512:
		return bad("longer than 512 bytes")
	case strings.HasPrefix(p, "/"):
		return bad("absolute paths are not allowed; name a script as <skill>/<script>")
	case strings.ContainsRune(p, '\\'):
		return bad("backslashes are not allowed")
	}
	for _, c := range p {
		if c < 0x20 || c == 0x7f {
			return bad("control characters are not allowed")
		}
	}
	seg := strings.Split(p, "/")
	for _, s := range seg {
		switch s {
		case "":
			return bad("empty path segment")
		case "..":
			return bad(`".." is not allowed`)
		case ".":
			return bad(`"." segments are not allowed`)
		}
	}
	if seg[0] == "skills" && len(seg) >= 4 && seg[2] == "scripts" {
		seg = seg[1:]
	}
	if !validSkillName(seg[0]) {
		return bad(fmt.Sprintf("skill %q must match ^[a-z0-9-]{1,64}$", truncate(seg[0], 64)))
	}
	switch {
	case len(seg) == 2:
		return ToolRef{Skill: seg[0], Script: seg[1]}, nil
	case len(seg) >= 3 && seg[1] == "scripts":
		return ToolRef{Skill: seg[0], File: strings.Join(seg[2:], "/")}, nil
	}
	return bad("must be <skill>/<script>, <skill>/scripts/<file> or skills/<skill>/scripts/<file>")
}

func validSkillName(s string) bool { return lowerDashed(s, 64) }

// lowerDashed reports whether s is 1 to max of a-z, 0-9 and '-'.
func lowerDashed(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// ValidSkillName reports whether s is a valid skill name: ^[a-z0-9-]{1,64}$.
func ValidSkillName(s string) bool { return validSkillName(s) }
