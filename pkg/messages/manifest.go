package messages

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Manifest defaults and limits (docs/spec.md §6.1).
const (
	// PriorityDefault is a skill's priority when the manifest has none.
	PriorityDefault = 50
	// ScriptTimeoutDefaultMs is a script's timeout (ms) when the manifest has none.
	ScriptTimeoutDefaultMs = 30_000
	// ScriptTimeoutMinMs is the smallest script timeout a manifest may set (ms).
	ScriptTimeoutMinMs = 1_000
	// ScriptTimeoutMaxMs is the largest script timeout a manifest may set (ms).
	ScriptTimeoutMaxMs = 300_000
	// MaxManifestBytes bounds a manifest file.
	MaxManifestBytes = 1 << 20
	// MaxScriptPathLength bounds a script's path, in characters.
	MaxScriptPathLength = 512
	// ReservedEnvPrefix starts the names of the runtime's own environment
	// variables (settings and credentials); a manifest's "env" may not name them.
	ReservedEnvPrefix = "NARRATORIA_"
)

// Manifest is a skill's skills/<name>/skill.json (docs/spec.md §6.1), validated and
// with its defaults applied. DecodeManifest is the only way to get a valid one
// from bytes; the JSON tags are for re-encoding (e.g. in the registry).
type Manifest struct {
	// Name is the skill name, ^[a-z0-9-]{1,64}$; it equals the skill's folder name.
	Name string `json:"name"`
	// Version is a semantic version.
	Version string `json:"version"`
	// Description says what the skill does, for the planner.
	Description string `json:"description"`
	// DisplayName is a human-friendly name. Optional.
	DisplayName string `json:"displayName,omitempty"`
	// Capabilities are short tags of what the skill can do. Optional.
	Capabilities []string `json:"capabilities,omitempty"`
	// Keywords are words in a prompt that suggest the skill. Optional.
	Keywords []string `json:"keywords,omitempty"`
	// Examples are player utterances the skill answers; the rule-based
	// planner learns from them and compares prompts with them (a
	// narration skill's are prompts it answers alone). Optional.
	Examples []string `json:"examples,omitempty"`
	// NegativeExamples are utterances that look alike but are not for
	// this skill; the rule-based planner learns them as negatives.
	// Optional.
	NegativeExamples []string `json:"negativeExamples,omitempty"`
	// Priority is 0..100; planners prefer higher. Default 50.
	Priority int `json:"priority"`
	// RetryPolicy is the policy planners should give the skill's tools; nil
	// when the manifest has none. A field it leaves out takes the plan
	// default (MaxRetriesDefault, BackoffMsDefault).
	RetryPolicy *RetryPolicy `json:"retryPolicy,omitempty"`
	// Env names the environment variables the worker passes to the skill's
	// scripts (our extension to §6.1, manifest key "env"). Names starting with
	// ReservedEnvPrefix are rejected. Optional.
	Env []string `json:"env,omitempty"`
	// Limits are the kernel limits every attempt of the skill's scripts
	// runs under (our extension, manifest key "limits"); a script's own
	// Limits override them field by field. Optional.
	Limits ResourceLimits `json:"limits,omitzero"`
	// Scripts are the skill's scripts, at least one, with unique names.
	Scripts []ScriptSpec `json:"scripts"`
}

// ResourceLimits are the kernel limits (setrlimit) one attempt of a script
// runs under. A zero field is unset: it takes the next level's value (the
// script's, then the skill's, then the worker's default), and the worker
// lowers every value to its operator's maximum.
type ResourceLimits struct {
	// MemoryMB is the writable memory the attempt's processes may map, in
	// MiB (RLIMIT_DATA). Worker default 1024.
	MemoryMB int `json:"memoryMB,omitempty" yaml:"memoryMB"`
	// CPUSeconds is the CPU time of each process, in seconds (RLIMIT_CPU).
	// Worker default: the larger of 60 and twice the script's timeout.
	CPUSeconds int `json:"cpuSeconds,omitempty" yaml:"cpuSeconds"`
	// Processes bounds the processes and threads the attempt has at once
	// (RLIMIT_NPROC). Worker default 64.
	Processes int `json:"processes,omitempty" yaml:"processes"`
	// FileSizeMB is the largest file the attempt may write, in MiB
	// (RLIMIT_FSIZE). Worker default 256.
	FileSizeMB int `json:"fileSizeMB,omitempty" yaml:"fileSizeMB"`
	// OpenFiles bounds the open files of each process (RLIMIT_NOFILE).
	// Worker default 1024.
	OpenFiles int `json:"openFiles,omitempty" yaml:"openFiles"`
}

