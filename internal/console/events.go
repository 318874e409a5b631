package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// sseBuffer bounds the events waiting for a slow browser; past it events
// are dropped (and the page told so) rather than stalling NATS.
const sseBuffer = 4096

// events streams a session's (or every session's) progress, narrations
// (and the prose a model streams before them), results, script events and
// health transitions as server-sent events,
// each with the session (and the plan and tool of a script event) added,
// until the browser goes away.
func (cs *Console) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "streaming unsupported"})
		return
	}
	tok := strings.TrimSuffix(strings.Repeat("*.", cs.subj.SessionTokens()), ".")
	if s := r.URL.Query().Get("session"); s != "" {
		if err := cs.subj.CheckSession(s); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		tok = s
	}
	p := cs.subj.Root()
	ch := make(chan *nats.Msg, sseBuffer)
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for _, subj := range []string{p + ".progress." + tok + ".*", p + ".narrations." + tok, p + ".prose." + tok, p + ".results." + tok + ".*",
		p + ".events." + tok + ".>", p + ".health." + tok + ".*"} {
		sub, err := cs.nc.ChanSubscribe(subj, ch)
		if err != nil {
			writeJSON(w, http.StatusBadGateway, map[string]string{"error": "subscribe " + subj + ": " + err.Error()})
			return
		}
		subs = append(subs, sub)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": connected\n\n")
	flusher.Flush()
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ping.C:
			fmt.Fprint(w, ": ping\n\n")
			flusher.Flush()
		case m := <-ch:
			kind, data := sseEvent(m, cs.subj.SessionTokens())
			if kind == "" {
				continue
			}
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", kind, data)
			// Send what is queued with it before flushing once.
			for n := len(ch); n > 0; n-- {
				if kind, data := sseEvent(<-ch, cs.subj.SessionTokens()); kind != "" {
					fmt.Fprintf(w, "event: %s\ndata: %s\n\n", kind, data)
				}
			}
			flusher.Flush()
		}
	}
}

// sseEvent turns a NATS message into an SSE event kind and its one-line
// JSON data ("" for a message it does not know); a session takes n
// subject tokens (2 across tenants: <tenant>.<session>).
func sseEvent(m *nats.Msg, n int) (string, []byte) {
	all := strings.Split(m.Subject, ".")
	if len(all) < 2+n || !json.Valid(m.Data) {
		return "", nil
	}
	session := strings.Join(all[2:2+n], ".")
	parts := append([]string{all[0], all[1], session}, all[2+n:]...)
	withSession := func(kind string) (string, []byte) {
		var obj map[string]json.RawMessage
		if json.Unmarshal(m.Data, &obj) != nil || obj == nil {
			return "", nil
		}
		obj["sessionId"], _ = json.Marshal(session)
		b, _ := json.Marshal(obj)
		return kind, b
	}
	switch parts[1] {
	case "progress":
		return withSession("progress")
	case "narrations":
		return withSession("narration")
	case "prose":
		return withSession("prose")
	case "results":
		return withSession("result")
	case "health":
		return withSession("health")
	case "events":
		if len(parts) != 5 {
			return "", nil
		}
		b, _ := json.Marshal(map[string]any{"sessionId": session, "planId": parts[3], "toolId": parts[4], "event": json.RawMessage(m.Data)})
		return "script", b
	}
	return "", nil
}
