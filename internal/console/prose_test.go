package console

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConsoleStreamsProse: a piece of prose a model writes reaches the
// page as a "prose" event with its session, as it is published.
func TestConsoleStreamsProse(t *testing.T) {
	e := newEnv(t)
	live := e.events(t, "web")
	// Published until the page's stream, subscribing, gets one.
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			_ = e.srv.NC.Publish("narratoria.prose.web", []byte(`{"promptId":"p1","planId":"x","seq":1,"text":"The door "}`))
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	m := live.wait(t, "prose", func(m map[string]any) bool { return m["promptId"] == "p1" })
	require.Equal(t, "web", m["sessionId"])
	require.Equal(t, "The door ", m["text"])
}
