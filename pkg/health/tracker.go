package health

import (
	"sort"
	"sync"
	"time"
)

// Tracker keeps the health of every (session, skill) in memory. It is safe
// for concurrent use; Forget drops a finished session so it does not grow
// without bound.
type Tracker struct {
	mu       sync.Mutex
	sessions map[string]map[string]Status
}

// NewTracker returns an empty tracker: every skill starts healthy.
func NewTracker() *Tracker { return &Tracker{sessions: map[string]map[string]Status{}} }

// Apply feeds one input and returns the transition.
func (t *Tracker) Apply(session, skill string, in Input, reason string, now time.Time) Transition {
	t.mu.Lock()
	defer t.mu.Unlock()
	skills := t.sessions[session]
	if skills == nil {
		skills = map[string]Status{}
		t.sessions[session] = skills
	}
	next, tr := Next(skills[skill], in, reason, now)
	skills[skill] = next
	return tr
}

// Status returns a skill's status (healthy when unknown).
func (t *Tracker) Status(session, skill string) Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, ok := t.sessions[session][skill]
	if !ok || st.State == "" {
		return Status{State: Healthy}
	}
	return st
}

// Set loads a persisted status.
func (t *Tracker) Set(session, skill string, st Status) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sessions[session] == nil {
		t.sessions[session] = map[string]Status{}
	}
	t.sessions[session][skill] = st
}

// Reset makes every skill of the session healthy and returns the
// transitions of those that changed, sorted by skill.
func (t *Tracker) Reset(session string, now time.Time) map[string]Transition {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]Transition{}
	for skill, st := range t.sessions[session] {
		next, tr := Next(st, Reset, "", now)
		t.sessions[session][skill] = next
		if tr.Changed {
			out[skill] = tr
		}
	}
	return out
}

// Skills returns a copy of the session's statuses.
func (t *Tracker) Skills(session string) map[string]Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]Status, len(t.sessions[session]))
	for k, v := range t.sessions[session] {
		out[k] = v
	}
	return out
}

// Disabled lists the session's skills in permanentFailure, sorted.
func (t *Tracker) Disabled(session string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for skill, st := range t.sessions[session] {
		if st.State == PermanentFailure {
			out = append(out, skill)
		}
	}
	sort.Strings(out)
	return out
}

// Forget drops a session.
func (t *Tracker) Forget(session string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.sessions, session)
}
