package natstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// builds are the binaries Build made in this test process, by package.
var builds sync.Map // package path -> func() (string, error)

// SharedBuildsEnv names the variable that, when set to a folder, makes
// Build share its binaries between the test processes of one run (make
// test sets it to a folder of the run's own, removed at its end): the
// packages' test binaries, started together, link each command once
// between them rather than once each. Unset, each process links its own.
const SharedBuildsEnv = "NARRATORIA_TEST_BUILDS"

// Build returns the path of the binary of the main package pkg (a path
// relative to the calling test's package, such as "../../cmd/scheduler"),
// built without the race detector the first time a test of this process
// (or of this run, with SharedBuildsEnv) asks for it, and shared by the
// later ones: linking a binary costs seconds of CPU, and make test runs
// on two cores. Callers must not change the file; a test that needs the
// binary under another name links or copies it.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	abs, err := filepath.Abs(pkg)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := builds.LoadOrStore(abs, sync.OnceValues(func() (string, error) {
		if shared := os.Getenv(SharedBuildsEnv); shared != "" {
			return buildShared(shared, abs)
		}
		dir, err := buildDir()
		if err != nil {
			return "", err
		}
		return link(filepath.Join(dir, filepath.Base(abs)), abs)
	}))
	bin, err := f.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// link builds the main package pkg (an absolute folder) into bin.
func link(bin, pkg string) (string, error) {
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("natstest: build %s: %v: %s", pkg, err, out)
	}
	return bin, nil
}

// buildShared builds pkg under the run's shared folder, at the package's
// own path inside it (so the binary keeps its command's name), once
// between the run's test processes.
func buildShared(shared, pkg string) (string, error) {
	bin := filepath.Join(shared, pkg, filepath.Base(pkg))
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", fmt.Errorf("natstest: %w", err)
	}
	return buildOnce(bin, true, pkg)
}

// buildDir is this process's folder of built binaries,
// <tmp>/narratoria-build-<pid>. Made the first time, after removing the
// folders of processes no longer running: a test process has no hook at
// its end, so the next one cleans up after it.
var buildDir = sync.OnceValues(func() (string, error) {
	old, _ := filepath.Glob(filepath.Join(os.TempDir(), "narratoria-build-*"))
	for _, d := range old {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "narratoria-build-"))
		if err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = os.RemoveAll(d)
		}
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("narratoria-build-%d", os.Getpid()))
	return dir, os.MkdirAll(dir, 0o700)
})

// Install puts the binary of the main package pkg (as Build takes it) at
// dst, a hard link to Build's file where the file system allows one, else
// a copy, and returns dst. For a test that needs the binary in a folder of
// its own (a skills folder's .bin, an image's layout).
func Install(t testing.TB, pkg, dst string) string {
	t.Helper()
	src := Build(t, pkg)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Link(src, dst) == nil {
		return dst
	}
	b, err := os.ReadFile(src)
	if err == nil {
		err = os.WriteFile(dst, b, 0o755)
	}
	if err != nil {
		t.Fatalf("natstest: install %s: %v", pkg, err)
	}
	return dst
}
