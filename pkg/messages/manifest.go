package messages

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Manifest defaults (§6.1).
const (
	// PriorityDefault is a skill's priority when the manifest has none.
	PriorityDefault = 50
	// ScriptTimeoutDefaultMs is a script's timeout when the manifest has none.
	ScriptTimeoutDefaultMs = 30_000
	// MaxManifestBytes bounds a manifest file.
	MaxManifestBytes = 1 << 20
)

// Manifest is a skill's skill.json.
type Manifest struct {
	// The fields of skills/<name>/skill.json (§6.1); Priority defaults to 50.
	Name         string       `json:"name"`
	Version      string       `json:"version"`
	Description  string       `json:"description"`
	DisplayName  string       `json:"displayName,omitempty"`
	Capabilities []string     `json:"capabilities,omitempty"`
	Keywords     []string     `json:"keywords,omitempty"`
	Priority     int          `json:"priority"`
	RetryPolicy  *RetryPolicy `json:"retryPolicy,omitempty"`
	// Env names the environment variables the scripts receive (extension).
	Env     []string     `json:"env,omitempty"`
	Scripts []ScriptSpec `json:"scripts"`
}

// ScriptSpec is one script of a manifest.
type ScriptSpec struct {
	// Name is used in toolPaths; Path is under scripts/; InputSchema validates the input.
	Name        string          `json:"name"`
	Path        string          `json:"path"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// TimeoutMs is the manifest's "timeout" (ms). Default 30000.
	TimeoutMs int64 `json:"timeout"`
}

// ManifestError lists what is wrong with a manifest.
type ManifestError struct {
	// Problems name each field at fault.
	Problems []Problem
}

// Error implements error.
func (e *ManifestError) Error() string { return joinProblems(e.Problems) }

// Unwrap returns ErrInvalidManifest.
func (e *ManifestError) Unwrap() error { return ErrInvalidManifest }

// DecodeManifest decodes and validates a manifest with the manifest schema
// and the rules a schema cannot express (unique script names, paths inside
// scripts/), and applies the defaults.
func DecodeManifest(b []byte) (*Manifest, error) {
	if len(b) > MaxManifestBytes {
		return nil, &ManifestError{Problems: []Problem{{Message: fmt.Sprintf("manifest is %d bytes; the limit is %d", len(b), MaxManifestBytes)}}}
	}
	generic, err := decodeForSchema(b)
	if err != nil {
		return nil, &ManifestError{Problems: []Problem{{Message: "not valid JSON: " + err.Error()}}}
	}
	s, err := CompiledSchema(SchemaManifest)
	if err != nil {
		return nil, fmt.Errorf("decode manifest: %w", err)
	}
	if probs := ValidateSchema(s, generic); len(probs) > 0 {
		return nil, &ManifestError{Problems: probs}
	}
	m := Manifest{Priority: PriorityDefault}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, &ManifestError{Problems: []Problem{{Message: err.Error()}}}
	}
	var probs []Problem
	seen := map[string]bool{}
	for i := range m.Scripts {
		sc := &m.Scripts[i]
		field := "scripts[" + strconv.Itoa(i) + "]"
		if seen[sc.Name] {
			probs = append(probs, Problem{Field: field + ".name", Message: fmt.Sprintf("script %q is defined more than once", sc.Name)})
		}
		seen[sc.Name] = true
		for _, seg := range strings.Split(sc.Path, "/") {
			if seg == ".." || seg == "" {
				probs = append(probs, Problem{Field: field + ".path", Message: fmt.Sprintf("%q must be a path under scripts/ without \"..\" or empty segments", sc.Path)})
				break
			}
		}
		if sc.TimeoutMs == 0 {
			sc.TimeoutMs = ScriptTimeoutDefaultMs
		}
	}
	if len(probs) > 0 {
		return nil, &ManifestError{Problems: probs}
	}
	return &m, nil
}

// Script returns the script of the given name.
func (m *Manifest) Script(name string) (*ScriptSpec, bool) {
	for i := range m.Scripts {
		if m.Scripts[i].Name == name {
			return &m.Scripts[i], true
		}
	}
	return nil, false
}

// ScriptByPath finds a script by its file: "scripts/x.sh" or "x.sh".
func (m *Manifest) ScriptByPath(p string) (*ScriptSpec, bool) {
	p = strings.TrimPrefix(strings.TrimPrefix(p, "./"), "scripts/")
	for i := range m.Scripts {
		if strings.TrimPrefix(strings.TrimPrefix(m.Scripts[i].Path, "./"), "scripts/") == p {
			return &m.Scripts[i], true
		}
	}
	return nil, false
}
