package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/narratoria/runtime/pkg/codec"
	"github.com/narratoria/runtime/pkg/messages"
)

// Update is one message Watch delivers; exactly one of Narration, Prose,
// Progress, Event and Health is set, as Kind says.
type Update struct {
	// Kind is "narration", "prose", "progress", "event" or "health".
	Kind string
	// Subject is the NATS subject it came on; SessionID its session.
	Subject   string
	SessionID string
	// Data is the message as it came (JSON).
	Data json.RawMessage
	// Narration is a prompt's narration.
	Narration *messages.Narration
	// Prose is a piece of a narration's prose as a model writes it
	// (<prefix>.prose.<session>, live only); the narration that follows
	// carries the whole text.
	Prose *messages.ProseChunk
	// Progress is a plan's or a tool's progress (with Progress.Progress,
	// the percentage a script reported).
	Progress *messages.Progress
	// Event is a script's protocol event (one NDJSON line), with the plan
	// and tool it came from.
	Event          json.RawMessage
	PlanID, ToolID string
	// Health is a skill's health transition.
	Health *messages.HealthTransition
}

// Watcher is a running Watch; Stop ends it.
type Watcher struct {
	subs []*nats.Subscription
}

// Stop unsubscribes; no update is delivered after it returns.
func (w *Watcher) Stop() error {
	var errs []error
	for _, s := range w.subs {
		if err := s.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Watch follows a session (every session when session is "") live:
// narrations, the prose a model streams before them, progress, script
// events and health transitions, each
// decoded into an Update and given to fn, one at a time, in the order each
// subject delivers them. A message that does not decode is skipped. It
// returns once the server has the subscriptions.
func (c *Client) Watch(session string, fn func(Update)) (*Watcher, error) {
	tok := "*"
	if session != "" {
		if err := messages.CheckToken("sessionId", session); err != nil {
			return nil, err
		}
		tok = session
	}
	p := c.subj.Root()
	w := &Watcher{}
	for _, subj := range []string{p + ".narrations." + tok, p + ".prose." + tok, p + ".progress." + tok + ".*", p + ".events." + tok + ".>",
		p + ".health." + tok + ".*"} {
		sub, err := c.nc.Subscribe(subj, func(m *nats.Msg) {
			if u, ok := decodeUpdate(m); ok {
				fn(u)
			}
		})
		if err != nil {
			_ = w.Stop()
			return nil, fmt.Errorf("watch %s: %w", subj, err)
		}
		w.subs = append(w.subs, sub)
	}
	if err := c.nc.Flush(); err != nil {
		_ = w.Stop()
		return nil, fmt.Errorf("watch: %w", err)
	}
	return w, nil
}

// decodeUpdate reads a message of one of the watched subjects.
func decodeUpdate(m *nats.Msg) (Update, bool) {
	parts := strings.Split(m.Subject, ".")
	if len(parts) < 3 {
		return Update{}, false
	}
	u := Update{Subject: m.Subject, SessionID: parts[2], Data: json.RawMessage(m.Data)}
	switch parts[1] {
	case "narrations":
		var n messages.Narration
		if codec.Unmarshal(m.Data, &n) != nil {
			return u, false
		}
		u.Kind, u.Narration = "narration", &n
	case "prose":
		var c messages.ProseChunk
		if json.Unmarshal(m.Data, &c) != nil {
			return u, false
		}
		u.Kind, u.Prose = "prose", &c
	case "progress":
		var pr messages.Progress
		if json.Unmarshal(m.Data, &pr) != nil {
			return u, false
		}
		u.Kind, u.Progress = "progress", &pr
	case "events":
		if len(parts) != 5 || !json.Valid(m.Data) {
			return u, false
		}
		u.Kind, u.Event, u.PlanID, u.ToolID = "event", json.RawMessage(m.Data), parts[3], parts[4]
	case "health":
		var h messages.HealthTransition
		if json.Unmarshal(m.Data, &h) != nil {
			return u, false
		}
		u.Kind, u.Health = "health", &h
	default:
		return u, false
	}
	return u, true
}
