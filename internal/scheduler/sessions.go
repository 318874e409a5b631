package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/pkg/messages"
)

// sessionStore is the session state in KV narratoria_sessions. Patches are
// deep-merged with compare-and-set on the key's revision, so concurrent
// plans of one session never lose each other's updates. A cache keeps the
// last value seen; a conflict re-reads it.
type sessionStore struct {
	kv jetstream.KeyValue

	mu    sync.Mutex
	cache map[string]sessionValue
}

type sessionValue struct {
	rev   uint64
	state map[string]any
	raw   json.RawMessage
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

func newSessionStore(kv jetstream.KeyValue) *sessionStore {
	return &sessionStore{kv: kv, cache: map[string]sessionValue{}}
}

func (s *sessionStore) load(ctx context.Context, session string) (sessionValue, error) {
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

// Merge deep-merges the patches, in order, into the session state and
// returns the new state.
func (s *sessionStore) Merge(ctx context.Context, session string, patches []map[string]any) (json.RawMessage, error) {
	if len(patches) == 0 {
		return s.Get(ctx, session)
	}
	s.mu.Lock()
	v, ok := s.cache[session]
	s.mu.Unlock()
	var cas casRetry
	for {
		if err := cas.next(ctx); err != nil {
			return nil, fmt.Errorf("write session %s: %w", session, err)
		}
		if !ok {
			var err error
			if v, err = s.load(ctx, session); err != nil {
				return nil, err
			}
		}
		next := cloneState(v.state)
		for _, p := range patches {
			next = messages.DeepMerge(next, p)
		}
		raw, err := json.Marshal(next)
		if err != nil {
			return nil, fmt.Errorf("encode session %s: %w", session, err)
		}
		var rev uint64
		if v.rev == 0 {
			rev, err = s.kv.Create(ctx, session, raw)
		} else {
			rev, err = s.kv.Update(ctx, session, raw, v.rev)
		}
		if err == nil {
			s.mu.Lock()
			s.cache[session] = sessionValue{rev: rev, state: next, raw: raw}
			s.mu.Unlock()
			return raw, nil
		}
		if !bus.IsConflict(err) {
			return nil, fmt.Errorf("write session %s: %w", session, err)
		}
		ok = false // someone else wrote: re-read and merge again
	}
}

// Clear empties the session state.
func (s *sessionStore) Clear(ctx context.Context, session string) error {
	rev, err := s.kv.Put(ctx, session, []byte("{}"))
	if err != nil {
		return fmt.Errorf("clear session %s: %w", session, err)
	}
	s.mu.Lock()
	s.cache[session] = sessionValue{rev: rev, state: map[string]any{}, raw: json.RawMessage("{}")}
	s.mu.Unlock()
	return nil
}

// Forget drops a session from the cache (its plans are all done).
func (s *sessionStore) Forget(session string) {
	s.mu.Lock()
	delete(s.cache, session)
	s.mu.Unlock()
}

func cloneState(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	if out == nil {
		out = map[string]any{}
	}
	return out
}
