package skills

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/narratoria/runtime/pkg/messages"
)

// Loader loads the skills of one folder. Set its fields, then call Load
// and/or Watch; it must not be copied after first use.
type Loader struct {
	// Dir is the skills folder. Required.
	Dir string
	// Only restricts the loader to these skill folders; a name that has no
	// folder gets a warning. Default: every skill in Dir.
	Only []string
	// Getenv reads the environment for config.json's "${VAR}" and the
	// manifest's "env". Default os.LookupEnv.
	Getenv func(string) (string, bool)

	mu sync.Mutex
	// baseline is what the last Load saw; Watch starts from it.
	baseline map[string]folderState
}

// Warning is a problem found while loading a skill. When Skipped is true
// the skill was not loaded (a broken skill gets one such warning per
// problem: every script, file and manifest field at fault); otherwise it
// loaded and the warning is advice (a missing prompt.md, a variable named
// in "env" that is not set).
type Warning struct {
	// Skill is the skill's folder name ("" for a problem with the skills folder itself).
	Skill string
	// File is the file at fault, as the skills folder's base name joined with
	// the path inside it, e.g. "skills/dice-roller/skill.json".
	File string
	// Err says what is wrong.
	Err error
	// Skipped reports that the skill was not loaded because of this problem.
	Skipped bool
}

// String renders "file: problem", e.g.
// "skills/dice-roller/skill.json: scripts[0].timeout: must be >= 1000 (got 5)".
func (w Warning) String() string {
	if w.Err == nil {
		return w.File
	}
	return w.File + ": " + w.Err.Error()
}

// folderState is what the loader last saw of one skill folder.
type folderState struct {
	fp   string // fingerprint taken before loading; "" forces a reload
	hash string // Skill.Hash; "" when the skill did not load
	warn string // the skipping warning, to report a broken skill once
}

func (l *Loader) getenv(k string) (string, bool) {
	if l.Getenv != nil {
		return l.Getenv(k)
	}
	return os.LookupEnv(k)
}

// Load loads every skill in Dir (or those in Only). It returns the skills
// that loaded, by name, and the warnings: one per skipped skill (Skipped),
// plus advice about skills that loaded. Load never fails as a whole; an
// unreadable Dir is a warning too.
func (l *Loader) Load() (map[string]*Skill, []Warning) {
	out := map[string]*Skill{}
	names, err := l.candidates()
	if err != nil {
		return out, []Warning{{File: l.Dir, Err: fmt.Errorf("cannot read the skills folder: %w", err), Skipped: true}}
	}
	var warns []Warning
	for _, o := range l.Only {
		if !slices.Contains(names, o) {
			warns = append(warns, Warning{Skill: o, File: l.rel(o, ""), Err: errors.New("no such skill folder (it is listed in the skills to serve)"), Skipped: true})
		}
	}
	baseline := map[string]folderState{}
	for _, name := range names {
		st := folderState{fp: fingerprint(filepath.Join(l.Dir, name), time.Now())}
		sk, ws := l.load(name)
		warns = append(warns, ws...)
		if sk == nil {
			st.warn = skippedKey(ws)
		} else {
			st.hash = sk.Hash
			out[name] = sk
		}
		baseline[name] = st
	}
	l.mu.Lock()
	l.baseline = baseline
	l.mu.Unlock()
	return out, warns
}

