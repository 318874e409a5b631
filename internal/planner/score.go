package planner

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/narratoria/runtime/pkg/messages"
)

// Scoring a prompt against a catalogue goes through named steps, each a
// function below; Explain shows what each concluded (Step):
//
//  1. readPrompt: the player's words, markup tags stripped, as the whole
//     prompt and its clauses (the sides), with their terms and features.
//  2. guardPrompt: text that gives the runtime orders, poses as its data or
//     floods; whether it is English, code, or holds a dice formula.
//  3. setAside: skills that are not scored (narration skills, which run
//     last; disabled ones; ones without a script).
//  4. matchTerms and termEvidence: each skill's closest example on each
//     side, the best side where it is near the top, its keywords and
//     negative example — the similarity score.
//  5. learnedEvidence: for a skill with examples, the learned model's
//     probability on each side, blended with the similarity, and the
//     scripts the clauses ask for.
//  6. unlearnedScripts: for a skill without a model, the script and the
//     scripts other clauses ask for.
//  7. choose: the guard's vetoes, then the thresholds.

// Names of the scoring steps, in order (Step.Name).
const (
	stepRead     = "read the prompt"
	stepGuard    = "guard"
	stepSetAside = "set aside"
	stepTerms    = "term evidence"
	stepLearned  = "learned model"
	stepCombine  = "combine"
	stepChoose   = "choose"
)

// stepOrder is the order Explain lists the steps in.
var stepOrder = []string{stepRead, stepGuard, stepSetAside, stepTerms, stepLearned, stepCombine, stepChoose}

// trace records what each step concluded; a nil trace records nothing
// (planning), so the steps cost nothing more than the scores.
type trace struct {
	said map[string][]string
}

func newTrace() *trace { return &trace{said: map[string][]string{}} }

// add records a conclusion of a step.
func (t *trace) add(step, format string, args ...any) {
	if t == nil {
		return
	}
	t.said[step] = append(t.said[step], fmt.Sprintf(format, args...))
}

// steps lists the steps in order.
func (t *trace) steps() []Step {
	out := make([]Step, 0, len(stepOrder))
	for _, name := range stepOrder {
		said := t.said[name]
		if said == nil {
			said = []string{"nothing to do"}
		}
		out = append(out, Step{Name: name, Said: said})
	}
	return out
}

// reading is the prompt as the scorer reads it.
type reading struct {
	// raw is the prompt as sent; text is it without markup tags; read is
	// text with chat abbreviations written out, slips corrected and what is
	// not a real action cut (typed.go, scope.go): what is scored.
	raw, text, read string
	// cuts are the parts of read's text that were cut (negated or
	// hypothetical); unreal says nothing was left.
	cuts   []string
	unreal bool
	// typed is the text as read before anything was cut (chat words
	// written out, slips corrected).
	typed string
	// lang is the prompt's language (language.go); glossed is the English
	// a prompt in another language was read as (gloss.go), "" for one in
	// English or in a language not read.
	lang, glossed string
	// named caches names(): nil until a skill that needs a name asks.
	named *bool
	// sides are the whole prompt's terms, then each clause's when there
	// are several; texts and feats are their words and features.
	sides []terms
	texts []string
	feats [][]string
}

// names says whether the prompt names a group or someone (namesSomeone),
// in what was cut too ("I swore never to serve the Black Lantern. How do
// they regard me now?"); worked out once, when a skill needs a name.
func (r *reading) names() bool {
	if r.named == nil {
		n := namesSomeone(r.typed)
		r.named = &n
	}
	return *r.named
}

// side names side i of a reading in words.
func (r *reading) side(i int) string {
	if i == 0 {
		return "the prompt"
	}
	return fmt.Sprintf("clause %d %q", i, strings.TrimSpace(r.texts[i]))
}

