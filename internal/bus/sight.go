package bus

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/narratoria/runtime/pkg/messages"
)

// Sight judges which workers are alive from the observer's side. A
// worker's heartbeat is a write to the registry; an observer that could
// not see the registry (its own connection was down, or the server was)
// has no evidence of death, only of its own blindness. So:
//
//   - while the observer's connection is down, no listed worker is dead;
//   - for a TTL after it comes back (a reconnect is seen), a worker is
//     alive if its heartbeat was recent when the observer lost sight, so
//     the workers have a whole TTL to be heard again;
//   - otherwise a worker is alive when its last heartbeat is within the
//     TTL, as before.
//
// It assumes the workers' and observers' clocks agree within a fraction
// of the TTL (the heartbeat carries the worker's time). Sight keeps no
// goroutine: it looks at the connection whenever it is asked, and
// Observe, called as registry updates arrive, keeps its notion of "last
// seen connected" fresh.
type Sight struct {
	status func() (connected bool, reconnects uint64)
	ttl    time.Duration

	mu         sync.Mutex
	lastUp     time.Time // last time the connection was seen up
	reconnects uint64
	lostAt     time.Time // when sight was last lost (the last lastUp before a reconnect)
	graceUntil time.Time
}

// NewSight returns a Sight over nc's connection state with the workers'
// TTL.
func NewSight(nc *nats.Conn, ttl time.Duration) *Sight {
	return newSight(func() (bool, uint64) { return nc.IsConnected(), nc.Stats().Reconnects }, ttl)
}

func newSight(status func() (bool, uint64), ttl time.Duration) *Sight {
	_, r := status()
	return &Sight{status: status, ttl: ttl, reconnects: r}
}

// Observe notes the connection's state at now; every judgement calls it.
func (s *Sight) Observe(now time.Time) {
	connected, r := s.status()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observeLocked(now, connected, r)
}

func (s *Sight) observeLocked(now time.Time, connected bool, r uint64) {
	if !connected {
		return
	}
	if r != s.reconnects {
		// Sight was lost at some point since it was last seen up.
		s.reconnects = r
		s.lostAt = s.lastUp
		if s.lostAt.IsZero() {
			s.lostAt = now
		}
		s.graceUntil = now.Add(s.ttl)
	}
	s.lastUp = now
}

// LiveWorkers returns the entry's workers that count as alive at now.
func (s *Sight) LiveWorkers(e *messages.RegistryEntry, now time.Time) []messages.WorkerInfo {
	connected, r := s.status()
	s.mu.Lock()
	s.observeLocked(now, connected, r)
	blind, grace, lostAt := !connected, now.Before(s.graceUntil), s.lostAt
	s.mu.Unlock()
	switch {
	case blind:
		// No evidence either way: every worker still listed.
		return e.LiveWorkers(now, time.Duration(1<<62))
	case grace:
		return e.LiveWorkers(now, max(s.ttl, now.Sub(lostAt)+s.ttl))
	default:
		return e.LiveWorkers(now, s.ttl)
	}
}

// Blind reports whether the observer cannot judge now: its connection is
// down, or came back less than a TTL ago.
func (s *Sight) Blind(now time.Time) bool {
	connected, r := s.status()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observeLocked(now, connected, r)
	return !connected || now.Before(s.graceUntil)
}

// Evidence keeps what an observer of the registry needs to call a skill
// dead rather than unheard: when each skill's newest heartbeat was
// written, and when the registry last took any write. A skill whose
// workers all went quiet is dead only when the registry took other
// writes a TTL or more after the skill's last heartbeat; while it takes no
// write at all (its stream electing a leader, every worker reconnecting)
// silence proves nothing. It assumes workers' and observers' clocks agree
// within a fraction of the TTL (a heartbeat carries the worker's time).
// Safe for concurrent use.
type Evidence struct {
	ttl time.Duration

	mu      sync.Mutex
	heard   map[string]time.Time
	lastPut time.Time
}

// NewEvidence returns an Evidence for workers' TTL ttl.
func NewEvidence(ttl time.Duration) *Evidence {
	return &Evidence{ttl: ttl, heard: map[string]time.Time{}}
}

// Put records a registry write of skill's entry e, seen at now: the
// registry took a write, and the skill's newest heartbeat is its newest
// worker's LastSeen, or now if that is later.
func (v *Evidence) Put(skill string, e *messages.RegistryEntry, now time.Time) {
	var newest time.Time
	for _, w := range e.Workers {
		if w.LastSeen.After(newest) {
			newest = w.LastSeen
		}
	}
	if newest.IsZero() || newest.After(now) {
		newest = now
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.lastPut = now
	v.heard[skill] = newest
}

// Delete forgets a skill whose entry was deleted.
func (v *Evidence) Delete(skill string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.heard, skill)
}

// Served returns the workers of skill's entry e that count as serving it
// at now: those heard within the TTL, judged from the observer's side by
// sight (by the TTL alone when sight is nil); when none is, every listed
// worker while the registry took no write to prove them dead (InDoubt).
func (v *Evidence) Served(skill string, e *messages.RegistryEntry, sight *Sight, now time.Time) []messages.WorkerInfo {
	var live []messages.WorkerInfo
	if sight == nil {
		live = e.LiveWorkers(now, v.ttl)
	} else {
		live = sight.LiveWorkers(e, now)
	}
	if len(live) == 0 && v.InDoubt(skill, e) {
		live = e.LiveWorkers(now, time.Duration(1<<62))
	}
	return live
}

// InDoubt reports whether a skill none of whose workers counts as alive
// may still be served: it still lists workers, and the registry took no
// write a TTL or more after the skill's last heartbeat.
func (v *Evidence) InDoubt(skill string, e *messages.RegistryEntry) bool {
	if len(e.Workers) == 0 {
		return false // every worker left the entry: no one to wait for
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	heard, ok := v.heard[skill]
	return ok && v.lastPut.Sub(heard) <= v.ttl
}
