package skills

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/narratoria/runtime/pkg/messages"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mkSkill(t *testing.T, dir, name, manifest string, files map[string]string) {
	t.Helper()
	sd := filepath.Join(dir, name)
	require.NoError(t, os.MkdirAll(filepath.Join(sd, "scripts"), 0o755))
	if manifest == "" {
		manifest = `{"name":"` + name + `","version":"1.0.0","description":"d","env":["SKILL_TOKEN"],"scripts":[{"name":"run","path":"scripts/run","timeout":2000,
"inputSchema":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}]}`
	}
	require.NoError(t, os.WriteFile(filepath.Join(sd, "skill.json"), []byte(manifest), 0o644))
	if _, ok := files["scripts/run"]; !ok {
		require.NoError(t, os.WriteFile(filepath.Join(sd, "scripts", "run"), []byte("#!/bin/sh\n"), 0o755))
	}
	for f, body := range files {
		mode := os.FileMode(0o644)
		if strings.HasPrefix(f, "scripts/") {
			mode = 0o755
		}
		require.NoError(t, os.WriteFile(filepath.Join(sd, f), []byte(body), mode))
	}
}

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestLoadValidSkill(t *testing.T) {
	dir := t.TempDir()
	mkSkill(t, dir, "good", "", map[string]string{"prompt.md": "# Good", "config.json": `{"key":"${API_KEY}","style":"vivid"}`,
		"config-schema.json": `{"type":"object","properties":{"style":{"enum":["vivid","terse"]}}}`})
	l := &Loader{Dir: dir, Getenv: env(map[string]string{"API_KEY": `se"cret`, "SKILL_TOKEN": "t0k", "OTHER": "x"})}
	sk, warns := l.Load()
	require.Empty(t, warns)
	g := sk["good"]
	require.Equal(t, "# Good", g.Prompt)
	require.JSONEq(t, `{"key":"se\"cret","style":"vivid"}`, string(g.Config), "${VAR} replaced, JSON-escaped")
	require.Equal(t, map[string]string{"SKILL_TOKEN": "t0k"}, g.Env, "only the variables the manifest names")
	require.Equal(t, 2*time.Second, g.Scripts["run"].Timeout)
	require.NotEmpty(t, g.Hash)

	require.NoError(t, g.ValidateInput("run", json.RawMessage(`{"n":1}`)))
	err := g.ValidateInput("run", json.RawMessage(`{"n":"one"}`))
	var ie *InputError
	require.True(t, errors.As(err, &ie))
	require.Contains(t, err.Error(), "input.n")
	require.ErrorContains(t, g.ValidateInput("run", json.RawMessage(`{}`)), "n")

	data, err := g.DataDir()
	require.NoError(t, err)
	st, err := os.Stat(data)
	require.NoError(t, err)
	require.True(t, st.IsDir())

	for _, p := range []string{"good/run", "good/scripts/run", "skills/good/scripts/run"} {
		sc, err := g.Resolve(p)
		require.NoError(t, err, p)
		require.Equal(t, "run", sc.Spec.Name)
	}
	for _, p := range []string{"good/../x", "/bin/sh", "other/run", "good/nope"} {
		_, err := g.Resolve(p)
		require.Error(t, err, p)
	}
}

