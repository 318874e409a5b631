package planner

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/narratoria/runtime/internal/plancheck"
	"github.com/narratoria/runtime/pkg/messages"
)

// CatalogueResolver resolves toolPaths against a catalogue: a skill
// missing from it (unknown, unserved or disabled) or without the script is
// plancheck.ErrUnknownSkill.
type CatalogueResolver struct {
	// C is the catalogue; nil resolves nothing.
	C *Catalogue
}

// Resolve implements plancheck.Resolver.
func (r CatalogueResolver) Resolve(ref messages.ToolRef) (plancheck.Script, error) {
	if r.C == nil {
		return plancheck.Script{}, fmt.Errorf("%w: no catalogue", plancheck.ErrUnknownSkill)
	}
	cs, ok := r.C.Skill(ref.Skill)
	if !ok {
		return plancheck.Script{}, fmt.Errorf("%w: skill %q is not in the catalogue (unknown, unserved or disabled)", plancheck.ErrUnknownSkill, ref.Skill)
	}
	s, ok := cs.Entry.Resolve(ref)
	if !ok {
		return plancheck.Script{}, fmt.Errorf("%w: skill %q has no script %q", plancheck.ErrUnknownSkill, ref.Skill, ref.String())
	}
	return plancheck.Script{Skill: ref.Skill, Name: s.Name}, nil
}

// CheckPlan validates p completely against cat, as the narrator checks a
// plan before publishing it: schema and graph rules, and every toolPath a
// script of the catalogue.
func CheckPlan(p *messages.Plan, cat *Catalogue) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode plan: %w", err)
	}
	_, err = plancheck.Check(b, messages.PlanLimits{}, CatalogueResolver{C: cat})
	return err
}

// NarrationSkills are the names of the catalogue's skills that turn the
// others' outputs into prose (capability "narration"): the skill every
// plan ends with, which labelled prompts do not name.
func (c *Catalogue) NarrationSkills() []string {
	out := []string{}
	if c == nil {
		return out
	}
	for _, cs := range c.Skills {
		if slices.Contains(cs.Entry.Capabilities, narrationCapability) {
			out = append(out, cs.Entry.Name)
		}
	}
	return out
}
