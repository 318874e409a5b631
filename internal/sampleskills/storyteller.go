package sampleskills

import (
	"context"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/narratoria/runtime/pkg/skillkit"
)

// Narrate turns the prompt, the outputs of earlier tools and the session
// state into prose: input {"prompt", "context": {name: output}}; config
// {"style": "terse"|"vivid"|"poetic"}; output {"narration"}.
func Narrate(_ context.Context, in *skillkit.Invocation, out *skillkit.Emitter) error {
	var input struct {
		Prompt  string         `json:"prompt"`
		Context map[string]any `json:"context"`
	}
	if err := in.DecodeInput(&input); err != nil {
		return fmt.Errorf("%w: input: %v", skillkit.ErrUsage, err)
	}
	var cfg struct {
		Style string `json:"style"`
	}
	_ = in.DecodeConfig(&cfg)
	var state map[string]any
	_ = in.DecodeState(&state)
	prompt := strings.TrimSpace(strings.TrimPrefix(input.Prompt, "$"))
	if asksAboutThePast(prompt) && !hasMemories(input.Context) {
		// The player asks about the past and no memory was recalled: ask
		// for more context (§9.1). A planner adds a recall and runs this
		// script again with the memories in its context.
		return out.AskForContext("needs memories", "recall what happened before: "+prompt, map[string]any{"narration": ""})
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(prompt))
	pick := func(opts []string) string { return opts[int(h.Sum32())%len(opts)] }

	var b strings.Builder
	b.WriteString(opening(prompt, cfg.Style, pick))
	names := make([]string, 0, len(input.Context))
	for k := range input.Context {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		m, ok := input.Context[name].(map[string]any)
		if !ok {
			continue
		}
		if total, ok := m["total"].(float64); ok {
			switch {
			case total >= 15:
				fmt.Fprintf(&b, " Fortune favours you: the roll of %v carries the day.", total)
			case total <= 5:
				fmt.Fprintf(&b, " The roll of %v betrays you; things go awry.", total)
			default:
				fmt.Fprintf(&b, " A roll of %v: you manage, barely.", total)
			}
		}
		if mem, ok := m["memories"].([]any); ok && len(mem) > 0 {
			if first, ok := mem[0].(map[string]any); ok {
				fmt.Fprintf(&b, " You remember: %v.", first["text"])
			}
		}
		if st, ok := m["standing"].(float64); ok {
			name := m["name"]
			if name == nil {
				name = m["faction"]
			}
			fmt.Fprintf(&b, " Your standing with the %v is now %v.", name, st)
		}
	}
	if lr, ok := state["lastRoll"].(map[string]any); ok && len(input.Context) == 0 {
		fmt.Fprintf(&b, " The last roll (%v) still echoes.", lr["total"])
	}
	text := b.String()
	return out.Done(true, "narrated", map[string]any{"narration": text})
}

func lowerFirst(s string) string {
	if s == "" {
		return "act"
	}
	return strings.ToLower(s[:1]) + s[1:]
}

// pastCues are words of a prompt that asks about the past.
var pastCues = []string{"before", "remember", "last time", "earlier", "previously", "ago", "have i met", "did i meet", "recall", "what happened"}

// asksAboutThePast says whether the prompt asks about what happened before.
func asksAboutThePast(prompt string) bool {
	p := " " + strings.ToLower(prompt) + " "
	for _, c := range pastCues {
		if strings.Contains(p, " "+c+" ") || strings.Contains(p, " "+c+"?") || strings.Contains(p, " "+c+".") || strings.Contains(p, " "+c+",") {
			return true
		}
	}
	return false
}

// hasMemories says whether an earlier tool's output in the context holds
// recalled memories (even none).
func hasMemories(ctx map[string]any) bool {
	for _, v := range ctx {
		if m, ok := v.(map[string]any); ok {
			if _, ok := m["memories"]; ok {
				return true
			}
		}
	}
	return false
}

