package planner

import (
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Reading players as they type (issue 48), second half: what a prompt does
// not really do. A prompt is split into sentences and each sentence into
// clauses (at commas, semicolons, colons, dashes and the words that chain
// actions: "then", "and then", "and", "but", "after that", "also"...). An
// action the player says they will not do ("I'm not going to pick the
// lock", "no need to write that down") and an action they only imagine
// ("Hypothetically, if I punched the captain...", "what would happen if
// I jumped?") are cut from the prompt before it is scored, so they call no
// skill; what is left (the real actions) is scored as before, whole and
// clause by clause.

// cut is a part of a prompt that is not a real action: why is "negated" or
// "hypothetical".
type cut struct {
	span
	why string
}

// sentence is a sentence of a text: its words (toks, a part of the text's
// tokens), the span from its first word to its last, where the marks that
// end it stop (stop), and whether they hold a "?" (question).
type sentence struct {
	span
	stop     int
	question bool
	toks     []token
}

// sentences splits a text (its tokens toks) into its sentences: one ends
// at a run of ".", "!", "?" or "…" (with closing quotes or brackets) before
// a blank or the end of the text, or at a line break.
func sentences(text string, toks []token) []sentence {
	var out []sentence
	from := 0
	for i := range toks {
		gapEnd := len(text)
		if i+1 < len(toks) {
			gapEnd = toks[i+1].start
		}
		stop, ends, question := sentenceEnd(text[toks[i].end:gapEnd], gapEnd == len(text))
		if ends || i+1 == len(toks) {
			out = append(out, sentence{span: span{toks[from].start, toks[i].end}, stop: toks[i].end + stop, question: question,
				toks: toks[from : i+1]})
			from = i + 1
		}
	}
	return out
}

// sentenceEnd says whether the text between two words (gap; last: after
// the last word) ends a sentence, whether with a "?", and where its end
// marks stop. End marks must be followed by a blank or the end of the
// text: "1.5" is one number.
func sentenceEnd(gap string, last bool) (stop int, ends, question bool) {
	i := strings.IndexAny(gap, ".!?…\n")
	if i < 0 {
		return 0, false, false
	}
	j := i
	for j < len(gap) {
		r, n := utf8.DecodeRuneInString(gap[j:])
		if r != '.' && r != '!' && r != '?' && r != '…' {
			break
		}
		question = question || r == '?'
		j += n
	}
	for j < len(gap) && strings.IndexByte(`"')]`, gap[j]) >= 0 {
		j++
	}
	if j > i && (j == len(gap) && last || j < len(gap) && isBlank(gap[j])) {
		return j, true, question
	}
	if k := strings.IndexByte(gap, '\n'); k >= 0 {
		return k, true, question
	}
	return 0, false, false
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// connectives are the words that chain the actions of a sentence, longest
// first: clauses break there as at a comma or a semicolon. Colons and
// dashes do not break: what follows them says more of the same action
// ("Write this down: the vault opens at low tide").
var connectives = [][]string{
	{"and", "then"}, {"and", "after", "that"}, {"and", "afterwards"}, {"and", "also"}, {"and", "finally"}, {"and"}, {"then"},
	{"but"}, {"after", "that"}, {"afterwards"}, {"before", "that"}, {"also"}, {"plus"}, {"finally"},
}

// clausesOf splits words of a sentence (toks) into its clauses: they
// break at a comma or a semicolon, and at a connective between two words
// ("I attack the orc and then look around"), which belongs to neither. "and"
// after "try", "go" or "come" joins one action ("try and pick the lock").
func clausesOf(text string, toks []token) [][]token {
	var out [][]token
	from := 0
	flush := func(to int) {
		if to > from {
			out = append(out, toks[from:to])
		}
	}
	for k := 1; k < len(toks); k++ {
		if strings.ContainsAny(text[toks[k-1].end:toks[k].start], ",;") {
			flush(k)
			from = k
		}
		gap := text[toks[k-1].end:toks[k].start]
		if gap == "" || !isBlank(gap[len(gap)-1]) {
			continue
		}
		for _, c := range connectives {
			n := len(c)
			if k+n >= len(toks) || !hasAt(toks, k, c) || !blankBetween(text, toks[k:k+n+1]) {
				continue
			}
			if n == 1 && c[0] == "and" && joinsByAnd[toks[k-1].lower] {
				break
			}
			flush(k)
			from = k + n
			k += n - 1
			break
		}
	}
	flush(len(toks))
	return out
}

// joinsByAnd are the verbs "and" joins to the next one as "to" ("try and
// pick the lock").
var joinsByAnd = map[string]bool{"try": true, "tries": true, "tried": true, "trying": true, "go": true, "goes": true,
	"going": true, "come": true, "comes": true, "wait": true}

// blankBetween says whether only blanks part the words toks.
func blankBetween(text string, toks []token) bool {
	for k := 1; k < len(toks); k++ {
		gap := text[toks[k-1].end:toks[k].start]
		if gap == "" || strings.TrimSpace(gap) != "" {
			return false
		}
	}
	return true
}

// spanOf is the span of words toks, from the first to the last.
func spanOf(toks []token) span { return span{toks[0].start, toks[len(toks)-1].end} }

// splitClauses returns the clauses of every sentence of text that have two
// words or more, with the "?" that ends one.
func splitClauses(text string) []string {
	var out []string
	toks := tokenize(text)
	for _, s := range sentences(text, toks) {
		for _, c := range clausesOf(text, s.toks) {
			if len(c) >= 2 {
				sp := spanOf(c)
				if strings.HasPrefix(strings.TrimLeft(text[sp.end:], `"')]`), "?") {
					sp.end = strings.Index(text[sp.end:], "?") + sp.end + 1 // it asks
				}
				out = append(out, text[sp.start:sp.end])
			}
		}
	}
	return out
}

// unreal returns the parts of text that are not real actions: in each
// sentence, an action in the scope of a hypothetical marker (see
// hypothetical) and, in each clause, one in the scope of a negation (see
// negated). The parts are in order and do not overlap.
func unreal(text string) []cut {
	var out []cut
	for _, s := range sentences(text, tokenize(text)) {
		parts := [][]token{s.toks}
		if h, ok := hypothetical(s); ok {
			out = append(out, cut{h, "hypothetical"})
			parts = [][]token{tokensBefore(s.toks, h.start), tokensAfter(s.toks, h.end)}
		}
		for _, p := range parts {
			for _, ct := range clausesOf(text, p) {
				if s.question && ct[len(ct)-1].end == s.end || asksFirst(ct) {
					continue // "Don't the elves trust me?" asks
				}
				for _, n := range negated(ct) {
					out = append(out, cut{n, "negated"})
				}
			}
		}
	}
	for _, d := range dialogue(text) {
		out = append(out, cut{d, "said to someone in the story"})
	}
	slices.SortFunc(out, func(a, b cut) int { return a.start - b.start })
	// A negation inside a quote goes with the quote; parts that overlap
	// are one.
	var merged []cut
	for _, c := range out {
		if n := len(merged); n > 0 && c.start < merged[n-1].end {
			merged[n-1].end = max(merged[n-1].end, c.end)
			continue
		}
		merged = append(merged, c)
	}
	return merged
}

// dialogue returns the quoted words a player's character says to someone
// in the story ("'I'll never forget this view,' I tell Nadja"): words of
// the story, not requests to the game. A quote counts when the text has a
// speech verb not aimed at the game ("tell me", "ask you" are) and the
// quote has three words or more ("write down the password, 'Blue Heron'"
// keeps its name).
func dialogue(text string) []span {
	if !speechVerb.MatchString(text) || toTheGame.MatchString(text) && !speechToSomeone.MatchString(text) {
		return nil
	}
	var out []span
	for _, m := range quoted.FindAllStringSubmatchIndex(text, -1) {
		inner := span{m[2], m[3]}
		if m[2] < 0 {
			inner = span{m[4], m[5]}
		}
		if inner.start < 0 || len(words(text[inner.start:inner.end])) < 3 {
			continue
		}
		out = append(out, inner)
	}
	return out
}

var (
	// quoted is a quote in double quotes (straight or curly) or in single
	// quotes that open after a blank or the start and close before one
	// (an apostrophe before a letter inside it is a contraction: "I'll").
	quoted = regexp.MustCompile(`["“]([^"“”]+)["”]|(?:^|[\s(])'((?:[^']|'[A-Za-z])+?)'(?:[\s,.;:!?)]|$)`)
	// speechVerb is a verb of saying.
	speechVerb = regexp.MustCompile(`(?i)\b(?:say|says|said|tell|tells|told|ask|asks|asked|shout|shouts|shouted|whisper|whispers|` +
		`whispered|reply|replies|replied|mutter|mutters|muttered|yell|yells|yelled|call|calls|called|answer|answers|answered|greet|greets)\b`)
	// toTheGame is speech aimed at the game master, and speechToSomeone
	// speech aimed at someone in the story.
	toTheGame       = regexp.MustCompile(`(?i)\b(?:tell|ask|show|give)\s+(?:me|us)\b`)
	speechToSomeone = regexp.MustCompile(`(?i:\b(?:say|says|said|mutter|mutters|whisper|whispers|reply|replies)\b)` +
		`|(?i:\b(?:tell|tells|told|ask|asks|asked))\s+(?:(?i:the|my)\s+|(?i:her|him|them)\b|[A-Z])`)
)

// tokensBefore and tokensAfter are the words of toks that end before at,
// and that start at or after at.
func tokensBefore(toks []token, at int) []token {
	k := 0
	for k < len(toks) && toks[k].end <= at {
		k++
	}
	return toks[:k]
}

func tokensAfter(toks []token, at int) []token {
	k := 0
	for k < len(toks) && toks[k].start < at {
		k++
	}
	return toks[k:]
}

// asksFirst says whether a clause is worded as a question: a question word
// first, or an auxiliary verb followed by its subject ("do they", "don't
// the elves").
func asksFirst(ct []token) bool {
	first := ct[0].lower
	if slices.Contains(conceptOf[first], "~question") || first == "why" || first == "when" {
		return true
	}
	if len(ct) < 2 {
		return false
	}
	aux := auxiliaries[first] || auxiliaries[strings.TrimSuffix(strings.TrimSuffix(first, "n't"), "nt")]
	return aux && subjects[ct[1].lower]
}

// subjects are the words that begin the subject of a question after its
// auxiliary verb.
var subjects = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`i you we they he she it the a an my your our their his her this that these those there`) {
		subjects[w] = true
	}
}

