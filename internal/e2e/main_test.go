package e2e

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them, and
// keeps the binaries the tests build (each built once per run) in a
// folder it removes at the end.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "narratoria-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	builds.dir = dir
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}