func TestBrokenSkillsAreSkippedOneWarningEach(t *testing.T) {
	cases := []struct {
		name, manifest string
		files          map[string]string
		setup          func(t *testing.T, dir string)
		file, msg      string
	}{
		{name: "badjson", manifest: `{"name":`, file: "badjson/skill.json", msg: "not valid JSON"},
		{name: "schema", manifest: `{"name":"schema","version":"1","description":"d","scripts":[{"name":"run","path":"scripts/run","timeout":5}]}`,
			file: "schema/skill.json", msg: "scripts[0].timeout: must be >= 1000"},
		{name: "mismatch", manifest: `{"name":"other","version":"1.0.0","description":"d","scripts":[{"name":"run","path":"scripts/run"}]}`,
			file: "mismatch/skill.json", msg: `must equal the folder name "mismatch"`},
		{name: "missing", manifest: `{"name":"missing","version":"1.0.0","description":"d","scripts":[{"name":"gone","path":"scripts/gone"}]}`,
			file: "missing/scripts/gone", msg: "no such file"},
		{name: "noexec", setup: func(t *testing.T, dir string) {
			require.NoError(t, os.Chmod(filepath.Join(dir, "noexec", "scripts", "run"), 0o644))
		}, file: "noexec/scripts/run", msg: "is not executable"},
		{name: "escape", setup: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "escape", "scripts", "run")
			require.NoError(t, os.Remove(p))
			require.NoError(t, os.Symlink("/bin/sh", p))
		}, file: "escape/scripts/run", msg: "resolves outside the skill folder"},
		{name: "dotdot", manifest: `{"name":"dotdot","version":"1.0.0","description":"d","scripts":[{"name":"run","path":"scripts/../../x"}]}`,
			file: "dotdot/skill.json", msg: `".."`},
		{name: "badschema", manifest: `{"name":"badschema","version":"1.0.0","description":"d","scripts":[{"name":"run","path":"scripts/run","inputSchema":{"type":"nonsense"}}]}`,
			file: "badschema/skill.json", msg: "scripts[0].inputSchema"},
		{name: "unsetvar", files: map[string]string{"config.json": `{"k":"${NOT_SET_ANYWHERE}"}`}, file: "unsetvar/config.json", msg: "NOT_SET_ANYWHERE not set"},
		{name: "badconfig", files: map[string]string{"config.json": `{"style":"loud"}`, "config-schema.json": `{"type":"object","properties":{"style":{"enum":["vivid"]}}}`},
			file: "badconfig/config.json", msg: "does not match config-schema.json"},
	}
	dir := t.TempDir()
	mkSkill(t, dir, "sibling", "", nil)
	for _, c := range cases {
		mkSkill(t, dir, c.name, c.manifest, c.files)
		if c.setup != nil {
			c.setup(t, dir)
		}
	}
	l := &Loader{Dir: dir, Getenv: env(nil)}
	sk, warns := l.Load()
	require.Contains(t, sk, "sibling", "a good skill loads next to broken ones")
	require.Len(t, sk, 1)
	require.Len(t, warns, len(cases), "one warning per broken skill")
	byName := map[string]Warning{}
	for _, w := range warns {
		byName[w.Skill] = w
	}
	for _, c := range cases {
		w, ok := byName[c.name]
		require.True(t, ok, c.name)
		require.True(t, strings.HasSuffix(w.File, c.file), "%s: file %s", c.name, w.File)
		require.Contains(t, w.String(), c.msg, c.name)
	}
	only := &Loader{Dir: dir, Only: []string{"sibling"}}
	sk, warns = only.Load()
	require.Len(t, sk, 1)
	require.Empty(t, warns)
}

func TestWatch(t *testing.T) {
	dir := t.TempDir()
	mkSkill(t, dir, "first", "", nil)
	l := &Loader{Dir: dir}
	initial, _ := l.Load()
	require.Len(t, initial, 1)
	var mu sync.Mutex
	var changes []Change
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		l.Watch(ctx, 20*time.Millisecond, func(c Change) { mu.Lock(); changes = append(changes, c); mu.Unlock() })
		close(done)
	}()
	defer func() { cancel(); <-done }()
	wait := func(pred func(Change) bool) {
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range changes {
				if pred(c) {
					return true
				}
			}
			return false
		}, 10*time.Second, 20*time.Millisecond)
	}
	mkSkill(t, dir, "second", "", nil)
	wait(func(c Change) bool { return len(c.Added) == 1 && c.Added[0].Name == "second" })
	time.Sleep(30 * time.Millisecond) // a different mtime
	require.NoError(t, os.WriteFile(filepath.Join(dir, "second", "prompt.md"), []byte("new prompt"), 0o644))
	wait(func(c Change) bool { return len(c.Updated) == 1 && c.Updated[0].Prompt == "new prompt" })
	require.NoError(t, os.WriteFile(filepath.Join(dir, "second", "skill.json"), []byte("{broken"), 0o644))
	wait(func(c Change) bool { return len(c.Removed) == 1 && c.Removed[0] == "second" && len(c.Warnings) == 1 })
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "first")))
	wait(func(c Change) bool { return len(c.Removed) == 1 && c.Removed[0] == "first" })
}

func TestSampleSkillsLoad(t *testing.T) {
	sk, warns := (&Loader{Dir: "../../skills"}).Load()
	require.Empty(t, warns)
	for _, name := range []string{"storyteller", "dice-roller", "memory", "reputation", "player-choices", "scene-art"} {
		require.Contains(t, sk, name)
		require.NotEmpty(t, sk[name].Prompt, name)
		require.NotEmpty(t, sk[name].Manifest.Keywords, name)
	}
	_ = messages.PriorityDefault
}