// Hypothetical markers: a sentence that holds one imagines the action
// that follows it. In a question the whole sentence is imagined
// ("Hypothetically, if I punched the captain, what would the guards
// do?"); in a statement, from the marker to the next contrast ("If I had
// wings I would fly over the wall, but I don't, so I look for a door").
var (
	// hypotheticalMarkers hold anywhere in a sentence.
	hypotheticalMarkers = [][]string{
		{"hypothetically"}, {"hypothetical"}, {"theoretically"}, {"in", "theory"}, {"what", "if"}, {"what", "would", "happen"},
		{"what", "happens", "if"}, {"what'd", "happen"}, {"what", "will", "happen", "if"}, {"suppose"}, {"supposing"},
		{"let's", "say"}, {"lets", "say"}, {"imagine", "if"}, {"imagine", "i"}, {"imagine", "we"}, {"imagine", "that"},
		{"if", "i", "were"}, {"if", "i", "was", "to"}, {"if", "we", "were"}, {"if", "i", "had"}, {"if", "we", "had"},
		{"if", "i", "could"}, {"just", "curious"}, {"just", "wondering"}, {"out", "of", "curiosity"}, {"would", "it", "be"},
		{"would", "i", "be", "able"}, {"could", "i", "even"}, {"in", "a", "hypothetical"}, {"if", "i", "ever"}, {"if", "we", "ever"},
		{"if", "i", "someday"}, {"if", "i", "one", "day"},
	}
	// hypotheticalOpeners hold only at the start of a sentence ("Say I
	// donated...").
	hypotheticalOpeners = [][]string{{"say", "i"}, {"say", "we"}, {"were", "i"}, {"were", "we"}, {"had", "i"}, {"had", "we"}}
	// contrasts end a statement's hypothetical (and a negation's scope).
	contrasts = map[string]bool{"but": true, "however": true, "though": true, "although": true, "instead": true,
		"anyway": true, "anyways": true, "actually": true, "so": true, "rather": true}
	// modals make an "if" question imagine ("If I attacked now, would I
	// win?").
	modals = map[string]bool{"would": true, "could": true, "might": true, "i'd": true, "we'd": true,
		"they'd": true, "he'd": true, "she'd": true, "it'd": true, "wouldn't": true, "couldn't": true}
)

