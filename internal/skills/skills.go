// Package skills discovers the skills in a folder (SPEC §6.1): manifests
// validated with our schema, prompts, executable scripts, settings with
// ${VAR} substitution validated against the skill's config schema, and
// compiled input schemas. A broken skill is skipped with one warning that
// names the file and the problem; the others load. Watch picks up added,
// edited and removed skills while the worker runs.
package skills

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/narratoria/runtime/pkg/messages"
)

// Files of a skill folder.
const (
	ManifestFile     = "skill.json"
	PromptFile       = "prompt.md"
	ConfigFile       = "config.json"
	ConfigSchemaFile = "config-schema.json"
	DataDirName      = "data"
	// MaxPromptBytes bounds prompt.md.
	MaxPromptBytes = 256 << 10
	// MaxConfigBytes bounds config.json.
	MaxConfigBytes = 1 << 20
)

// Skill is a loaded skill.
type Skill struct {
	// Name is the skill name (= its folder name).
	Name string
	// Dir is the skill folder, absolute.
	Dir string
	// Manifest is the validated skill.json with defaults applied.
	Manifest *messages.Manifest
	// Prompt is prompt.md ("" if absent).
	Prompt string
	// Scripts by name.
	Scripts map[string]*Script
	// Config is config.json after ${VAR} substitution ({} if absent).
	Config json.RawMessage
	// Env holds the variables the manifest's "env" names, from the loader's environment.
	Env map[string]string
	// Hash identifies the skill's content (manifest, prompt, config, scripts).
	Hash string
}

// Script is one executable script of a skill.
type Script struct {
	// Spec is the manifest entry.
	Spec messages.ScriptSpec
	// Path is the executable, absolute.
	Path string
	// Input validates the script's input (nil without an inputSchema).
	Input *jsonschema.Schema
	// Timeout is the manifest timeout.
	Timeout time.Duration
}

// Warning is a skill that could not be loaded.
type Warning struct {
	// Skill is the folder name.
	Skill string
	// File is the file at fault, relative to the skills folder's parent (e.g. skills/x/skill.json).
	File string
	// Err says what is wrong.
	Err error
}

// String renders "file: problem".
func (w Warning) String() string { return w.File + ": " + w.Err.Error() }

// InputError says which field of a tool's input breaks the script's inputSchema.
type InputError struct {
	// Script is "<skill>/<script>".
	Script string
	// Problems name each field at fault.
	Problems []messages.Problem
}

// Error implements error.
func (e *InputError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return "input does not match the inputSchema of " + e.Script + ": " + strings.Join(parts, "; ")
}

// ValidateInput checks a tool input against the script's inputSchema.
func (s *Skill) ValidateInput(script string, input json.RawMessage) error {
	sc, ok := s.Scripts[script]
	if !ok {
		return fmt.Errorf("skill %q has no script %q", s.Name, script)
	}
	if sc.Input == nil {
		return nil
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(input))
	if err != nil {
		return &InputError{Script: s.Name + "/" + script, Problems: []messages.Problem{{Message: "not valid JSON: " + err.Error()}}}
	}
	if probs := messages.ValidateSchema(sc.Input, v); len(probs) > 0 {
		for i := range probs {
			if probs[i].Field == "" {
				probs[i].Field = "input"
			} else {
				probs[i].Field = "input." + probs[i].Field
			}
		}
		return &InputError{Script: s.Name + "/" + script, Problems: probs}
	}
	return nil
}

// DataDir returns the skill's private storage, creating it on first use.
func (s *Skill) DataDir() (string, error) {
	d := filepath.Join(s.Dir, DataDirName)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", fmt.Errorf("skill %s: create data folder: %w", s.Name, err)
	}
	return d, nil
}

