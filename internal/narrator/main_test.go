package narrator

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/narratoria/runtime/internal/testlog"
)

// TestMain fails the package's tests when any goroutine outlives them:
// session queues, keep-alives, result waits and watchers all end with Stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testlog.UpstreamLeaks()...)
}
