package scheduler

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTokenIsTheAttemptsMAC: a token is the HMAC-SHA256, under the outcome
// key, of the attempt's plan, tool, skill and number, each followed by a
// zero byte — what every version made, so the jobs of a scheduler of an
// earlier version still check — and concurrent tokens (MACs are reused)
// do not mix.
func TestTokenIsTheAttemptsMAC(t *testing.T) {
	k := newKeys([]byte("0123456789abcdef0123456789abcdef"))
	want := func(plan, tool, skill, attempt string) string {
		m := hmac.New(sha256.New, []byte("0123456789abcdef0123456789abcdef"))
		for _, s := range []string{plan, tool, skill, attempt} {
			m.Write([]byte(s))
			m.Write([]byte{0})
		}
		return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	}
	require.Equal(t, want("p", "t", "s", "3"), k.token("p", "t", "s", 3))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 200 {
				if got := k.token("plan", "tool", "skill", 12); got != want("plan", "tool", "skill", "12") {
					t.Errorf("goroutine %d: token %s", i, got)
					return
				}
			}
		})
	}
	wg.Wait()
}
