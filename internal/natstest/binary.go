package natstest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
)

// serverModule is the module whose main package is nats-server.
const serverModule = "github.com/nats-io/nats-server/v2"

// Binary returns the path of a nats-server executable of the version in
// go.mod, built without the race detector (a server under test runs at
// its real speed, and a test binary's race detector watches only our
// code). It is built once per machine and version: test binaries of
// several packages started together take a file lock, and the first
// builds it while the others wait for it.
var Binary = sync.OnceValues(func() (string, error) {
	version := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == serverModule {
				version = m.Version
				if m.Replace != nil {
					version = m.Replace.Version + "-replaced"
				}
			}
		}
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("narratoria-natstest-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("natstest: %w", err)
	}
	bin := filepath.Join(dir, "nats-server-"+version)
	reuse := version != "devel" && !strings.HasSuffix(version, "-replaced")
	return buildOnce(bin, reuse, serverModule)
})

// buildOnce links the main package pkg at bin under a file lock on
// bin.lock, so that test processes started together build it once: the
// first links it (into a file of its own, then renamed) while the others
// wait, then find it. With reuse false an existing bin is linked again.
func buildOnce(bin string, reuse bool, pkg string) (string, error) {
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", fmt.Errorf("natstest: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("natstest: lock %s: %w", lock.Name(), err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if _, err := os.Stat(bin); err == nil && reuse {
		return bin, nil
	}
	tmp := fmt.Sprintf("%s.%d", bin, os.Getpid())
	if _, err := link(tmp, pkg); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("natstest: %w", err)
	}
	return bin, nil
}