// fillers open a sentence without saying anything ("ok so hypothetically").
var fillers = map[string]bool{"ok": true, "okay": true, "so": true, "well": true, "and": true, "but": true, "now": true,
	"oh": true, "hey": true, "alright": true, "right": true, "wait": true, "like": true, "just": true, "quick": true,
	"question": true, "ooc": true, "then": true, "yeah": true, "yes": true, "no": true, "nah": true, "hm": true}

// hypothetical returns the part of sentence s (tokens toks) that is
// imagined, if any: in a question the whole sentence, in a statement from
// the marker to the next contrast or the end. A question with "if" and a
// modal verb ("would the monks notice if I stole the idol?") imagines too.
func hypothetical(s sentence) (span, bool) {
	toks := s.toks
	at := -1
	first := 0
	for first < len(toks) && fillers[toks[first].lower] {
		first++
	}
	for _, m := range hypotheticalOpeners {
		if hasAt(toks, first, m) {
			at = first
			break
		}
	}
	for i := 0; at < 0 && i < len(toks); i++ {
		for _, m := range hypotheticalMarkers {
			if hasAt(toks, i, m) {
				at = i
				break
			}
		}
	}
	if at < 0 && s.question {
		iff, modal := false, false
		for i, t := range toks {
			switch {
			case t.lower == "if" && i+1 < len(toks) && (toks[i+1].lower == "i" || toks[i+1].lower == "we"):
				iff = true
			case modals[t.lower]:
				modal = true
			}
		}
		if iff && modal {
			at = first
		}
	}
	if at < 0 && !s.question {
		at = counterfactual(toks)
	}
	if at < 0 {
		return span{}, false
	}
	if s.question {
		if at > 0 && contrasts[toks[at-1].lower] {
			// "I attack the troll, but what if it has friends?"
			return span{toks[at].start, s.stop}, true
		}
		return span{s.start, s.stop}, true
	}
	end := s.stop
	for i := at + 1; i < len(toks); i++ {
		if contrasts[toks[i].lower] {
			end = toks[i].start
			break
		}
	}
	return span{toks[at].start, end}, true
}

