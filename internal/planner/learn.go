package planner

import (
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	snowball "github.com/kljensen/snowball/english"

	"github.com/narratoria/runtime/pkg/messages"
)

// The learned half of intent matching. When a catalogue is first seen, one
// logistic regression per skill is fitted to the manifests' examples: the
// skill's examples (skill-wide and per script) are its positives; every
// other skill's examples, its own negative examples and the narration
// skill's examples (prompts the narration answers alone: ordinary actions)
// are its negatives. A second regression per script, fitted on the skill's
// script examples alone, tells its scripts apart. Features are the terms of
// termsOf (stems, concepts, word pairs, the question marker) plus function
// words, the first word and the tense, which is how "Do I know him?" (asks)
// differs from "Remember him" (tells). Fitting is full-batch gradient
// descent from zero for a fixed number of rounds over examples in manifest
// order: deterministic, no model file, about 0.4 s for the sample skills
// (fitted once per registry version, in the background: the narrator warms it through Fit).

const (
	// learnedThreshold is the score a skill with examples needs to be
	// chosen.
	learnedThreshold = 0.58
	// nearCopy is the similarity to an example at which a prompt (or a
	// clause) says that example again, whatever the regression makes of it.
	nearCopy = 0.8
	// cosineShare is the share of the score that comes from the closest
	// example's similarity (scaled so that matchThreshold maps to 0.5);
	// the rest is the learned probability. The nearest example catches a
	// phrasing close to one example that the regression averages away.
	cosineShare = 0.3
	// learnRounds, learnRate and learnL2 fix the fitting: rounds of
	// accelerated gradient descent (200 to 400 rounds give nearly the same
	// plans; 100 underfit), step size, and the L2 penalty that keeps the
	// weights of words seen once small.
	learnRounds = 200
	learnRate   = 2.0
	learnL2     = 0.00005
	// posShare is the share of the loss the positives carry, the rest the
	// negatives': a skill's examples are a sixth of all, and weighing them
	// half made every prompt of unknown words a coin toss.
	posShare = 0.3
)

// featuresOf returns the features of a text, sorted: its terms, the
// mood words it has ("w:my", "w:did"), its first word ("^remember")
// and a past-tense marker ("-ed" or an irregular past).
func featuresOf(text string) []string {
	set := map[string]bool{}
	for t := range termsOf(text) {
		set[t] = true
	}
	ws := words(text)
	for i, w := range ws {
		w = strings.Trim(w, "'-")
		if w == "" || len(w) > 40 {
			continue
		}
		if i == 0 {
			set["^"+snowball.Stem(w, false)] = true
		}
		if moodWords[w] {
			set["w:"+w] = true
		} else if !stopwords[w] {
			role := wordRole(ws, i)
			for _, f := range lexiconFeatures(w) {
				if role.admits(f) {
					set[f] = true
				}
			}
		}
		if len(w) > 4 && strings.HasSuffix(w, "ed") || pastForms[w] {
			set["~pasttense"] = true
		}
	}
	out := make([]string, 0, len(set))
	for f := range set {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// moodWords are the function words kept as features: pronouns, auxiliary
// and modal verbs, question words and negations say who acts and whether
// the player asks, tells or tries ("did I", "what do they", "my").
var moodWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`i me my mine myself we us our you your they them their he she him her
		do does did have has had am is are was were can could would should will shall may might must
		what who how where which when why whom not don't didn't never no`) {
		moodWords[w] = true
	}
}

// pastForms are irregular past tenses ("who gave me…" asks of the past).
var pastForms = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`was were did had gave took saw met told said went came found left got made knew heard
		fought ran brought bought thought felt kept lost held stood spoke wrote stole hid forgot sold sent paid meant
		began led won lay fell threw caught taught slept swore broke chose drove ate drank rode wore`) {
		pastForms[w] = true
	}
}

