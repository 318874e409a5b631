package narrator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/planner"
	"github.com/narratoria/runtime/pkg/health"
	"github.com/narratoria/runtime/pkg/messages"
)

// catalogueSource mirrors the registry and the health bucket through
// watchers, so building a catalogue costs no round trip.
type catalogueSource struct {
	workerTTL time.Duration
	// sight judges liveness from this narrator's side (nil: by the TTL
	// alone).
	sight *bus.Sight
	log   *slog.Logger

	mu     sync.RWMutex
	skills map[string]*messages.RegistryEntry
	health map[string]health.Status // by <session>.<skill>; only non-healthy kept
	revs   map[string]uint64        // revision of each skill's entry last applied
	// evidence tells a dead skill from an unheard one (see alive).
	evidence *bus.Evidence

	// changed wakes warm when a registry entry was applied.
	changed chan struct{}
}

func newCatalogueSource(ttl time.Duration, log *slog.Logger) *catalogueSource {
	return &catalogueSource{workerTTL: ttl, log: log, skills: map[string]*messages.RegistryEntry{}, health: map[string]health.Status{},
		revs: map[string]uint64{}, evidence: bus.NewEvidence(ttl), changed: make(chan struct{}, 1)}
}

// warm fits the rule planner's model of the live skills as soon as the
// registry has them, and again whenever they change, so no prompt waits for
// a fit (0.4 s for the sample skills). A heartbeat changes nothing the model
// depends on: the model cache answers it by key. A skill whose workers all
// went away changes the live set without an event; the ticker sees that.
// warm returns when ctx ends (a fit under way finishes first).
func (c *catalogueSource) warm(ctx context.Context, fitted func(time.Duration)) {
	tick := time.NewTicker(c.workerTTL)
	defer tick.Stop()
	for {
		if cat := c.Catalogue("", nil); len(cat.LearnFrom) > 0 {
			if d, fresh := planner.Fit(cat); fresh && fitted != nil {
				fitted(d)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-c.changed:
		case <-tick.C:
		}
	}
}

// run mirrors both buckets and returns once each has delivered its values.
func (c *catalogueSource) run(ctx context.Context, skillsKV, healthKV jetstream.KeyValue) error {
	if err := bus.Mirror(ctx, skillsKV, c.log, c.applySkill); err != nil {
		return err
	}
	return bus.Mirror(ctx, healthKV, c.log, c.applyHealth)
}

func (c *catalogueSource) applySkill(e jetstream.KeyValueEntry) {
	if c.sight != nil {
		c.sight.Observe(time.Now())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer func() {
		select {
		case c.changed <- struct{}{}:
		default: // warm has a wake-up pending already
		}
	}()
	c.revs[e.Key()] = e.Revision()
	if e.Operation() != jetstream.KeyValuePut {
		delete(c.skills, e.Key())
		c.evidence.Delete(e.Key())
		return
	}
	var re messages.RegistryEntry
	if err := json.Unmarshal(e.Value(), &re); err != nil {
		c.log.Warn("narrator: unreadable registry entry ignored", slog.String("skill", e.Key()), slog.Any("error", err))
		delete(c.skills, e.Key())
		return
	}
	c.skills[e.Key()] = &re
	c.evidence.Put(e.Key(), &re, time.Now())
}

// alive reports whether a skill counts as served at now. It is when a
// worker was heard within the TTL (judged from this narrator's side by
// sight). A skill whose workers all went quiet is dead only on evidence:
// the registry took writes (other heartbeats) a TTL or more after the
// skill's last one. Silence alone is not death — a registry that takes no
// write (its stream electing a leader, the workers reconnecting) silences
// every worker at once — so such a skill stays offered, and a plan naming
// it is accepted; its job waits in the stream for the worker.
func (c *catalogueSource) alive(name string, e *messages.RegistryEntry, now time.Time) bool {
	return len(c.evidence.Served(name, e, c.sight, now)) > 0
}

func (c *catalogueSource) applyHealth(e jetstream.KeyValueEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(c.health, e.Key())
		return
	}
	var st health.Status
	if err := json.Unmarshal(e.Value(), &st); err != nil || st.State == health.Healthy || st.State == "" {
		delete(c.health, e.Key())
		return
	}
	c.health[e.Key()] = st
}

// Catalogue builds the catalogue for a session, leaving out disabled skills
// and skills that are not alive.
func (c *catalogueSource) Catalogue(session string, disabled []string) *planner.Catalogue {
	now := time.Now()
	c.mu.RLock()
	defer c.mu.RUnlock()
	cat := &planner.Catalogue{}
	off := map[string]bool{}
	for _, d := range disabled {
		off[d] = true
	}
	for name, e := range c.skills {
		if !c.alive(name, e, now) {
			continue
		}
		st := c.health[session+"."+name]
		if st.State == "" {
			st.State = health.Healthy
		}
		cat.LearnFrom = append(cat.LearnFrom, e)
		// A skill in permanentFailure past its cool-down is offered again:
		// the probe that may heal it.
		if off[name] || !st.Selectable(now) {
			cat.Disabled = append(cat.Disabled, name)
			continue
		}
		cat.Skills = append(cat.Skills, planner.SkillIn(e, st.State))
	}
	cat.Sort()
	sort.Slice(cat.LearnFrom, func(i, j int) bool { return cat.LearnFrom[i].Name < cat.LearnFrom[j].Name })
	for d := range off {
		if _, ok := c.skills[d]; !ok {
			cat.Disabled = append(cat.Disabled, d)
		}
	}
	sort.Strings(cat.Disabled)
	cat.Disabled = dedupe(cat.Disabled)
	return cat
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// CatalogueRevision is the KV revision of the skill's registry entry the
// narrator has seen last (0 when none): how far its watch of
// narratoria_skills has come.
func (n *Narrator) CatalogueRevision(skill string) uint64 {
	n.cat.mu.RLock()
	defer n.cat.mu.RUnlock()
	return n.cat.revs[skill]
}

// CatalogueFromRegistry builds a catalogue from a deployment's registry
// (KV narratoria_skills), every skill healthy, live workers or not.
func CatalogueFromRegistry(ctx context.Context, js jetstream.JetStream) (*planner.Catalogue, error) {
	kv, err := js.KeyValue(ctx, messages.BucketSkills)
	if err != nil {
		return nil, fmt.Errorf("open the skill registry: %w", err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the skill registry: %w", err)
	}
	cat := &planner.Catalogue{}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var re messages.RegistryEntry
		if json.Unmarshal(e.Value(), &re) == nil {
			cat.Skills = append(cat.Skills, planner.CatalogueSkill{Entry: &re, Health: health.Healthy, Priority: re.Priority, TimeoutFactor: 1})
		}
	}
	cat.Sort()
	return cat, nil
}