// counterfactual finds in a statement "if I" (or "we") with a verb in
// the past and a modal after it, before any contrast ("If I punched the
// dockmaster, the Brotherhood would hate me, so I ask…"): an action
// imagined. It returns the index of the "if", or -1.
func counterfactual(toks []token) int {
	for i := 0; i+2 < len(toks); i++ {
		if toks[i].lower != "if" || toks[i+1].lower != "i" && toks[i+1].lower != "we" {
			continue
		}
		v := toks[i+2].lower
		if !(len(v) > 4 && strings.HasSuffix(v, "ed") || pastForms[v]) {
			continue
		}
		for j := i + 3; j < len(toks) && !contrasts[toks[j].lower]; j++ {
			if modals[toks[j].lower] {
				return i
			}
		}
	}
	return -1
}

// hasAt says whether the words m start at toks[i].
func hasAt(toks []token, i int, m []string) bool {
	if i+len(m) > len(toks) {
		return false
	}
	for k, w := range m {
		if toks[i+k].lower != w {
			return false
		}
	}
	return true
}

// Negation: in a statement's clause, a negation ("not", "don't", "won't",
// "never", "no", "no need to", "refuse to") takes the words after it, to the
// clause's end or a contrast ("I don't attack the wolf but I climb the
// tree"), out of the prompt; the words before it go too when they only say
// who decides ("I decide not to jump"). A negation that asks is no
// negation: "don't forget" stores, "I don't know what to do" and "not
// sure" are stuck, "I can't remember who she was" recalls, "not gonna lie"
// is a manner of speaking.
var (
	// negations start a negation's scope.
	negations = map[string]bool{}
	// scopeEnds end a negation's scope besides contrasts ("I won't fight
	// as I sneak past", "...just talk").
	scopeEnds = map[string]bool{"just": true, "as": true, "while": true, "because": true, "until": true, "when": true,
		"since": true, "except": true, "unless": true, "whereas": true, "cause": true}
	// lightWords may stand before a negation and go with its scope: they
	// say who acts and how sure they are, not what they do.
	lightWords = map[string]bool{}
	// askingAfterNegation are the words that, after a negation, make it a
	// request (stuck, forgetting, not remembering).
	stuckWords  = map[string]bool{"know": true, "sure": true, "idea": true, "clue": true, "decide": true, "figure": true, "certain": true}
	recallWords = map[string]bool{"remember": true, "recall": true, "recollect": true, "recognise": true, "recognize": true,
		"remembering": true, "place": true}
	forgetWords = map[string]bool{"forget": true, "forgot": true, "forgetting": true}
	// tryingNot are the words before a negation that make it a risk taken
	// ("trying not to get caught", "careful not to wake the dog").
	tryingNot = map[string]bool{"try": true, "tries": true, "tried": true, "trying": true, "careful": true, "carefully": true,
		"hoping": true, "hope": true, "praying": true}
	// notNegations are set phrases with a negation that negate no action.
	notNegations = [][]string{{"not", "gonna", "lie"}, {"not", "going", "to", "lie"}, {"not", "to", "mention"}, {"not", "only"},
		{"no", "doubt"}, {"no", "matter"}, {"no", "problem"}, {"no", "worries"}, {"not", "bad"}, {"no", "kidding"},
		{"can't", "help", "but"}, {"cannot", "help", "but"}, {"no", "one"}, {"no", "longer"}, {"not", "yet"}, {"no", "sooner"},
		{"never", "before"}, {"not", "far"}, {"no", "wonder"}, {"if", "not"}, {"or", "not"}, {"whether", "or", "not"}}
)

func init() {
	for _, w := range strings.Fields(`not never no nope don't doesn't didn't won't can't cannot isn't aren't wasn't weren't
		shouldn't wouldn't couldn't mustn't haven't hasn't hadn't ain't shan't nor`) {
		negations[w] = true
	}
	for _, w := range strings.Fields(`i i'm i'll i'd we we're we'll we'd you you're he she they it i've we've he's she's they're
		just really definitely certainly probably still simply so ok okay well nah yeah and then also decide decided choose chose
		would will am are is do does did to rather prefer absolutely totally surely be going gonna obviously clearly honestly
		think guess swear promise please`) {
		lightWords[w] = true
	}
}