// logit is one fitted logistic regression.
type logit struct {
	w    map[string]float64
	bias float64
}

// prob is the regression's probability for a text's features, with the
// features that weigh most for it (at most three, heaviest first).
func (l *logit) prob(fs []string) (float64, []string) {
	z := l.bias
	type fw struct {
		f string
		w float64
	}
	var top []fw
	n := 1 / math.Sqrt(float64(max(len(fs), 1)))
	for _, f := range fs {
		if w, ok := l.w[f]; ok {
			z += w * n
			if w > 0 {
				top = append(top, fw{f, w})
			}
		}
	}
	sort.SliceStable(top, func(i, j int) bool { return top[i].w > top[j].w })
	var why []string
	for _, t := range top[:min(len(top), 3)] {
		why = append(why, t.f)
	}
	return 1 / (1 + math.Exp(-z)), why
}

// sample is one training example: features and label.
type sample struct {
	fs  []string
	pos bool
}

// fit fits a logistic regression to samples, positives and negatives
// weighing the same in total.
func fit(samples []sample) *logit {
	index := map[string]int32{}
	var names []string
	// xs are the samples' feature indices, one run per sample from
	// starts[i] to starts[i+1]; norm is each sample's 1/√features.
	xs := make([]int32, 0, 16*len(samples))
	starts := make([]int, len(samples)+1)
	norm := make([]float64, len(samples))
	npos := 0
	for i, s := range samples {
		starts[i] = len(xs)
		for _, f := range s.fs {
			k, ok := index[f]
			if !ok {
				k = int32(len(names))
				index[f] = k
				names = append(names, f)
			}
			xs = append(xs, k)
		}
		norm[i] = 1 / math.Sqrt(float64(max(len(s.fs), 1)))
		if s.pos {
			npos++
		}
	}
	starts[len(samples)] = len(xs)
	l := &logit{w: map[string]float64{}}
	if npos == 0 || npos == len(samples) {
		return l
	}
	cpos, cneg := posShare/float64(npos), (1-posShare)/float64(len(samples)-npos)
	// Nesterov's accelerated gradient descent: the gradient is taken at
	// y, a step ahead of w along its last move.
	w, prev := make([]float64, len(names)+1), make([]float64, len(names)+1)
	y, g := make([]float64, len(names)+1), make([]float64, len(names)+1)
	bias := len(names) // the last weight is the bias
	for round := range learnRounds {
		mom := float64(round) / float64(round+3)
		for k := range y {
			y[k] = w[k] + mom*(w[k]-prev[k])
			g[k] = learnL2 * y[k]
		}
		g[bias] = 0
		for i, s := range samples {
			x, n := xs[starts[i]:starts[i+1]], norm[i]
			z := 0.0
			for _, k := range x {
				z += y[k]
			}
			p := 1 / (1 + math.Exp(-(y[bias] + z*n)))
			c, t := cneg, 0.0
			if s.pos {
				c, t = cpos, 1
			}
			d := c * (p - t)
			g[bias] += d
			dn := d * n
			for _, k := range x {
				g[k] += dn
			}
		}
		copy(prev, w)
		for k := range w {
			w[k] = y[k] - learnRate*g[k]
		}
	}
	b := w[bias]
	for k, f := range names {
		if w[k] != 0 {
			l.w[f] = w[k]
		}
	}
	l.bias = b
	return l
}

// skillModel is what was learned of one skill.
type skillModel struct {
	// profile is the skill's examples and keywords; mass is, for each
	// example, the weight of its words (phrases left out) by rarity.
	profile *profile
	mass    []float64
	// first is the number of its first example in the model's index.
	first int
	// skill tells the skill from the rest; nil when the skill has no
	// examples (then it is matched by its description and keywords).
	skill *logit
	// scripts tell its scripts apart (by index); nil entries have no
	// examples.
	scripts []*logit
	// named says the skill's examples nearly all name a group or
	// someone (needsName): a prompt naming none is not the skill's.
	named bool
}

