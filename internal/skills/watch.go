package skills

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// WatchIntervalDefault is how often Watch looks at the skills folder.
const WatchIntervalDefault = time.Second

// settleTime is how old a file's modification time must be before its
// (mtime, size) is trusted to reveal the next change: a file written twice
// within one tick of the file system's clock, with the same size, would
// otherwise look unchanged. A skill with a younger file is reloaded at every
// poll until it settles; its Hash keeps that from being reported as a change.
const settleTime = 2 * time.Second

// Change is what changed in the skills folder since the last look. Each
// list is sorted by skill name.
type Change struct {
	// Added are skills that load now and did not before: new folders, and
	// broken skills that were fixed.
	Added []*Skill
	// Updated are loaded skills whose content (Skill.Hash) changed.
	Updated []*Skill
	// Removed names skills that loaded before and no longer do: their
	// folder is gone, or they broke (then Warnings says why).
	Removed []string
	// Warnings are the warnings of the skills in Added and Updated, and the
	// skipping warning of each newly broken skill — reported once, not at
	// every poll, until the problem changes.
	Warnings []Warning
}

// Empty reports whether nothing changed.
func (c Change) Empty() bool {
	return len(c.Added) == 0 && len(c.Updated) == 0 && len(c.Removed) == 0 && len(c.Warnings) == 0
}

// Watch polls the skills folder every interval (WatchIntervalDefault when
// interval ≤ 0) until ctx ends, and calls onChange, on Watch's goroutine,
// after each poll that found a change. Changes are relative to the last
// Load, so nothing that changed in between is missed; without a Load, the
// first poll happens at once and reports every skill as Added (and every
// broken one in Warnings).
//
// A poll is cheap when nothing changed: it lists Dir and stats each skill's
// manifest, prompt, config, config schema and scripts/ tree (following
// symlinks); only a skill whose (mtime, size, mode) changed is read and
// hashed again. Watch keeps its own state, so Load may run meanwhile; run
// one Watch per Loader.
func (l *Loader) Watch(ctx context.Context, interval time.Duration, onChange func(Change)) {
	if interval <= 0 {
		interval = WatchIntervalDefault
	}
	l.mu.Lock()
	state := maps.Clone(l.baseline)
	l.mu.Unlock()
	if state == nil {
		state = map[string]folderState{}
		if ch := l.poll(state); !ch.Empty() && ctx.Err() == nil {
			onChange(ch)
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ch := l.poll(state); !ch.Empty() {
			onChange(ch)
		}
	}
}

// poll compares the folder with state, reloads what changed, updates state
// and returns the change.
func (l *Loader) poll(state map[string]folderState) Change {
	var ch Change
	names, err := l.candidates()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return ch // unreadable for now: keep what we have and look again later
	}
	present := make(map[string]bool, len(names))
	now := time.Now()
	for _, name := range names {
		present[name] = true
		fp := fingerprint(filepath.Join(l.Dir, name), now)
		old, known := state[name]
		if known && fp != "" && old.fp == fp {
			continue
		}
		sk, warns := l.load(name)
		st := folderState{fp: fp}
		if sk == nil {
			st.warn = skippedKey(warns)
			if old.hash != "" {
				ch.Removed = append(ch.Removed, name)
			}
			if !known || old.warn != st.warn {
				ch.Warnings = append(ch.Warnings, warns...)
			}
		} else {
			st.hash = sk.Hash
			switch old.hash {
			case "":
				ch.Added = append(ch.Added, sk)
				ch.Warnings = append(ch.Warnings, warns...)
			case sk.Hash:
			default:
				ch.Updated = append(ch.Updated, sk)
				ch.Warnings = append(ch.Warnings, warns...)
			}
		}
		state[name] = st
	}
	for name, st := range state {
		if !present[name] {
			if st.hash != "" {
				ch.Removed = append(ch.Removed, name)
			}
			delete(state, name)
		}
	}
	sort.Strings(ch.Removed)
	return ch
}

// fingerprint summarises a skill folder's files by stat alone: the fixed
// files and everything under scripts/ (symlinks both as links and as what
// they point to). It returns "" while any of them was modified within
// settleTime of now, so that the skill is looked at again.
func fingerprint(dir string, now time.Time) string {
	var b strings.Builder
	settled := true
	add := func(name string, info fs.FileInfo) {
		fmt.Fprintf(&b, "%s|%d|%d|%v;", name, info.Size(), info.ModTime().UnixNano(), info.Mode())
		if now.Sub(info.ModTime()) < settleTime {
			settled = false
		}
	}
	for _, f := range []string{ManifestFile, PromptFile, ConfigFile, ConfigSchemaFile, ScriptsDirName} {
		if info, err := os.Stat(filepath.Join(dir, f)); err == nil {
			add(f, info)
		}
	}
	_ = filepath.WalkDir(filepath.Join(dir, ScriptsDirName), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		add(p, info)
		if info.Mode()&fs.ModeSymlink != 0 {
			if target, err := os.Stat(p); err == nil {
				add("->", target)
			}
		}
		return nil
	})
	if !settled {
		return ""
	}
	return b.String()
}