// readPrompt is step 1: markup tags are not the player's words ("<b>I
// attack</b>"); chat abbreviations are written out and slips of the
// keyboard corrected against the examples' words (typed.go); negated and
// hypothetical actions are cut (scope.go). The sides are what is left,
// whole, then each clause when there are several, with their terms and the
// learned model's features.
func readPrompt(mdl *model, text string, tr *trace) *reading {
	r := &reading{raw: text, text: markup.ReplaceAllString(text, " ")}
	r.lang, r.glossed = readLanguage(r.text)
	chat := expandChat(cmp.Or(r.glossed, r.text))
	typed, fixed := mdl.vocab.correctText(chat)
	cuts := unreal(typed)
	r.read = plainly(keep(typed, cuts))
	for _, c := range cuts {
		r.cuts = append(r.cuts, c.why+": "+strings.TrimSpace(typed[c.start:c.end]))
	}
	r.unreal = len(cuts) > 0 && len(words(r.read)) == 0
	r.typed = typed
	r.sides = []terms{termsOf(r.read)}
	r.texts = []string{r.read}
	if parts := splitClauses(r.read); len(parts) > 1 {
		for _, c := range parts {
			r.sides = append(r.sides, termsOf(c))
			r.texts = append(r.texts, c)
		}
	}
	r.feats = make([][]string, len(r.texts))
	for i, t := range r.texts {
		r.feats[i] = featuresOf(t)
	}
	if tr != nil {
		if r.text != r.raw {
			tr.add(stepRead, "markup tags stripped: %q", strings.TrimSpace(r.text))
		}
		if r.glossed != "" {
			tr.add(stepRead, "in %s, read through its gloss as %q", languageNames[r.lang], r.glossed)
		}
		if chat != apostrophes.Replace(cmp.Or(r.glossed, r.text)) {
			tr.add(stepRead, "chat words written out: %q", strings.TrimSpace(chat))
		}
		if len(fixed) > 0 {
			tr.add(stepRead, "slips of the keyboard corrected: %s", strings.Join(fixed, ", "))
		}
		for _, c := range r.cuts {
			tr.add(stepRead, "not a real action, cut (%s)", c)
		}
		if kept := keep(typed, cuts); r.read != kept {
			tr.add(stepRead, "said plainly: %q", strings.TrimSpace(r.read))
		}
		switch {
		case r.unreal:
			tr.add(stepRead, "nothing is left: every action is negated or hypothetical")
		case len(r.sides) == 1:
			tr.add(stepRead, "one clause: the prompt is read whole")
		default:
			var cs []string
			for i := 1; i < len(r.texts); i++ {
				cs = append(cs, fmt.Sprintf("%q", strings.TrimSpace(r.texts[i])))
			}
			tr.add(stepRead, "read whole and as %d clauses: %s", len(cs), strings.Join(cs, ", "))
		}
		if _, ok := r.sides[0]["~asking"]; ok {
			tr.add(stepRead, "a question")
		}
	}
	return r
}

// guard is what guardPrompt found.
type guard struct {
	// forged: the text poses as the runtime's own data (forgeries).
	forged bool
	// injected: it gives the runtime orders or names a tool; repetitive:
	// it repeats a few words over and over.
	injected, repetitive bool
	// english: it reads as English or through a gloss; formula: it holds a dice formula (not
	// in forged text); code: it is mostly code, markup or a path (and holds
	// no dice formula).
	english, formula, code bool
	// unreal: every action of it is negated or hypothetical.
	unreal bool
	// nonsense: most of its words are no words (gibberish).
	nonsense bool
}

// blocked says the prompt chooses no skill but a dice formula's.
func (g guard) blocked() bool { return g.forged || g.injected || g.repetitive }

