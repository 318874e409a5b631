package testlog

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// OpenTempDir is t.TempDir opened to every user, as /tmp is (mode 1777,
// and its parent, the test's own folder, passable): a worker that runs as
// root gives each script a user of its own, which must reach the skills a
// test writes there and may write what the test's scripts record there.
func OpenTempDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Dir(dir), 0o711}, {dir, 0o777 | os.ModeSticky}} {
		if err := os.Chmod(d.path, d.mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// LiveProcessesOf lists the processes (not zombies) whose real user is
// uid, read from /proc, with what each runs.
func LiveProcessesOf(uid int) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		zombie, mine := false, false
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "State:"); ok {
				zombie = strings.HasPrefix(strings.TrimSpace(v), "Z")
			}
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				f := strings.Fields(v)
				mine = len(f) > 0 && f[0] == strconv.Itoa(uid)
			}
		}
		if mine && !zombie {
			cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			out = append(out, e.Name()+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	return out
}