// model is what was learned of a catalogue.
type model struct {
	// skills are by name.
	skills map[string]*skillModel
	// idf is how rare each term of the examples is among the skills: a
	// term every skill's examples have tells them apart no better than
	// none.
	idf map[string]float64
	// postings index the examples by term; examples is their number.
	postings map[string][]posting
	examples int
	// vocab is the words of the examples, which a prompt's slips of the
	// keyboard are corrected to.
	vocab *vocabulary
}

// posting is one example that has a term, and the term's weight there.
type posting struct {
	id int
	w  float64
}

// models caches each catalogue's model by its skills' names, hashes and
// examples.
var (
	modelsMu sync.Mutex
	models   = map[string]*model{}
)

// learnedFrom are the entries a catalogue's model is fitted on: every live
// skill, those left out of the catalogue (disabled for an attempt, in
// permanentFailure) too, so that a replan without a skill uses the same
// model — fitted once — and a prompt for the missing skill does not fall to
// another one.
// They are sorted by name, so the model does not depend on priorities.
func learnedFrom(cat *Catalogue) []*messages.RegistryEntry {
	if cat.LearnFrom != nil {
		return cat.LearnFrom
	}
	out := make([]*messages.RegistryEntry, len(cat.Skills))
	for i := range cat.Skills {
		out[i] = cat.Skills[i].Entry
	}
	slices.SortFunc(out, func(a, b *messages.RegistryEntry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// modelKey names a catalogue's examples.
func modelKey(cat *Catalogue) string {
	var b strings.Builder
	for _, e := range learnedFrom(cat) {
		b.WriteString(e.Name)
		b.WriteByte(0)
		b.WriteString(e.Hash)
		b.WriteByte(0)
		if e.Hash == "" {
			// Without a content hash (hand-built entries), the examples.
			b.WriteString(strings.Join(e.Examples, "\x01"))
			b.WriteString(strings.Join(e.NegativeExamples, "\x01"))
			for _, s := range e.Scripts {
				b.WriteString(s.Name)
				b.WriteString(strings.Join(s.Examples, "\x01"))
			}
		}
		b.WriteByte(0)
	}
	return b.String()
}

// modelOf returns the catalogue's model, fitting it the first time.
func modelOf(cat *Catalogue) *model {
	m, _, _ := cachedModel(cat)
	return m
}

// cachedModel returns the catalogue's model, fitting it (and saying how
// long that took) when it is not cached. Planners of the same catalogue
// wait for one fit rather than each fitting it.
func cachedModel(cat *Catalogue) (*model, time.Duration, bool) {
	key := modelKey(cat)
	modelsMu.Lock()
	defer modelsMu.Unlock()
	if m, ok := models[key]; ok {
		return m, 0, false
	}
	t0 := time.Now()
	m := learn(cat)
	if len(models) >= 64 {
		clear(models) // catalogues come and go with skill versions
	}
	models[key] = m
	return m, time.Since(t0), true
}

// Fit fits the catalogue's model of the rule-based planner when it is not
// cached yet, so that no prompt waits for the fit: fresh says it was
// fitted now, and took d. A catalogue with the same skills, hashes and
// examples (LearnFrom) reuses the cached model.
func Fit(cat *Catalogue) (d time.Duration, fresh bool) {
	_, d, fresh = cachedModel(cat)
	return d, fresh
}

// Fitted reports whether the catalogue's model is cached (fitted).
func Fitted(cat *Catalogue) bool {
	key := modelKey(cat)
	modelsMu.Lock()
	defer modelsMu.Unlock()
	_, ok := models[key]
	return ok
}

// positives are a skill's examples, skill-wide then per script.
func positives(e *messages.RegistryEntry) []string {
	out := slices.Clone(e.Examples)
	for _, s := range e.Scripts {
		out = append(out, s.Examples...)
	}
	return out
}

// learn fits a catalogue's model.
func learn(cat *Catalogue) *model {
	feats := map[string][]string{}
	fsOf := func(text string) []string {
		if fs, ok := feats[text]; ok {
			return fs
		}
		fs := featuresOf(text)
		feats[text] = fs
		return fs
	}
	entries := learnedFrom(cat)
	m := &model{skills: map[string]*skillModel{}, idf: map[string]float64{}}
	var texts []string
	for _, e := range entries {
		texts = append(append(append(texts, positives(e)...), e.NegativeExamples...), e.Keywords...)
	}
	m.vocab = newVocabulary(texts)
	df := map[string]int{}
	nskills := 0
	for _, e := range entries {
		p := profileOf(e)
		m.skills[e.Name] = &skillModel{profile: p, named: needsName(positives(e))}
		seen := map[string]bool{}
		for _, x := range p.examples {
			for t := range x.terms {
				seen[t] = true
			}
		}
		if len(seen) > 0 {
			nskills++
		}
		for t := range seen {
			df[t]++
		}
	}
	for t, n := range df {
		m.idf[t] = math.Log(float64(nskills+1) / float64(n))
	}
	m.postings = map[string][]posting{}
	for _, e := range entries {
		sm := m.skills[e.Name]
		sm.first = m.examples
		for j, x := range sm.profile.examples {
			for t, w := range x.terms {
				m.postings[t] = append(m.postings[t], posting{sm.first + j, w})
			}
			mass := 0.0
			for t, w := range x.terms {
				if !strings.HasPrefix(t, "+") {
					mass += w * m.idf[t]
				}
			}
			sm.mass = append(sm.mass, mass)
		}
		m.examples += len(sm.profile.examples)
	}
	// The regressions are fitted in parallel once their samples are
	// gathered: each writes its own field, and each fit is deterministic.
	var fits []func()
	for i, e := range entries {
		if slices.Contains(e.Capabilities, narrationCapability) {
			continue
		}
		sm := m.skills[e.Name]
		own := positives(e)
		if len(own) == 0 {
			continue
		}
		mine := map[string]bool{}
		var samples []sample
		for _, x := range own {
			mine[strings.ToLower(x)] = true
			samples = append(samples, sample{fsOf(x), true})
		}
		// Negatives: the other skills' examples (an example two skills
		// share is a positive of both), the skill's negative examples.
		for j, other := range entries {
			if j == i {
				continue
			}
			for _, x := range positives(other) {
				if !mine[strings.ToLower(x)] {
					samples = append(samples, sample{fsOf(x), false})
				}
			}
		}
		for _, x := range e.NegativeExamples {
			samples = append(samples, sample{fsOf(x), false})
		}
		fits = append(fits, func() { sm.skill = fit(samples) })
		sm.scripts = make([]*logit, len(e.Scripts))
		with := 0
		for _, s := range e.Scripts {
			if len(s.Examples) > 0 {
				with++
			}
		}
		if with < 2 {
			continue
		}
		for k, s := range e.Scripts {
			if len(s.Examples) == 0 {
				continue
			}
			var ss []sample
			for k2, s2 := range e.Scripts {
				for _, x := range s2.Examples {
					ss = append(ss, sample{fsOf(x), k2 == k})
				}
			}
			fits = append(fits, func() { sm.scripts[k] = fit(ss) })
		}
	}
	var wg sync.WaitGroup
	for _, f := range fits {
		wg.Go(f)
	}
	wg.Wait()
	return m
}

// script is the index of the script whose regression likes the features
// best, -1 when no script has examples.
func (sm *skillModel) script(fs []string) (int, float64) {
	best, bestP := -1, 0.0
	for k, l := range sm.scripts {
		if l == nil {
			continue
		}
		if p, _ := l.prob(fs); best < 0 || p > bestP {
			best, bestP = k, p
		}
	}
	return best, bestP
}
