package planner

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A skill whose examples nearly all name a group or someone by name (the
// reputation skill's: "I insult the Iron Guild", "how do the farmers see
// me?") is about that group: a prompt that names none ("pay her", "I watch
// the card player", "my sword does the talking with the bandit leader") is
// not its, however close its words come to one of the examples. The rule is
// learned, not written for one skill: namesShare of a skill's examples must
// name someone for it to apply.

// namesShare is the share of a skill's examples (of at least namesMin)
// that must name a group or someone for the skill to need one.
const (
	namesShare = 0.9
	namesMin   = 20
)

// needsName says whether most of examples name a group or someone.
func needsName(examples []string) bool {
	if len(examples) < namesMin {
		return false
	}
	n := 0
	for _, x := range examples {
		if namesSomeone(x) {
			n++
		}
	}
	return float64(n) >= namesShare*float64(len(examples))
}

// namesSomeone says whether text names a group or someone: a word with a
// capital that does not start a sentence ("the Iron Guild", "Nell"; not
// "I"), a group's word ("guild", "the watch", a noun of WordNet's
// noun.group not where a verb would be: "the crew", "orbital command",
// not "I let"), a ruler ("the
// baron": his house), or people in the plural ("the farmers", "the nuns",
// "the bargemen"), or a plural pronoun ("their", "them": a group said
// before, or known to the story).
func namesSomeone(text string) bool {
	toks := tokenize(text)
	for _, s := range sentences(text, toks) {
		for j, t := range s.toks {
			w := strings.Trim(t.lower, "'-")
			if w == "" {
				continue
			}
			if r, _ := utf8.DecodeRuneInString(text[t.start:t.end]); j > 0 && unicode.IsUpper(r) && !selfWords[w] {
				return true
			}
			if slices.Contains(conceptOf[w], "~faction") {
				return true
			}
			w = strings.TrimSuffix(strings.TrimSuffix(w, "'s"), "s'")
			if rulers[w] || groupPronouns[w] || j > 0 && w == "guard" && s.toks[j-1].lower == "the" {
				return true
			}
			feats := lexiconFeatures(w)
			if slices.Contains(feats, "s:noun.group") && !verbSlot(s.toks, j) || plural(w) && slices.Contains(feats, "s:noun.person") {
				return true
			}
			if base, ok := strings.CutSuffix(w, "men"); ok && len(base) > 1 && slices.Contains(lexiconFeatures(base+"man"), "s:noun.person") {
				return true // "the bargemen"
			}
		}
	}
	return false
}

// verbSlot says whether toks[j] stands where a verb would ("I let",
// "we can crew"; lexicon.go's verbBefore): a noun of a group there is a
// verb that has one.
func verbSlot(toks []token, j int) bool {
	return j > 0 && verbBefore[toks[j-1].lower]
}

// plural says whether w looks like a plural noun.
func plural(w string) bool {
	return len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss")
}

// groupPronouns stand for a group.
var groupPronouns = map[string]bool{"they": true, "them": true, "their": true, "theirs": true, "they're": true, "they've": true}

// rulers stand for their house or realm: "I insult the baron".
var rulers = map[string]bool{"king": true, "queen": true, "baron": true, "baroness": true, "duke": true, "duchess": true,
	"count": true, "countess": true, "lord": true, "lady": true, "emperor": true, "empress": true, "prince": true,
	"princess": true, "chieftain": true, "mayor": true, "governor": true, "sultan": true, "khan": true, "jarl": true}

// selfWords are the words with a capital inside a sentence that name no
// one else: the player, and out-of-character markers.
var selfWords = map[string]bool{"i": true, "i'm": true, "i'll": true, "i'd": true, "i've": true, "ooc": true, "ok": true,
	"okay": true, "gm": true, "dm": true, "npc": true, "pc": true}
