package client_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/llm/llmtest"
	"github.com/narratoria/runtime/internal/narrator"
	"github.com/narratoria/runtime/internal/planner"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestNarrateWithProse: WithProse hands over each piece of the model's
// prose, in order, before Narrate returns, and only the prompt's own;
// Watch delivers the same pieces as Kind "prose".
func TestNarrateWithProse(t *testing.T) {
	t.Parallel()
	pieces := []string{"You step ", "into the ", "lamplight."}
	fake := llmtest.Start(t, func(llmtest.Call) llmtest.Reply {
		return llmtest.Reply{Chunks: pieces, Every: 30 * time.Millisecond}
	})
	srv, c, _ := pipelineWithout(t)
	log, _ := testlog.New(t)
	nar, err := narrator.New(srv.Connect(t), narrator.Config{PlanTimeoutMs: 20_000, Prose: "llm",
		LLM: planner.LLMConfig{BaseURL: fake.URL, Model: "m"}}, narrator.Options{Logger: log, Bus: srv.Bus})
	require.NoError(t, err)
	require.NoError(t, nar.Start(context.Background()))
	t.Cleanup(nar.Stop)

	var mu sync.Mutex
	var watched []messages.ProseChunk
	w, err := c.Watch("pw", func(u client.Update) {
		if u.Kind == "prose" {
			mu.Lock()
			watched = append(watched, *u.Prose)
			mu.Unlock()
		}
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, w.Stop()) }()

	// Another prompt's prose on the same session is not this one's.
	stopOther := make(chan struct{})
	otherDone := make(chan struct{})
	go func() {
		defer close(otherDone)
		for {
			select {
			case <-stopOther:
				return
			case <-time.After(10 * time.Millisecond):
				_ = srv.NC.Publish("narratoria.prose.pw", []byte(`{"promptId":"other","planId":"x","seq":1,"text":"NOT MINE"}`))
			}
		}
	}()
	var got []messages.ProseChunk
	n, err := c.Narrate(t.Context(), messages.Prompt{SessionID: "pw", Text: "I step forward"}, client.WithProse(func(ch messages.ProseChunk) {
		got = append(got, ch) // one at a time: no lock needed
	}))
	close(stopOther)
	<-otherDone
	require.NoError(t, err)
	require.Equal(t, strings.Join(pieces, ""), n.Text)
	require.Len(t, got, len(pieces)+1, "every piece, then the end, before Narrate returned")
	for i, ch := range got {
		require.Equal(t, i+1, ch.Seq)
		require.Equal(t, n.PromptID, ch.PromptID)
	}
	require.True(t, got[len(pieces)].Done)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		text := ""
		for _, ch := range watched {
			if ch.PromptID == n.PromptID {
				text += ch.Text
			}
		}
		return text == n.Text
	}, testlog.Budget(5*time.Second), 10*time.Millisecond)
}
