// Package testskills writes skills for tests whose scripts run in process:
// each skill's folder (manifest, prompt.md, a placeholder script) and the
// in-process runner that serves its Go function.
package testskills

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/narratoria/runtime/internal/runner"
)

// Skill is one skill with one script run in process.
type Skill struct {
	// Name is the skill; Script its script (default "run").
	Name, Script string
	// Keywords default to the skill's name; Capabilities to none.
	Keywords, Capabilities []string
	// Fn is the script's body.
	Fn runner.Func
}

// Write writes the skills' folders under dir and returns the runner that
// serves them.
func Write(t testing.TB, dir string, skills ...Skill) *runner.InProcessRunner {
	t.Helper()
	ip := runner.NewInProcess()
	for _, s := range skills {
		if s.Script == "" {
			s.Script = "run"
		}
		if s.Keywords == nil {
			s.Keywords = []string{s.Name}
		}
		sd := filepath.Join(dir, s.Name)
		if err := os.MkdirAll(filepath.Join(sd, "scripts"), 0o755); err != nil {
			t.Fatal(err)
		}
		man := map[string]any{"name": s.Name, "version": "1.0.0", "description": s.Name, "keywords": s.Keywords,
			"scripts": []any{map[string]any{"name": s.Script, "path": "scripts/" + s.Script}}}
		if s.Capabilities != nil {
			man["capabilities"] = s.Capabilities
		}
		b, _ := json.Marshal(man)
		for name, body := range map[string][]byte{"skill.json": b, "prompt.md": []byte(s.Name),
			filepath.Join("scripts", s.Script): []byte("#!/bin/sh\n")} {
			if err := os.WriteFile(filepath.Join(sd, name), body, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		ip.Register(s.Name, s.Script, s.Fn)
	}
	return ip
}

// WriteMap is Write for skills given as name → body, each with one script
// "run" and its name as keyword; the skill named narration (if any) has
// the capability "narration".
func WriteMap(t testing.TB, dir, narration string, fns map[string]runner.Func) *runner.InProcessRunner {
	t.Helper()
	skills := make([]Skill, 0, len(fns))
	for name, fn := range fns {
		s := Skill{Name: name, Fn: fn}
		if name == narration {
			s.Capabilities = []string{"narration"}
		}
		skills = append(skills, s)
	}
	return Write(t, dir, skills...)
}