// candidates lists the skill folders: the directories (or symlinks to
// directories) directly under Dir whose names do not start with ".",
// restricted to Only, sorted.
func (l *Loader) candidates() ([]string, error) {
	entries, err := os.ReadDir(l.Dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || (len(l.Only) > 0 && !slices.Contains(l.Only, name)) {
			continue
		}
		isDir := e.IsDir()
		if e.Type()&fs.ModeSymlink != 0 {
			st, err := os.Stat(filepath.Join(l.Dir, name))
			isDir = err == nil && st.IsDir()
		}
		if isDir {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// skippedKey describes a broken skill's problems as one string, so a
// watcher reports them again only when they change.
func skippedKey(ws []Warning) string {
	var b strings.Builder
	for _, w := range ws {
		if w.Skipped {
			b.WriteString(w.String())
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// rel names a file of a skill for warnings: "skills/<name>/<file>".
func (l *Loader) rel(name, file string) string {
	return filepath.Join(filepath.Base(l.Dir), name, filepath.FromSlash(file))
}

// load loads the skill in folder name. A broken skill gives (nil, one
// Skipped warning per problem found: every script, file and manifest field
// at fault, not only the first); a loaded one gives the skill and any
// advice.
func (l *Loader) load(name string) (*Skill, []Warning) {
	var broken []Warning
	fail := func(file string, err error) {
		broken = append(broken, Warning{Skill: name, File: l.rel(name, file), Err: err, Skipped: true})
	}
	dir, err := filepath.Abs(filepath.Join(l.Dir, name))
	if err == nil {
		var realDir string
		if realDir, err = filepath.EvalSymlinks(dir); err == nil {
			return l.loadFrom(name, skillFiles{dir: dir, realDir: realDir, h: sha256.New()}, fail, &broken)
		}
	}
	fail("", err)
	return nil, broken
}

// loadFrom is load once the folder is found: fail records a problem (in
// *broken) and loading goes on to find the others.
func (l *Loader) loadFrom(name string, f skillFiles, fail func(string, error), broken *[]Warning) (*Skill, []Warning) {
	m := l.manifest(name, &f, fail)
	if m == nil {
		return nil, *broken
	}
	sk := &Skill{Name: name, Dir: f.dir, Manifest: m, Scripts: make(map[string]*Script, len(m.Scripts)),
		Config: json.RawMessage("{}"), Env: map[string]string{}}
	var advice []Warning
	pb, err := f.read(PromptFile, MaxPromptBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		advice = append(advice, Warning{Skill: name, File: l.rel(name, PromptFile),
			Err: errors.New("missing: the skill loads with an empty prompt, and LLM planners know it only by its manifest")})
	case err != nil:
		fail(PromptFile, err)
	default:
		sk.Prompt = string(pb)
	}
	for i := range m.Scripts {
		spec := m.Scripts[i]
		sc, err := f.script(spec)
		if err != nil {
			fail(spec.Path, err)
			continue
		}
		if len(spec.InputSchema) > 0 {
			if sc.Input, err = messages.CompileSchema(name+"/"+spec.Name+"/inputSchema", spec.InputSchema); err != nil {
				fail(ManifestFile, fmt.Errorf("scripts[%d].inputSchema: %w", i, err))
				continue
			}
		}
		sk.Scripts[spec.Name] = sc
	}
	l.config(sk, &f, fail)
	for _, k := range m.Env {
		if v, ok := l.getenv(k); ok {
			sk.Env[k] = v
		} else {
			advice = append(advice, Warning{Skill: name, File: l.rel(name, ManifestFile),
				Err: fmt.Errorf("env: %s is not set, so the scripts run without it", k)})
		}
	}
	if len(*broken) > 0 {
		return nil, *broken
	}
	sk.Hash = hex.EncodeToString(f.h.Sum(nil))[:16]
	return sk, advice
}

// manifest reads and decodes the skill's manifest; nil when it cannot be
// (each problem recorded with fail: one per field at fault).
func (l *Loader) manifest(name string, f *skillFiles, fail func(string, error)) *messages.Manifest {
	mb, err := f.read(ManifestFile, messages.MaxManifestBytes)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = errors.New("missing: every skill folder needs a manifest")
		}
		fail(ManifestFile, err)
		return nil
	}
	m, err := messages.DecodeManifest(mb)
	var me *messages.ManifestError
	switch {
	case errors.As(err, &me) && len(me.Problems) > 1:
		for _, p := range me.Problems {
			fail(ManifestFile, errors.New(p.String()))
		}
		return nil
	case err != nil:
		fail(ManifestFile, err)
		return nil
	case m.Name != name:
		fail(ManifestFile, fmt.Errorf("name %q must equal the folder name %q", m.Name, name))
		return nil
	}
	return m
}

// config reads the skill's config.json (its ${VAR}s substituted) and
// checks it against its config.schema.json, recording each problem.
func (l *Loader) config(sk *Skill, f *skillFiles, fail func(string, error)) {
	cb, err := f.read(ConfigFile, MaxConfigBytes)
	var cfg any = map[string]any{}
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		fail(ConfigFile, err)
		return
	default:
		if cfg, err = l.substitute(cb); err != nil {
			fail(ConfigFile, err)
			return
		}
		if sk.Config, err = messages.MarshalCompact(cfg); err != nil {
			fail(ConfigFile, err)
			return
		}
	}
	sb, err := f.read(ConfigSchemaFile, MaxConfigBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		fail(ConfigSchemaFile, err)
	default:
		schema, err := messages.CompileSchema(sk.Name+"/"+ConfigSchemaFile, sb)
		if err != nil {
			fail(ConfigSchemaFile, err)
			return
		}
		for _, p := range messages.ValidateSchema(schema, cfg) {
			fail(ConfigFile, fmt.Errorf("does not match %s: %s", ConfigSchemaFile, p.String()))
		}
	}
}

// skillFiles reads the files of one skill folder, refusing any that resolve
// outside it, and feeds each into the content hash.
type skillFiles struct {
	dir     string // the folder as named under the skills folder, absolute
	realDir string // the folder with symlinks resolved
	h       hash.Hash
}

// open resolves rel (slash-separated, inside the skill folder), checks it
// stays inside and is a regular file, and opens it.
func (f *skillFiles) open(rel string) (*os.File, os.FileInfo, string, error) {
	p := filepath.Join(f.dir, filepath.FromSlash(rel))
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, nil, "", err
	}
	if r, err := filepath.Rel(f.realDir, real); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return nil, nil, "", fmt.Errorf("%w (it points to %s)", ErrOutsideSkill, real)
	}
	st, err := os.Stat(real)
	if err != nil {
		return nil, nil, "", err
	}
	if !st.Mode().IsRegular() {
		what := "a special file"
		if st.IsDir() {
			what = "a directory"
		}
		return nil, nil, "", fmt.Errorf("not a regular file but %s", what)
	}
	fh, err := os.Open(real)
	if err != nil {
		return nil, nil, "", err
	}
	return fh, st, real, nil
}

// read returns a file's content, at most limit bytes; fs.ErrNotExist when
// the file is missing.
func (f *skillFiles) read(rel string, limit int64) ([]byte, error) {
	fh, st, _, err := f.open(rel)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	if st.Size() > limit {
		return nil, fmt.Errorf("%d bytes; the limit is %d", st.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(fh, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("more than %d bytes", limit)
	}
	f.section(rel, int64(len(b)))
	f.h.Write(b)
	return b, nil
}

// script checks one manifest script: an executable regular file inside the
// skill folder. Its content goes into the hash.
func (f *skillFiles) script(spec messages.ScriptSpec) (*Script, error) {
	fh, st, real, err := f.open(spec.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("script %q: %w", spec.Name, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("script %q: %w", spec.Name, err)
	}
	defer fh.Close()
	if st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("script %q is not executable (chmod +x %s)", spec.Name, spec.Path)
	}
	f.section(spec.Path, st.Size())
	fmt.Fprintf(f.h, "%o", st.Mode().Perm())
	var head bytes.Buffer
	if _, err := io.Copy(io.MultiWriter(f.h, &limitedWriter{w: &head, n: 256}), fh); err != nil {
		return nil, fmt.Errorf("script %q: %w", spec.Name, err)
	}
	if err := checkInterpreter(head.Bytes()); err != nil {
		return nil, fmt.Errorf("script %q cannot run: %w", spec.Name, err)
	}
	return &Script{Spec: spec, Path: real, Timeout: time.Duration(spec.TimeoutMs) * time.Millisecond}, nil
}

// section starts a file in the hash, so that no two different sets of
// files hash alike.
func (f *skillFiles) section(name string, size int64) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(name)))
	f.h.Write(n[:])
	f.h.Write([]byte(name))
	binary.BigEndian.PutUint64(n[:], uint64(size))
	f.h.Write(n[:])
}