// guardPrompt is step 2: forgeries, injections and repetition are looked
// for in the text as sent; English, a dice formula and code in the text
// without markup.
func guardPrompt(cat *Catalogue, mdl *model, r *reading, tr *trace) guard {
	g := guard{forged: forgeries.MatchString(r.raw)}
	g.injected = !g.forged && injection(cat, r.raw)
	if chat := expandChat(r.raw); !g.forged && !g.injected && chat != r.raw {
		g.injected = injection(cat, chat) // "ignore ur previous instructions"
	}
	if !g.forged && !g.injected && r.glossed != "" {
		g.injected = injection(cat, r.glossed) // "Ignore tes instructions précédentes"
	}
	g.repetitive = !g.forged && !g.injected && repetitive(r.raw)
	g.english = r.lang == languageEnglish || r.glossed != ""
	g.formula = diceFormula.MatchString(r.text) && !g.forged
	g.code = looksLikeCode(r.text) && !g.formula
	g.unreal = r.unreal
	g.nonsense = !g.formula && gibberish(mdl.vocab, r.read)
	if tr != nil {
		switch {
		case g.forged:
			tr.add(stepGuard, "poses as the runtime's own data (a tool-call tag, a $ref into an output, a file path): no skill is chosen, not even for a dice formula")
		case g.injected:
			tr.add(stepGuard, "gives the runtime orders (asks to ignore instructions, names a tool, holds a script tag, SQL or a shell command): no skill is chosen but for a dice formula")
		case g.repetitive:
			tr.add(stepGuard, "repeats a few words over and over: no skill is chosen but for a dice formula")
		default:
			tr.add(stepGuard, "no orders to the runtime, no forged data, no flooding")
		}
		if !g.english {
			tr.add(stepGuard, "not English (%s) and no gloss reads it: every skill is dropped, the narration skill answers alone",
				cmp.Or(language(r.text), "no letters"))
		}
		if g.code {
			tr.add(stepGuard, "looks like code, markup or a path: every skill is dropped, the narration skill answers alone")
		}
		if g.nonsense {
			tr.add(stepGuard, "most of its words are no words: every skill is dropped, the narration skill answers alone")
		}
		if g.formula {
			tr.add(stepGuard, "holds a dice formula (%s): a skill that takes one is chosen", strings.ReplaceAll(diceFormula.FindString(r.text), " ", ""))
		}
	}
	return g
}

// skillEntry is a skill of the catalogue with what the model knows of it.
type skillEntry struct {
	cs *CatalogueSkill
	p  *profile
	sm *skillModel
	// narration: the skill has the narration capability.
	narration bool
}

// entriesOf pairs each skill of the catalogue with its model.
func entriesOf(cat *Catalogue, mdl *model) []skillEntry {
	all := make([]skillEntry, 0, len(cat.Skills))
	for i := range cat.Skills {
		cs := &cat.Skills[i]
		sm := mdl.skills[cs.Entry.Name]
		all = append(all, skillEntry{cs: cs, p: sm.profile, sm: sm, narration: slices.Contains(cs.Entry.Capabilities, narrationCapability)})
	}
	return all
}

// setAside is step 3: it returns the score of a skill that is not scored —
// a narration skill (it runs last, reading the others' outputs), a skill
// disabled for the attempt, a skill without a script — and false for the
// others.
func setAside(e skillEntry, disabled []string, tr *trace) (SkillScore, bool) {
	name := e.cs.Entry.Name
	sc := SkillScore{Skill: name, Threshold: matchThreshold}
	switch {
	case e.narration:
		sc.Narration, sc.Why = true, "narration skill: always runs last, reading the others' outputs"
	case slices.Contains(disabled, name):
		sc.Why = "disabled for this attempt"
	case len(e.cs.Entry.Scripts) == 0:
		sc.Why = "no script"
	default:
		return sc, false
	}
	tr.add(stepSetAside, "%s: %s", name, sc.Why)
	return sc, true
}

// match is a skill's best example on one side.
type match struct {
	sim     float64
	shows   bool
	script  int
	example string
	// moodScript is the script of the best example in the side's
	// mood (question or statement), -2 when none.
	moodScript int
	moodSim    float64
}

// examples is what matchTerms found: every skill's examples against every
// side.
type examples struct {
	// best is each skill's best example by side; top each side's best
	// similarity among the skills that are not narration skills.
	best [][]match // by skill, by side
	top  []float64
	// negBest and negText are each skill's closest negative example.
	negBest []float64
	negText []string
	// anyShows says a skill's example shows intent on some side (a concept
	// or a phrase) with at least half the match threshold.
	anyShows []bool
}

