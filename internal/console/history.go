package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/history"
	"github.com/narratoria/runtime/pkg/messages"
)

// parseHistoryQuery reads a search from the URL: session, state, skill,
// reason, plan (an ID prefix), from and to (RFC 3339), before (a
// sequence from the previous page's next) and limit (1..100).
func parseHistoryQuery(r *http.Request) (messages.HistoryRequest, error) {
	v := r.URL.Query()
	q := messages.HistoryRequest{SessionID: v.Get("session"), State: v.Get("state"), Skill: v.Get("skill"), FailureReason: v.Get("reason"),
		PlanID: v.Get("plan"), Limit: messages.HistoryPageMax}
	for _, f := range []struct {
		name string
		to   *time.Time
	}{{"from", &q.From}, {"to", &q.To}} {
		if s := v.Get(f.name); s != "" {
			t, err := time.Parse(time.RFC3339, s)
			if err != nil {
				return q, fmt.Errorf("%w: %s: %q is not an RFC 3339 time (2026-11-26T10:00:00Z)", errBadRequest, f.name, s)
			}
			*f.to = t
		}
	}
	if s := v.Get("before"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return q, fmt.Errorf("%w: before: %q is not a sequence number", errBadRequest, s)
		}
		q.Before = n
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > messages.HistoryPageMax {
			return q, fmt.Errorf("%w: limit: must be 1..%d, got %q", errBadRequest, messages.HistoryPageMax, s)
		}
		q.Limit = n
	}
	if err := history.CheckQuery(q); err != nil {
		return q, fmt.Errorf("%w: %v", errBadRequest, err)
	}
	return q, nil
}

// historyWait bounds how long a search waits for the index to load.
const historyWait = 10 * time.Second

// searchHistory answers GET /api/history: finished plans, newest first,
// from the results stream (everything it holds, not only what finished
// since the console started): from the console's own index where its
// account reaches JetStream, else (a tenant's console) from a
// scheduler's, through the tenant's import of plan control
// (client.History), which answers the tenant's own plans only.
func (cs *Console) searchHistory(w http.ResponseWriter, r *http.Request) {
	q, err := parseHistoryQuery(r)
	if err != nil {
		fail(w, err)
		return
	}
	if cs.hist == nil {
		ctx, cancel := context.WithTimeout(r.Context(), historyWait)
		defer cancel()
		page, err := cs.c.History(ctx, q)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, page)
		return
	}
	cs.hist.Start()
	select {
	case <-cs.hist.Caught():
	case <-time.After(historyWait):
	case <-r.Context().Done():
		return
	}
	page, err := cs.hist.Search(history.Query{HistoryRequest: q})
	if err != nil {
		fail(w, errors.Join(errUnavailable, err))
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// sessionNarrationsMax bounds the narrations a session's page gets.
const sessionNarrationsMax = 50

// sessionNarrations answers GET /api/sessions/{session}/narrations: the
// session's newest narrations (at most 50), oldest first, read from
// NARRATORIA_NARRATIONS, so a session's URL shows its story so far.
func (cs *Console) sessionNarrations(w http.ResponseWriter, r *http.Request) {
	session := r.PathValue("session")
	subj, err := cs.subj.Narrations(session)
	if err != nil {
		fail(w, fmt.Errorf("%w: %v", errBadRequest, err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var out []json.RawMessage
	err = bus.ScanSubject(ctx, cs.nc, messages.StreamNarrations, subj, time.Unix(0, 0), func(data []byte) bool {
		out = append(out, json.RawMessage(slices.Clone(data)))
		if len(out) > sessionNarrationsMax {
			out = out[1:]
		}
		return true
	})
	if err != nil {
		fail(w, fmt.Errorf("%w: read the narrations of %s: %v", errUnavailable, session, err))
		return
	}
	if out == nil {
		out = []json.RawMessage{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"narrations": out})
}