// Over returns l with every unset field taken from base.
func (l ResourceLimits) Over(base ResourceLimits) ResourceLimits {
	return ResourceLimits{
		MemoryMB:   cmp.Or(l.MemoryMB, base.MemoryMB),
		CPUSeconds: cmp.Or(l.CPUSeconds, base.CPUSeconds),
		Processes:  cmp.Or(l.Processes, base.Processes),
		FileSizeMB: cmp.Or(l.FileSizeMB, base.FileSizeMB),
		OpenFiles:  cmp.Or(l.OpenFiles, base.OpenFiles),
	}
}

// Capped returns l with every field lowered to max's where max sets one,
// and the names of the fields it lowered.
func (l ResourceLimits) Capped(max ResourceLimits) (ResourceLimits, []string) {
	var lowered []string
	capAt := func(name string, v *int, m int) {
		if m > 0 && *v > m {
			*v = m
			lowered = append(lowered, name)
		}
	}
	capAt("memoryMB", &l.MemoryMB, max.MemoryMB)
	capAt("cpuSeconds", &l.CPUSeconds, max.CPUSeconds)
	capAt("processes", &l.Processes, max.Processes)
	capAt("fileSizeMB", &l.FileSizeMB, max.FileSizeMB)
	capAt("openFiles", &l.OpenFiles, max.OpenFiles)
	return l, lowered
}

// ScriptSpec is one entry of a manifest's "scripts".
type ScriptSpec struct {
	// Name is the script's name in toolPaths ("<skill>/<name>"), ^[a-z0-9-]{1,64}$.
	Name string `json:"name"`
	// Path is the executable relative to the skill folder, under scripts/
	// (e.g. "scripts/roll.sh"; a leading "./" is allowed).
	Path string `json:"path"`
	// Description says what the script does. Optional.
	Description string `json:"description,omitempty"`
	// InputSchema is a JSON Schema the tool input must match. Optional.
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// TimeoutMs is the manifest's "timeout": one attempt's limit in ms,
	// 1000..300000. Default 30000.
	TimeoutMs int64 `json:"timeout"`
	// NoReuse is the manifest's "reuse": false: a replan of the same
	// prompt runs the script again instead of reusing an earlier
	// attempt's outcome (e.g. a dice roll a game wants re-rolled).
	NoReuse bool `json:"noReuse,omitempty"`
	// Examples are utterances for this script in particular, which pick
	// it among the skill's scripts (and count as the skill's). Optional.
	Examples []string `json:"examples,omitempty"`
	// Limits are this script's own attempt limits, over the skill's.
	// Optional.
	Limits ResourceLimits `json:"limits,omitzero"`
}

// ManifestError lists everything that is wrong with a manifest. It matches
// ErrInvalidManifest.
type ManifestError struct {
	// Problems name each field at fault, sorted by field.
	Problems []Problem
}

// Error renders the problems as "field: message; field: message".
func (e *ManifestError) Error() string { return joinProblems(e.Problems) }

// Unwrap returns ErrInvalidManifest.
func (e *ManifestError) Unwrap() error { return ErrInvalidManifest }

// The string rules of a manifest, kept identical to the patterns in
// schemas/manifest.schema.json (a test compares them) so that DecodeManifest
// can phrase a failure better than "does not match pattern".
const (
	skillNamePattern = `^[a-z0-9-]{1,64}$`
	semverPattern    = `^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)` +
		`(-(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*)?` +
		`(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$`
	envNamePattern = `^[A-Za-z_][A-Za-z0-9_]*$`
)

var (
	semverRe  = regexp.MustCompile(semverPattern)
	envNameRe = regexp.MustCompile(envNamePattern)
)

// DecodeManifest decodes a skill.json, validates it with the manifest schema
// (SchemaManifest) and the rules a schema cannot express (unique script
// names), and applies the defaults (priority 50, script timeout 30000 ms, a
// partial retryPolicy completed with the plan defaults). Every problem is
// reported, each naming its field, in a *ManifestError, e.g.
// "scripts[0].timeout: must be >= 1000 (got 5)". Field names are matched
// exactly (JSON is case-sensitive here) and unknown fields are ignored.
func DecodeManifest(b []byte) (*Manifest, error) {
	if len(b) > MaxManifestBytes {
		return nil, &ManifestError{Problems: []Problem{{Message: fmt.Sprintf("manifest is %d bytes; the limit is %d", len(b), MaxManifestBytes)}}}
	}
	v, err := decodeForSchema(b)
	if err != nil {
		return nil, &ManifestError{Problems: []Problem{{Message: "not valid JSON: " + err.Error()}}}
	}
	s, err := CompiledSchema(SchemaManifest)
	if err != nil {
		return nil, fmt.Errorf("decode manifest: %w", err)
	}
	if probs := mergeProblems(ValidateSchema(s, v), manifestRules(v)); len(probs) > 0 {
		return nil, &ManifestError{Problems: probs}
	}
	m, err := manifestFrom(v.(map[string]any))
	if err != nil {
		return nil, &ManifestError{Problems: []Problem{{Message: err.Error()}}}
	}
	return m, nil
}

