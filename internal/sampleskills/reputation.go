package sampleskills

import (
	"context"
	"fmt"
	"strings"
	"unicode"

	"github.com/narratoria/runtime/pkg/skillkit"
)

// Reputation is kept in state.reputation.<faction> on a bounded scale.
const (
	ReputationMin = -100
	ReputationMax = 100
)

func clampRep(v int) int { return min(max(v, ReputationMin), ReputationMax) }

func standingWord(v int) string {
	switch {
	case v >= 60:
		return "revered"
	case v >= 20:
		return "friendly"
	case v > -20:
		return "neutral"
	case v > -60:
		return "distrusted"
	}
	return "hated"
}

func currentRep(in *skillkit.Invocation, faction string) int {
	var state struct {
		Reputation map[string]float64 `json:"reputation"`
	}
	_ = in.DecodeState(&state)
	return int(state.Reputation[faction])
}

// factionOf reads the faction of a "faction" input: the name itself, or —
// when a planner passed the player's words ("Does the Ashmoor Cartel still
// trust me?"), which the rule-based planner does — the name in them: a run
// of capitalised words not starting a sentence ("Ashmoor Cartel", "Order of
// the Copper Wren"), else a group noun with the word before it ("the thieves'
// guild"), else "townsfolk". said reports that the input was a sentence.
// The name keeps its case for the narration (which says "the" itself); its
// state key is lower case.
func factionOf(input string) (name string, said bool) {
	input = strings.TrimSpace(input)
	ws := strings.Fields(input)
	switch {
	case input == "":
		return "townsfolk", false
	case len(ws) <= 4 && !strings.ContainsAny(input, "?!.,"):
		return withoutThe(input), false
	}
	if n := capitalisedName(ws); n != "" {
		return n, true
	}
	return groupNounIn(input), true
}

// withoutThe drops a leading "the ".
func withoutThe(name string) string {
	if len(name) > 4 && strings.EqualFold(name[:4], "the ") {
		return name[4:]
	}
	return name
}

// capitalisedName returns the first run of capitalised words in ws that does
// not start a sentence and names a group ("the Lampblack Printers", "the
// Copper Wren Guild"), else the first such run (a person: "Dunstan Kray"),
// else "".
func capitalisedName(ws []string) string {
	var run, names []string
	flush := func() {
		for len(run) > 0 && (run[len(run)-1] == "of" || run[len(run)-1] == "the") {
			run = run[:len(run)-1]
		}
		if len(run) > 0 {
			names = append(names, withoutThe(strings.Join(run, " ")))
		}
		run = run[:0]
	}
	start := true
	for _, tok := range ws {
		w := strings.TrimFunc(tok, func(r rune) bool { return !unicode.IsLetter(r) && r != '-' })
		w = strings.TrimSuffix(strings.TrimSuffix(w, "'s"), "'")
		upper := w != "" && unicode.IsUpper([]rune(w)[0]) && w != "I" && !strings.HasPrefix(w, "I'") && w != strings.ToUpper(w)
		switch {
		case upper && !start:
			run = append(run, w)
		case len(run) > 0 && (w == "of" || w == "the"):
			run = append(run, w)
		default:
			flush()
		}
		start = strings.ContainsAny(tok[len(tok)-1:], ".!?:")
		if len(run) > 0 && strings.ContainsAny(tok[len(tok)-1:], ".,;:!?)") {
			flush() // "the Ashmoor Cartel, who…"
		}
	}
	flush()
	for _, n := range names {
		last := strings.ToLower(n[strings.LastIndexByte(n, ' ')+1:])
		if groupNouns[last] || strings.HasSuffix(last, "s") && !strings.HasSuffix(last, "ss") {
			return n
		}
	}
	if len(names) > 0 {
		return names[0]
	}
	return ""
}

// groupNounIn returns the group noun of text with the word that names it
// ("thieves guild", "merchant guild", "monks"), else "townsfolk".
func groupNounIn(text string) string {
	lower := strings.Fields(strings.ToLower(text))
	for i := range lower {
		lower[i] = strings.TrimSuffix(strings.TrimSuffix(strings.Trim(lower[i], ".,!?;:\""), "'s"), "'")
	}
	for i, w := range lower {
		if !groupNouns[w] {
			continue
		}
		switch {
		case i+1 < len(lower) && groupNouns[lower[i+1]]: // "thieves' guild"
			return w + " " + lower[i+1]
		case i > 0 && institutions[w] && !determiners[lower[i-1]]: // "merchant guild"
			return lower[i-1] + " " + w
		}
		return w
	}
	return "townsfolk"
}