// matchTerms is the first half of step 4: it compares each skill's
// examples with each side. An example's similarity to a side is the share
// of the side's informative weight the example explains, less a little for
// what the example says besides, and whether the match shows intent (a
// concept or a phrase that not every skill's examples have). Words no
// example has say nothing about which skill fits: their weight is 0 (a
// troll is no less an attack). A side or an example without a word (not
// only phrases) worth something matches nothing.
func matchTerms(mdl *model, all []skillEntry, r *reading) *examples {
	sides := r.sides
	idf := mdl.idf
	type sideInfo struct {
		all         float64
		informative bool
	}
	infos := make([]sideInfo, len(sides))
	for i, side := range sides {
		for t, w := range side {
			if x := w * idf[t]; x > 0 {
				infos[i].all += x
				infos[i].informative = infos[i].informative || !strings.HasPrefix(t, "+")
			}
		}
	}
	// What each example has of each side, through the model's index of
	// terms: the side's weight it explains, the weight of its own words it
	// shares, and whether a shared term shows intent.
	type overlap struct {
		in, said float64
		shows    bool
	}
	over := make([][]overlap, len(sides))
	for i, side := range sides {
		over[i] = make([]overlap, mdl.examples)
		for t, w := range side {
			x := idf[t]
			if x <= 0 {
				continue
			}
			ev, phrase := evidence(t), strings.HasPrefix(t, "+")
			for _, p := range mdl.postings[t] {
				o := &over[i][p.id]
				o.in += w * x
				o.shows = o.shows || ev
				if !phrase {
					o.said += p.w * x
				}
			}
		}
	}
	sim := func(x *example, id int, mass float64, i int) (float64, bool) {
		side, o := sides[i], over[i][id]
		if !infos[i].informative || mass == 0 || o.in == 0 {
			return 0, false
		}
		v := o.in / infos[i].all / (1 + coverSlack*(mass-o.said))
		if x.asking != (side["~asking"] > 0) {
			// A question matches questions better, a statement statements
			// ("Do the elves trust me?" asks; "I help the elves" acts).
			v *= moodPenalty
		}
		return v, o.shows
	}
	ex := &examples{
		best:     make([][]match, len(all)),
		top:      make([]float64, len(sides)),
		negBest:  make([]float64, len(all)),
		anyShows: make([]bool, len(all)),
		negText:  make([]string, len(all)),
	}
	asking := make([]bool, len(sides))
	for i, sd := range sides {
		asking[i] = sd["~asking"] > 0
	}
	for k, e := range all {
		ex.best[k] = make([]match, len(sides))
		for i := range ex.best[k] {
			ex.best[k][i].moodScript = -2
		}
		for j := range e.p.examples {
			x := &e.p.examples[j]
			for i := range sides {
				v, shows := sim(x, e.sm.first+j, e.sm.mass[j], i)
				if x.neg {
					if v > ex.negBest[k] {
						ex.negBest[k], ex.negText[k] = v, x.text
					}
					continue
				}
				if shows && v >= matchThreshold/2 {
					ex.anyShows[k] = true
				}
				b := &ex.best[k][i]
				if x.asking == asking[i] && v > b.moodSim {
					b.moodSim, b.moodScript = v, x.script
				}
				if v > b.sim {
					b.sim, b.shows, b.script, b.example = v, shows, x.script, x.text
				}
			}
		}
		if e.narration {
			continue
		}
		for i := range sides {
			ex.top[i] = max(ex.top[i], ex.best[k][i].sim)
		}
	}
	return ex
}

// termScore is what the term evidence says of one skill.
type termScore struct {
	// m is the skill's match: on the best side where it is near the top
	// (relative), else on its best side.
	m        match
	relative bool
	// shows: an example shows intent; script is the script of the best
	// example in the prompt's mood (-1: the skill's, -2: none).
	shows  bool
	script int
	// sim is the match's similarity, scaled for a degraded skill; neg the
	// closest negative example's.
	sim, neg float64
}