// negated returns the negated parts of a clause (tokens ct).
func negated(ct []token) []span {
	var out []span
	for i := 0; i < len(ct); i++ {
		w := ct[i].lower
		refusal := (w == "refuse" || w == "refuses" || w == "refused" || w == "decline" || w == "declines" || w == "declined") &&
			i+1 < len(ct) && ct[i+1].lower == "to"
		if !negations[w] && !refusal && !dismissal(ct, i) || setPhraseAt(ct, i) || i > 0 && setPhraseAt(ct, i-1) {
			continue
		}
		if i > 0 && tryingNot[ct[i-1].lower] {
			continue // "trying not to fall" is a risk taken
		}
		next := contentAfter(ct, i)
		switch {
		case next < 0:
			continue // "No." "Nope."
		case forgetWords[ct[next].lower] && next-i <= 4:
			continue // "don't forget", "don't let me forget" store
		case stuckWords[ct[next].lower]:
			continue // "I don't know what to do", "not sure"
		case recallWords[ct[next].lower] && subjectBefore(ct[:i]):
			continue // "I can't remember who she was" recalls
		}
		start := ct[i].start
		if allLight(ct[:i]) {
			start = ct[0].start
		}
		if dismissal(ct, i) && i+2 < len(ct) && pronounObject[ct[i+1].lower] {
			// "skip it — I return the ledgers": the order is its two words.
			out = append(out, span{start, ct[i+1].end})
			i++
			continue
		}
		end := ct[len(ct)-1].end
		j := i + 1
		for ; j < len(ct); j++ {
			if contrasts[ct[j].lower] || scopeEnds[ct[j].lower] {
				end = ct[j].start
				break
			}
		}
		out = append(out, span{start, end})
		i = j
	}
	return out
}

// dismissal says whether ct[i] starts an order not to do something, at
// the head of its clause: "Skip the recap", "Forget about the choices",
// "Forget the map", "please skip the drawing" (not "I skip across the
// stones", not "never forget the oath").
func dismissal(ct []token, i int) bool {
	w := ct[i].lower
	if i+1 >= len(ct) || !((w == "skip" || w == "forget") && (skipWhat[ct[i+1].lower] || strings.HasSuffix(ct[i+1].lower, "ing")) ||
		w == "forget" && ct[i+1].lower == "about") {
		return false // "Skip ahead: I pay my debt" goes on
	}
	for _, t := range ct[:i] {
		if !dismissalLead[t.lower] {
			return false
		}
	}
	return true
}

// skipWhat are the words after "skip" that make it "do not do": "skip
// the recap", "skip that".
var skipWhat = map[string]bool{"the": true, "that": true, "this": true, "it": true, "my": true, "your": true, "all": true,
	"any": true, "those": true, "these": true}

// pronounObject are the objects of a dismissal that end it: "skip it",
// "skip that".
var pronounObject = map[string]bool{"it": true, "that": true, "this": true}

// dismissalLead are the words that may come before a dismissal.
var dismissalLead = map[string]bool{"please": true, "just": true, "ok": true, "okay": true, "nah": true, "so": true,
	"um": true, "uh": true, "and": true, "oh": true, "actually": true, "also": true, "then": true}

// setPhraseAt says whether a set phrase without negation (notNegations)
// starts at ct[i].
func setPhraseAt(ct []token, i int) bool {
	for _, m := range notNegations {
		if hasAt(ct, i, m) {
			return true
		}
	}
	return false
}

// contentAfter is the index of the first word after ct[i] that says what
// is negated (not a light word, article or "need to"), or -1.
func contentAfter(ct []token, i int) int {
	for j := i + 1; j < len(ct); j++ {
		switch ct[j].lower {
		case "a", "an", "the", "any", "even", "ever", "really", "need", "needed", "to", "want", "wanna", "gonna", "going",
			"let", "me", "us", "i", "we", "you", "be", "have", "quite", "exactly", "totally", "do", "try", "trying", "mean":
			continue
		}
		return j
	}
	return -1
}

// allLight says whether every word of ws is a light word (or there are
// none).
func allLight(ws []token) bool {
	for _, t := range ws {
		if !lightWords[t.lower] {
			return false
		}
	}
	return true
}

// subjectBefore says whether a subject stands in ws ("I can't remember"
// tells; "don't remember that" orders).
func subjectBefore(ws []token) bool {
	for _, t := range ws {
		switch t.lower {
		case "i", "we", "i'm", "we're", "i've", "we've", "i'd", "we'd", "i'll":
			return true
		}
	}
	return false
}

