package narrator

import (
	"context"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode"

	snowball "github.com/kljensen/snowball/english"

	"github.com/narratoria/runtime/pkg/messages"
)

// The rule-based planner's intent matching: a prompt is compared with each
// skill's examples (manifest "examples", skill-wide and per script) as bags
// of stemmed words, with common action verbs folded into shared concepts
// (swing, slash, stab → attack) and word pairs counted as phrases; the
// cosine similarity, weighted by how rare each term is among all the
// skills' examples, is the skill's score, plus a little for each manifest
// keyword found. Skills at or above matchThreshold are chosen, unless the
// prompt is closer to one of the skill's negative examples. Deterministic,
// no model, a few tens of microseconds per prompt.

const (
	// matchThreshold is the score a skill needs to be chosen.
	matchThreshold = 0.34
	// keywordWeight is added per manifest keyword found (at most two).
	keywordWeight = 0.12
	// pairWeight scales word pairs against single words.
	pairWeight = 1.5
)

// concepts fold common verbs and nouns of player prompts into one term
// each, so an example with one of them matches a prompt with another.
var concepts = map[string][]string{
	"~attack":   {"attack", "swing", "strike", "hit", "slash", "stab", "punch", "kick", "shoot", "fire", "smash", "bash", "charge", "fight", "assault", "cleave", "lunge", "thrust", "tackle", "wrestle", "grapple", "slay", "kill", "duel", "ambush", "fling", "throw", "hurl", "cast", "zap"},
	"~feat":     {"jump", "leap", "vault", "hop", "climb", "scale", "dodge", "evade", "balance", "swim", "sprint", "cross", "squeeze", "lift", "force", "break", "bend", "push", "pull", "resist", "endure", "escape", "flee", "chase"},
	"~stealth":  {"sneak", "creep", "hide", "stalk", "tiptoe", "steal", "pickpocket", "lockpick", "pick", "pilfer", "shadow", "slip", "disarm", "unlock"},
	"~sway":     {"persuade", "convince", "haggle", "bargain", "negotiate", "charm", "intimidate", "deceive", "lie", "bluff", "seduce", "trick", "coax", "flatter"},
	"~chance":   {"try", "attempt", "gamble", "bet", "risk", "luck", "chance", "check", "test", "save", "roll", "dice", "die"},
	"~see":      {"look", "see", "view", "observe", "survey", "scan", "glance", "gaze", "peer", "watch", "behold", "scout", "overlook", "around", "surroundings", "scenery", "landscape", "vista", "panorama"},
	"~picture":  {"draw", "sketch", "paint", "illustrate", "picture", "depict", "render", "image", "drawing", "painting", "illustration", "portrait", "map", "visual", "visualize", "visualise", "show", "art"},
	"~past":     {"before", "earlier", "previously", "ago", "last", "past", "once", "already", "ever", "again"},
	"~recall":   {"remember", "recall", "remind", "recollect", "memory", "memories", "forget", "forgot", "forgotten", "know"},
	"~meet":     {"meet", "met", "encounter", "seen", "visit", "visited"},
	"~note":     {"note", "journal", "diary", "record", "write", "jot", "log", "mind", "memorize", "memorise", "keep"},
	"~give":     {"donate", "give", "gift", "offer", "tithe", "contribute", "pay", "tip", "share", "return", "restore"},
	"~offend":   {"insult", "mock", "taunt", "offend", "spit", "curse", "threaten", "humiliate", "slander", "shame", "provoke", "sneer"},
	"~bribe":    {"bribe", "grease", "payoff", "buy"},
	"~aid":      {"help", "aid", "assist", "rescue", "protect", "defend", "serve", "favour", "favor", "support", "heal"},
	"~betray":   {"betray", "rat", "snitch", "double-cross", "abandon", "sabotage", "rob", "cheat"},
	"~faction":  {"guild", "faction", "order", "clan", "temple", "church", "brotherhood", "league", "house", "court", "crown", "watch", "guard", "guards", "villagers", "town", "city", "council", "monks", "priests", "merchants", "thieves", "mages", "nobles", "elves", "dwarves", "tribe", "cult", "company"},
	"~regard":   {"think", "regard", "feel", "see", "trust", "like", "hate", "welcome", "standing", "reputation", "opinion", "favour", "favor", "respect", "rank"},
	"~option":   {"option", "options", "choice", "choices", "idea", "ideas", "suggestion", "suggestions", "suggest", "alternative", "possibility", "possibilities", "next", "decide", "hint", "advice", "advise", "stuck", "unsure"},
	"~question": {"what", "who", "how", "where", "which", "whom"},
}

