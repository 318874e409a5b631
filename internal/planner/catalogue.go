package planner

import (
	"sort"

	"github.com/narratoria/runtime/internal/skills"
	"github.com/narratoria/runtime/pkg/health"
	"github.com/narratoria/runtime/pkg/messages"
)

// CatalogueSkill is one skill as the planners see it.
type CatalogueSkill struct {
	// Entry is the registry entry (manifest fields, prompt, scripts).
	Entry *messages.RegistryEntry
	// Health is the skill's health in the session.
	Health health.State
	// Priority is the manifest priority, lowered for degraded skills.
	Priority int
	// TimeoutFactor multiplies script timeouts (2 for degraded skills).
	TimeoutFactor int
}

// Catalogue is what a planner may choose from for one prompt: skills with
// a live worker, not disabled, not in permanentFailure; sorted by priority
// (highest first), then name.
type Catalogue struct {
	// Skills are the selectable skills.
	Skills []CatalogueSkill
	// Disabled are the skills left out (disabled or permanentFailure).
	Disabled []string
	// LearnFrom are the entries of every live skill, the left-out ones
	// too, sorted by name: the rule-based planner's model is fitted on
	// them (nil: on Skills), so that a replan without a skill uses the
	// same model.
	LearnFrom []*messages.RegistryEntry
}

// Skill returns the named skill.
func (c *Catalogue) Skill(name string) (*CatalogueSkill, bool) {
	for i := range c.Skills {
		if c.Skills[i].Entry.Name == name {
			return &c.Skills[i], true
		}
	}
	return nil, false
}

// Sort orders the skills by priority (highest first), then name.
func (c *Catalogue) Sort() {
	sort.Slice(c.Skills, func(i, j int) bool {
		a, b := c.Skills[i], c.Skills[j]
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		return a.Entry.Name < b.Entry.Name
	})
}

// SkillIn applies §7's planner rules (pkg/health) to a skill in a state: a
// degraded one gets a lower priority (DegradedPriorityPenalty) and
// TimeoutFactor times the timeout (the caller leaves out what is not
// Selectable).
func SkillIn(e *messages.RegistryEntry, st health.State) CatalogueSkill {
	cs := CatalogueSkill{Entry: e, Health: st, Priority: e.Priority, TimeoutFactor: st.TimeoutFactor()}
	if st.Deprioritized() {
		cs.Priority -= DegradedPriorityPenalty
	}
	return cs
}

// DegradedPriorityPenalty is subtracted from a degraded skill's priority.
const DegradedPriorityPenalty = 50

// CatalogueFromDir builds a catalogue from the skills on disk, every one
// healthy, as a narrator would see them with workers serving all of them
// (for `narratoria plan explain --skills-dir` and planning tests). The
// loader's warnings name the skills left out.
func CatalogueFromDir(dir string) (*Catalogue, []string) {
	loaded, warnings := (&skills.Loader{Dir: dir}).Load()
	cat := &Catalogue{}
	for _, sk := range loaded {
		e := &messages.RegistryEntry{}
		sk.FillEntry(e)
		cat.Skills = append(cat.Skills, CatalogueSkill{Entry: e, Health: health.Healthy, Priority: e.Priority, TimeoutFactor: 1})
	}
	cat.Sort()
	out := make([]string, len(warnings))
	for i, w := range warnings {
		out[i] = w.String()
	}
	return cat, out
}
