package skills

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// age sets the modification time of every file of a skill folder by into
// the past (past settleTime: the watcher then trusts its stat fingerprint;
// negative: into the future, which keeps the folder unsettled).
func age(t *testing.T, sd string, by time.Duration) {
	t.Helper()
	when := time.Now().Add(-by)
	require.NoError(t, filepath.Walk(sd, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, when, when)
	}))
}

// writeAtomic replaces a file the way careful tools do, so that a poll never
// sees it half-written.
func writeAtomic(t *testing.T, p, body string) {
	t.Helper()
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	require.NoError(t, err)
	_, err = f.WriteString(body)
	require.NoError(t, err)
	require.NoError(t, f.Chmod(0o644))
	require.NoError(t, f.Close())
	require.NoError(t, os.Rename(f.Name(), p))
}

// countingEnv counts the loads of goodManifest skills: each load reads
// SKILL_TOKEN once.
func countingEnv(n *atomic.Int64) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if k == "SKILL_TOKEN" {
			n.Add(1)
		}
		return "t", true
	}
}

// TestPollReportsEachChangeOnce drives the watcher's poll step by step.
func TestPollReportsEachChangeOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var loads atomic.Int64
	l := &Loader{Dir: dir, Getenv: countingEnv(&loads)}
	state := map[string]folderState{}

	require.True(t, l.poll(state).Empty(), "an empty folder")

	sd := mkSkill(t, dir, "a", "", nil)
	age(t, sd, time.Hour)
	ch := l.poll(state)
	require.Len(t, ch.Added, 1)
	require.Equal(t, "a", ch.Added[0].Name)
	require.Empty(t, ch.Updated)
	require.Empty(t, ch.Warnings)

	before := loads.Load()
	for range 3 {
		require.True(t, l.poll(state).Empty(), "nothing changed")
	}
	require.Equal(t, before, loads.Load(), "an unchanged, settled skill is not reloaded")

	// touched but identical: reloaded, not reported
	age(t, sd, 30*time.Minute)
	require.True(t, l.poll(state).Empty())
	require.Greater(t, loads.Load(), before)

	// an edit of the same size, with an old mtime: still seen
	require.NoError(t, os.WriteFile(filepath.Join(sd, "prompt.md"), []byte("# A"), 0o644))
	age(t, sd, 20*time.Minute)
	ch = l.poll(state)
	require.Len(t, ch.Updated, 1)
	require.Equal(t, "# A", ch.Updated[0].Prompt)
	require.Empty(t, ch.Added)
	require.Empty(t, ch.Removed)

	// a fresh edit is reloaded at every poll until it settles, but reported
	// once (a future mtime keeps it fresh however slow the machine is)
	require.NoError(t, os.WriteFile(filepath.Join(sd, "prompt.md"), []byte("# fresh"), 0o644))
	age(t, sd, -time.Hour)
	ch = l.poll(state)
	require.Len(t, ch.Updated, 1)
	before = loads.Load()
	require.True(t, l.poll(state).Empty())
	require.True(t, l.poll(state).Empty())
	require.Equal(t, before+2, loads.Load())

	// broken: removed, with one warning, reported once
	require.NoError(t, os.WriteFile(filepath.Join(sd, "skill.json"), []byte("{broken"), 0o644))
	ch = l.poll(state)
	require.Equal(t, []string{"a"}, ch.Removed)
	require.Len(t, ch.Warnings, 1)
	require.True(t, ch.Warnings[0].Skipped)
	require.Contains(t, ch.Warnings[0].String(), "skill.json: not valid JSON")
	require.True(t, l.poll(state).Empty(), "the same problem is not reported again")
	age(t, sd, time.Hour)
	require.True(t, l.poll(state).Empty())

	// a different problem is reported
	require.NoError(t, os.WriteFile(filepath.Join(sd, "skill.json"), []byte(goodManifest("b")), 0o644))
	ch = l.poll(state)
	require.Empty(t, ch.Removed)
	require.Len(t, ch.Warnings, 1)
	require.Contains(t, ch.Warnings[0].String(), `must equal the folder name "a"`)

	// fixed: added again
	require.NoError(t, os.WriteFile(filepath.Join(sd, "skill.json"), []byte(goodManifest("a")), 0o644))
	ch = l.poll(state)
	require.Len(t, ch.Added, 1)

	// a new broken skill: a warning only
	mkSkill(t, dir, "c", `{"name":"c"}`, nil)
	ch = l.poll(state)
	require.Empty(t, ch.Added)
	require.Empty(t, ch.Removed)
	require.Len(t, ch.Warnings, 1)
	require.Equal(t, "c", ch.Warnings[0].Skill)

	// deleted: removed; a deleted broken skill is not reported
	require.NoError(t, os.RemoveAll(sd))
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "c")))
	ch = l.poll(state)
	require.Equal(t, []string{"a"}, ch.Removed)
	require.Empty(t, ch.Warnings)
	require.Empty(t, state)

	// the whole folder gone: nothing left to remove, no error
	mkSkill(t, dir, "d", "", nil)
	require.Len(t, l.poll(state).Added, 1)
	require.NoError(t, os.RemoveAll(dir))
	require.Equal(t, []string{"d"}, l.poll(state).Removed)
}