// conceptOf maps a lower-case word to its concepts.
var conceptOf = func() map[string][]string {
	m := map[string][]string{}
	for c, words := range concepts {
		for _, w := range words {
			m[w] = append(m[w], c)
		}
	}
	for _, cs := range m {
		sort.Strings(cs)
	}
	return m
}()

// stopwords carry no intent.
var stopwords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`a an the to of and or in on at for with from by as into onto upon about my me mine myself i you your yours
		it its is are was were be been being am this that these those some any there here then than so very just
		his her him he she they them their we us our ours let lets please now also too can could would should will shall
		may might must do does did done have has had having get got up down out off over under again all each own`) {
		stopwords[w] = true
	}
	for _, w := range []string{"what", "who", "how", "where", "which", "whom", "before", "again", "last", "next", "around", "know", "ever"} {
		delete(stopwords, w)
	}
}

// foreignWords are frequent function words of other languages; a prompt
// with more of them than of English ones is not English.
var foreignWords = map[string]bool{}

// englishWords are frequent English function words.
var englishWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`le la les un une des je tu il elle nous vous ils est et dans sur avec pour pas que qui du au mon ma mes
		der die das ein eine ich du er sie wir ihr ist und nicht mit auf für zu im den dem mein meine
		el los las una yo tú él ella es y en con por para no qué mi mis del al
		il lo gli io sono non che di per con una
		o os as um uma eu não com para que do da em`) {
		foreignWords[w] = true
	}
	for _, w := range strings.Fields(`the a an i you to of and in on at is are was it my me what how who where do does can with for this that`) {
		englishWords[w] = true
	}
}

// words splits text into lower-case words (letters, digits, ' and -).
func words(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\'' && r != '-'
	})
}

// english says whether the text looks like English: mostly ASCII letters,
// and not more function words of other languages than of English.
func english(text string) bool {
	letters, ascii := 0, 0
	for _, r := range text {
		if unicode.IsLetter(r) {
			letters++
			if r < 128 {
				ascii++
			}
		}
	}
	if letters == 0 || float64(ascii) < 0.85*float64(letters) {
		return false
	}
	en, other := 0, 0
	for _, w := range words(text) {
		switch {
		case englishWords[w]:
			en++
		case foreignWords[w]:
			other++
		}
	}
	return other <= en
}

// terms is a bag of terms: stems, concepts and word pairs.
type terms map[string]float64

// auxiliaries start a question ("Have I…", "Do they…").
var auxiliaries = map[string]bool{"have": true, "has": true, "do": true, "does": true, "did": true, "is": true, "are": true,
	"am": true, "was": true, "were": true, "can": true, "could": true, "would": true, "should": true, "will": true}

// termsOf turns text into its terms.
func termsOf(text string) terms {
	t := terms{}
	if ws := words(text); strings.HasSuffix(strings.TrimSpace(text), "?") ||
		len(ws) > 0 && (auxiliaries[ws[0]] || len(conceptOf[ws[0]]) > 0 && slices.Contains(conceptOf[ws[0]], "~question")) {
		t["~asking"] = 1
	}
	var prev string
	for _, w := range words(text) {
		w = strings.Trim(w, "'-")
		w = strings.TrimSuffix(w, "'s")
		if w == "" || len(w) > 40 {
			prev = ""
			continue
		}
		for _, c := range conceptOf[w] {
			t[c] = 1
		}
		if stopwords[w] {
			continue
		}
		stem := snowball.Stem(w, false)
		for _, c := range conceptOf[stem] {
			t[c] = 1
		}
		t[stem] = 1
		if prev != "" {
			t[prev+" "+stem] = pairWeight
		}
		prev = stem
	}
	return t
}