// termEvidence is the second half of step 4: the skill's match is its best
// side where it is near the top (competition between skills keeps a shared
// word from choosing every skill that uses it); it fills the score's
// Example, Negative, Keywords, Health, Similarity and the similarity score
// (plus the keywords' weight; at least the threshold for a skill without
// examples whose keyword is found; 1 for a dice formula a skill takes).
func termEvidence(k int, e skillEntry, r *reading, hasFormula bool, ex *examples, sc *SkillScore, tr *trace) termScore {
	var m, far match
	relative := false
	for i := range r.sides {
		b := ex.best[k][i]
		if b.sim >= rivalRatio*ex.top[i] {
			if !relative || b.sim > m.sim {
				m, relative = b, true
			}
		} else if b.sim > far.sim {
			far = b
		}
	}
	if !relative {
		m = far
	}
	sc.Example = m.example
	ts := termScore{m: m, relative: relative, script: m.script, shows: m.shows || ex.anyShows[k]}
	if m.moodScript != -2 && m.moodSim >= matchThreshold/2 {
		// The script: the best example in the prompt's mood.
		ts.script = m.moodScript
	}
	ts.sim, ts.neg = m.sim, ex.negBest[k]
	if ts.neg > 0 {
		sc.Negative = ex.negText[k]
	}
	prompt := r.sides[0]
	for stem, kw := range e.p.keywords {
		if _, ok := prompt[stem]; ok && !slices.Contains(sc.Keywords, kw) {
			sc.Keywords = append(sc.Keywords, kw)
		}
	}
	sort.Strings(sc.Keywords)
	if e.cs.Health.Deprioritized() {
		// §7: a degraded skill is chosen only when it fits clearly.
		ts.sim *= degradedFactor
		sc.Health = string(e.cs.Health)
	}
	sc.Similarity = round3(ts.sim)
	sc.Score = round3(ts.sim + keywordWeight*float64(min(len(sc.Keywords), 2)))
	if e.p.described && len(sc.Keywords) > 0 {
		// A manifest without examples is matched by its keywords.
		sc.Score = max(sc.Score, matchThreshold)
	}
	if hasFormula {
		sc.Score = max(sc.Score, 1)
	}
	if tr != nil {
		name := e.cs.Entry.Name
		if m.example == "" {
			tr.add(stepTerms, "%s: no example shares an informative word with the prompt", name)
		} else {
			where := "near the top there"
			if !relative {
				where = "not near the top on any side"
			}
			side := bestSide(ex.best[k], m)
			tr.add(stepTerms, "%s: closest example %q, similarity %.3f on %s (%s)", name, m.example, m.sim, r.side(side), where)
			if !ts.shows {
				tr.add(stepTerms, "%s: only names of things match (no action, phrase or concept)", name)
			}
		}
		if len(sc.Keywords) > 0 {
			tr.add(stepTerms, "%s: keywords found: %s", name, strings.Join(sc.Keywords, ", "))
		}
		if ts.neg > 0 {
			tr.add(stepTerms, "%s: closest negative example %q, similarity %.3f", name, sc.Negative, ts.neg)
		}
		if sc.Health != "" {
			tr.add(stepCombine, "%s: %s, its similarity scaled by %.1f", name, sc.Health, degradedFactor)
		}
	}
	return ts
}

// bestSide is the side a skill's match m comes from (the first with its
// similarity and example).
func bestSide(bySide []match, m match) int {
	for i, b := range bySide {
		if b.sim == m.sim && b.example == m.example {
			return i
		}
	}
	return 0
}

// learnedEvidence is step 5, for a skill the model learned: the skill's
// probability on each side, blended with that side's similarity (scaled
// so that matchThreshold is 0.5; a one-clause prompt nearly the same as an
// example, nearCopy, gets at least the threshold) and scaled for a degraded
// skill; the score is the best side's. Each clause that chooses the skill picks the
// script its script regressions like best; a second script of the skill
// needs a clause sure of it.
func learnedEvidence(e skillEntry, r *reading, ts termScore, bySide []match, sc *SkillScore, tr *trace) {
	sm := e.sm
	var ps []float64
	var why []string
	bestP := -1.0
	var raw []float64
	for i, fs := range r.feats {
		p, w := sm.skill.prob(fs)
		if tr != nil {
			raw = append(raw, p)
		}
		p = (1-cosineShare)*p + cosineShare*min(1, bySide[i].sim/(2*matchThreshold))
		if i == 0 && len(r.sides) == 1 && bySide[i].sim >= nearCopy && bySide[i].shows && p < learnedThreshold {
			// A one-clause prompt that says an example again.
			p = learnedThreshold
			tr.add(stepCombine, "%s: the prompt says an example again (similarity %.3f): at least the threshold", e.cs.Entry.Name, bySide[i].sim)
		}
		if e.cs.Health.Deprioritized() {
			p *= degradedFactor
		}
		ps = append(ps, p)
		if p > bestP {
			bestP, why = p, w
		}
	}
	sc.Score, sc.Threshold, sc.Features = round3(bestP), learnedThreshold, why
	sc.Script, sc.Also = "", nil
	pick := func(i int) (string, float64) {
		k, p := sm.script(r.feats[i])
		if k < 0 {
			k, p = ts.script, 1
		}
		if k < 0 {
			return pickScript(e.cs.Entry, words(r.texts[i])).Name, 1
		}
		return e.cs.Entry.Scripts[k].Name, p
	}
	var picks []string
	for i := 1; i < len(r.sides); i++ {
		if ps[i] >= learnedThreshold {
			if s, p := pick(i); !slices.Contains(picks, s) && (len(picks) == 0 || p >= alsoConfidence) {
				picks = append(picks, s)
			}
		}
	}
	if len(picks) == 0 {
		s, _ := pick(0)
		picks = []string{s}
	}
	sc.Script, sc.Also = picks[0], picks[1:]
	if tr != nil {
		name := e.cs.Entry.Name
		var on, blended []string
		for i := range raw {
			on = append(on, fmt.Sprintf("%.3f on %s", raw[i], r.side(i)))
			blended = append(blended, fmt.Sprintf("%.3f on %s", ps[i], r.side(i)))
		}
		tr.add(stepLearned, "%s: probability %s", name, strings.Join(on, ", "))
		if len(why) > 0 {
			tr.add(stepLearned, "%s: weighing most: %s", name, strings.Join(why, ", "))
		}
		tr.add(stepCombine, "%s: %.0f%% learned probability + %.0f%% similarity: %s; score %.3f (threshold %.2f); script %s",
			name, 100*(1-cosineShare), 100*cosineShare, strings.Join(blended, ", "), sc.Score, sc.Threshold, strings.Join(picks, " + "))
	}
}

