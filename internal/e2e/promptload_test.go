package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// narrationLog keeps every narration a test saw, live on
// narratoria.narrations.> and, for what its connection missed while it
// reconnected, on NARRATORIA_NARRATIONS.
type narrationLog struct {
	mu       sync.Mutex
	byPrompt map[string][]*messages.Narration // session/promptId → narrations
	onlyHeld int                              // found only in the stream
}

// watchNarrations starts a narrationLog on nc.
func watchNarrations(t *testing.T, nc *nats.Conn) *narrationLog {
	t.Helper()
	l := &narrationLog{byPrompt: map[string][]*messages.Narration{}}
	_, err := nc.Subscribe("narratoria.narrations.>", func(m *nats.Msg) {
		var n messages.Narration
		if json.Unmarshal(m.Data, &n) == nil {
			l.mu.Lock()
			l.byPrompt[n.SessionID+"/"+n.PromptID] = append(l.byPrompt[n.SessionID+"/"+n.PromptID], &n)
			l.mu.Unlock()
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	return l
}

// fromStream adds the stored narrations of prompts not seen live.
func (l *narrationLog) fromStream(t *testing.T, js jetstream.JetStream) {
	stored := storedMsgs(t, js, messages.StreamNarrations)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range stored {
		var n messages.Narration
		if json.Unmarshal(m, &n) == nil && len(l.byPrompt[n.SessionID+"/"+n.PromptID]) == 0 {
			l.byPrompt[n.SessionID+"/"+n.PromptID] = append(l.byPrompt[n.SessionID+"/"+n.PromptID], &n)
			l.onlyHeld++
		}
	}
}

// count is how many prompts have a narration.
func (l *narrationLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byPrompt)
}

// check asserts that every one of prompts prompts was narrated once, and
// with its tool (tl ran a tool of its plan) unless its narration says it
// is the fallback; it returns the fallbacks.
func (l *narrationLog) check(t *testing.T, tl *tally, prompts int) (fallback int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	twice := 0
	for key, ns := range l.byPrompt {
		if len(ns) > 1 {
			twice++
			t.Errorf("prompt %s narrated %d times", key, len(ns))
		}
		switch n := ns[0]; {
		case n.Fallback:
			fallback++
			t.Logf("prompt %s narrated as fallback: %+v", key, n.Trace)
		case !tl.ranFor(n.PlanID):
			t.Errorf("prompt %s narrated without its tool (plan %s): %q", key, n.PlanID, n.Text)
		}
	}
	require.Zero(t, twice, "every prompt narrated once")
	require.Len(t, l.byPrompt, prompts, "every prompt narrated")
	return fallback
}

// submitPrompts submits n prompts ("count the coins", which the rule
// planner plans with the tally skill) on sessions <prefix>00.. (one of
// sessions per prompt in turn), one every gap, each retried until the
// server takes it (it may be down).
func submitPrompts(game *client.Client, prefix string, n, sessions int, gap time.Duration) {
	for i := range n {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := game.Submit(ctx, messages.Prompt{SessionID: fmt.Sprintf("%s%02d", prefix, i%sessions), Text: "count the coins", PromptID: fmt.Sprintf("p%03d", i)})
			cancel()
			if err == nil {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		time.Sleep(gap)
	}
}
