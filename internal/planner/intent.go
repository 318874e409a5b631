package planner

import (
	"math"
	"regexp"
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
// (swing, slash, stab → attack) and word pairs counted as phrases. Two
// scores are blended (see learn.go): the probability of a logistic
// regression per skill learned from all the catalogue's examples, and the
// cosine similarity of the closest example, weighted by how rare each term
// is among the skills. Skills at or above learnedThreshold on the prompt or
// on one of its clauses are chosen. A skill without examples is matched by
// its description and keywords (matchThreshold, with a little for each
// keyword found, unless the prompt is closer to one of its negative
// examples). Deterministic, no model file, well under a millisecond per
// prompt.

// matchThreshold is the score a skill needs to be chosen.
const matchThreshold = 0.25

// degradedFactor scales a degraded skill's similarity (§7: planners prefer
// other skills).
const degradedFactor = 0.7

const (
	// rivalRatio: a skill is chosen for a side (the prompt or a clause)
	// only when its similarity there is at least this share of the best
	// skill's.
	rivalRatio = 0.8
	// moodPenalty scales the similarity of a question to a statement.
	moodPenalty = 0.75
	// coverSlack is how much what an example says besides the prompt
	// lowers its similarity.
	coverSlack = 0.1
	// keywordWeight is added per manifest keyword found (at most two).
	keywordWeight = 0.12
	// pairWeight scales word pairs against single words.
	pairWeight = 1.5
	// alsoConfidence is how sure a clause's script regression must be to
	// add a second script of a skill another clause chose ("Remind me who
	// she was, I've forgotten" recalls; it does not also store).
	alsoConfidence = 0.8
)

// concepts fold common verbs and nouns of player prompts into one term
// each, so an example with one of them matches a prompt with another.
var concepts = map[string][]string{
	"~attack":   {"attack", "swing", "shove", "smack", "wallop", "clobber", "strike", "hit", "slash", "stab", "punch", "kick", "shoot", "fire", "smash", "bash", "charge", "fight", "assault", "cleave", "lunge", "thrust", "tackle", "wrestle", "grapple", "slay", "kill", "duel", "ambush", "fling", "throw", "hurl", "cast", "zap", "hack", "hew", "smite", "maul", "bludgeon", "pummel", "whack", "skewer", "impale", "slice", "strangle", "choke"},
	"~feat":     {"jump", "leap", "vault", "hop", "climb", "scale", "scramble", "clamber", "shimmy", "dodge", "evade", "balance", "swim", "sprint", "cross", "squeeze", "lift", "force", "break", "bend", "push", "pull", "resist", "endure", "escape", "flee", "chase"},
	"~stealth":  {"sneak", "creep", "hide", "stalk", "tiptoe", "steal", "pickpocket", "lockpick", "pick", "pilfer", "slip", "disarm", "unlock"},
	"~sway":     {"persuade", "convince", "haggle", "bargain", "negotiate", "charm", "intimidate", "deceive", "lie", "bluff", "seduce", "trick", "coax", "flatter", "sweet-talk", "smooth-talk", "schmooze", "cajole", "wheedle", "interrogate"},
	"~chance":   {"try", "attempt", "gamble", "bet", "risk", "luck", "chance", "check", "test", "save", "roll", "dice", "die", "fortune", "fate", "odds", "flip", "toss", "dexterity", "strength", "agility", "perception", "athletics", "acrobatics"},
	"~see":      {"look", "view", "observe", "survey", "scan", "glance", "gaze", "peer", "watch", "behold", "scout", "overlook", "around", "surroundings", "scenery", "landscape", "vista", "panorama"},
	"~picture":  {"draw", "sketch", "paint", "illustrate", "picture", "depict", "render", "image", "drawing", "painting", "illustration", "portrait", "visual", "visualize", "visualise", "show", "art"},
	"~past":     {"before", "earlier", "previously", "ago", "last", "once", "already", "ever", "yesterday", "did", "was", "were", "told", "said", "promised", "met", "saw", "heard"},
	"~recall":   {"remember", "recall", "remind", "recollect", "memory", "memories", "forget", "forgot", "forgotten", "know", "recognise", "recognize", "familiar", "recap", "refresh", "reminisce"},
	"~meet":     {"meet", "met", "encounter", "seen", "visit", "visited"},
	"~note":     {"note", "journal", "diary", "record", "write", "jot", "log", "mind", "memorize", "memorise", "keep", "notebook", "notes", "memo", "scribble", "transcribe"},
	"~give":     {"donate", "gift", "tithe", "alms", "charity", "contribute", "pay", "tip", "share", "return", "restore"},
	"~offend":   {"insult", "mock", "taunt", "offend", "spit", "curse", "threaten", "humiliate", "slander", "shame", "provoke", "sneer"},
	"~bribe":    {"bribe", "grease", "payoff", "buy", "palm", "kickback", "backhander"},
	"~aid":      {"help", "aid", "assist", "rescue", "protect", "defend", "serve", "favour", "favor", "support", "heal", "errand", "errands", "service", "services", "chore", "chores", "volunteer"},
	"~betray":   {"betray", "snitch", "double-cross", "abandon", "sabotage", "rob", "cheat", "swindle", "deceive"},
	"~faction":  {"guild", "faction", "order", "clan", "temple", "church", "cathedral", "shrine", "brotherhood", "sisterhood", "league", "house", "court", "crown", "kingdom", "realm", "watch", "guards", "village", "villagers", "town", "townsfolk", "city", "citizens", "folk", "council", "monks", "priests", "merchants", "traders", "thieves", "mages", "nobles", "nobility", "elves", "dwarves", "tribe", "cult", "company", "army", "rebels", "pirates"},
	"~regard":   {"think", "regard", "feel", "see", "trust", "like", "hate", "welcome", "standing", "reputation", "opinion", "favour", "favor", "respect", "rank", "renown", "fame", "famous", "infamy", "infamous", "notoriety", "notorious", "popular", "popularity", "rep", "liked", "hated", "trusted"},
	"~option":   {"option", "options", "path", "paths", "choice", "choices", "idea", "ideas", "suggestion", "suggestions", "suggest", "alternative", "possibility", "possibilities", "next", "decide", "hint", "advice", "advise", "stuck", "unsure", "torn", "undecided", "dilemma", "alternatives"},
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

// spelled corrects a slip of the keyboard in a word of five letters or
// more that is not one of the concepts' words: a letter doubled or left
// out, or two letters swapped ("remmber", "remembr", "rememebr"), when that
// gives exactly one concept word. A changed letter is not corrected: it
// makes other real words ("pouch" is not "punch").
func spelled(w string) string {
	if len(w) < 5 || conceptOf[w] != nil || stopwords[w] || inLexicon(w) {
		return w // a word of its own ("forge" is not "forget")
	}
	found := ""
	for _, c := range conceptWords {
		if len(c) >= 5 && oneSlip(w, c) {
			if found != "" && found != c {
				return w // ambiguous
			}
			found = c
		}
	}
	if found == "" {
		return w
	}
	return found
}

// inLexicon says whether w is a word of the lexicon (as written, or one of its
// inflections).
func inLexicon(w string) bool {
	feats, ok := lexiconLookup(w)
	return ok && feats != ""
}

// conceptWords are the words of every concept, sorted.
var conceptWords = func() []string {
	var out []string
	for w := range conceptOf {
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}()

// oneSlip says whether typed is word with one letter added, one left
// out, or two neighbours swapped.
func oneSlip(typed, word string) bool {
	switch len(typed) - len(word) {
	case 1:
		return dropsOne(typed, word)
	case -1:
		return dropsOne(word, typed)
	case 0:
		for i := 0; i+1 < len(word); i++ {
			if typed[i] != word[i] {
				return typed[i] == word[i+1] && typed[i+1] == word[i] && typed[i+2:] == word[i+2:]
			}
		}
	}
	return false
}

// dropsOne says whether short is long with one letter left out.
func dropsOne(long, short string) bool {
	for i := 0; i < len(short); i++ {
		if long[i] != short[i] {
			return long[i+1:] == short[i:]
		}
	}
	return true
}

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

// words splits text into lower-case words (letters, digits, ' and -).
func words(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\'' && r != '-'
	})
}

// looksLikeCode says whether text is mostly markup, JSON, paths or code
// rather than a player's words: then no skill is chosen from it.
func looksLikeCode(text string) bool {
	symbols, other := 0, 0
	for _, r := range text {
		switch {
		case strings.ContainsRune("{}[]<>\"=:;$/\\|`%*#@&_", r):
			symbols++
		case !unicode.IsSpace(r):
			other++
		}
	}
	return symbols > 0 && float64(symbols) >= 0.1*float64(symbols+other)
}

// terms is a bag of terms: stems, concepts and word pairs.
type terms map[string]float64

// auxiliaries start a question ("Have I…", "Do they…").
var auxiliaries = map[string]bool{"have": true, "has": true, "do": true, "does": true, "did": true, "is": true, "are": true,
	"am": true, "was": true, "were": true, "can": true, "could": true, "would": true, "should": true, "will": true}

// negators turn the concepts of the next word off.
var negators = map[string]bool{"not": true, "don't": true, "dont": true, "never": true, "no": true, "can't": true, "cannot": true,
	"won't": true, "didn't": true, "doesn't": true, "isn't": true}

// glue are words too common to make a phrase with.
var glue = map[string]bool{"the": true, "a": true, "an": true, "to": true, "of": true, "at": true, "in": true, "on": true,
	"and": true, "for": true, "with": true, "into": true, "from": true, "by": true, "my": true, "his": true, "her": true,
	"their": true, "its": true, "this": true, "that": true, "i": true, "me": true, "we": true}

// termsOf turns text into its terms: stems of content words, the
// concepts of every word, a question marker, and phrases — pairs of
// neighbouring words (function words included: "what can", "have i") —
// marked with a leading "+".
func termsOf(text string) terms {
	t := terms{}
	ws := words(text)
	if strings.HasSuffix(strings.TrimSpace(text), "?") ||
		len(ws) > 0 && (auxiliaries[ws[0]] || slices.Contains(conceptOf[ws[0]], "~question")) {
		t["~asking"] = 1
	}
	var prev, before string
	negated := false
	for _, w := range ws {
		w = strings.TrimSuffix(strings.Trim(w, "'-"), "'s")
		if w == "" || len(w) > 40 {
			prev, before = "", ""
			continue
		}
		w = spelled(w)
		stem := snowball.Stem(w, false)
		if !negated {
			// "I don't know" is not about knowing.
			for _, c := range append(slices.Clone(conceptOf[w]), conceptOf[stem]...) {
				if !sensed(before, w, c) {
					continue
				}
				t[c] = 1
			}
			if i := strings.LastIndexByte(w, '-'); i > 0 && conceptOf[w] == nil && conceptOf[stem] == nil {
				// "arm-wrestle", "sword-fight": the last part says the act.
				last := w[i+1:]
				for _, c := range append(slices.Clone(conceptOf[last]), conceptOf[snowball.Stem(last, false)]...) {
					t[c] = 1
				}
			}
		}
		negated = negators[w]
		before = w
		if !stopwords[w] {
			t[stem] = 1
		}
		if glue[w] {
			continue // "swing my axe" pairs as "swing axe"
		}
		if prev != "" {
			t["+"+prev+" "+stem] = pairWeight
		}
		prev = stem
	}
	return t
}

// sensed says whether word w, after the word before, has concept c: a
// word that is an act as a verb and a thing as a noun is the thing after
// a determiner ("sit near the fire", "the pick", "keep my balance"); a
// word that is a group as a noun is an act after a subject ("I order a
// beer", "we watch the waves", "Order the stew").
func sensed(before, w, c string) bool {
	switch {
	case actsAsVerb[c] && thingsToo[w]:
		return !nounAfter[before]
	case c == "~faction" && actsToo[w]:
		return before != "" && !verbAfter[before]
	}
	return true
}

// actsAsVerb are the concepts of acts; thingsToo their words that name a
// thing as often; actsToo the words of groups that are acts too;
// nounAfter and verbAfter the words that say a noun or a verb follows.
var (
	actsAsVerb = map[string]bool{"~attack": true, "~feat": true, "~stealth": true}
	thingsToo  = setOf("fire cast scale scales break force cross balance slip pick lift push pull")
	actsToo    = setOf("order watch house court crown")
	nounAfter  = setOf("the a an my your his her its our their this that these those some any every each no")
	verbAfter  = setOf("i we you they he she i'll we'll i'd we'd and then can could will would should must might may let lets please")
)

// setOf is a set of the words of ws.
func setOf(ws string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(ws) {
		m[w] = true
	}
	return m
}

// evidence says whether a matched term shows intent: a concept (other than
// being a question), a phrase, or a content word that is not a name of a
// thing — which a single noun ("innkeeper", "table") is not taken to be.
func evidence(term string) bool {
	switch {
	case term == "~asking" || term == "~question":
		return false
	case strings.HasPrefix(term, "~"), strings.HasPrefix(term, "+"):
		return true
	}
	return false
}

// example is one example utterance of a skill.
type example struct {
	// script is the index of the script it is for, -1 for the skill.
	script int
	text   string
	terms  terms
	neg    bool
	// asking says it is a question (its terms have ~asking).
	asking bool
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
				_, asking := t["~asking"]
				p.examples = append(p.examples, example{script: script, text: x, terms: t, neg: neg, asking: asking})
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
	// Score is, for a skill with examples, 70% its learned probability
	// and 30% Similarity scaled so that matchThreshold is 0.5, on the
	// prompt or the clause where it is highest; for a skill without, the
	// similarity to its description plus the keywords' weight. Chosen
	// says it was at least Threshold (and, without examples, not vetoed
	// by a negative example). Similarity is the closest example's.
	Score      float64 `json:"score"`
	Similarity float64 `json:"similarity"`
	Threshold  float64 `json:"threshold"`
	Chosen     bool    `json:"chosen"`
	// Example is the closest example; Keywords the manifest keywords
	// found; Negative the closest negative example when it vetoed.
	Example  string   `json:"example,omitempty"`
	Keywords []string `json:"keywords,omitempty"`
	Negative string   `json:"negative,omitempty"`
	// Features are the prompt's features that weigh most for the skill
	// in its learned model (stems, ~concepts, +word pairs, w:function
	// words, ^first word).
	Features []string `json:"features,omitempty"`
	// Script is the script that would run; Also are more scripts of the
	// skill that clauses of the prompt ask for ("I bribe the watch; how do
	// they see me now?" updates, then queries).
	Script string   `json:"script,omitempty"`
	Also   []string `json:"also,omitempty"`
	// Health is the skill's health when it is not healthy.
	Health string `json:"health,omitempty"`
	// Why says in words why it was chosen or not.
	Why string `json:"why"`
}

// injections are the marks of text written to steer the runtime rather
// than to play: orders to drop instructions, script tags, SQL and shell
// commands.
var injections = regexp.MustCompile(`(?i)\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+|the\s+|your\s+|my\s+|these\s+)?(?:previous\s+|prior\s+|above\s+|earlier\s+|system\s+|game\s+|game's\s+)?(?:instructions|rules|prompts?)\b` +
	`|\bsystem\s+prompt\b|\b(?:developer|debug|god|admin)\s+mode\b|\bsystem\s+override\b|<\s*script\b|javascript:` +
	`|\bturn\s+off\s+(?:all\s+)?(?:the\s+|your\s+)?(?:safety|filters?|guardrails?|content\s+checks)\b` +
	`|\bset\s+my\s+[\w ]{1,40}?\s+to\s+\d{4,}\b|\bgive\s+me\s+\d{4,}\b|\bforce\s+(?:the\s+|every\s+)?(?:total|roll|result|outcome|dice)\b` +
	`|\b(?:drop|truncate)\s+table\b|\bunion\s+select\b|\bselect\s+\*|\bselect\s+[\w, ]+\s+from\s+\w+\s+where\b|\binsert\s+into\b|\bdelete\s+from\b|;\s*--` +
	`|\brm\s+-rf\b|\bsudo\s|/bin/|\$\(`)

// forgeries are the marks of text that poses as the runtime's own data
// rather than a player's words: a tool-call tag or a tool call written as
// JSON ({"tool": …}), a message posing as another role ("SYSTEM: …"), a
// reference into a tool's output ("$roll.total"), a file path. Such a prompt chooses no
// skill, not even for a dice formula in it.
var forgeries = regexp.MustCompile(`(?i)<\s*/?\s*(?:tool_call|tool_use|function_call|invoke)\b` +
	`|^\s*\[?(?:system|assistant|developer|tool)\]?\s*:` +
	`|\{\s*"(?:tools?|tool_?name|tool_?path|tool_?id|function|function_call|arguments|args|script|skill)"\s*:` +
	`|\$\{?[a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)+|\bcontext\.[a-z]` +
	`|(?:^|[\s'"(])(?:\.\.?/|~/|/(?:etc|usr|var|home|root|tmp|proc|dev)/|[a-z]:\\)|\bfile:/` +
	`|\b[\w.-]+/[\w./-]*\.(?:json|ya?ml|txt|sh|py|go|js|env|db|sqlite|conf|log)\b`)

// injection says whether text tries to steer the runtime: one of the
// injections, or the name of one of the catalogue's tools
// ("memory/store-memory"). Such a prompt chooses no skill (a dice
// formula in it still rolls).
func injection(cat *Catalogue, text string) bool {
	if injections.MatchString(text) {
		return true
	}
	lower := strings.ToLower(text)
	for i := range cat.Skills {
		e := cat.Skills[i].Entry
		for _, sc := range e.Scripts {
			if strings.Contains(lower, strings.ToLower(e.Name+"/"+sc.Name)) {
				return true
			}
		}
	}
	return false
}

// repetitive says whether text is mostly the same few words over and
// over (flooding, not playing): at least 8 words, under 30% distinct.
func repetitive(text string) bool {
	ws := words(text)
	if len(ws) < 8 {
		return false
	}
	distinct := map[string]bool{}
	for _, w := range ws {
		distinct[w] = true
	}
	return float64(len(distinct)) < 0.3*float64(len(ws))
}

// markup matches HTML/XML tags.
var markup = regexp.MustCompile(`</?[A-Za-z][A-Za-z0-9-]{0,20}(?:\s[^<>]{0,200})?/?>`)

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
