package e2e

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/narratoria/runtime/internal/testlog"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testlog.UpstreamLeaks()...) }