// unlearnedScripts is step 6, for a skill without a learned model (no
// examples): the script of its best example in the prompt's mood, else the
// one whose name and description share the most words with the prompt;
// another clause may ask for another script of the same skill.
func unlearnedScripts(e skillEntry, r *reading, ts termScore, ex *examples, k int, sc *SkillScore, tr *trace) {
	scriptIdx := ts.script
	if scriptIdx < 0 {
		picked := pickScript(e.cs.Entry, words(r.text)).Name
		scriptIdx = slices.IndexFunc(e.cs.Entry.Scripts, func(s messages.RegistryScript) bool { return s.Name == picked })
	}
	sc.Script = e.cs.Entry.Scripts[max(scriptIdx, 0)].Name
	if len(r.sides) > 1 {
		for i := range r.sides {
			b := ex.best[k][i]
			if b.moodScript >= 0 && b.moodSim >= matchThreshold && b.moodSim >= rivalRatio*ex.top[i] {
				if name := e.cs.Entry.Scripts[b.moodScript].Name; name != sc.Script && !slices.Contains(sc.Also, name) {
					sc.Also = append(sc.Also, name)
				}
			}
		}
	}
	if tr != nil {
		tr.add(stepCombine, "%s: no learned model (no examples): similarity %.3f + %.2f per keyword (at most two) = score %.3f (threshold %.2f); script %s",
			e.cs.Entry.Name, sc.Similarity, keywordWeight, sc.Score, sc.Threshold, strings.Join(append([]string{sc.Script}, sc.Also...), " + "))
	}
}

