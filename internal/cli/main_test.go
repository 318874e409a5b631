package cli

import (
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/crypto/bcrypt"

	"github.com/narratoria/runtime/internal/console"
	"github.com/narratoria/runtime/internal/testlog"
)

// TestMain fails the package's tests when a goroutine outlives them.
// It also makes the console's password hashes cheap (bcrypt's lowest
// cost): the default takes a second a check under the race detector.
func TestMain(m *testing.M) {
	console.PasswordCost = bcrypt.MinCost
	goleak.VerifyTestMain(m, testlog.UpstreamLeaks()...)
}