// Two rewrites make a clause say plainly what it asks: "don't forget"
// (and "never forget", "do not forget") is "remember"; a question put as a
// statement ("I ask how the Harbor Watch sees me", "I wonder whether the
// elves trust me", "I want to know if...") is asked: the words before the
// question word go and the clause ends with "?". Asking someone in the
// world ("I ask the innkeeper where the mayor lives", "I ask how she's
// holding up") is left as it is.
var (
	// rememberPhrases say "remember" with a negation.
	rememberPhrases = regexp.MustCompile(`(?i)\b(?:don't|do\s+not|dont|never)\s+(?:ever\s+)?(?:let\s+(?:me|us)\s+)?forget\b`)
	// rememberWish is a wish that the game remember, said plainly as
	// "remember" ("I do want you to remember that…", "I want it
	// remembered that…", "make sure you remember…").
	rememberWish = regexp.MustCompile(`(?i)\b(?:(?:i|we)\s+(?:do\s+|really\s+|just\s+|also\s+)?(?:want|need|'d\s+like|would\s+like)\s+` +
		`(?:you\s+to\s+remember|(?:it|this|that)\s+remembered)|make\s+sure\s+(?:you\s+)?remember)\b`)
	// reportedQuestion is a question put as a statement, to its question
	// word.
	reportedQuestion = regexp.MustCompile(`(?i)^(?:(?:so|ok|okay|now|and|then)\s+)*(?:(?:i|we)\s+)?(?:(?:just|also|then)\s+)?` +
		`(?:ask|asks|wonder|wonders|wondering|(?:want|wanna|need|would\s+like|'d\s+like|like)\s+to\s+know|want\s+know|` +
		`(?:i'd|we'd|i'm|would|am)\s+(?:be\s+)?(?:really\s+|so\s+)?curious(?:\s+to\s+(?:know|hear|learn))?)\s+` +
		`(?:(?:about\s+)?(?:now|again)\s+)?(how|what|whether|if|who|where|which|why|when)\b`)
)

