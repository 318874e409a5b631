package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/plancheck"
	"github.com/narratoria/runtime/pkg/messages"
)

// registry mirrors KV narratoria_skills through a watcher, so resolving a
// toolPath costs no round trip.
type registry struct {
	log *slog.Logger
	// sight judges liveness from this scheduler's side (nil: by the TTL
	// alone).
	sight *bus.Sight
	// evidence keeps a skill whose workers went quiet while the registry
	// took no write at all from being taken for dead.
	evidence *bus.Evidence

	mu      sync.RWMutex
	entries map[string]*messages.RegistryEntry
	// revs are the revisions of the entries last applied, by skill.
	revs map[string]uint64
}

func newRegistry(ttl time.Duration, log *slog.Logger) *registry {
	return &registry{log: log, evidence: bus.NewEvidence(ttl), entries: map[string]*messages.RegistryEntry{}, revs: map[string]uint64{}}
}

// revision is the KV revision of the skill's entry last applied.
func (r *registry) revision(skill string) uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.revs[skill]
}

// snapshot returns the entries as they are now, by skill name (the
// entries themselves are never changed once applied).
func (r *registry) snapshot() []*messages.RegistryEntry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*messages.RegistryEntry, 0, len(r.entries))
	for _, e := range r.entries {
		out = append(out, e)
	}
	return out
}

// run follows the bucket until ctx ends.
func (r *registry) run(ctx context.Context, kv jetstream.KeyValue) error {
	return bus.Mirror(ctx, kv, r.log, r.apply)
}

func (r *registry) apply(e jetstream.KeyValueEntry) {
	if r.sight != nil {
		r.sight.Observe(time.Now())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.revs[e.Key()] = e.Revision()
	if e.Operation() != jetstream.KeyValuePut {
		delete(r.entries, e.Key())
		r.evidence.Delete(e.Key())
		return
	}
	var re messages.RegistryEntry
	if err := json.Unmarshal(e.Value(), &re); err != nil {
		r.log.Warn("scheduler: unreadable registry entry ignored", slog.String("skill", e.Key()), slog.Any("error", err))
		delete(r.entries, e.Key())
		return
	}
	r.entries[e.Key()] = &re
	r.evidence.Put(e.Key(), &re, time.Now())
}

// live returns the entry's live workers as this scheduler can judge them:
// those heard within the TTL (from this scheduler's side, by sight), or,
// when none is, every listed worker while the registry took no write to
// prove them dead (bus.Evidence): a job for them waits in the stream for
// the worker, which is as good as waiting here.
func (r *registry) live(e *messages.RegistryEntry) []messages.WorkerInfo {
	return r.evidence.Served(e.Name, e, r.sight, time.Now())
}

// capacity is how many scripts of the skill its live workers can run at
// once: the sum of their concurrency (each worker's slots are shared by
// the skills it serves, so this is an upper bound); 0 when the skill is
// unknown or there is no registry (a nil r).
func (r *registry) capacity(skill string) int {
	if r == nil {
		return 0
	}
	r.mu.RLock()
	e, ok := r.entries[skill]
	r.mu.RUnlock()
	if !ok {
		return 0
	}
	n := 0
	for _, w := range r.live(e) {
		n += max(w.Concurrency, 0)
	}
	return n
}

// Resolve implements plancheck.Resolver.
func (r *registry) Resolve(ref messages.ToolRef) (plancheck.Script, error) {
	r.mu.RLock()
	e, ok := r.entries[ref.Skill]
	r.mu.RUnlock()
	if !ok {
		return plancheck.Script{}, fmt.Errorf("%w: skill %q is not registered", plancheck.ErrUnknownSkill, ref.Skill)
	}
	if len(r.live(e)) == 0 {
		return plancheck.Script{}, fmt.Errorf("%w: %w: no live worker serves skill %q", plancheck.ErrUnknownSkill, errNoLiveWorker, ref.Skill)
	}
	s, ok := e.Resolve(ref)
	if !ok {
		return plancheck.Script{}, fmt.Errorf("%w: skill %q has no script %q", plancheck.ErrUnknownSkill, ref.Skill, ref.String())
	}
	return plancheck.Script{Skill: ref.Skill, Name: s.Name, Timeout: time.Duration(s.TimeoutMs) * time.Millisecond, NoReuse: s.NoReuse}, nil
}

// errNoLiveWorker: the skill is registered but no worker of it is proven
// live now; one may be back soon (after an outage, its heartbeats resume).
var errNoLiveWorker = errors.New("no live worker")

// liveCheck is a Resolver that notes whether every resolution that failed
// failed only because no worker was proven live.
type liveCheck struct {
	plancheck.Resolver
	notLive, other bool
}

// Resolve implements plancheck.Resolver.
func (c *liveCheck) Resolve(ref messages.ToolRef) (plancheck.Script, error) {
	s, err := c.Resolver.Resolve(ref)
	switch {
	case err == nil:
	case errors.Is(err, errNoLiveWorker):
		c.notLive = true
	default:
		c.other = true
	}
	return s, err
}

// waitsForWorker says whether the check failed only for want of a live
// worker.
func (c *liveCheck) waitsForWorker() bool { return c.notLive && !c.other }

// lenientResolver resolves toolPaths without a registry: "<skill>/<script>"
// names the script; the file forms use the file's base name without its
// extension. Used when the registry check is off.
type lenientResolver struct{}

func (lenientResolver) Resolve(ref messages.ToolRef) (plancheck.Script, error) {
	name := ref.Script
	if name == "" {
		name = ref.File
		if i := lastIndexByte(name, '/'); i >= 0 {
			name = name[i+1:]
		}
		if i := lastIndexByte(name, '.'); i > 0 {
			name = name[:i]
		}
	}
	return plancheck.Script{Skill: ref.Skill, Name: name}, nil
}

func lastIndexByte(s string, c byte) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// RegistryRevision is the KV revision of the skill's registry entry the
// scheduler has seen last (0 when none, or when the registry check is
// skipped): how far its watch of narratoria_skills has come.
func (s *Scheduler) RegistryRevision(skill string) uint64 {
	if s.registry == nil {
		return 0
	}
	return s.registry.revision(skill)
}
