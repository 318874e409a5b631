// Package skills discovers the skills in a folder (docs/spec.md §6.1) and keeps
// track of them while a skill worker runs (§6.2).
//
// A skill is a folder directly under the skills folder:
//
//	<name>/skill.json          the manifest (messages.DecodeManifest); its name must equal <name>
//	<name>/prompt.md           the planner prompt; missing: the skill loads with "" and a warning
//	<name>/scripts/...         the executables the manifest lists
//	<name>/config.json         optional settings; "${VAR}" inside strings is replaced from the environment
//	<name>/config-schema.json  optional JSON Schema the settings must match
//	<name>/data/               the skill's own storage, created on first use (Skill.DataDir)
//
// Loader.Load loads every skill; a broken one is skipped with exactly one
// Warning naming the file at fault and the problem, and the others load.
// Loader.Watch polls the folder and reports skills added, updated, removed
// or newly broken, without a restart.
package skills

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/narratoria/runtime/pkg/messages"
)

// The files and folders of a skill.
const (
	// ManifestFile is the manifest, skills/<name>/skill.json.
	ManifestFile = "skill.json"
	// PromptFile is the planner prompt, skills/<name>/prompt.md.
	PromptFile = "prompt.md"
	// ConfigFile holds the skill's settings, skills/<name>/config.json.
	ConfigFile = "config.json"
	// ConfigSchemaFile is the JSON Schema of the settings.
	ConfigSchemaFile = "config-schema.json"
	// ScriptsDirName is the folder every script lives in.
	ScriptsDirName = "scripts"
	// DataDirName is the skill's private storage folder.
	DataDirName = "data"
)

// Limits of the files a skill may have.
const (
	// MaxPromptBytes bounds prompt.md.
	MaxPromptBytes = 256 << 10
	// MaxConfigBytes bounds config.json and config-schema.json.
	MaxConfigBytes = 1 << 20
)

// Skill is a loaded, valid skill. The loader builds it once and never
// changes it: a change on disk produces a new Skill (see Loader.Watch), so a
// Skill can be shared between goroutines.
type Skill struct {
	// Name is the skill name, equal to its folder name.
	Name string
	// Dir is the skill folder, absolute. Scripts run in it.
	Dir string
	// Manifest is the validated skill.json, defaults applied.
	Manifest *messages.Manifest
	// Prompt is prompt.md; "" when the file is missing (Load then warns).
	Prompt string
	// Scripts are the manifest's scripts by name.
	Scripts map[string]*Script
	// Config is config.json after "${VAR}" substitution; {} without one.
	Config json.RawMessage
	// Env holds the variables the manifest's "env" names that are set in the
	// loader's environment, and only those: the scripts' extra environment.
	Env map[string]string
	// Hash is a content hash of the manifest, prompt, config, config schema
	// and script files; it changes when any of them does.
	Hash string
}

// Script is one script of a skill.
type Script struct {
	// Spec is the script's manifest entry.
	Spec messages.ScriptSpec
	// Path is the executable, absolute, with symlinks resolved; it is a
	// regular file inside the skill folder.
	Path string
	// Input validates the script's input; nil without an inputSchema.
	Input *jsonschema.Schema
	// Timeout is the manifest's timeout of one attempt (default 30 s).
	Timeout time.Duration
}

// InputError says which fields of a tool input break the script's
// inputSchema. It matches ErrInvalidInput.
type InputError struct {
	// Script is "<skill>/<script>".
	Script string
	// Problems name each field at fault, as "input.<path>".
	Problems []messages.Problem
}

// Error renders "input does not match the inputSchema of x/y: input.n: must be integer (got string)".
func (e *InputError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return "input does not match the inputSchema of " + e.Script + ": " + strings.Join(parts, "; ")
}

// Unwrap returns ErrInvalidInput.
func (e *InputError) Unwrap() error { return ErrInvalidInput }