// example is one example utterance of a skill.
type example struct {
	// script is the index of the script it is for, -1 for the skill.
	script int
	text   string
	terms  terms
	neg    bool
}

// profile is what intent matching knows of a skill.
type profile struct {
	examples []example
	keywords map[string]string // stem → keyword
	// described says the skill has no examples: its description stands
	// in for them, and one keyword found is enough to choose it.
	described bool
}

// profiles caches each registry entry's profile by name and hash.
var profiles sync.Map // string → *profile

func profileOf(e *messages.RegistryEntry) *profile {
	key := e.Name + "\x00" + e.Hash + "\x00" + strings.Join(e.Examples, "\x00")
	if p, ok := profiles.Load(key); ok {
		return p.(*profile)
	}
	p := &profile{keywords: map[string]string{}}
	for _, k := range append(slices.Clone(e.Keywords), e.Capabilities...) {
		for _, w := range words(k) {
			if !stopwords[w] {
				p.keywords[snowball.Stem(w, false)] = k
			}
		}
	}
	add := func(script int, neg bool, texts []string) {
		for _, x := range texts {
			if t := termsOf(x); len(t) > 0 {
				p.examples = append(p.examples, example{script: script, text: x, terms: t, neg: neg})
			}
		}
	}
	add(-1, false, e.Examples)
	add(-1, true, e.NegativeExamples)
	for i := range e.Scripts {
		add(i, false, e.Scripts[i].Examples)
	}
	if len(p.examples) == 0 {
		// A skill without examples is known by its description.
		texts := []string{e.Description}
		for _, s := range e.Scripts {
			texts = append(texts, s.Description)
		}
		add(-1, false, texts)
		p.described = true
	}
	profiles.Store(key, p)
	return p
}

// SkillScore is how a skill scored against a prompt (see plan explain).
type SkillScore struct {
	// Skill is the skill's name; Narration marks the always-last
	// narration skill, which is not scored.
	Skill     string `json:"skill"`
	Narration bool   `json:"narration,omitempty"`
	// Score is Similarity plus the keywords' weight; Chosen says it was
	// at least Threshold (and not vetoed by a negative example).
	Score      float64 `json:"score"`
	Similarity float64 `json:"similarity"`
	Threshold  float64 `json:"threshold"`
	Chosen     bool    `json:"chosen"`
	// Example is the closest example; Keywords the manifest keywords
	// found; Negative the closest negative example when it vetoed.
	Example  string   `json:"example,omitempty"`
	Keywords []string `json:"keywords,omitempty"`
	Negative string   `json:"negative,omitempty"`
	// Script is the script that would run.
	Script string `json:"script,omitempty"`
	// Why says in words why it was chosen or not.
	Why string `json:"why"`
}