var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// substitute decodes config.json, which must be a JSON object, and replaces
// every "${VAR}" inside its string values (not its keys) with the variable's
// value. A variable that is not set is an error naming it (ErrMissingVariable).
func (l *Loader) substitute(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("not valid JSON: unexpected data after the JSON value")
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, errors.New("must be a JSON object")
	}
	missing := map[string]bool{}
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case string:
			return varRef.ReplaceAllStringFunc(v, func(ref string) string {
				name := ref[2 : len(ref)-1]
				val, ok := l.getenv(name)
				if !ok {
					missing[name] = true
				}
				return val
			})
		case map[string]any:
			for k, e := range v {
				v[k] = walk(e)
			}
		case []any:
			for i, e := range v {
				v[i] = walk(e)
			}
		}
		return v
	}
	v = walk(v)
	if len(missing) > 0 {
		names := make([]string, 0, len(missing))
		for n := range missing {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("%w: %s (named as ${...})", ErrMissingVariable, strings.Join(names, ", "))
	}
	return v, nil
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

// Write implements io.Writer: it keeps what fits and accepts everything.
func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// checkInterpreter refuses a script whose "#!" line names an interpreter
// that is not there (or not executable), so the skill is reported at load
// time instead of failing every plan that uses it. "#!/usr/bin/env name"
// looks name up on PATH.
func checkInterpreter(head []byte) error {
	if !bytes.HasPrefix(head, []byte("#!")) {
		return nil
	}
	line, _, _ := bytes.Cut(head[2:], []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) == 0 {
		return errors.New("empty #! line")
	}
	interp := fields[0]
	if filepath.Base(interp) == "env" && len(fields) > 1 {
		name := fields[1]
		if name == "-S" && len(fields) > 2 {
			name = fields[2]
		}
		if _, err := exec.LookPath(name); err != nil {
			return fmt.Errorf("its interpreter %q is not on PATH", name)
		}
		return nil
	}
	st, err := os.Stat(interp)
	if err != nil {
		return fmt.Errorf("its interpreter %s does not exist", interp)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("its interpreter %s is not executable", interp)
	}
	return nil
}
