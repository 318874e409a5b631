package testlog

import (
	"os"
	"path/filepath"
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
