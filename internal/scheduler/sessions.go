package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/pkg/messages"
)

// sessionStore is the session state in KV narratoria_sessions. Patches are
// deep-merged with compare-and-set on the key's revision, so concurrent
// plans of one session never lose each other's updates. A cache keeps the
// last value seen; a conflict re-reads it.
type sessionStore struct {
	kv     jetstream.KeyValue
	js     jetstream.JetStream
	stream jetstream.Stream // the bucket's stream, for commits with their marks
	max    int              // the largest state stored (Config.MaxStateBytes)
	// subj, with tenants, names a session's state subject in its tenant's
	// state stream (messages.StateStream): each tenant's states are in a
	// stream of their own, sized by its quota, created when the tenant is
	// added.
	subj *messages.Subjects

	mu      sync.Mutex
	cache   map[string]sessionValue
	tenants map[string]jetstream.Stream
}

type sessionValue struct {
	rev   uint64
	state map[string]any
	raw   json.RawMessage
}

// where returns the stream and subject of session's state: the sessions
// bucket's, or with tenants its tenant's state stream.
func (s *sessionStore) where(ctx context.Context, session string) (jetstream.Stream, string, error) {
	if s.subj == nil || messages.TenantOf(session) == "" {
		return s.stream, bus.KVSubject(s.kv.Bucket(), session), nil
	}
	subj, err := s.subj.State(session)
	if err != nil {
		return nil, "", err
	}
	name := messages.TenantOf(session).StateStream()
	s.mu.Lock()
	st, ok := s.tenants[name]
	s.mu.Unlock()
	if ok {
		return st, subj, nil
	}
	st, err = s.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, "", fmt.Errorf("tenant %s has no state stream %s: add the tenant with narratoria tenant add", messages.TenantOf(session), name)
	}
	if err != nil {
		return nil, "", fmt.Errorf("open %s: %w", name, err)
	}
	s.mu.Lock()
	s.tenants[name] = st
	s.mu.Unlock()
	return st, subj, nil
}

// casBackoffMax caps the wait between two compare-and-set tries of one
// update. There is no cap on the number of tries: a patch is never dropped
// because others won the race; only the context ends the loop.
const casBackoffMax = 50 * time.Millisecond

// casRetry paces a compare-and-set loop: the first try at once, then
// waits that double (with jitter, so racing writers spread out) up to
// casBackoffMax, until the context ends.
type casRetry struct{ wait time.Duration }