// Resolve finds the script a toolPath names (any of the three §3 forms).
func (s *Skill) Resolve(toolPath string) (*Script, error) {
	ref, err := messages.ParseToolPath(toolPath)
	if err != nil {
		return nil, err
	}
	if ref.Skill != s.Name {
		return nil, fmt.Errorf("toolPath %q names skill %q, not %q", toolPath, ref.Skill, s.Name)
	}
	var spec *messages.ScriptSpec
	var ok bool
	if ref.Script != "" {
		spec, ok = s.Manifest.Script(ref.Script)
	} else {
		spec, ok = s.Manifest.ScriptByPath(ref.File)
	}
	if !ok {
		return nil, fmt.Errorf("skill %q has no script %q", s.Name, ref.String())
	}
	return s.Scripts[spec.Name], nil
}

// Loader loads the skills of a folder.
type Loader struct {
	// Dir is the skills folder.
	Dir string
	// Only restricts loading to these skills (empty: all).
	Only []string
	// Getenv reads the environment for ${VAR} and manifest "env" (default os.LookupEnv).
	Getenv func(string) (string, bool)

	// seen is what the last Load saw, the baseline of Watch.
	seen map[string]*seen
}

// seen is what the loader last saw of one skill folder.
type seen struct {
	fp   string // fingerprint taken before loading
	hash string // "" when broken
}

func (l *Loader) getenv(k string) (string, bool) {
	if l.Getenv != nil {
		return l.Getenv(k)
	}
	return os.LookupEnv(k)
}

func (l *Loader) wanted(name string) bool {
	if len(l.Only) == 0 {
		return true
	}
	for _, o := range l.Only {
		if o == name {
			return true
		}
	}
	return false
}