// TestPollSeesScriptChanges: scripts, their mode, and symlink targets count.
func TestPollSeesScriptChanges(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := &Loader{Dir: dir, Getenv: env(map[string]string{"SKILL_TOKEN": "t"})}
	sd := mkSkill(t, dir, "a", "", map[string]string{"scripts/run": "", "lib/run": "#!/bin/sh\necho 1\n"})
	require.NoError(t, os.Chmod(filepath.Join(sd, "lib", "run"), 0o755))
	require.NoError(t, os.Symlink("../lib/run", filepath.Join(sd, "scripts", "run")))
	age(t, sd, time.Hour)
	state := map[string]folderState{}
	require.Len(t, l.poll(state).Added, 1)

	// the symlink's target changes (same size), the link does not
	require.NoError(t, os.WriteFile(filepath.Join(sd, "lib", "run"), []byte("#!/bin/sh\necho 2\n"), 0o755))
	age(t, sd, 50*time.Minute)
	require.Len(t, l.poll(state).Updated, 1)

	// not executable any more: removed
	require.NoError(t, os.Chmod(filepath.Join(sd, "lib", "run"), 0o644))
	age(t, sd, 40*time.Minute)
	ch := l.poll(state)
	require.Equal(t, []string{"a"}, ch.Removed)
	require.Contains(t, ch.Warnings[0].String(), "is not executable")
}

// recorder collects the changes a Watch reports.
type recorder struct {
	mu      sync.Mutex
	changes []Change
}

func (r *recorder) add(c Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, c)
}

// saw reports whether some change satisfies pred.
func (r *recorder) saw(pred func(Change) bool) func() bool {
	return func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.changes {
			if pred(c) {
				return true
			}
		}
		return false
	}
}

// watch runs l.Watch until the test ends.
func watch(t *testing.T, l *Loader, interval time.Duration) *recorder {
	t.Helper()
	r := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Watch(ctx, interval, r.add)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func TestWatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mkSkill(t, dir, "first", "", nil)
	l := &Loader{Dir: dir, Getenv: env(map[string]string{"SKILL_TOKEN": "t"})}
	initial, warns := l.Load()
	require.Len(t, initial, 1)
	require.Empty(t, warns)
	r := watch(t, l, 10*time.Millisecond)
	const wait, tick = 10 * time.Second, 10 * time.Millisecond

	staging := t.TempDir() // built elsewhere and moved in, so no poll sees half a skill
	mkSkill(t, staging, "second", "", nil)
	sd := filepath.Join(dir, "second")
	require.NoError(t, os.Rename(filepath.Join(staging, "second"), sd))
	require.Eventually(t, r.saw(func(c Change) bool { return len(c.Added) == 1 && c.Added[0].Name == "second" }), wait, tick, "added")

	writeAtomic(t, filepath.Join(sd, "skill.json"), `{"name":"second","version":"1.1.0","description":"edited","scripts":[{"name":"run","path":"scripts/run"}]}`)
	require.Eventually(t, r.saw(func(c Change) bool {
		return len(c.Updated) == 1 && c.Updated[0].Manifest.Description == "edited" && c.Updated[0].Manifest.Version == "1.1.0"
	}), wait, tick, "updated")

	_, _ = l.Load() // Load may run while Watch does (the race detector checks)

	writeAtomic(t, filepath.Join(sd, "skill.json"), `{"name":"second"}`)
	require.Eventually(t, r.saw(func(c Change) bool {
		return len(c.Removed) == 1 && c.Removed[0] == "second" && len(c.Warnings) == 1 && c.Warnings[0].Skill == "second" && c.Warnings[0].Skipped
	}), wait, tick, "broken")

	require.NoError(t, os.Rename(filepath.Join(dir, "first"), filepath.Join(dir, ".first-deleted"))) // hidden: gone at once
	require.NoError(t, os.RemoveAll(filepath.Join(dir, ".first-deleted")))
	require.Eventually(t, r.saw(func(c Change) bool { return len(c.Removed) == 1 && c.Removed[0] == "first" }), wait, tick, "deleted")

	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.changes {
		require.False(t, c.Empty(), "only changes are reported")
	}
	broken := 0
	for _, c := range r.changes {
		for _, w := range c.Warnings {
			if w.Skill == "second" && w.Skipped {
				broken++
			}
		}
	}
	require.Equal(t, 1, broken, "the broken skill's warning is reported once")
}

// TestWatchWithoutLoad: the first poll reports what is there.
func TestWatchWithoutLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mkSkill(t, dir, "a", "", map[string]string{"prompt.md": ""})
	mkSkill(t, dir, "broken", "{", nil)
	r := watch(t, &Loader{Dir: dir, Getenv: env(map[string]string{"SKILL_TOKEN": "t"})}, time.Hour)
	require.Eventually(t, r.saw(func(c Change) bool {
		return len(c.Added) == 1 && c.Added[0].Name == "a" && len(c.Warnings) == 2 &&
			!c.Warnings[0].Skipped && c.Warnings[0].Skill == "a" && c.Warnings[1].Skipped && c.Warnings[1].Skill == "broken"
	}), 10*time.Second, 10*time.Millisecond)
}
