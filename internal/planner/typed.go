package planner

import (
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Reading players as they type (issue 48), first half: before a prompt is
// scored, chat abbreviations are written out ("u" → "you", "b4" →
// "before", "lemme" → "let me") and slips of the keyboard are corrected
// against the words of the skills' examples ("sneek" → "sneak", "gaurds" →
// "guards"). The examples get the same abbreviations written out when the
// model is fitted, so both sides speak alike. See scope.go for the second
// half (what a prompt does not really do) and docs/planning-examples.md.

// span is a byte range [start, end) of a text.
type span struct{ start, end int }

// token is a word of a text (a run of letters, digits, ' and -, as words
// reads them) with its place and its lower-case form.
type token struct {
	span
	lower string
}

// isWordRune says whether r belongs to a word (as words splits).
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '\'' || r == '-'
}

// tokenize returns the words of text in order, with their byte spans.
func tokenize(text string) []token {
	var out []token
	start := -1
	for i, r := range text {
		switch {
		case isWordRune(r) && start < 0:
			start = i
		case !isWordRune(r) && start >= 0:
			out = append(out, token{span{start, i}, strings.ToLower(text[start:i])})
			start = -1
		}
	}
	if start >= 0 {
		out = append(out, token{span{start, len(text)}, strings.ToLower(text[start:])})
	}
	return out
}

// chatWords are the abbreviations and spellings of chat written out in
// full; "" drops a word that says nothing of intent ("tbh", "um"), and ","
// a laugh or a cry that ends a thought as a comma would ("i kick the door
// in lol whats inside"). Words
// that are abbreviations only in some places ("2", "4", "n", "w", "c") are
// in chatByContext.
var chatWords = map[string]string{
	"u": "you", "ya": "you", "yu": "you", "ur": "your", "yr": "your", "youre": "you're", "ure": "you're",
	"r": "are", "pls": "please", "plz": "please", "plss": "please", "pleez": "please", "plox": "please",
	"rn": "right now", "atm": "right now", "b4": "before", "bc": "because", "bcuz": "because", "cuz": "because", "coz": "because",
	"lemme": "let me", "gonna": "going to", "wanna": "want to", "gotta": "got to", "gimme": "give me", "givme": "give me",
	"dunno": "don't know", "kinda": "kind of", "sorta": "sort of", "outta": "out of", "lotta": "lot of", "tryna": "trying to",
	"finna": "going to", "imma": "i'm going to", "ima": "i'm going to", "hafta": "have to", "oughta": "ought to",
	"wtf": "what", "wth": "what",
	"idk": "i don't know", "idek": "i don't even know", "dk": "don't know", "nvm": "never mind", "btw": "by the way",
	"ofc": "of course", "thx": "thanks", "thnx": "thanks", "ty": "thanks", "tysm": "thanks", "pic": "picture", "pics": "pictures",
	"pix": "pictures", "ppl": "people", "sth": "something", "smth": "something", "sum1": "someone", "some1": "someone",
	"any1": "anyone", "every1": "everyone", "no1": "no one", "msg": "message", "rep": "reputation", "convo": "conversation",
	"wat": "what", "wut": "what", "wht": "what", "whut": "what", "wot": "what", "wats": "what's", "whatcha": "what are you",
	"hw": "how", "wen": "when", "wher": "where", "wheres": "where's", "whos": "who's", "hows": "how's", "whats": "what's",
	"abt": "about", "bout": "about", "thru": "through", "shud": "should", "shld": "should",
	"cud": "could", "cld": "could", "wud": "would", "wld": "would", "teh": "the", "hte": "the", "da": "the", "tha": "the",
	"dis": "this", "dat": "that", "dem": "them", "dey": "they", "thx4": "thanks for",
	"im": "i'm", "ive": "i've", "dont": "don't", "doesnt": "doesn't", "didnt": "didn't", "cant": "can't", "wont": "won't",
	"isnt": "isn't", "arent": "aren't", "wasnt": "wasn't", "werent": "weren't", "shouldnt": "shouldn't",
	"couldnt": "couldn't", "wouldnt": "wouldn't", "havent": "haven't", "hasnt": "hasn't", "aint": "ain't",
	"thats": "that's", "theyre": "they're", "theres": "there's", "hes": "he's", "shes": "she's", "whaddya": "what do you",
	"4get": "forget", "4got": "forgot", "4gotten": "forgotten", "2day": "today", "2nite": "tonight", "2night": "tonight",
	"tmrw": "tomorrow", "tmr": "tomorrow", "2morrow": "tomorrow", "gr8": "great", "h8": "hate", "h8s": "hates",
	"l8r": "later", "l8": "late", "m8": "mate", "w8": "wait", "str8": "straight", "k": "ok", "kk": "ok", "okie": "ok",
	"giv": "give", "rmbr": "remember", "rmb": "remember", "rember": "remember", "jmp": "jump", "btwn": "between",
	"hav": "have", "gud": "good", "luv": "love", "prolly": "probably", "probs": "probably", "rly": "really", "srsly": "seriously",
	"ppl's": "people's", "yall": "you all", "y'all": "you all",
	"lol": ",", "lmao": ",", "lmfao": ",", "rofl": ",", "xd": ",", "omg": ",", "omfg": ",", "smh": ",", "jk": ",", "hehe": ",",
	"haha": ",", "hahaha": ",", "ugh": ",", "tbh": "", "ngl": "", "imo": "", "imho": "", "fr": "", "lowkey": "", "highkey": "",
	"tbf": "", "ikr": "", "uh": "", "um": "", "umm": "", "hmm": "", "hmmm": "", "erm": "",
}

