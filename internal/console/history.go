package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/pkg/messages"
)

// historyMax bounds the plans the history index holds (the oldest go
// first); the results stream bounds it too (its age and size limits).
const historyMax = 500_000

// historyPage is the default and largest page of a history search.
const historyPage = 100

// planEntry is one finished plan in the history index: what a result's
// headers say about it (messages.HeaderResult*) and when it was stored.
type planEntry struct {
	Plan     string    `json:"planId"`
	Session  string    `json:"sessionId"`
	State    string    `json:"state"`
	Reason   string    `json:"failureReason,omitempty"`
	Skills   []string  `json:"skills"`
	Ms       int64     `json:"executionTimeMs"`
	At       time.Time `json:"finishedAt"`
	Sequence uint64    `json:"seq"`
}

// history is an index of every plan on NARRATORIA_RESULTS, newest last,
// read through an ordered consumer that takes only the results' headers
// (a few hundred bytes a plan, so 100,000 plans load in about a second)
// and follows the stream live. It starts with the first search.
type history struct {
	js       jetstream.JetStream
	stream   string
	sessions func(subject string) (session, plan string)
	log      *slog.Logger

	once   sync.Once
	mu     sync.RWMutex
	plans  []planEntry
	caught chan struct{} // closed once the index reached the stream's end
	err    error
	cons   jetstream.ConsumeContext
	cancel context.CancelFunc
}

// start opens the ordered consumer (once).
func (h *history) start() {
	h.once.Do(func() {
		h.caught = make(chan struct{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		h.cancel = cancel
		fail := func(err error) {
			h.mu.Lock()
			h.err = err
			h.mu.Unlock()
			close(h.caught)
		}
		st, err := h.js.Stream(ctx, h.stream)
		if err != nil {
			fail(fmt.Errorf("history: open %s: %w", h.stream, err))
			return
		}
		if st.CachedInfo().State.Msgs == 0 {
			close(h.caught)
		}
		c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{HeadersOnly: true, DeliverPolicy: jetstream.DeliverAllPolicy})
		if err != nil {
			fail(fmt.Errorf("history: read %s: %w", h.stream, err))
			return
		}
		var caught sync.Once
		cons, err := c.Consume(func(m jetstream.Msg) {
			md, err := m.Metadata()
			if err != nil {
				return
			}
			h.add(m, md)
			if md.NumPending == 0 {
				caught.Do(func() {
					if st.CachedInfo().State.Msgs != 0 {
						close(h.caught)
					}
				})
			}
		})
		if err != nil {
			fail(fmt.Errorf("history: read %s: %w", h.stream, err))
			return
		}
		h.mu.Lock()
		h.cons = cons
		h.mu.Unlock()
	})
}

// add indexes one result from its headers.
func (h *history) add(m jetstream.Msg, md *jetstream.MsgMetadata) {
	session, plan := h.sessions(m.Subject())
	if plan == "" {
		return
	}
	hd := m.Headers()
	e := planEntry{Plan: plan, Session: session, State: hd.Get(messages.HeaderResultState), Reason: hd.Get(messages.HeaderResultReason),
		At: md.Timestamp, Sequence: md.Sequence.Stream, Skills: []string{}}
	if e.State == "" {
		e.State = "unknown" // stored by a version before the summary headers
	}
	if s := hd.Get(messages.HeaderResultSkills); s != "" {
		e.Skills = strings.Split(s, ",")
	}
	e.Ms, _ = strconv.ParseInt(hd.Get(messages.HeaderResultDuration), 10, 64)
	h.mu.Lock()
	h.plans = append(h.plans, e)
	if len(h.plans) > historyMax {
		h.plans = slices.Delete(h.plans, 0, len(h.plans)-historyMax)
	}
	h.mu.Unlock()
}

// stop ends the consumer.
func (h *history) stop() {
	h.once.Do(func() {}) // a console never searched starts nothing later
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cons != nil {
		h.cons.Stop()
		h.cons = nil
	}
	if h.cancel != nil {
		h.cancel()
	}
}

// historyQuery is a search of the history index.
type historyQuery struct {
	Session, State, Skill, Reason, Plan string
	From, To                            time.Time
	// Before pages: only plans stored before this stream sequence.
	Before uint64
	Limit  int
}

// matches reports whether e is one the query asks for.
func (q *historyQuery) matches(e *planEntry) bool {
	return (q.Session == "" || e.Session == q.Session) && (q.State == "" || e.State == q.State) &&
		(q.Reason == "" || e.Reason == q.Reason) && (q.Skill == "" || slices.Contains(e.Skills, q.Skill)) &&
		(q.Plan == "" || strings.HasPrefix(e.Plan, q.Plan)) &&
		(q.From.IsZero() || !e.At.Before(q.From)) && (q.To.IsZero() || e.At.Before(q.To))
}

// historyPageResult is a page of a search, newest first.
type historyPageResult struct {
	Plans []planEntry `json:"plans"`
	// Total is how many plans match, on every page.
	Total int `json:"total"`
	// Next is the Before of the next (older) page; 0 on the last page.
	Next uint64 `json:"next"`
	// Loading says the index has not reached the stream's end yet.
	Loading bool `json:"loading"`
}

// search runs q over the index, newest first.
func (h *history) search(q historyQuery) (historyPageResult, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.err != nil {
		return historyPageResult{}, h.err
	}
	out := historyPageResult{Plans: []planEntry{}}
	select {
	case <-h.caught:
	default:
		out.Loading = true
	}
	for i := len(h.plans) - 1; i >= 0; i-- {
		e := &h.plans[i]
		if !q.matches(e) {
			continue
		}
		out.Total++
		if q.Before != 0 && e.Sequence >= q.Before {
			continue
		}
		if len(out.Plans) < q.Limit {
			out.Plans = append(out.Plans, *e)
		} else if out.Next == 0 {
			out.Next = out.Plans[len(out.Plans)-1].Sequence
		}
	}
	return out, nil
}

// parseHistoryQuery reads a search from the URL: session, state, skill,
// reason, plan (an ID prefix), from and to (RFC 3339), before (a
// sequence from the previous page's next) and limit (1..100).
func parseHistoryQuery(r *http.Request) (historyQuery, error) {
	v := r.URL.Query()
	q := historyQuery{Session: v.Get("session"), State: v.Get("state"), Skill: v.Get("skill"), Reason: v.Get("reason"),
		Plan: v.Get("plan"), Limit: historyPage}
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
		if err != nil || n < 1 || n > historyPage {
			return q, fmt.Errorf("%w: limit: must be 1..%d, got %q", errBadRequest, historyPage, s)
		}
		q.Limit = n
	}
	return q, nil
}

// historyWait bounds how long a search waits for the index to load.
const historyWait = 10 * time.Second

// searchHistory answers GET /api/history: finished plans, newest first,
// from the results stream (everything it holds, not only what finished
// since the console started).
func (cs *Console) searchHistory(w http.ResponseWriter, r *http.Request) {
	q, err := parseHistoryQuery(r)
	if err != nil {
		fail(w, err)
		return
	}
	cs.hist.start()
	if cs.hist.caught == nil {
		fail(w, fmt.Errorf("%w: the console is closing", errUnavailable))
		return
	}
	select {
	case <-cs.hist.caught:
	case <-time.After(historyWait):
	case <-r.Context().Done():
		return
	}
	page, err := cs.hist.search(q)
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