// ValidateInput checks a tool input against the inputSchema of the named
// script. An empty input counts as {}. A script without an inputSchema
// accepts any input. The error is an *InputError naming each field at fault
// (e.g. "input.sides: must be integer (got string)"), or ErrUnknownScript.
func (s *Skill) ValidateInput(script string, input json.RawMessage) error {
	sc, ok := s.Scripts[script]
	if !ok {
		return &UnknownScriptError{Skill: s.Name, ToolPath: script}
	}
	if sc.Input == nil {
		return nil
	}
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage("{}")
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(input))
	if err != nil {
		return &InputError{Script: s.Name + "/" + script, Problems: []messages.Problem{{Field: "input", Message: "not valid JSON: " + err.Error()}}}
	}
	probs := messages.ValidateSchema(sc.Input, v)
	if len(probs) == 0 {
		return nil
	}
	for i := range probs {
		switch {
		case probs[i].Field == "":
			probs[i].Field = "input"
		case strings.HasPrefix(probs[i].Field, "["):
			probs[i].Field = "input" + probs[i].Field
		default:
			probs[i].Field = "input." + probs[i].Field
		}
	}
	return &InputError{Script: s.Name + "/" + script, Problems: probs}
}

// DataDir returns the skill's private storage folder, <Dir>/data, creating
// it (0o755) on first use.
func (s *Skill) DataDir() (string, error) {
	d := filepath.Join(s.Dir, DataDirName)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", fmt.Errorf("skill %s: create the data folder: %w", s.Name, err)
	}
	return d, nil
}

// Resolve finds the script of this skill that a toolPath names, in any of
// the §3 forms: "<skill>/<script>" (the manifest name),
// "<skill>/scripts/<file>" and "skills/<skill>/scripts/<file>" (the file
// the manifest lists). Absolute paths, "..", other skills' scripts and
// anything that is not a listed script are rejected: a toolPath is never
// a path to execute. The error wraps messages.ErrInvalidToolPath for a
// malformed toolPath and ErrUnknownScript otherwise.
func (s *Skill) Resolve(toolPath string) (*Script, error) {
	ref, err := messages.ParseToolPath(toolPath)
	if err != nil {
		return nil, fmt.Errorf("skill %s: %w", s.Name, err)
	}
	if ref.Skill != s.Name {
		return nil, &UnknownScriptError{Skill: s.Name, ToolPath: toolPath}
	}
	if ref.Script != "" {
		if sc, ok := s.Scripts[ref.Script]; ok {
			return sc, nil
		}
		return nil, &UnknownScriptError{Skill: s.Name, ToolPath: ref.String()}
	}
	want := ScriptsDirName + "/" + ref.File
	var found *Script
	for name, sc := range s.Scripts { // two names may share a file: the first name wins
		if strings.TrimPrefix(sc.Spec.Path, "./") == want && (found == nil || name < found.Spec.Name) {
			found = sc
		}
	}
	if found != nil {
		return found, nil
	}
	return nil, &UnknownScriptError{Skill: s.Name, ToolPath: ref.String()}
}

// UnknownScriptError is a toolPath or script name that is not a script of
// the skill. It matches ErrUnknownScript.
type UnknownScriptError struct {
	// Skill is the skill that was asked.
	Skill string
	// ToolPath is what was asked for: a toolPath in canonical form, or a script name.
	ToolPath string
}

// Error renders `skill "dice" has no script "dice/nope"`.
func (e *UnknownScriptError) Error() string {
	return fmt.Sprintf("skill %q has no script %q", e.Skill, e.ToolPath)
}

// Unwrap returns ErrUnknownScript.
func (e *UnknownScriptError) Unwrap() error { return ErrUnknownScript }

// FillEntry writes what the registry says of the skill into e (manifest
// fields, prompt, scripts with their effective timeouts, hash), leaving
// its workers alone.
func (sk *Skill) FillEntry(e *messages.RegistryEntry) {
	m := sk.Manifest
	e.Name = sk.Name
	e.Version = m.Version
	e.Description = m.Description
	e.DisplayName = m.DisplayName
	e.Capabilities = m.Capabilities
	e.Keywords = m.Keywords
	e.Examples = m.Examples
	e.NegativeExamples = m.NegativeExamples
	e.Priority = m.Priority
	e.Prompt = sk.Prompt
	e.Hash = sk.Hash
	e.Scripts = e.Scripts[:0]
	for _, s := range m.Scripts {
		timeout := s.TimeoutMs
		if sc, ok := sk.Scripts[s.Name]; ok && sc.Timeout > 0 {
			timeout = sc.Timeout.Milliseconds()
		}
		e.Scripts = append(e.Scripts, messages.RegistryScript{Name: s.Name, Path: s.Path, Description: s.Description,
			InputSchema: s.InputSchema, TimeoutMs: timeout, NoReuse: s.NoReuse, Examples: s.Examples})
	}
	e.UpdatedAt = time.Now().UTC()
}