// interjections are words of chat that are no slip of another word.
var interjections = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`nope yep yup yeah yea nah okay hey hiya hello welp whoa wow oops ouch yikes meh huh
		gonna wanna gotta lemme gimme dunno kinda sorta`) {
		interjections[w] = true
	}
}

// determiners are the words after which "2" reads "to" and "4" reads
// "for" ("2 the temple", "4 me").
var determiners = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`the a an this that these those my your ur his her their our its me him them us it you u
		everyone someone anyone every some any da teh`) {
		determiners[w] = true
	}
}

// chatByContext writes out a word that is an abbreviation only where its
// neighbours say so, or returns false: "2" is "to" before a determiner or
// a pronoun, or between a verb that takes "to" and a verb ("try 2
// persuade"); "4" is "for" likewise; "n" is "and" between words; "w" is
// "with" before a word or a number; "c" is "see" and "b" is "be" after a
// subject or a modal; "wit" is "with" before a determiner; "y" is "why"
// at the start.
func chatByContext(prev, w, next string) (string, bool) {
	// "2" and "4" may be words too ("y 2 the..." is "why to the").
	nextWord := next != "" && unicode.IsLetter(rune(next[0])) || next == "2" || next == "4"
	switch w {
	case "2":
		if nextWord && (determiners[next] || toBefore[prev] && verbal(next)) {
			return "to", true
		}
	case "4":
		if nextWord && (determiners[next] || forBefore[prev]) {
			return "for", true
		}
	case "n":
		if prev != "" && nextWord {
			return "and", true
		}
	case "w":
		if nextWord || next != "" && unicode.IsDigit(rune(next[0])) {
			return "with", true
		}
	case "c":
		if seeBefore[prev] {
			return "see", true
		}
	case "b":
		if beBefore[prev] {
			return "be", true
		}
	case "wit":
		if determiners[next] {
			return "with", true
		}
	case "y":
		if prev == "" && nextWord {
			return "why", true
		}
	}
	return "", false
}

// verbal says whether w can be a verb (the lexicon gives it a verb's
// meaning, or does not know it): "try 2 persuade", not "have 2 swords".
func verbal(w string) bool {
	fs := lexiconFeatures(w)
	return fs == nil || slices.ContainsFunc(fs, func(f string) bool { return strings.HasPrefix(f, "s:verb.") })
}

// toBefore, forBefore, seeBefore and beBefore are the words after which
// "2", "4", "c" and "b" are "to", "for", "see" and "be".
var toBefore, forBefore, seeBefore, beBefore = map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}

func init() {
	for _, w := range strings.Fields(`try tried tries trying want wants need needs going gonna have has had got able used
		been go went come came back up talk talked speak spoke listen say said give gave hand handed return returned donate donated
		get got walk run ran head lie lied pray prayed belong belongs next close`) {
		toBefore[w] = true
	}
	for _, w := range strings.Fields(`wait waiting look looking ask asked asking pay paid thanks search searching reach go
		vote fight care hope hoping`) {
		forBefore[w] = true
	}
	for _, w := range strings.Fields(`can could i to me lemme let u you we will wanna must`) {
		seeBefore[w] = true
	}
	for _, w := range strings.Fields(`will to would could gonna might must should can't won't`) {
		beBefore[w] = true
	}
}

// apostrophes are the marks phones type for '.
var apostrophes = strings.NewReplacer("\u2019", "'", "\u2018", "'", "\u02bc", "'", "`", "'")