// plainly rewrites text's "don't forget" and its reported questions (see
// rememberPhrases and reportedQuestion), clause by clause.
func plainly(text string) string {
	if strings.Contains(text, "orget") { // "forget", "Forget"
		text = rememberPhrases.ReplaceAllString(text, "remember")
	}
	if strings.Contains(text, "emember") { // "remember", "Remembered"
		text = rememberWish.ReplaceAllString(text, "remember")
	}
	text = reminiscing(idioms(text))
	var b strings.Builder
	last := 0
	toks := tokenize(text)
	for _, s := range sentences(text, toks) {
		for _, ct := range clausesOf(text, s.toks) {
			if !slices.ContainsFunc(ct[:min(len(ct), 8)], func(t token) bool { return reportingVerbs[t.lower] }) {
				continue
			}
			c := spanOf(ct)
			m := reportedQuestion.FindStringSubmatchIndex(text[c.start:c.end])
			if m == nil || askedInWorld(text[c.start+m[3]:c.end]) {
				continue
			}
			b.WriteString(text[last:c.start])
			q := text[c.start+m[2] : c.end]
			if strings.EqualFold(text[c.start+m[2]:c.start+m[3]], "if") {
				q = "whether" + q[2:]
			}
			b.WriteString(q)
			b.WriteString("?")
			last = c.end
			if ct[len(ct)-1] == s.toks[len(s.toks)-1] {
				last = s.stop // the sentence's own end marks go: it asks
			}
		}
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// idiomTable are idioms said plainly: what a player means by them, in
// the words the examples use.
var idiomTable = []struct {
	re   *regexp.Regexp
	with string
}{
	// "drawing a blank on what she said": forgot; "I'm drawing a blank":
	// stuck (not a drawing).
	{regexp.MustCompile(`(?i)\b(?:draw(?:ing|s|n)?|drew)\s+(?:a\s+)?(?:complete\s+|total\s+)?blank\s+on\b`), "forgot"},
	{regexp.MustCompile(`(?i)\b(?:draw(?:ing|s|n)?|drew)\s+(?:a\s+)?(?:complete\s+|total\s+)?blank\b`), "stuck"},
	// Drawing a weapon, a garment or a chair is not a picture: "I draw my
	// sword", "draws her shawl tighter", "draw up a chair".
	{regexp.MustCompile(`(?i)\b(?:draw|draws|drew|drawing)(\s+(?:up\s+|out\s+)?(?:my|his|her|their|our|a|the|your)\s+(?:\w+\s+)?` +
		`(?:sword|blade|knife|dagger|pistol|gun|revolver|weapon|bow|axe|saber|sabre|rapier|wand|shawl|cloak|coat|collar|hood|blanket|` +
		`curtains?|blinds|breath|chair|stool|bath|water|bucket|cart|line|card|lots|straws?)s?\b)`), "hold$1"},
	// "remind her she's a good girl": telling her (not a memory); "remind
	// me" stays.
	{regexp.MustCompile(`(?i)\bremind(?:s|ed|ing)?(\s+(?:her|him|them|the\s+\w+|my\s+\w+))\b`), "tell$1"},
	// "just thinking out loud": nothing asked.
	{regexp.MustCompile(`(?i)\b(?:just\s+)?thinking\s+(?:out\s+)?loud(?:\s+here)?\b`), ""},
	// "throw me a bone": a hint (not a throw).
	{regexp.MustCompile(`(?i)\bthrow\s+(?:me|us)\s+a\s+bone\b`), "give me a hint"},
	// "the ball's in my court": my choice (not a ball game).
	{regexp.MustCompile(`(?i)\b(?:so\s+)?(?:the\s+)?ball(?:'s|\s+is)\s+in\s+(?:my|our)\s+court\b`), "it is my choice"},
	{regexp.MustCompile(`(?i)\b(?:so\s+)?(?:the\s+)?ball(?:'s|\s+is)\s+in\s+your\s+court\b`), "your call"},
	// "give me the lay of the land": a view of the place.
	{regexp.MustCompile(`(?i)\bthe\s+lay\s+of\s+the\s+land\b`), "a view of the area"},
	// "I'd love to get a look at the deck": seeing it.
	{regexp.MustCompile(`(?i)\b(?:get|getting|grab|catch)\s+a\s+(?:good\s+|quick\s+|proper\s+|better\s+)?look\s+at\b`), "see"},
	// "stash this in memory": keep it.
	{regexp.MustCompile(`(?i)\b(?:stash|file|tuck|lock)\s+(this|that|it)\s+(?:away\s+)?(?:in|into)\s+(?:your\s+|my\s+|the\s+)?(?:memory|memories|log|records?|notes)\b`), "remember $1"},
	// "take a shot at the wolf", "take a swing at him": an attack.
	{regexp.MustCompile(`(?i)\btak(?:e|es|ing)\s+a\s+(?:shot|swing|stab|swipe|crack|potshot)\s+at\b`), "attack"},
	// "keep walking", "kept standing watch": going on (not keeping a
	// note).
	{regexp.MustCompile(`(?i)\b(?:keep|keeps|kept|keeping)\s+(?:on\s+)?([a-z]+ing)\b`), "$1"},
	// "my mind is blank": I forgot (not a note in mind).
	{regexp.MustCompile(`(?i)\bmy\s+mind(?:'s|\s+is|\s+went|\s+goes)\s+(?:totally\s+|completely\s+)?(?:a\s+)?blank\b`), "I forgot"},
	// "do I manage to catch the vase?": trying it.
	{regexp.MustCompile(`(?i)\b(?:do|did|can|could|will|would)\s+i\s+manage\s+to\b`), "I try to"},
	// "let me lay eyes on the outpost": seeing it.
	{regexp.MustCompile(`(?i)\b(?:lay|laying|set|setting)\s+(?:my\s+)?eyes\s+on\b`), "see"},
	// "with a straight face", "straight-faced": a bluff.
	{regexp.MustCompile(`(?i)\b(?:with|keeping|keep|wearing)\s+a\s+(?:perfectly\s+|totally\s+|completely\s+|dead\s+)?straight\s+face\b|\bstraight-faced\b`), "bluffing $0"},
	// "keeping low", "keeping to the shadows": staying so (not a note).
	{regexp.MustCompile(`(?i)\bkeep(?:ing|s)?\s+(low|quiet|quietly|down|still|silent|calm|close|to\s+the|out\s+of|my\s+head\s+down|a\s+low\s+profile|my\s+distance)\b`), "staying $1"},
	// Reaching for a memory: "rack my brain", "I blanked on", "dredge
	// up", "search my memories", "lost the thread".
	{regexp.MustCompile(`(?i)\brack(?:s|ed|ing)?\s+my\s+brains?\b|\bsearch(?:es|ed|ing)?\s+my\s+memor(?:y|ies)\b|\bdredg(?:e|es|ed|ing)\s+up\b`), "try to remember"},
	{regexp.MustCompile(`(?i)\bblank(?:ed)?\s+on\b|\b(?:lost|losing|lose)\s+the\s+thread\b`), "forgot"},
	// "marking down that …": writing it down.
	{regexp.MustCompile(`(?i)\bmark(?:s|ed|ing)?\s+down\b`), "write down"},
	// Stuck: "painted myself into a corner", "spinning my wheels".
	{regexp.MustCompile(`(?i)\bpaint(?:ed|ing)?\s+(?:myself|ourselves)\s+into\s+a\s+corner\b|\bspinning\s+(?:my|our)\s+wheels\b`), "stuck"},
	// Forgotten: "the details are fuzzy (in my head)".
	{regexp.MustCompile(`(?i)(\s(?:is|are|got|gets|feels?)|'s|'re)\s+(?:all\s+|a\s+bit\s+|kinda\s+|pretty\s+)?(?:fuzzy|hazy|foggy|blurry)(?:\s+in\s+my\s+(?:head|mind|memory))?\b`), "$1 forgotten"},
	// "for the history books": to be remembered.
	{regexp.MustCompile(`(?i)\bfor\s+the\s+history\s+books\b`), "to remember"},
	// "how does the Riverguard see me": regard (not a sight to draw).
	{regexp.MustCompile(`(?i)\b(how\s+(?:do|does|did|will|would|might)\s+[^?.!,;]{1,60}?)\s+(?:see|view)\s+(me|us)\b`), "$1 regard $2"},
	// "save this: …", "save that.": keep it (not a saving throw).
	{regexp.MustCompile(`(?i)\bsav(?:e)?\s+(this|that|dis|dat)(\s*(?::|[.!;,]|$))`), "remember $1$2"},
}

// reminiscing says a player's memory, told in a statement ("I remember my
// father's hands", "I tell Nell I remember her father fondly"), as
// thinking of it: the player tells the story, and asks nothing to be
// recalled or kept. A question ("do I remember…?") and "I remember that
// …", "I remember to …", "I remember what…" are left alone.
func reminiscing(text string) string {
	toks := tokenize(text)
	var b strings.Builder
	last := 0
	for _, s := range sentences(text, toks) {
		if s.question {
			continue
		}
		for j := 0; j+1 < len(s.toks); j++ {
			if s.toks[j].lower != "i" {
				continue
			}
			k := j + 1
			if k+1 < len(s.toks) && (s.toks[k].lower == "still" || s.toks[k].lower == "fondly" || s.toks[k].lower == "suddenly") {
				k++
			}
			if s.toks[k].lower != "remember" || k+1 >= len(s.toks) || rememberWhat[s.toks[k+1].lower] {
				continue
			}
			b.WriteString(text[last:s.toks[k].start])
			b.WriteString("think of")
			last = s.toks[k].end
		}
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// rememberWhat are the words after "I remember" that make it more than a
// memory told: a fact to keep, a thing to do, a question.
var rememberWhat = map[string]bool{"that": true, "to": true, "what": true, "who": true, "where": true, "how": true,
	"when": true, "why": true, "whether": true, "if": true, "which": true}

// leanOn is "lean on" someone: pressing them ("I lean on the bookie"),
// not leaning on a wall.
var leanOn = regexp.MustCompile(`(?i)\blean(?:s|ed|ing)?\s+on\s+((?:the|that|this|his|her|their|our|my)\s+)?([a-z][a-z'-]*)`)

// idioms says text's idioms plainly (idiomTable, leanOn).
func idioms(text string) string {
	for _, x := range idiomTable {
		text = x.re.ReplaceAllString(text, x.with)
	}
	return leanOn.ReplaceAllStringFunc(text, func(m string) string {
		sub := leanOn.FindStringSubmatch(m)
		w := strings.ToLower(sub[2])
		if w == "him" || w == "her" || w == "them" || slices.Contains(lexiconFeatures(strings.TrimSuffix(w, "s")), "s:noun.person") {
			return "intimidate " + sub[1] + sub[2]
		}
		return m
	})
}

// reportingVerbs are the words one of which a reported question has
// (reportedQuestion), looked for first.
var reportingVerbs = map[string]bool{"ask": true, "asks": true, "wonder": true, "wonders": true, "wondering": true, "know": true,
	"curious": true}

// askedInWorld says whether the rest of a reported question asks after
// someone in the world rather than the player's standing, past or options
// ("ask how she's holding up"): its subject is he, she, it or you.
func askedInWorld(rest string) bool {
	ws := words(rest)
	if len(ws) == 0 {
		return false
	}
	switch ws[0] {
	case "he", "she", "it", "you", "he's", "she's", "it's", "you're", "his", "her", "your":
		return true
	}
	return false
}

// keep returns text with its cuts replaced by clause breaks (";").
func keep(text string, cuts []cut) string {
	if len(cuts) == 0 {
		return text
	}
	var b strings.Builder
	last := 0
	for _, c := range cuts {
		if c.start < last {
			continue
		}
		b.WriteString(text[last:c.start])
		b.WriteString(";")
		if c.end < len(text) && !isBlank(text[c.end]) {
			b.WriteString(" ")
		}
		last = c.end
	}
	b.WriteString(text[last:])
	return b.String()
}
