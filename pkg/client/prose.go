package client

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/narratoria/runtime/pkg/messages"
)

// NarrateOption configures one Narrate call.
type NarrateOption func(*narrateOptions)

type narrateOptions struct {
	prose func(messages.ProseChunk)
}

// WithProse hands fn each piece of the prose a model writes for the
// prompt's narration as it streams (<prefix>.prose.<session>), in order,
// one at a time, before Narrate returns: show them as they come, then
// replace them with the narration's text, which is the whole prose (or
// the template's, when the last chunk says Fallback). Nothing comes when
// the deployment writes template prose (no narrator.prose: llm) or the
// plan failed. A chunk with Seq 1 again means the prose started over.
func WithProse(fn func(messages.ProseChunk)) NarrateOption {
	return func(o *narrateOptions) { o.prose = fn }
}

// proseDrain bounds how long Narrate waits, once the narration came, for
// the rest of a prose stream that began (its pieces travel on a
// subscription of their own).
const proseDrain = time.Second

// followProse subscribes to p's session's prose before the prompt is sent
// and hands fn the chunks of p's prompt; stop ends it, once a stream that
// began has ended (its Done chunk handed over) or after proseDrain.
func (c *Client) followProse(p messages.Prompt, fn func(messages.ProseChunk)) (stop func(), err error) {
	subj, err := c.subj.Prose(p.SessionID)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex // one chunk at a time, and none after stop
	started, stopped := false, false
	ended := make(chan struct{})
	sub, err := c.nc.Subscribe(subj, func(m *nats.Msg) {
		var ch messages.ProseChunk
		if json.Unmarshal(m.Data, &ch) != nil || ch.PromptID != p.PromptID {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		started = true
		fn(ch)
		if ch.Done {
			close(ended)
			stopped = true
		}
	})
	if err != nil {
		return nil, fmt.Errorf("follow prose on %s: %w", subj, err)
	}
	if err := c.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("follow prose on %s: %w", subj, err)
	}
	return func() {
		queued, _, _ := sub.Pending() // came before the narration, not handed over yet
		mu.Lock()
		wait := (started || queued > 0) && !stopped
		mu.Unlock()
		if wait {
			select {
			case <-ended:
			case <-time.After(proseDrain):
			}
		}
		_ = sub.Unsubscribe()
		mu.Lock()
		stopped = true
		mu.Unlock()
	}, nil
}