// expandChat writes out the chat abbreviations of text (chatWords and
// chatByContext), keeping everything else as it is; curly apostrophes
// become straight ones. It is idempotent.
func expandChat(text string) string {
	text = apostrophes.Replace(text)
	toks := tokenize(text)
	var b strings.Builder
	last := 0
	changed := false
	for i, t := range toks {
		prev, next := neighbour(text, toks, i, -1), neighbour(text, toks, i, 1)
		end := t.end
		word, ok := chatWords[t.lower]
		if t.lower == "w" && strings.HasPrefix(text[t.end:], "/") {
			// "w/" and "w/o".
			word, ok, end = "with", true, t.end+1
			if strings.HasPrefix(text[end:], "o") && (end+1 == len(text) || !isWordByte(text[end+1])) {
				word, end = "without", end+1
			}
		} else if !ok {
			word, ok = chatByContext(prev, t.lower, next)
		}
		if !ok {
			continue
		}
		if !changed {
			b.Grow(len(text) + 16)
			changed = true
		}
		b.WriteString(text[last:t.start])
		b.WriteString(word)
		last = end
	}
	if !changed {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// neighbour is the word before (dir -1) or after (dir 1) toks[i] as
// written out (its chat word's expansion, the word of it next to toks[i]),
// past the chat words that are dropped; "" when punctuation parts them.
func neighbour(text string, toks []token, i, dir int) string {
	for k := i + dir; k >= 0 && k < len(toks); k += dir {
		a, b := toks[min(k, k-dir)], toks[max(k, k-dir)]
		if strings.TrimSpace(text[a.end:b.start]) != "" {
			return ""
		}
		w, ok := chatWords[toks[k].lower]
		if !ok {
			return toks[k].lower
		}
		switch w {
		case "":
			continue
		case ",":
			return ""
		}
		ws := strings.Fields(w)
		if dir < 0 {
			return ws[len(ws)-1]
		}
		return ws[0]
	}
	return ""
}

func isWordByte(c byte) bool {
	if c >= utf8.RuneSelf {
		return true
	}
	return isWordRune(rune(c))
}

// vocabulary is the words of a catalogue's examples, for correcting slips
// of the keyboard: each word with the number of examples that use it,
// indexed by its first letter.
type vocabulary struct {
	count   map[string]int
	byFirst map[byte][]string
}

// newVocabulary indexes the words of texts.
func newVocabulary(texts []string) *vocabulary {
	v := &vocabulary{count: map[string]int{}, byFirst: map[byte][]string{}}
	for _, x := range texts {
		for _, w := range words(expandChat(x)) {
			w = strings.Trim(w, "'-")
			if w != "" {
				v.count[w]++
			}
		}
	}
	for w := range v.count {
		if isPlainWord(w) {
			v.byFirst[w[0]] = append(v.byFirst[w[0]], w)
		}
	}
	for _, ws := range v.byFirst {
		sort.Strings(ws)
	}
	return v
}

// isPlainWord says whether w is made of ASCII lower-case letters only.
func isPlainWord(w string) bool {
	for i := 0; i < len(w); i++ {
		if w[i] < 'a' || w[i] > 'z' {
			return false
		}
	}
	return w != ""
}

// known says whether w is a word the planner knows: one of the examples',
// a function word, a concept's, or one of the lexicon's (or an inflection
// of one).
func (v *vocabulary) known(w string) bool {
	if v.count[w] > 0 || stopwords[w] || moodWords[w] || conceptOf[w] != nil || negations[w] || fillers[w] || lightWords[w] ||
		interjections[w] {
		return true
	}
	return lexiconFeatures(w) != nil
}

// Typo correction limits.
const (
	// typoMinLen is the shortest word corrected: shorter ones are too near
	// too many words ("wal" is "wall", "was" or "war").
	typoMinLen = 4
	// typoTwoLen is the shortest word corrected by two edits, which must
	// both be letters left out ("rember" → "remember").
	typoTwoLen = 5
	// typoMaxLen is the longest word looked at.
	typoMaxLen = 20
)

// correct returns w corrected to the word of the examples it is one slip
// away from (a letter left out, added, changed, or two neighbours swapped:
// "sneek", "gaurds", "atack"), or, for a longer word, two letters left out
// ("rember"); a final "g" left out ("tryin") first. Of several such words,
// the one used most, a letter left out or two swapped (the commonest
// slips) counting double and two letters left out half; ties to the first
// in order. A word
// the planner knows, a short word, or a word no example word is that close
// to is left as it is. The first letter is taken to be right, unless it is
// swapped with the second.
func (v *vocabulary) correct(w string) string {
	if len(w) < typoMinLen || len(w) > typoMaxLen || !isPlainWord(w) || v.known(w) {
		return w
	}
	if strings.HasSuffix(w, "in") && v.count[w+"g"] > 0 {
		return w + "g" // "tryin", "nothin"
	}
	best, bestScore := "", 0
	consider := func(c string, weight int) {
		if n := v.count[c] * weight; n > bestScore || n == bestScore && c < best {
			best, bestScore = c, n
		}
	}
	for _, c := range v.byFirst[w[0]] {
		switch d := len(c) - len(w); {
		case d < -1 || d > 2:
		case d == 2:
			if len(w) >= typoTwoLen && subsequence(w, c) {
				consider(c, 1)
			}
		case d == 1 && dropsOne(c, w):
			consider(c, 4) // a letter left out: the commonest slip
		case d == 0 && swapsTwo(w, c):
			consider(c, 4)
		case oneEdit(w, c):
			consider(c, 2)
		}
	}
	if swapped := string([]byte{w[1], w[0]}) + w[2:]; w[1] != w[0] && v.count[swapped] > 0 {
		consider(swapped, 4)
	}
	if best == "" {
		return w
	}
	return best
}

// oneEdit says whether a and b (different) are one letter added, left
// out, changed, or two neighbours swapped apart.
func oneEdit(a, b string) bool {
	switch len(a) - len(b) {
	case 1:
		return dropsOne(a, b)
	case -1:
		return dropsOne(b, a)
	case 0:
		i := 0
		for i < len(a) && a[i] == b[i] {
			i++
		}
		if i == len(a) {
			return false
		}
		if a[i+1:] == b[i+1:] {
			return true // one letter changed
		}
		return i+1 < len(a) && a[i] == b[i+1] && a[i+1] == b[i] && a[i+2:] == b[i+2:]
	}
	return false
}

// swapsTwo says whether a and b (as long) differ by two neighbours
// swapped.
func swapsTwo(a, b string) bool {
	i := 0
	for i < len(a) && a[i] == b[i] {
		i++
	}
	return i+1 < len(a) && a[i] == b[i+1] && a[i+1] == b[i] && a[i+2:] == b[i+2:]
}

// subsequence says whether short is long with letters left out.
func subsequence(short, long string) bool {
	j := 0
	for i := 0; i < len(long) && j < len(short); i++ {
		if long[i] == short[j] {
			j++
		}
	}
	return j == len(short)
}

// corrections are the words a correction changed, for the trace.
type corrections []string

// correctText corrects the slips of text's words (vocabulary.correct),
// leaving names alone (a capitalised word that does not start a sentence),
// and text whose words are mostly unknown (nonsense, or another language)
// as it is.
func (v *vocabulary) correctText(text string) (string, corrections) {
	if v == nil {
		return text, nil
	}
	toks := tokenize(text)
	unknown := 0
	for _, t := range toks {
		if len(t.lower) >= typoMinLen && !v.known(t.lower) {
			unknown++
		}
	}
	if unknown == 0 || 2*unknown > len(toks) {
		// Nothing to correct, or mostly words no one knows: nonsense or
		// another language, not slips.
		return text, nil
	}
	var b strings.Builder
	var fixed corrections
	last := 0
	for i, t := range toks {
		if len(t.lower) < typoMinLen || !isPlainWord(t.lower) {
			continue
		}
		if r, _ := utf8.DecodeRuneInString(text[t.start:]); unicode.IsUpper(r) && !startsSentence(text, toks, i) {
			continue // a name
		}
		c := v.correct(t.lower)
		if c == t.lower {
			continue
		}
		if fixed == nil {
			b.Grow(len(text) + 8)
		}
		fixed = append(fixed, t.lower+" → "+c)
		b.WriteString(text[last:t.start])
		b.WriteString(c)
		last = t.end
	}
	if fixed == nil {
		return text, nil
	}
	b.WriteString(text[last:])
	return b.String(), fixed
}

// startsSentence says whether token i of text begins a sentence.
func startsSentence(text string, toks []token, i int) bool {
	if i == 0 {
		return true
	}
	between := strings.TrimSpace(text[toks[i-1].end:toks[i].start])
	return between != "" && strings.ContainsAny(between[len(between)-1:], ".!?:;\"")
}

// gibberish says whether most of text's words are no words: at least two
// words of three letters or more that the planner does not know (not the
// examples', a function word, a concept's or the lexicon's), and they are
// half of those words or more ("qwertyuiop roll dice zzz"). Names (a
// capital) and words with digits are left out of the count.
func gibberish(v *vocabulary, text string) bool {
	long, unknown := 0, 0
	for _, t := range tokenize(text) {
		w := text[t.start:t.end]
		if len(w) < 3 || strings.ContainsAny(w, "0123456789") {
			continue
		}
		if r, _ := utf8.DecodeRuneInString(w); unicode.IsUpper(r) {
			continue
		}
		long++
		if !v.known(strings.Trim(t.lower, "'-")) {
			unknown++
		}
	}
	return unknown >= 2 && 2*unknown >= long
}
