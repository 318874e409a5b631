package skills

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Change is what changed in the skills folder since the last look.
type Change struct {
	// Added are newly loadable skills.
	Added []*Skill
	// Updated are skills whose content changed.
	Updated []*Skill
	// Removed are skills gone or newly broken.
	Removed []string
	// Warnings are newly broken skills (each reported once).
	Warnings []Warning
}

// Empty reports whether nothing changed.
func (c Change) Empty() bool {
	return len(c.Added) == 0 && len(c.Updated) == 0 && len(c.Removed) == 0 && len(c.Warnings) == 0
}

// fingerprint is a cheap stat-based summary of a skill folder's files.
func fingerprint(dir string) string {
	var b strings.Builder
	for _, f := range []string{ManifestFile, PromptFile, ConfigFile, ConfigSchemaFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err == nil {
			fmt.Fprintf(&b, "%s|%d|%d;", f, st.Size(), st.ModTime().UnixNano())
		}
	}
	_ = filepath.WalkDir(filepath.Join(dir, "scripts"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil {
			fmt.Fprintf(&b, "%s|%d|%d|%v;", p, info.Size(), info.ModTime().UnixNano(), info.Mode())
		}
		return nil
	})
	return b.String()
}

// Watch polls the folder every interval (1 s when 0) until ctx ends and
// calls onChange with each change. A poll costs a few stats per skill;
// only a skill whose files changed is reloaded. Changes are relative to the
// last Load (or, without one, to the folder when Watch starts), so nothing
// that changed in between is missed.
func (l *Loader) Watch(ctx context.Context, interval time.Duration, onChange func(Change)) {
	if interval <= 0 {
		interval = time.Second
	}
	state := l.seen
	if state == nil {
		_, _ = l.Load()
		state = l.seen
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		names, err := l.candidates()
		if err != nil {
			continue
		}
		var ch Change
		present := map[string]bool{}
		for _, n := range names {
			present[n] = true
			fp := fingerprint(filepath.Join(l.Dir, n))
			s, known := state[n]
			if known && s.fp == fp {
				continue
			}
			sk, w := l.LoadOne(n)
			if !known {
				s = &seen{}
				state[n] = s
			}
			s.fp = fp
			switch {
			case w != nil:
				if s.hash != "" {
					ch.Removed = append(ch.Removed, n)
				}
				s.hash = ""
				ch.Warnings = append(ch.Warnings, *w)
			case s.hash == "":
				s.hash = sk.Hash
				ch.Added = append(ch.Added, sk)
			case s.hash != sk.Hash:
				s.hash = sk.Hash
				ch.Updated = append(ch.Updated, sk)
			}
		}
		for n, s := range state {
			if !present[n] {
				if s.hash != "" {
					ch.Removed = append(ch.Removed, n)
				}
				delete(state, n)
			}
		}
		sort.Strings(ch.Removed)
		if !ch.Empty() {
			onChange(ch)
		}
	}
}