func (c *casRetry) next(ctx context.Context) error {
	if c.wait == 0 {
		c.wait = time.Millisecond
		return ctx.Err()
	}
	t := time.NewTimer(c.wait/2 + rand.N(c.wait/2+1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	c.wait = min(2*c.wait, casBackoffMax)
	return nil
}

// errStateTooLarge: the session state a commit would store is over the
// limit.
var errStateTooLarge = errors.New("the session state would be too large")

func newSessionStore(kv jetstream.KeyValue, js jetstream.JetStream, stream jetstream.Stream, max int) *sessionStore {
	return &sessionStore{kv: kv, js: js, stream: stream, max: max, cache: map[string]sessionValue{}, tenants: map[string]jetstream.Stream{}}
}

func (s *sessionStore) load(ctx context.Context, session string) (sessionValue, error) {
	if s.subj != nil && messages.TenantOf(session) != "" {
		st, subj, err := s.where(ctx, session)
		if err != nil {
			return sessionValue{}, err
		}
		state, rev, _, err := s.latest(ctx, st, subj)
		if err != nil {
			return sessionValue{}, err
		}
		raw, _ := json.Marshal(state)
		return sessionValue{rev: rev, state: state, raw: raw}, nil
	}
	e, err := s.kv.Get(ctx, session)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return sessionValue{state: map[string]any{}, raw: json.RawMessage("{}")}, nil
	case err != nil:
		return sessionValue{}, fmt.Errorf("read session %s: %w", session, err)
	}
	v := sessionValue{rev: e.Revision(), raw: e.Value()}
	if e.Operation() != jetstream.KeyValuePut {
		v.state, v.raw = map[string]any{}, json.RawMessage("{}")
		return v, nil
	}
	if err := json.Unmarshal(e.Value(), &v.state); err != nil || v.state == nil {
		// Someone wrote a non-object; the state restarts empty rather
		// than blocking every plan of the session.
		v.state, v.raw = map[string]any{}, json.RawMessage("{}")
	}
	return v, nil
}

// Get returns the session state as JSON.
func (s *sessionStore) Get(ctx context.Context, session string) (json.RawMessage, error) {
	s.mu.Lock()
	v, ok := s.cache[session]
	s.mu.Unlock()
	if ok {
		return v.raw, nil
	}
	v, err := s.load(ctx, session)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.cache[session] = v
	s.mu.Unlock()
	return v.raw, nil
}

// commitsHeader carries, with each committed session state, the IDs of
// the plans whose patches were committed most recently (newest last), so a
// plan's commit repeated after a crash is recognised and not applied twice.
const commitsHeader = "Narratoria-Commits"

// commitsKept bounds the plan IDs kept in commitsHeader: a commit is
// recognised as long as fewer than this many other plans of the session
// committed since.
const commitsKept = 64

// Commit deep-merges a finished plan's staged patches, in order, into the
// session state as it is now, once: the write is a compare-and-set on the
// key's revision that also records the plan in commitsHeader, and a plan
// already recorded there is not merged again. It retries conflicts until
// ctx ends (no fixed cap).
func (s *sessionStore) Commit(ctx context.Context, session, plan string, patches []map[string]any) error {
	st, subj, err := s.where(ctx, session)
	if err != nil {
		return fmt.Errorf("commit plan %s to session %s: %w", plan, session, err)
	}
	var cas casRetry
	for {
		if err := cas.next(ctx); err != nil {
			return fmt.Errorf("commit plan %s to session %s: %w", plan, session, err)
		}
		state, rev, commits, err := s.latest(ctx, st, subj)
		if err != nil {
			return err
		}
		if slices.Contains(commits, plan) {
			return nil // committed before a crash
		}
		for _, p := range patches {
			state = messages.DeepMerge(state, p)
		}
		raw, err := json.Marshal(state)
		if err != nil {
			return fmt.Errorf("encode session %s: %w", session, err)
		}
		if len(raw) > s.max {
			return fmt.Errorf("commit plan %s to session %s: %w: %d bytes, the limit is %d (scheduler.maxStateBytes)", plan, session, errStateTooLarge, len(raw), s.max)
		}
		commits = append(commits, plan)
		if len(commits) > commitsKept {
			commits = commits[len(commits)-commitsKept:]
		}
		m := nats.NewMsg(subj)
		m.Data = raw
		m.Header.Set(commitsHeader, strings.Join(commits, ","))
		ack, err := s.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev))
		if err == nil {
			s.mu.Lock()
			s.cache[session] = sessionValue{rev: ack.Sequence, state: state, raw: raw}
			s.mu.Unlock()
			return nil
		}
		if !bus.IsConflict(err) {
			return fmt.Errorf("commit plan %s to session %s: %w", plan, session, err)
		}
	}
}

// latest reads a session's state, its revision and its commit marks from
// the bucket's stream.
func (s *sessionStore) latest(ctx context.Context, stream jetstream.Stream, subj string) (map[string]any, uint64, []string, error) {
	m, err := stream.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return map[string]any{}, 0, nil, nil
	}
	if err != nil {
		return nil, 0, nil, fmt.Errorf("read %s: %w", subj, err)
	}
	var commits []string
	if h := m.Header.Get(commitsHeader); h != "" {
		commits = strings.Split(h, ",")
	}
	state := map[string]any{}
	if !bus.KVDeleted(m.Header) {
		if err := json.Unmarshal(m.Data, &state); err != nil || state == nil {
			state = map[string]any{} // not an object: the state restarts empty
		}
	}
	return state, m.Sequence, commits, nil
}

// Clear empties the session state.
func (s *sessionStore) Clear(ctx context.Context, session string) error {
	var rev uint64
	var err error
	if s.subj != nil && messages.TenantOf(session) != "" {
		_, subj, err := s.where(ctx, session)
		if err != nil {
			return fmt.Errorf("clear session %s: %w", session, err)
		}
		ack, err := s.js.Publish(ctx, subj, []byte("{}"))
		if err != nil {
			return fmt.Errorf("clear session %s: %w", session, err)
		}
		rev = ack.Sequence
	} else if rev, err = s.kv.Put(ctx, session, []byte("{}")); err != nil {
		return fmt.Errorf("clear session %s: %w", session, err)
	}
	s.mu.Lock()
	s.cache[session] = sessionValue{rev: rev, state: map[string]any{}, raw: json.RawMessage("{}")}
	s.mu.Unlock()
	return nil
}

// ForgetIf drops the cached sessions owns says yes to (a partition that
// moved away).
func (s *sessionStore) ForgetIf(owns func(session string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for session := range s.cache {
		if owns(session) {
			delete(s.cache, session)
		}
	}
}

// Forget drops a session from the cache (its plans are all done).
func (s *sessionStore) Forget(session string) {
	s.mu.Lock()
	delete(s.cache, session)
	s.mu.Unlock()
}
