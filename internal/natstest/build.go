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

// Build returns the path of the binary of the main package pkg (a path
// relative to the calling test's package, such as "../../cmd/scheduler"),
// built without the race detector the first time a test of this process
// asks for it, and shared by the later ones: linking a binary costs
// seconds of CPU, and make test runs on two cores. Callers must not change
// the file; a test that needs the binary under another name links or
// copies it.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	f, _ := builds.LoadOrStore(pkg, sync.OnceValues(func() (string, error) {
		dir, err := buildDir()
		if err != nil {
			return "", err
		}
		bin := filepath.Join(dir, filepath.Base(pkg))
		out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("natstest: build %s: %v: %s", pkg, err, out)
		}
		return bin, nil
	}))
	bin, err := f.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	return bin
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