// mergeProblems adds the rule problems to the schema problems; a rule
// problem replaces the schema's findings on the same field, whose wording it
// improves.
func mergeProblems(schema, rules []Problem) []Problem {
	if len(rules) == 0 {
		return schema
	}
	ruled := map[string]bool{}
	for _, p := range rules {
		ruled[p.Field] = true
	}
	out := make([]Problem, 0, len(schema)+len(rules))
	for _, p := range schema {
		if !ruled[p.Field] {
			out = append(out, p)
		}
	}
	out = append(out, rules...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}

// manifestRules checks the string rules with clear wording, and unique
// script names. It looks only at values of the right JSON type; the schema
// reports the others.
func manifestRules(v any) []Problem {
	doc, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	var probs []Problem
	if s, ok := doc["name"].(string); ok && !ValidSkillName(s) {
		probs = append(probs, Problem{Field: "name", Message: fmt.Sprintf("%q must match %s (lowercase letters, digits and hyphens, at most 64)", truncate(s, 80), skillNamePattern)})
	}
	if s, ok := doc["version"].(string); ok && !semverRe.MatchString(s) {
		probs = append(probs, Problem{Field: "version", Message: fmt.Sprintf("%q must be a semantic version such as 1.2.0", truncate(s, 80))})
	}
	if env, ok := doc["env"].([]any); ok {
		for i, e := range env {
			s, ok := e.(string)
			if !ok {
				continue
			}
			field := "env[" + strconv.Itoa(i) + "]"
			switch {
			case !envNameRe.MatchString(s) || utf8.RuneCountInString(s) > 128:
				probs = append(probs, Problem{Field: field, Message: fmt.Sprintf("%q must be an environment variable name (letters, digits, _; not starting with a digit; at most 128)", truncate(s, 80))})
			case strings.HasPrefix(s, ReservedEnvPrefix):
				probs = append(probs, Problem{Field: field, Message: fmt.Sprintf("%q is reserved: variables starting with %s are the runtime's own settings and are never passed to scripts", truncate(s, 80), ReservedEnvPrefix)})
			}
		}
	}
	scripts, isArray := doc["scripts"].([]any)
	if isArray && len(scripts) == 0 {
		probs = append(probs, Problem{Field: "scripts", Message: "must list at least one script"})
	}
	first := map[string]int{}
	for i, sc := range scripts {
		item, ok := sc.(map[string]any)
		if !ok {
			continue
		}
		field := "scripts[" + strconv.Itoa(i) + "]"
		if name, ok := item["name"].(string); ok {
			if !ValidSkillName(name) {
				probs = append(probs, Problem{Field: field + ".name", Message: fmt.Sprintf("%q must match %s (lowercase letters, digits and hyphens, at most 64)", truncate(name, 80), skillNamePattern)})
			} else if j, dup := first[name]; dup {
				probs = append(probs, Problem{Field: field + ".name", Message: fmt.Sprintf("duplicate script name %q (also scripts[%d])", name, j)})
			} else {
				first[name] = i
			}
		}
		if p, ok := item["path"].(string); ok {
			if msg := scriptPathProblem(p); msg != "" {
				probs = append(probs, Problem{Field: field + ".path", Message: fmt.Sprintf("%q %s", truncate(p, 80), msg)})
			}
		}
	}
	return probs
}

// scriptPathProblem says what is wrong with a manifest script path, or "".
// It accepts exactly what the schema's path pattern and maxLength accept.
func scriptPathProblem(p string) string {
	switch {
	case p == "":
		return "must not be empty; name a file under scripts/"
	case utf8.RuneCountInString(p) > MaxScriptPathLength:
		return fmt.Sprintf("must be at most %d characters", MaxScriptPathLength)
	case strings.HasPrefix(p, "/"):
		return "must be relative to the skill folder (e.g. scripts/run.sh), not absolute"
	}
	for _, c := range p {
		if c == '\\' || c < 0x20 || c == 0x7f {
			return "must not contain backslashes or control characters"
		}
	}
	seg := strings.Split(strings.TrimPrefix(p, "./"), "/")
	for _, s := range seg {
		if s == "" || s == "." || s == ".." {
			return `must not contain "..", "." or empty segments`
		}
	}
	if seg[0] != "scripts" || len(seg) < 2 {
		return "must be a file under scripts/ (e.g. scripts/run.sh)"
	}
	return ""
}

// manifestFrom builds the Manifest from a schema-valid document, applying
// the defaults. It reads the decoded value rather than unmarshalling the
// bytes again so that only the exact, validated keys count (encoding/json
// would also accept "Name" or "NAME").
func manifestFrom(doc map[string]any) (*Manifest, error) {
	m := &Manifest{
		Name:             str(doc["name"]),
		Version:          str(doc["version"]),
		Description:      str(doc["description"]),
		DisplayName:      str(doc["displayName"]),
		Capabilities:     strs(doc["capabilities"]),
		Keywords:         strs(doc["keywords"]),
		Priority:         int(integer(doc["priority"], PriorityDefault)),
		Examples:         strs(doc["examples"]),
		NegativeExamples: strs(doc["negativeExamples"]),
		Limits:           limitsFrom(doc["limits"]),
	}
	if rp, ok := doc["retryPolicy"].(map[string]any); ok {
		m.RetryPolicy = &RetryPolicy{
			MaxRetries: int(integer(rp["maxRetries"], MaxRetriesDefault)),
			BackoffMs:  integer(rp["backoffMs"], BackoffMsDefault),
		}
	}
	seen := map[string]bool{}
	for _, e := range strs(doc["env"]) {
		if !seen[e] {
			seen[e] = true
			m.Env = append(m.Env, e)
		}
	}
	scripts, _ := doc["scripts"].([]any)
	m.Scripts = make([]ScriptSpec, 0, len(scripts))
	for i, sc := range scripts {
		item := sc.(map[string]any)
		spec := ScriptSpec{
			Name:        str(item["name"]),
			Path:        str(item["path"]),
			Description: str(item["description"]),
			TimeoutMs:   integer(item["timeout"], ScriptTimeoutDefaultMs),
			Examples:    strs(item["examples"]),
			Limits:      limitsFrom(item["limits"]),
		}
		if reuse, ok := item["reuse"].(bool); ok && !reuse {
			spec.NoReuse = true
		}
		if is, ok := item["inputSchema"]; ok {
			raw, err := MarshalCompact(is)
			if err != nil {
				return nil, fmt.Errorf("scripts[%d].inputSchema: %w", i, err)
			}
			spec.InputSchema = raw
		}
		m.Scripts = append(m.Scripts, spec)
	}
	return m, nil
}

// limitsFrom reads a schema-valid "limits" object; absent, all unset.
func limitsFrom(v any) ResourceLimits {
	m, _ := v.(map[string]any)
	return ResourceLimits{
		MemoryMB:   int(integer(m["memoryMB"], 0)),
		CPUSeconds: int(integer(m["cpuSeconds"], 0)),
		Processes:  int(integer(m["processes"], 0)),
		FileSizeMB: int(integer(m["fileSizeMB"], 0)),
		OpenFiles:  int(integer(m["openFiles"], 0)),
	}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func strs(v any) []string {
	a, _ := v.([]any)
	if len(a) == 0 {
		return nil
	}
	out := make([]string, 0, len(a))
	for _, e := range a {
		out = append(out, str(e))
	}
	return out
}

// integer reads a schema-validated integer (which JSON may spell 50, 50.0 or
// 5e1), or def when the value is absent.
func integer(v any, def int64) int64 {
	n, ok := v.(json.Number)
	if !ok {
		return def
	}
	if i, err := n.Int64(); err == nil {
		return i
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || !r.IsInt() || !r.Num().IsInt64() {
		return def
	}
	return r.Num().Int64()
}

// MarshalCompact encodes a decoded JSON value on one line without HTML
// escaping ("<" stays "<"), as skill authors wrote it.
func MarshalCompact(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return json.RawMessage(bytes.TrimRight(buf.Bytes(), "\n")), nil
}

// Script returns the script with the given manifest name.
func (m *Manifest) Script(name string) (*ScriptSpec, bool) {
	for i := range m.Scripts {
		if m.Scripts[i].Name == name {
			return &m.Scripts[i], true
		}
	}
	return nil, false
}

// ScriptByPath returns the script whose file is p, given relative to the
// skill folder ("scripts/x.sh", "./scripts/x.sh") or to its scripts/ folder
// ("x.sh", "sub/x.sh"). The first form wins when both could match.
func (m *Manifest) ScriptByPath(p string) (*ScriptSpec, bool) {
	p = strings.TrimPrefix(p, "./")
	if p == "" {
		return nil, false
	}
	find := func(want string) (*ScriptSpec, bool) {
		for i := range m.Scripts {
			if strings.TrimPrefix(m.Scripts[i].Path, "./") == want {
				return &m.Scripts[i], true
			}
		}
		return nil, false
	}
	if strings.HasPrefix(p, "scripts/") {
		if s, ok := find(p); ok {
			return s, true
		}
	}
	return find("scripts/" + p)
}
