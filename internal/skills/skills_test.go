package skills

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/narratoria/runtime/pkg/messages"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// goodManifest is a valid manifest for a skill called name.
func goodManifest(name string) string {
	return `{"name":"` + name + `","version":"1.0.0","description":"d","env":["SKILL_TOKEN"],"scripts":[
		{"name":"run","path":"scripts/run","timeout":2000,
		 "inputSchema":{"type":"object","properties":{"n":{"type":"integer"},"opts":{"type":"object","properties":{"sides":{"type":"integer"}}}},"required":["n"]}},
		{"name":"free","path":"./scripts/sub/free.sh"}]}`
}

// mkSkill writes a skill folder: the manifest (goodManifest when ""), a
// prompt, both scripts of goodManifest (executable), then files, which
// override the defaults ("" as a body deletes the file).
func mkSkill(t *testing.T, dir, name, manifest string, files map[string]string) string {
	t.Helper()
	sd := filepath.Join(dir, name)
	if manifest == "" {
		manifest = goodManifest(name)
	}
	all := map[string]string{"skill.json": manifest, "prompt.md": "# " + name,
		"scripts/run": "#!/bin/sh\necho run\n", "scripts/sub/free.sh": "#!/bin/sh\necho free\n"}
	for f, body := range files {
		all[f] = body
	}
	for f, body := range all { // deletions first, so that "x": "" and "x/y": "..." make x a folder
		if body == "" {
			require.NoError(t, os.RemoveAll(filepath.Join(sd, filepath.FromSlash(f))))
		}
	}
	for f, body := range all {
		p := filepath.Join(sd, filepath.FromSlash(f))
		if body == "" {
			continue
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		mode := os.FileMode(0o644)
		if strings.HasPrefix(f, "scripts/") {
			mode = 0o755
		}
		require.NoError(t, os.WriteFile(p, []byte(body), mode))
	}
	return sd
}

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestLoadValidSkill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sd := mkSkill(t, dir, "good", "", map[string]string{
		"config.json":        `{"key":"${API_KEY}","url":"https://${HOST}/v1","list":["${HOST}"],"n":3,"${HOST}":"keys are kept","style":"vivid"}`,
		"config-schema.json": `{"type":"object","properties":{"style":{"enum":["vivid","terse"]}}}`,
	})
	l := &Loader{Dir: dir, Getenv: env(map[string]string{"API_KEY": `se"cret`, "HOST": "example.com", "SKILL_TOKEN": "t0k", "OTHER": "x"})}
	sk, warns := l.Load()
	require.Empty(t, warns)
	require.Len(t, sk, 1)
	g := sk["good"]
	require.Equal(t, "good", g.Name)
	require.Equal(t, sd, g.Dir)
	require.True(t, filepath.IsAbs(g.Dir))
	require.Equal(t, "# good", g.Prompt)
	require.Equal(t, "1.0.0", g.Manifest.Version)
	require.Equal(t, messages.PriorityDefault, g.Manifest.Priority)
	require.JSONEq(t, `{"key":"se\"cret","url":"https://example.com/v1","list":["example.com"],"n":3,"${HOST}":"keys are kept","style":"vivid"}`,
		string(g.Config), "${VAR} replaced inside strings, JSON-escaped")
	require.Equal(t, map[string]string{"SKILL_TOKEN": "t0k"}, g.Env, "only the variables the manifest names")
	require.Len(t, g.Scripts, 2)
	run := g.Scripts["run"]
	require.Equal(t, 2*time.Second, run.Timeout)
	real, err := filepath.EvalSymlinks(filepath.Join(sd, "scripts", "run"))
	require.NoError(t, err)
	require.Equal(t, real, run.Path)
	require.NotNil(t, run.Input)
	free := g.Scripts["free"]
	require.Equal(t, messages.ToolTimeoutDefault, free.Timeout)
	require.Nil(t, free.Input)
	require.Len(t, g.Hash, 16)

	again, _ := l.Load()
	require.Equal(t, g.Hash, again["good"].Hash, "the hash is stable")
	require.NoError(t, os.WriteFile(filepath.Join(sd, "scripts", "run"), []byte("#!/bin/sh\necho changed\n"), 0o755))
	changed, _ := l.Load()
	require.NotEqual(t, g.Hash, changed["good"].Hash, "a script's content is in the hash")
}

func TestLoadWithoutConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mkSkill(t, dir, "plain", "", nil)
	sk, warns := (&Loader{Dir: dir, Getenv: env(nil)}).Load()
	require.Len(t, sk, 1)
	require.JSONEq(t, `{}`, string(sk["plain"].Config))
	require.Empty(t, sk["plain"].Env)
	// SKILL_TOKEN is named in "env" but not set: advice, and the skill loads
	require.Len(t, warns, 1)
	require.False(t, warns[0].Skipped)
	require.Equal(t, filepath.Join(filepath.Base(dir), "plain", "skill.json")+": env: SKILL_TOKEN is not set, so the scripts run without it", warns[0].String())
}

func TestMissingPromptIsAdvice(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mkSkill(t, dir, "quiet", "", map[string]string{"prompt.md": ""})
	sk, warns := (&Loader{Dir: dir, Getenv: env(map[string]string{"SKILL_TOKEN": "x"})}).Load()
	require.Contains(t, sk, "quiet", "a skill without prompt.md loads")
	require.Empty(t, sk["quiet"].Prompt)
	require.Len(t, warns, 1)
	require.False(t, warns[0].Skipped)
	require.Equal(t, "quiet", warns[0].Skill)
	require.True(t, strings.HasSuffix(warns[0].File, filepath.Join("quiet", "prompt.md")))
	require.Contains(t, warns[0].String(), "missing")
}