// choose is step 7: the guard's vetoes first (not English, code; a dice
// formula chooses the skill that takes it; orders to the runtime), then
// the threshold; a skill without a learned model is also dropped when a
// negative example is closer than any example, when another skill matches
// much better, or when only names of things match.
func choose(learned, hasFormula, unnamed bool, g guard, ts termScore, sc *SkillScore, tr *trace) {
	switch {
	case !g.english:
		sc.Score, sc.Why = 0, "the prompt is not English: the narration skill answers alone"
	case g.code:
		sc.Score, sc.Why = 0, "the prompt looks like code, markup or a path, not a player's words: the narration skill answers alone"
	case g.nonsense:
		sc.Score, sc.Why = 0, "most of the prompt's words are no words: the narration skill answers alone"
	case hasFormula:
		sc.Chosen, sc.Why = true, "the prompt holds a dice formula"
	case g.unreal:
		sc.Score, sc.Why = 0, "every action of the prompt is negated or hypothetical: the narration skill answers alone"
	case g.blocked():
		sc.Score, sc.Why = 0, "the prompt tries to give the runtime orders (names a tool, asks to ignore instructions, holds a script tag, SQL or a shell command) or repeats a few words over and over: the narration skill answers alone"
	case learned && sc.Score >= learnedThreshold && unnamed:
		sc.Negative = ""
		sc.Why = "its examples name a group or someone, and the prompt names no one"
	case learned && sc.Score >= learnedThreshold:
		sc.Chosen, sc.Negative = true, ""
		sc.Why = "score at or above the threshold"
	case learned:
		sc.Negative = ""
		sc.Why = "score below the threshold"
	case ts.neg > ts.sim && ts.neg >= matchThreshold:
		sc.Why = "closer to the negative example than to any example"
	case sc.Score >= matchThreshold && !ts.relative && len(sc.Keywords) == 0:
		sc.Negative = ""
		sc.Why = "another skill matches much better"
	case sc.Score >= matchThreshold && !ts.shows && len(sc.Keywords) == 0:
		sc.Negative = ""
		sc.Why = "only names of things match (no action, phrase or keyword): not an intent"
	case sc.Score >= matchThreshold:
		sc.Chosen, sc.Negative = true, ""
		sc.Why = "score at or above the threshold"
	default:
		sc.Negative = ""
		sc.Why = "score below the threshold"
	}
	if tr != nil {
		verdict := "dropped"
		if sc.Chosen {
			verdict = "kept"
		}
		tr.add(stepChoose, "%s: %s, score %.3f (threshold %.2f): %s", sc.Skill, verdict, sc.Score, sc.Threshold, sc.Why)
	}
}

// scoreSkills scores every skill of the catalogue against the text.
func scoreSkills(cat *Catalogue, text string, disabled []string) []SkillScore {
	return score(cat, text, disabled, nil)
}

// score runs the scoring steps; tr, when not nil, records what each
// concluded.
func score(cat *Catalogue, text string, disabled []string, tr *trace) []SkillScore {
	if cat == nil {
		return nil
	}
	mdl := modelOf(cat)
	r := readPrompt(mdl, text, tr)
	g := guardPrompt(cat, mdl, r, tr)
	all := entriesOf(cat, mdl)
	ex := matchTerms(mdl, all, r)
	out := make([]SkillScore, 0, len(all))
	for k, e := range all {
		if sc, aside := setAside(e, disabled, tr); aside {
			out = append(out, sc)
			continue
		}
		sc := SkillScore{Skill: e.cs.Entry.Name, Threshold: matchThreshold}
		// A dice formula chooses a skill that takes one (unless the guard
		// vetoes every skill).
		hasFormula := g.formula && wantsFormula(e.cs.Entry)
		ts := termEvidence(k, e, r, hasFormula, ex, &sc, tr)
		learned := e.sm.skill != nil
		if learned {
			learnedEvidence(e, r, ts, ex.best[k], &sc, tr)
		} else {
			unlearnedScripts(e, r, ts, ex, k, &sc, tr)
		}
		choose(learned, hasFormula, e.sm.named && !r.names(), g, ts, &sc, tr)
		out = append(out, sc)
	}
	limitTools(out, tr)
	return out
}

// maxTools is the most tools (scripts, the narration's left out) a rule
// plan runs: a player's prompt asks for one to three things.
const maxTools = 3

// limitTools keeps the chosen skills' scripts to maxTools: the
// lowest-scored skill (ties: the later in the catalogue) gives way, its
// last extra script first, then itself.
func limitTools(out []SkillScore, tr *trace) {
	n := 0
	for _, sc := range out {
		if sc.Chosen {
			n += 1 + len(sc.Also)
		}
	}
	for n > maxTools {
		low := -1
		for k, sc := range out {
			if sc.Chosen && (low < 0 || sc.Score <= out[low].Score) {
				low = k
			}
		}
		sc := &out[low]
		n--
		if len(sc.Also) > 0 {
			tr.add(stepChoose, "%s: more than %d tools chosen; its script %s, the lowest scored, is dropped", sc.Skill, maxTools,
				sc.Also[len(sc.Also)-1])
			sc.Also = sc.Also[:len(sc.Also)-1]
			continue
		}
		sc.Chosen = false
		sc.Why = fmt.Sprintf("more than %d tools chosen: the lowest score is dropped", maxTools)
		tr.add(stepChoose, "%s: dropped, %s", sc.Skill, sc.Why)
	}
}
