package planner

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/narratoria/runtime/pkg/messages"
)

// Request is what a planner plans from.
type Request struct {
	// SessionID is the prompt's session.
	SessionID string
	// Text is the player's words.
	Text string
	// Attempt is 1..5 in the replan loop.
	Attempt int
	// ParentPlanID is the previous attempt's plan ID ("" for the first).
	ParentPlanID string
	// DisabledSkills must not be used.
	DisabledSkills []string
	// Catalogue is what may be used.
	Catalogue *Catalogue
}

// Planner turns a prompt into a Plan JSON.
type Planner interface {
	// Name is "rules" or "llm" (a metric label).
	Name() string
	// Plan builds a plan; it must honour ctx's deadline.
	Plan(ctx context.Context, req Request) (*messages.Plan, error)
}

// narrationCapability marks skills that turn earlier outputs into prose;
// the rule-based planner runs them last, reading the others' outputs.
const narrationCapability = "narration"

// RulePlanner is the default planner: it needs no model. It picks the
// skills whose keywords or capabilities appear in the prompt, runs them in
// parallel, then runs a narration skill (capability "narration") that reads
// their outputs through "$ref"s. It is deterministic for a given prompt and
// catalogue (except the plan ID) and always returns a valid plan — with no
// usable skill, a plan of its narrative line alone.
type RulePlanner struct{}

// Name implements Planner.
func (RulePlanner) Name() string { return "rules" }

// scenes open a plan whose narration skill tells the player's action: they
// set the scene without repeating the player's words (the narration does).
var scenes = []string{
	"The world holds its breath.",
	"The story turns on your next move.",
	"All eyes turn to you.",
}

// narratives are the planner's own lines for a plan without a narration
// skill; one is picked by a hash of the prompt.
var narratives = []string{
	`You declare: "%s"`,
	`The moment stretches as you act: "%s"`,
	`All eyes turn to you: "%s"`,
}

// Plan implements Planner.
func (RulePlanner) Plan(_ context.Context, req Request) (*messages.Plan, error) {
	text := strings.TrimSpace(req.Text)
	h := fnv.New32a()
	_, _ = h.Write([]byte(text))
	p := &messages.Plan{
		RequestID:      uuid.NewString(),
		SessionID:      req.SessionID,
		Narrative:      fmt.Sprintf(narratives[int(h.Sum32())%len(narratives)], clip(text, 300)),
		DisabledSkills: slices.Clone(req.DisabledSkills),
		Metadata:       messages.PlanMetadata{GenerationAttempt: max(req.Attempt, 1)},
		Tools:          []messages.Tool{},
	}
	if p.DisabledSkills == nil {
		p.DisabledSkills = []string{}
	}
	if req.ParentPlanID != "" {
		parent := req.ParentPlanID
		p.Metadata.ParentPlanID = &parent
	}
	if req.Catalogue == nil {
		return p, nil
	}
	ws := words(text)
	type action struct {
		cs     *CatalogueSkill
		script *messages.RegistryScript
	}
	var actions []action
	var narrator *CatalogueSkill
	for _, sc := range scoreSkills(req.Catalogue, text, p.DisabledSkills) {
		cs, _ := req.Catalogue.Skill(sc.Skill)
		switch {
		case sc.Narration && narrator == nil && len(cs.Entry.Scripts) > 0 && !slices.Contains(p.DisabledSkills, sc.Skill):
			narrator = cs
		case sc.Chosen:
			for _, name := range append([]string{sc.Script}, sc.Also...) {
				i := slices.IndexFunc(cs.Entry.Scripts, func(s messages.RegistryScript) bool { return s.Name == name })
				actions = append(actions, action{cs: cs, script: &cs.Entry.Scripts[max(i, 0)]})
			}
		}
	}
	refs := map[string]any{}
	var deps []string
	for n, a := range actions {
		cs, script := a.cs, a.script
		id := fmt.Sprintf("t%d-%s", n+1, cs.Entry.Name)
		if len(id) > 64 {
			id = id[:64]
		}
		p.Tools = append(p.Tools, messages.Tool{
			ToolID: id, ToolPath: cs.Entry.Name + "/" + script.Name, Description: script.Description,
			Input: Inputs(script, text), Dependencies: []string{}, Required: true, Async: true,
			RetryPolicy: messages.RetryPolicy{MaxRetries: messages.MaxRetriesDefault, BackoffMs: messages.BackoffMsDefault},
			TimeoutMs:   ScaleTimeout(script.TimeoutMs, cs.TimeoutFactor),
		})
		if _, ok := refs[cs.Entry.Name]; ok {
			refs[cs.Entry.Name+"/"+script.Name] = "$" + id
		} else {
			refs[cs.Entry.Name] = "$" + id
		}
		deps = append(deps, id)
	}
	if narrator != nil {
		p.Narrative = scenes[int(h.Sum32())%len(scenes)]
		script := pickScript(narrator.Entry, ws)
		input := map[string]any{"prompt": escapeRef(text), "context": refs}
		b, _ := json.Marshal(input)
		p.Tools = append(p.Tools, messages.Tool{
			ToolID: "narrate", ToolPath: narrator.Entry.Name + "/" + script.Name, Description: "tell what happens",
			Input: b, Dependencies: append([]string{}, deps...), Required: true, Async: true,
			RetryPolicy: messages.RetryPolicy{MaxRetries: messages.MaxRetriesDefault, BackoffMs: messages.BackoffMsDefault},
			TimeoutMs:   ScaleTimeout(script.TimeoutMs, narrator.TimeoutFactor),
		})
	}
	p.Parallel = len(actions) > 1
	return p, nil
}

// ScaleTimeout is a script's timeout (ms, the default tool timeout when
// 0) times a skill's TimeoutFactor (at least 1): degraded skills get
// longer (§7).
func ScaleTimeout(ms int64, factor int) int64 {
	if ms <= 0 {
		ms = messages.ToolTimeoutDefault.Milliseconds()
	}
	return ms * int64(max(factor, 1))
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// pickScript chooses the script whose name or description shares the most
// words with the prompt; ties go to the first script of the manifest.
func pickScript(e *messages.RegistryEntry, ws []string) *messages.RegistryScript {
	best, bestScore := &e.Scripts[0], -1
	for i := range e.Scripts {
		s := &e.Scripts[i]
		score := 0
		hay := words(strings.ReplaceAll(s.Name, "-", " ") + " " + s.Description)
		for _, w := range ws {
			if len(w) >= 3 && slices.Contains(hay, w) {
				score++
			}
		}
		if score > bestScore {
			best, bestScore = s, score
		}
	}
	return best
}