func TestBrokenSkillsAreSkippedOneWarningEach(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("#!/bin/sh\n"), 0o755))
	manifest := func(name, scripts string) string {
		return `{"name":"` + name + `","version":"1.0.0","description":"d","scripts":` + scripts + `}`
	}
	cases := []struct {
		name     string
		manifest string
		files    map[string]string
		setup    func(t *testing.T, sd string)
		file     string // the file the warning names, inside the skill folder
		msg      string
	}{
		{name: "badjson", manifest: `{"name":`, file: "skill.json", msg: "not valid JSON"},
		{name: "schema", manifest: manifest("schema", `[{"name":"run","path":"scripts/run","timeout":5}]`),
			file: "skill.json", msg: "scripts[0].timeout: must be >= 1000 (got 5)"},
		{name: "mismatch", manifest: manifest("other", `[{"name":"run","path":"scripts/run"}]`),
			file: "skill.json", msg: `name "other" must equal the folder name "mismatch"`},
		{name: "nomanifest", files: map[string]string{"skill.json": ""}, file: "skill.json", msg: "missing"},
		{name: "manifestdir", files: map[string]string{"skill.json": "", "skill.json/x": "{}"}, file: "skill.json", msg: "not a regular file but a directory"},
		{name: "missing", manifest: manifest("missing", `[{"name":"gone","path":"scripts/gone"}]`),
			file: "scripts/gone", msg: `script "gone": file does not exist`},
		{name: "noexec", setup: func(t *testing.T, sd string) {
			require.NoError(t, os.Chmod(filepath.Join(sd, "scripts", "run"), 0o644))
		}, file: "scripts/run", msg: `script "run" is not executable (chmod +x scripts/run)`},
		{name: "scriptdir", files: map[string]string{"scripts/run": "", "scripts/run/x": "y"}, file: "scripts/run", msg: "not a regular file but a directory"},
		{name: "symlinkescape", setup: func(t *testing.T, sd string) {
			p := filepath.Join(sd, "scripts", "run")
			require.NoError(t, os.Remove(p))
			require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), p))
		}, file: "scripts/run", msg: "resolves outside the skill folder"},
		{name: "scriptsdirescape", setup: func(t *testing.T, sd string) {
			require.NoError(t, os.RemoveAll(filepath.Join(sd, "scripts")))
			require.NoError(t, os.Symlink(outside, filepath.Join(sd, "scripts")))
		}, manifest: manifest("scriptsdirescape", `[{"name":"run","path":"scripts/secret"}]`), file: "scripts/secret", msg: "resolves outside the skill folder"},
		{name: "dotdot", manifest: manifest("dotdot", `[{"name":"run","path":"scripts/../../x"}]`),
			file: "skill.json", msg: `scripts[0].path: "scripts/../../x" must not contain ".."`},
		{name: "absolute", manifest: manifest("absolute", `[{"name":"run","path":"/bin/sh"}]`),
			file: "skill.json", msg: `scripts[0].path: "/bin/sh" must be relative`},
		{name: "badschema", manifest: manifest("badschema", `[{"name":"run","path":"scripts/run","inputSchema":{"type":"nonsense"}}]`),
			file: "skill.json", msg: "scripts[0].inputSchema: "},
		{name: "unsetvar", files: map[string]string{"config.json": `{"k":"${NOT_SET_ANYWHERE}","j":"${ALSO_UNSET}-${NOT_SET_ANYWHERE}"}`},
			file: "config.json", msg: "environment variable not set: ALSO_UNSET, NOT_SET_ANYWHERE"},
		{name: "badconfig", files: map[string]string{"config.json": `{"style":"loud"}`, "config-schema.json": `{"type":"object","properties":{"style":{"enum":["vivid"]}}}`},
			file: "config.json", msg: "does not match config-schema.json: style: "},
		{name: "configvarschema", files: map[string]string{"config.json": `{"port":"${SKILL_TOKEN}"}`, "config-schema.json": `{"properties":{"port":{"pattern":"^[0-9]+$"}}}`},
			file: "config.json", msg: "does not match config-schema.json: port: "},
		{name: "confignotjson", files: map[string]string{"config.json": `{"a":}`}, file: "config.json", msg: "not valid JSON"},
		{name: "confignotobject", files: map[string]string{"config.json": `[1]`}, file: "config.json", msg: "must be a JSON object"},
		{name: "configtrailing", files: map[string]string{"config.json": `{} {}`}, file: "config.json", msg: "unexpected data"},
		{name: "badconfigschema", files: map[string]string{"config-schema.json": `{"type":7}`}, file: "config-schema.json", msg: "config-schema.json"},
		{name: "promptescape", setup: func(t *testing.T, sd string) {
			require.NoError(t, os.Remove(filepath.Join(sd, "prompt.md")))
			require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(sd, "prompt.md")))
		}, file: "prompt.md", msg: "resolves outside the skill folder"},
		{name: "hugeprompt", files: map[string]string{"prompt.md": strings.Repeat("x", MaxPromptBytes+1)}, file: "prompt.md", msg: "the limit is"},
	}
	dir := t.TempDir()
	mkSkill(t, dir, "sibling", "", nil)
	for _, c := range cases {
		sd := mkSkill(t, dir, c.name, c.manifest, c.files)
		if c.setup != nil {
			c.setup(t, sd)
		}
	}
	l := &Loader{Dir: dir, Getenv: env(map[string]string{"SKILL_TOKEN": "not-a-number"})}
	sk, warns := l.Load()
	require.Contains(t, sk, "sibling", "a good skill loads next to broken ones")
	require.Len(t, sk, 1)
	byName := map[string][]Warning{}
	for _, w := range warns {
		byName[w.Skill] = append(byName[w.Skill], w)
	}
	require.Len(t, warns, len(cases), "one warning per broken skill: %v", warns)
	for _, c := range cases {
		ws := byName[c.name]
		require.Len(t, ws, 1, c.name)
		w := ws[0]
		require.True(t, w.Skipped, c.name)
		require.Equal(t, filepath.Join(filepath.Base(dir), c.name, filepath.FromSlash(c.file)), w.File, c.name)
		require.True(t, strings.HasPrefix(w.String(), w.File+": "), c.name)
		require.Contains(t, w.String(), c.msg, c.name)
	}
	require.Equal(t, filepath.Join(filepath.Base(dir), "schema", "skill.json")+": scripts[0].timeout: must be >= 1000 (got 5)", byName["schema"][0].String())
	require.ErrorIs(t, byName["unsetvar"][0].Err, ErrMissingVariable)
	require.ErrorIs(t, byName["symlinkescape"][0].Err, ErrOutsideSkill)
	require.ErrorIs(t, byName["schema"][0].Err, messages.ErrInvalidManifest)
}

