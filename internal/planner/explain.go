package planner

import (
	"context"
	"sort"

	"github.com/narratoria/runtime/pkg/messages"
)

// Explanation is what `narratoria plan explain` shows: how each skill of
// the catalogue scored against a prompt, step by step, and the plan that
// results.
type Explanation struct {
	// Text is the prompt; English says whether it was read as English.
	Text    string `json:"text"`
	English bool   `json:"english"`
	// Language names the language of a prompt the rule planner does not
	// read (UnreadLanguage): it plans it storyteller-only. "" for English
	// and for a language read through a gloss.
	Language string `json:"language,omitempty"`
	// GlossLanguage names the language of a prompt read through a gloss
	// ("fr", "es", "de", "pt", "ja"), and Gloss is the English it was read
	// as (GlossOf); both "" otherwise.
	GlossLanguage string `json:"glossLanguage,omitempty"`
	Gloss         string `json:"gloss,omitempty"`
	// Steps are the rule-based planner's steps, in order, with what each
	// concluded for the prompt.
	Steps []Step `json:"steps"`
	// Skills are every skill's score, best first (narration skills last).
	Skills []SkillScore `json:"skills"`
	// Plan is the rule-based planner's plan for the prompt.
	Plan *messages.Plan `json:"plan"`
}

// Step is one step of the rule-based planner's scoring (see score.go):
// "read the prompt", "guard", "set aside", "term evidence", "learned
// model", "combine", "choose".
type Step struct {
	// Name names the step.
	Name string `json:"name"`
	// Said is what it concluded for the prompt, in words: which clauses it
	// read, which skills it kept or dropped and why.
	Said []string `json:"said"`
}

// Explain scores the catalogue's skills against text and plans it, so a
// skill author can see why a skill was chosen or not.
func Explain(cat *Catalogue, text string) (*Explanation, error) {
	tr := newTrace()
	scores := score(cat, text, nil, tr)
	sort.SliceStable(scores, func(i, j int) bool {
		if scores[i].Narration != scores[j].Narration {
			return !scores[i].Narration
		}
		return scores[i].Score > scores[j].Score
	})
	p, err := RulePlanner{}.Plan(context.Background(), Request{SessionID: "explain", Text: text, Catalogue: cat})
	if err != nil {
		return nil, err
	}
	unread, lang, glossed := PromptLanguage(text)
	return &Explanation{Text: text, English: glossed != "" || unread == "" && language(markup.ReplaceAllString(text, " ")) != "",
		Language: unread, GlossLanguage: lang, Gloss: glossed, Steps: tr.steps(), Skills: scores, Plan: p}, nil
}