// scoreSkills scores every skill of the catalogue against the text.
func scoreSkills(cat *Catalogue, text string, disabled []string) []SkillScore {
	if cat == nil {
		return nil
	}
	prompt := termsOf(text)
	isEnglish := english(text)
	formula := diceFormula.MatchString(text)
	type entry struct {
		cs *CatalogueSkill
		p  *profile
	}
	var all []entry
	for i := range cat.Skills {
		cs := &cat.Skills[i]
		all = append(all, entry{cs, profileOf(cs.Entry)})
	}
	// How rare each term is among every skill's examples.
	df := map[string]int{}
	docs := 0
	for _, e := range all {
		for _, x := range e.p.examples {
			docs++
			for t := range x.terms {
				df[t]++
			}
		}
	}
	idf := func(t string) float64 { return math.Log(1 + float64(docs+1)/float64(df[t]+1)) }
	// Word pairs are a bonus when they match; they do not count in the
	// norms, so an example is not penalised for its own phrases.
	norm := func(ts terms) float64 {
		s := 0.0
		for t, w := range ts {
			if strings.Contains(t, " ") {
				continue
			}
			v := w * idf(t)
			s += v * v
		}
		return math.Sqrt(s)
	}
	// Words no example has say nothing about which skill fits: they are
	// left out of the prompt's side (a troll is no less an attack).
	known := terms{}
	for t, w := range prompt {
		if df[t] > 0 {
			known[t] = w
		}
	}
	pn := norm(known)
	cosine := func(ts terms) float64 {
		if pn == 0 {
			return 0
		}
		dot := 0.0
		for t, w := range ts {
			if pw, ok := prompt[t]; ok {
				v := idf(t)
				dot += w * pw * v * v
			}
		}
		if dot == 0 {
			return 0
		}
		return min(dot/(pn*norm(ts)), 1)
	}
	out := make([]SkillScore, 0, len(all))
	for _, e := range all {
		name := e.cs.Entry.Name
		sc := SkillScore{Skill: name, Threshold: matchThreshold}
		switch {
		case slices.Contains(e.cs.Entry.Capabilities, narrationCapability):
			sc.Narration, sc.Why = true, "narration skill: always runs last, reading the others' outputs"
			out = append(out, sc)
			continue
		case slices.Contains(disabled, name):
			sc.Why = "disabled for this attempt"
			out = append(out, sc)
			continue
		case len(e.cs.Entry.Scripts) == 0:
			sc.Why = "no script"
			out = append(out, sc)
			continue
		}
		best, bestNeg, script := 0.0, 0.0, -1
		for _, x := range e.p.examples {
			s := cosine(x.terms)
			if x.neg {
				if s > bestNeg {
					bestNeg, sc.Negative = s, x.text
				}
				continue
			}
			if s > best {
				best, sc.Example, script = s, x.text, x.script
			}
		}
		for stem, k := range e.p.keywords {
			if _, ok := prompt[stem]; ok && !slices.Contains(sc.Keywords, k) {
				sc.Keywords = append(sc.Keywords, k)
			}
		}
		sort.Strings(sc.Keywords)
		sc.Similarity = round3(best)
		sc.Score = round3(best + keywordWeight*float64(min(len(sc.Keywords), 2)))
		if e.p.described && len(sc.Keywords) > 0 {
			// A manifest without examples is matched by its keywords.
			sc.Score = max(sc.Score, matchThreshold)
		}
		hasFormula := formula && wantsFormula(e.cs.Entry)
		if hasFormula {
			sc.Score = max(sc.Score, 1)
		}
		scriptIdx := script
		if scriptIdx < 0 {
			picked := pickScript(e.cs.Entry, words(text)).Name
			scriptIdx = slices.IndexFunc(e.cs.Entry.Scripts, func(s messages.RegistryScript) bool { return s.Name == picked })
		}
		sc.Script = e.cs.Entry.Scripts[max(scriptIdx, 0)].Name
		switch {
		case !isEnglish:
			sc.Score, sc.Why = 0, "the prompt is not English: the narration skill answers alone"
		case hasFormula:
			sc.Chosen, sc.Why = true, "the prompt holds a dice formula"
		case bestNeg > best && bestNeg >= matchThreshold:
			sc.Why = "closer to the negative example than to any example"
		case sc.Score >= matchThreshold:
			sc.Chosen, sc.Negative = true, ""
			sc.Why = "score at or above the threshold"
		default:
			sc.Negative = ""
			sc.Why = "score below the threshold"
		}
		out = append(out, sc)
	}
	return out
}

// wantsFormula says whether a skill takes a dice formula (an input
// property named "formula").
func wantsFormula(e *messages.RegistryEntry) bool {
	for _, s := range e.Scripts {
		if strings.Contains(string(s.InputSchema), `"formula"`) {
			return true
		}
	}
	return false
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// Explanation is what `narratoria plan explain` shows: how each skill of
// the catalogue scored against a prompt, and the plan that results.
type Explanation struct {
	// Text is the prompt; English says whether it was read as English.
	Text    string `json:"text"`
	English bool   `json:"english"`
	// Skills are every skill's score, best first (narration skills last).
	Skills []SkillScore `json:"skills"`
	// Plan is the rule-based planner's plan for the prompt.
	Plan *messages.Plan `json:"plan"`
}

// Explain scores the catalogue's skills against text and plans it, so a
// skill author can see why a skill was chosen or not.
func Explain(cat *Catalogue, text string) (*Explanation, error) {
	scores := scoreSkills(cat, text, nil)
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
	return &Explanation{Text: text, English: english(text), Skills: scores, Plan: p}, nil
}