func TestLoadFolders(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mkSkill(t, dir, "a", "", nil)
	mkSkill(t, dir, "b", "", nil)
	mkSkill(t, dir, ".hidden", "", nil)                                                             // hidden: ignored
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("not a skill"), 0o644)) // a file: ignored
	elsewhere := t.TempDir()
	mkSkill(t, elsewhere, "linked", "", map[string]string{"scripts/run": "", "lib/run": "#!/bin/sh\n"})
	require.NoError(t, os.Chmod(filepath.Join(elsewhere, "linked", "lib", "run"), 0o755))
	require.NoError(t, os.Symlink("../lib/run", filepath.Join(elsewhere, "linked", "scripts", "run"))) // inside the skill: fine
	require.NoError(t, os.Symlink(filepath.Join(elsewhere, "linked"), filepath.Join(dir, "linked")))   // a symlinked skill folder is followed

	e := env(map[string]string{"SKILL_TOKEN": "x"})
	sk, warns := (&Loader{Dir: dir, Getenv: e}).Load()
	require.Empty(t, warns)
	require.Len(t, sk, 3)
	require.Contains(t, sk, "linked")
	real, err := filepath.EvalSymlinks(filepath.Join(elsewhere, "linked", "lib", "run"))
	require.NoError(t, err)
	require.Equal(t, real, sk["linked"].Scripts["run"].Path, "Path is the resolved executable")

	sk, warns = (&Loader{Dir: dir, Getenv: e, Only: []string{"b", "nope"}}).Load()
	require.Len(t, sk, 1)
	require.Contains(t, sk, "b")
	require.Len(t, warns, 1, "a skill to serve that has no folder")
	require.Equal(t, "nope", warns[0].Skill)
	require.True(t, warns[0].Skipped)

	sk, warns = (&Loader{Dir: filepath.Join(dir, "missing")}).Load()
	require.Empty(t, sk)
	require.Len(t, warns, 1)
	require.Contains(t, warns[0].String(), "cannot read the skills folder")
}

func loadOne(t *testing.T) *Skill {
	t.Helper()
	dir := t.TempDir()
	mkSkill(t, dir, "good", "", nil)
	sk, _ := (&Loader{Dir: dir, Getenv: env(nil)}).Load()
	require.Contains(t, sk, "good")
	return sk["good"]
}

func TestValidateInput(t *testing.T) {
	t.Parallel()
	g := loadOne(t)
	cases := []struct {
		script, input string
		wantErr       string // "" for none
	}{
		{"run", `{"n":1}`, ""},
		{"run", `{"n":1,"extra":true,"opts":{"sides":6}}`, ""},
		{"run", `{"n":"one"}`, "input.n: must be integer (got string)"},
		{"run", `{"n":1,"opts":{"sides":1.5}}`, "input.opts.sides: must be integer"},
		{"run", `{}`, "input: missing required field(s) n"},
		{"run", ``, "input: missing required field(s) n"},
		{"run", `[1]`, "input: must be object (got array)"},
		{"run", `{"n":`, "input: not valid JSON"},
		{"free", `{"anything":[1,2]}`, ""},
		{"free", ``, ""},
	}
	for _, c := range cases {
		err := g.ValidateInput(c.script, json.RawMessage(c.input))
		if c.wantErr == "" {
			require.NoError(t, err, c.input)
			continue
		}
		require.ErrorIs(t, err, ErrInvalidInput, c.input)
		var ie *InputError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "good/"+c.script, ie.Script)
		require.Contains(t, err.Error(), c.wantErr, c.input)
	}
	require.ErrorIs(t, g.ValidateInput("nope", json.RawMessage(`{}`)), ErrUnknownScript)
}

func TestDataDir(t *testing.T) {
	t.Parallel()
	g := loadOne(t)
	want := filepath.Join(g.Dir, "data")
	_, err := os.Stat(want)
	require.ErrorIs(t, err, os.ErrNotExist, "not created by loading")
	d, err := g.DataDir()
	require.NoError(t, err)
	require.Equal(t, want, d)
	st, err := os.Stat(d)
	require.NoError(t, err)
	require.True(t, st.IsDir())
	require.NoError(t, os.WriteFile(filepath.Join(d, "kept"), []byte("x"), 0o644))
	d2, err := g.DataDir()
	require.NoError(t, err)
	require.Equal(t, d, d2)
	require.FileExists(t, filepath.Join(d, "kept"), "a second call keeps the contents")
}