// candidates lists the skill folders: directories directly under Dir, not hidden.
func (l *Loader) candidates() ([]string, error) {
	entries, err := os.ReadDir(l.Dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || !l.wanted(e.Name()) {
			continue
		}
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out, nil
}

// Load loads every skill; broken ones come back as warnings.
func (l *Loader) Load() (map[string]*Skill, []Warning) {
	out := map[string]*Skill{}
	names, err := l.candidates()
	if err != nil {
		return out, []Warning{{File: l.Dir, Err: fmt.Errorf("cannot read the skills folder: %w", err)}}
	}
	var warns []Warning
	l.seen = map[string]*seen{}
	for _, name := range names {
		st := &seen{fp: fingerprint(filepath.Join(l.Dir, name))}
		l.seen[name] = st
		sk, w := l.LoadOne(name)
		if w != nil {
			warns = append(warns, *w)
			continue
		}
		st.hash = sk.Hash
		out[name] = sk
	}
	return out, warns
}

func (l *Loader) rel(name, file string) string {
	return filepath.Join(filepath.Base(l.Dir), name, file)
}

var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// LoadOne loads the skill in folder name.
func (l *Loader) LoadOne(name string) (*Skill, *Warning) {
	warn := func(file string, err error) (*Skill, *Warning) {
		return nil, &Warning{Skill: name, File: l.rel(name, file), Err: err}
	}
	dir, err := filepath.Abs(filepath.Join(l.Dir, name))
	if err != nil {
		return warn("", err)
	}
	h := sha256.New()
	mb, err := readBounded(filepath.Join(dir, ManifestFile), messages.MaxManifestBytes)
	if err != nil {
		return warn(ManifestFile, err)
	}
	h.Write(mb)
	m, err := messages.DecodeManifest(mb)
	if err != nil {
		return warn(ManifestFile, err)
	}
	if m.Name != name {
		return warn(ManifestFile, fmt.Errorf("name %q must equal the folder name %q", m.Name, name))
	}
	sk := &Skill{Name: name, Dir: dir, Manifest: m, Scripts: map[string]*Script{}, Config: json.RawMessage("{}"), Env: map[string]string{}}
	if pb, err := readBounded(filepath.Join(dir, PromptFile), MaxPromptBytes); err == nil {
		sk.Prompt = string(pb)
		h.Write(pb)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return warn(PromptFile, err)
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return warn("", err)
	}
	for i := range m.Scripts {
		spec := m.Scripts[i]
		p := filepath.Join(dir, filepath.FromSlash(spec.Path))
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return warn(spec.Path, fmt.Errorf("script %q: %w", spec.Name, err))
		}
		if rel, err := filepath.Rel(realDir, real); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return warn(spec.Path, fmt.Errorf("script %q resolves outside the skill folder (%s)", spec.Name, real))
		}
		st, err := os.Stat(real)
		if err != nil {
			return warn(spec.Path, fmt.Errorf("script %q: %w", spec.Name, err))
		}
		if !st.Mode().IsRegular() {
			return warn(spec.Path, fmt.Errorf("script %q is not a regular file", spec.Name))
		}
		if st.Mode()&0o111 == 0 {
			return warn(spec.Path, fmt.Errorf("script %q is not executable (chmod +x %s)", spec.Name, spec.Path))
		}
		fmt.Fprintf(h, "%s|%d|%d|%v\n", spec.Path, st.Size(), st.ModTime().UnixNano(), st.Mode())
		sc := &Script{Spec: spec, Path: p, Timeout: time.Duration(spec.TimeoutMs) * time.Millisecond}
		if len(spec.InputSchema) > 0 {
			if sc.Input, err = messages.CompileSchema(name+"/"+spec.Name+"/inputSchema", spec.InputSchema); err != nil {
				return warn(ManifestFile, fmt.Errorf("scripts[%d].inputSchema: %w", i, err))
			}
		}
		sk.Scripts[spec.Name] = sc
	}
	if cb, err := readBounded(filepath.Join(dir, ConfigFile), MaxConfigBytes); err == nil {
		h.Write(cb)
		var missing []string
		out := varRef.ReplaceAllFunc(cb, func(m []byte) []byte {
			v, ok := l.getenv(string(m[2 : len(m)-1]))
			if !ok {
				missing = append(missing, string(m[2:len(m)-1]))
			}
			enc, _ := json.Marshal(v)
			return enc[1 : len(enc)-1] // JSON-escaped, inside the string it stands in
		})
		if len(missing) > 0 {
			return warn(ConfigFile, fmt.Errorf("environment variable(s) %s not set", strings.Join(missing, ", ")))
		}
		var cfg any
		if err := json.Unmarshal(out, &cfg); err != nil {
			return warn(ConfigFile, fmt.Errorf("not valid JSON: %w", err))
		}
		if _, ok := cfg.(map[string]any); !ok {
			return warn(ConfigFile, errors.New("must be a JSON object"))
		}
		sk.Config = out
	} else if !errors.Is(err, fs.ErrNotExist) {
		return warn(ConfigFile, err)
	}
	if sb, err := readBounded(filepath.Join(dir, ConfigSchemaFile), MaxConfigBytes); err == nil {
		h.Write(sb)
		schema, err := messages.CompileSchema(name+"/config-schema", sb)
		if err != nil {
			return warn(ConfigSchemaFile, err)
		}
		v, _ := jsonschema.UnmarshalJSON(bytes.NewReader(sk.Config))
		if probs := messages.ValidateSchema(schema, v); len(probs) > 0 {
			parts := make([]string, len(probs))
			for i, p := range probs {
				parts[i] = p.String()
			}
			return warn(ConfigFile, fmt.Errorf("does not match config-schema.json: %s", strings.Join(parts, "; ")))
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return warn(ConfigSchemaFile, err)
	}
	for _, k := range m.Env {
		if v, ok := l.getenv(k); ok {
			sk.Env[k] = v
		}
	}
	sk.Hash = hex.EncodeToString(h.Sum(nil))[:16]
	return sk, nil
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	b := make([]byte, st.Size())
	n, err := f.Read(b)
	if err != nil && st.Size() > 0 {
		return nil, err
	}
	return b[:n], nil
}