// groupNouns name a group a player can stand well or badly with.
var groupNouns = map[string]bool{}

// institutions are group nouns a word before names ("merchant guild").
var institutions = map[string]bool{"guild": true, "order": true, "league": true, "house": true, "company": true, "union": true,
	"society": true, "circle": true, "council": true, "temple": true, "church": true, "court": true}

// determiners are left out of a faction's name.
var determiners = map[string]bool{"the": true, "a": true, "an": true, "this": true, "that": true, "these": true, "those": true,
	"our": true, "my": true, "their": true, "his": true, "her": true, "with": true, "to": true, "of": true, "at": true}

func init() {
	for _, w := range strings.Fields(`guild guilds faction order clan temple church brotherhood sisterhood league house court crown
		watch guards guard village villagers town townsfolk city council monks priests merchants traders thieves mages nobles
		nobility elves dwarves tribe cult company army rebels pirates syndicate cartel gang union collective circle society`) {
		groupNouns[w] = true
	}
}

// deltaOf reads how an action the player described changes a standing:
// -10 for harm (insulting, betraying, stealing from, attacking), +10 for
// help (giving, returning, rescuing), +5 when it says neither.
func deltaOf(text string) int {
	switch {
	case hasWordStarting(text, harmStems):
		return -10
	case hasWordStarting(text, helpStems):
		return 10
	}
	return 5
}

// harmStems and helpStems begin the words of harming and helping.
var (
	harmStems = strings.Fields(`insult mock taunt spit curs threat betray steal stole rob attack burn kill murder sabotag cheat
		slander denounc humiliat smash destroy desecrat defac snitch sell frame swindl blackmail`)
	helpStems = strings.Fields(`donat give gave gift return rescu help aid sav protect defend heal repay thank tith offer
		deliver restor rebuil free escort`)
)

// hasWordStarting says whether a word of text begins with one of stems.
func hasWordStarting(text string, stems []string) bool {
	for _, w := range strings.Fields(strings.ToLower(text)) {
		w = strings.Trim(w, ".,!?;:'\"")
		for _, stem := range stems {
			if strings.HasPrefix(w, stem) {
				return true
			}
		}
	}
	return false
}

// UpdateReputation changes a faction standing: input {"faction", "delta"};
// it patches state.reputation.<faction> (clamped to -100..100) and outputs
// {"faction", "standing", "label", "narration"}.
func UpdateReputation(_ context.Context, in *skillkit.Invocation, out *skillkit.Emitter) error {
	var input struct {
		Faction string `json:"faction"`
		Delta   int    `json:"delta"`
	}
	if err := in.DecodeInput(&input); err != nil {
		return fmt.Errorf("%w: input: %v", skillkit.ErrUsage, err)
	}
	name, said := factionOf(input.Faction)
	faction := strings.ToLower(name)
	if input.Delta == 0 && said {
		input.Delta = deltaOf(input.Faction)
	}
	next := clampRep(currentRep(in, faction) + input.Delta)
	if err := out.Patch(map[string]any{"reputation": map[string]any{faction: next}}); err != nil {
		return err
	}
	return out.Done(true, fmt.Sprintf("%s: %d", faction, next), map[string]any{
		"faction": faction, "name": name, "standing": next, "label": standingWord(next),
		"narration": fmt.Sprintf("Word spreads among the %s; they now hold you %s.", name, standingWord(next)),
	})
}

// QueryReputation reports a faction standing: input {"faction"}.
func QueryReputation(_ context.Context, in *skillkit.Invocation, out *skillkit.Emitter) error {
	var input struct {
		Faction string `json:"faction"`
	}
	if err := in.DecodeInput(&input); err != nil {
		return fmt.Errorf("%w: input: %v", skillkit.ErrUsage, err)
	}
	name, _ := factionOf(input.Faction)
	faction := strings.ToLower(name)
	v := currentRep(in, faction)
	return out.Done(true, fmt.Sprintf("%s: %d", faction, v), map[string]any{
		"faction": faction, "name": name, "standing": v, "label": standingWord(v),
		"narration": fmt.Sprintf("The %s regard you as %s.", name, standingWord(v)),
	})
}