// opening is the narration's first sentence: a statement in the first
// person becomes "you …", a question is pondered, anything else (an order,
// a fragment) is quoted — never a player's words bent into bad grammar, and
// never a first-person clause of theirs told back as it was ("I ask" is
// told "you ask", "Have I met" "have you met", "Tell me what I know" "you
// ask to be told what you know").
func opening(prompt, style string, pick func([]string) string) string {
	p := strings.TrimSpace(prompt)
	if p == "" {
		return "You hesitate, and the moment passes."
	}
	body := strings.TrimRight(p, ".!?… ")
	// A statement ends with its own ? or ! when it has one, else a period.
	end := "."
	if strings.HasSuffix(p, "?") || strings.HasSuffix(p, "!") {
		end = p[len(p)-1:]
	}
	switch {
	case strings.HasPrefix(p, "I ") || strings.HasPrefix(p, "i ") || strings.HasPrefix(p, "I'm ") || strings.HasPrefix(p, "I am "):
		act := secondPerson(body)
		switch style {
		case "terse":
			return fmt.Sprintf("You %s%s", act, end)
		case "poetic":
			return fmt.Sprintf("%s — and the moment bends around your will: you %s%s", pick([]string{"Softly as dusk", "Like a held breath", "As the old songs foretold"}), act, end)
		default:
			return fmt.Sprintf("%s you %s%s", pick([]string{"Heart pounding,", "With steady hands,", "Without a second thought,"}), act, end)
		}
	case speaksOfSelf(p) && askedFor.MatchString(p):
		// "Tell me what I know": a request about the player, told as one.
		m := askedFor.FindStringSubmatch(p)
		return fmt.Sprintf("You ask to be %s %s.", participles[strings.ToLower(m[1])], secondPerson("I "+strings.TrimRight(m[2], ".!? ")))
	case strings.HasSuffix(p, "?"):
		q := p
		if speaksOfSelf(q) {
			q = upperFirst(secondPerson("I " + q))
		}
		return fmt.Sprintf("%s \"%s\"", pick([]string{"You pause and wonder:", "The question hangs in the air:", "You ask aloud:"}), q)
	default:
		q := p
		if speaksOfSelf(q) {
			q = upperFirst(secondPerson("I " + q))
		}
		return fmt.Sprintf("%s \"%s\"", pick([]string{"You call out:", "Your voice carries:", "You say:"}), q)
	}
}

// askedFor is a request about the player: "Tell me …", "Show me …".
var askedFor = regexp.MustCompile(`^(?i:(tell|show|give|remind)) me (.+)$`)

// participles of the verbs askedFor knows.
var participles = map[string]string{"tell": "told", "show": "shown", "give": "given", "remind": "reminded"}

// speaksOfSelf reports whether a prompt has a first-person clause ("I"
// and a word next to it).
func speaksOfSelf(p string) bool {
	for _, w := range strings.Fields(p) {
		if _, core, _ := wordParts(w); core == "I" || strings.HasPrefix(core, "I'") {
			return true
		}
	}
	return false
}

// wordParts splits a token into what comes before its word, the word
// (letters and apostrophes) and what follows: "<b>I" is "<b>", "I", "";
// markup (<…>) before the word is not part of it.
func wordParts(w string) (pre, core, post string) {
	isWord := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '\'' }
	i := 0
	for i < len(w) && !isWord(w[i]) {
		if w[i] == '<' {
			if k := strings.IndexByte(w[i:], '>'); k > 0 {
				i += k + 1
				continue
			}
		}
		i++
	}
	j := i
	for j < len(w) && isWord(w[j]) {
		j++
	}
	return w[:i], w[i:j], w[j:]
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// persons turns the player's first person into the narration's second.
var persons = map[string]string{"i": "you", "i'm": "you're", "am": "are", "my": "your", "me": "you", "myself": "yourself",
	"mine": "yours", "i've": "you've", "i'll": "you'll", "i'd": "you'd", "we": "you", "our": "your", "us": "you"}

// secondPerson rewrites "I swing my axe" as "swing your axe" ("I am
// lost" as "are lost"): the words after the leading "I", in the second
// person.
func secondPerson(s string) string {
	ws := strings.Fields(s)
	dropped := false // the leading "I" was dropped: the first word follows it
	if len(ws) > 0 && strings.EqualFold(ws[0], "i") {
		ws, dropped = ws[1:], true
	} else if len(ws) > 0 && strings.EqualFold(ws[0], "i'm") {
		ws[0] = "are"
	}
	orig := slices.Clone(ws)
	isI := func(j int) bool {
		if j < 0 {
			return dropped
		}
		if j >= len(orig) {
			return false
		}
		_, core, _ := wordParts(orig[j])
		return strings.EqualFold(core, "i")
	}
	for i, w := range ws {
		pre, core, post := wordParts(w)
		switch {
		case strings.EqualFold(core, "was") && (isI(i-1) || isI(i+1)):
			// "I was" / "was I": "you were" / "were you".
			ws[i] = pre + matchCase(core, "were") + post
		default:
			if r, ok := persons[strings.ToLower(core)]; ok {
				ws[i] = pre + matchCase(core, r) + post
			}
		}
	}
	if len(ws) == 0 {
		return "act"
	}
	return lowerFirst(strings.Join(ws, " "))
}

// matchCase gives to its capitalised first letter when from has one (a
// question's "Am" becomes "Are"; "I" inside a sentence becomes "you").
func matchCase(from, to string) string {
	if from != "I" && from != "" && from[0] >= 'A' && from[0] <= 'Z' {
		return strings.ToUpper(to[:1]) + to[1:]
	}
	return to
}
