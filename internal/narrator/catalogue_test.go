package narrator

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/planner"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/health"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestQuietWorkerIsNotDead: a skill whose workers went quiet is dead only
// on evidence. While the registry takes no write at all (its stream
// electing a leader: every heartbeat fails at once), a skill silent for
// ten TTLs stays in the catalogue — the scheduler holds a plan naming it
// until a worker is heard again. Once the registry takes other skills'
// heartbeats a TTL after a skill's last one, that skill leaves; a skill
// heard within the TTL stays whatever else happens, and one whose workers
// all left its entry leaves at once.
func TestQuietWorkerIsNotDead(t *testing.T) {
	const ttl = 10 * time.Second
	c := newCatalogueSource(ttl, slog.New(slog.DiscardHandler))
	start := time.Now().Add(-time.Hour)
	put := func(name string, at time.Time, workers int) {
		e := &messages.RegistryEntry{Name: name, Workers: map[string]messages.WorkerInfo{}}
		for i := range workers {
			id := fmt.Sprintf("w%d-%s", i, name)
			e.Workers[id] = messages.WorkerInfo{ID: id, LastSeen: at}
		}
		c.skills[name] = e
		c.evidence.Put(name, e, at)
	}
	offered := func(now time.Time) []string {
		var names []string
		for name, e := range c.skills {
			if c.alive(name, e, now) {
				names = append(names, name)
			}
		}
		return names
	}
	// Every worker heard, then the registry takes no write for ten TTLs.
	put("dice", start, 1)
	put("memory", start, 1)
	put("retired", start, 0)
	require.ElementsMatch(t, []string{"dice", "memory"}, offered(start.Add(ttl/2)))
	require.ElementsMatch(t, []string{"dice", "memory"}, offered(start.Add(10*ttl)), "silence alone is not death")
	// The registry takes memory's heartbeats again; dice stays quiet.
	for d := ttl / 5; d <= ttl+ttl/5; d += ttl / 5 {
		put("memory", start.Add(10*ttl+d), 1)
	}
	require.ElementsMatch(t, []string{"memory"}, offered(start.Add(11*ttl+ttl/5)), "quiet while others were heard: dead")
	// Heard again: back.
	put("dice", start.Add(12*ttl), 1)
	require.ElementsMatch(t, []string{"dice", "memory"}, offered(start.Add(12*ttl+ttl/2)))
}

// TestPureDisabledSkillKeepsTheModel: the catalogue of a replan that leaves a
// skill out (disabled for the attempt, or in permanentFailure) plans with
// the model fitted on every live skill — the same one, fitted once — so a
// prompt for the missing skill is not handed to another skill.
func TestPureDisabledSkillKeepsTheModel(t *testing.T) {
	testlog.WithoutRace(t) // fits the model: 14 s under the detector, 1 s without
	disk, warnings := planner.CatalogueFromDir("../../skills")
	require.Empty(t, warnings)
	src := newCatalogueSource(time.Minute, nil)
	for _, cs := range disk.Skills {
		e := *cs.Entry
		e.Workers = map[string]messages.WorkerInfo{"w1": {ID: "w1", LastSeen: time.Now()}}
		src.skills[e.Name] = &e
	}
	src.health["s.reputation"] = health.Status{State: health.PermanentFailure}
	all := src.Catalogue("s", nil)
	without := src.Catalogue("s", []string{"dice-roller"})
	require.Equal(t, []string{"reputation"}, all.Disabled)
	require.Equal(t, []string{"dice-roller", "reputation"}, without.Disabled)
	planner.Fit(all)
	_, fresh := planner.Fit(without)
	require.False(t, fresh, "a replan without a skill refits the model")
	require.Equal(t, []string{"dice-roller/roll-dice"}, ruleTools(t, all, "I swing my axe at the troll"))
	require.Empty(t, ruleTools(t, without, "I swing my axe at the troll"))
}

// ruleTools are the toolPaths of the rule-based plan, narration left out.
func ruleTools(t *testing.T, cat *planner.Catalogue, text string) []string {
	t.Helper()
	p, err := planner.RulePlanner{}.Plan(context.Background(), planner.Request{SessionID: "q", Text: text, Catalogue: cat})
	require.NoError(t, err)
	var out []string
	for _, tool := range p.Tools {
		if tool.ToolID != "narrate" {
			out = append(out, tool.ToolPath)
		}
	}
	sort.Strings(out)
	return out
}