func TestResolve(t *testing.T) {
	t.Parallel()
	g := loadOne(t)
	for p, want := range map[string]string{
		"good/run": "run", "good/scripts/run": "run", "skills/good/scripts/run": "run",
		"good/free": "free", "good/scripts/sub/free.sh": "free", "skills/good/scripts/sub/free.sh": "free",
	} {
		sc, err := g.Resolve(p)
		require.NoError(t, err, p)
		require.Equal(t, want, sc.Spec.Name, p)
		require.Same(t, g.Scripts[want], sc)
	}
	for p, sentinel := range map[string]error{
		"../x":                        messages.ErrInvalidToolPath,
		"good/../x":                   messages.ErrInvalidToolPath,
		"good/scripts/../run":         messages.ErrInvalidToolPath,
		"/bin/sh":                     messages.ErrInvalidToolPath,
		filepath.Join(g.Dir, "run"):   messages.ErrInvalidToolPath,
		"good":                        messages.ErrInvalidToolPath,
		"":                            messages.ErrInvalidToolPath,
		"other/run":                   ErrUnknownScript,
		"skills/other/scripts/run":    ErrUnknownScript,
		"good/nope":                   ErrUnknownScript,
		"good/scripts/nope":           ErrUnknownScript,
		"good/scripts/free.sh":        ErrUnknownScript, // the file is scripts/sub/free.sh
		"good/scripts/scripts/run":    ErrUnknownScript,
		"good/prompt.md":              ErrUnknownScript,
		"skills/good/scripts/../../x": messages.ErrInvalidToolPath,
	} {
		_, err := g.Resolve(p)
		require.ErrorIs(t, err, sentinel, p)
	}
}

// TestSampleSkillsLoad loads the project's own skills/ folder.
func TestSampleSkillsLoad(t *testing.T) {
	t.Parallel()
	sk, warns := (&Loader{Dir: "../../skills"}).Load()
	require.Empty(t, warns)
	for _, name := range []string{"storyteller", "dice-roller", "memory", "reputation", "player-choices", "scene-art"} {
		require.Contains(t, sk, name)
		require.NotEmpty(t, sk[name].Prompt, name)
		require.NotEmpty(t, sk[name].Manifest.Keywords, name)
	}
}

func TestWarningString(t *testing.T) {
	t.Parallel()
	w := Warning{Skill: "dice-roller", File: "skills/dice-roller/skill.json", Err: errors.New("scripts[0].timeout: must be >= 1000 (got 5)")}
	require.Equal(t, "skills/dice-roller/skill.json: scripts[0].timeout: must be >= 1000 (got 5)", w.String())
	require.Equal(t, "skills/x", Warning{File: "skills/x"}.String())
}

// TestBadInterpreterReportedAtLoad: a script whose #! names a missing
// interpreter skips its skill at load time with a warning naming it.
func TestBadInterpreterReportedAtLoad(t *testing.T) {
	dir := t.TempDir()
	for name, shebang := range map[string]string{"ghost": "#!/no/such/interpreter\n", "envghost": "#!/usr/bin/env no-such-interpreter-here\n", "fine": "#!/bin/sh\n"} {
		sd := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Join(sd, "scripts"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(sd, "scripts", "run"), []byte(shebang+"echo hi\n"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(sd, "skill.json"), []byte(`{"name":"`+name+`","version":"1.0.0","description":"d","scripts":[{"name":"run","path":"scripts/run"}]}`), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(sd, "prompt.md"), []byte("p"), 0o644))
	}
	loaded, warnings := (&Loader{Dir: dir}).Load()
	require.Contains(t, loaded, "fine")
	require.NotContains(t, loaded, "ghost")
	require.NotContains(t, loaded, "envghost")
	all := fmt.Sprint(warnings)
	require.Contains(t, all, "/no/such/interpreter does not exist")
	require.Contains(t, all, `"no-such-interpreter-here" is not on PATH`)
}
