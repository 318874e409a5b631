package planner

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The rule planner's examples, concepts and lexicon are English. A prompt
// in French, Spanish, German, Portuguese or Japanese is read through a
// gloss: its words are put into English, a word or a set phrase at a time,
// from a small hand-written table per language (gloss_words.go) of the
// words players use for what the tools do and the function words that
// carry negation, condition, question and person. What the gloss does not
// know is dropped, but for a name (a capitalised word inside a sentence),
// which is kept as written. The English reading then does the rest:
// scope, clauses, guard, scores. A gloss that knows too few of a prompt's
// words is no reading: the prompt is then said to be in a language the
// planner does not read, and planned storyteller-only, like a prompt in
// any other language.

// glossMinKnown is the share of a prompt's words (names aside) the gloss
// must know to be a reading of it.
const glossMinKnown = 0.5

// glossMaxBytes bounds a gloss: a prompt is at most 4,000 characters, and a
// gloss of as many Japanese characters (three bytes each, a word each) would
// otherwise be an English text three times the longest English prompt.
const glossMaxBytes = 4000

// glossTable is one language's gloss: exact words and set phrases, and
// stems (a word's start, or for German compounds its end).
type glossTable struct {
	// exact maps a word or phrase as written (lower case, accents kept);
	// folded maps it without accents. A value "" means the word is known
	// and says nothing the planner reads.
	exact, folded map[string]string
	// prefixes and suffixes are stems, longest first.
	prefixes, suffixes []glossStem
	// longest is the most words a phrase of the table has.
	longest int
	// nouns says every noun of the language is capitalised (German): a
	// capitalised word it does not know is no name.
	nouns bool
}

// glossStem is a stem of a glossTable and its English.
type glossStem struct{ stem, english string }

// glossTables are the languages read through a gloss.
var glossTables = func() map[string]*glossTable {
	out := map[string]*glossTable{}
	for lang, src := range glossSources {
		out[lang] = parseGloss(src)
	}
	out["de"].nouns = true
	return out
}()

// parseGloss reads a table written as lines "key, key... = english": a
// key is a word or a phrase; "stem*" matches a word starting with stem and
// "*stem" one ending with it; "-" as the English says the words are known
// and carry nothing.
func parseGloss(src string) *glossTable {
	t := &glossTable{exact: map[string]string{}, folded: map[string]string{}}
	for _, line := range strings.Split(src, "\n") {
		keys, english, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		english = strings.TrimSpace(english)
		if english == "-" {
			english = ""
		}
		for _, k := range strings.Split(keys, ",") {
			k = strings.ToLower(strings.TrimSpace(k))
			switch {
			case k == "":
			case strings.HasSuffix(k, "*"):
				t.prefixes = append(t.prefixes, glossStem{fold(strings.TrimSuffix(k, "*")), english})
			case strings.HasPrefix(k, "*"):
				t.suffixes = append(t.suffixes, glossStem{fold(strings.TrimPrefix(k, "*")), english})
			default:
				k = strings.Join(glossTokens(k), " ")
				t.exact[k] = english
				if _, taken := t.folded[fold(k)]; !taken {
					t.folded[fold(k)] = english
				}
				t.longest = max(t.longest, strings.Count(k, " ")+1)
			}
		}
	}
	longestFirst := func(a, b glossStem) int { return len(b.stem) - len(a.stem) }
	slices.SortStableFunc(t.prefixes, longestFirst)
	slices.SortStableFunc(t.suffixes, longestFirst)
	return t
}

// folds are the accented letters a gloss reads as their plain ones
// (players often leave accents out).
var folds = strings.NewReplacer("à", "a", "á", "a", "â", "a", "ã", "a", "ä", "a", "ç", "c", "è", "e", "é", "e", "ê", "e", "ë", "e",
	"ì", "i", "í", "i", "î", "i", "ï", "i", "ñ", "n", "ò", "o", "ó", "o", "ô", "o", "õ", "o", "ö", "o", "ù", "u", "ú", "u",
	"û", "u", "ü", "u", "ß", "ss", "œ", "oe", "’", "'")

// fold writes s without accents.
func fold(s string) string { return folds.Replace(s) }

// elided are the French words written joined to the next by an
// apostrophe ("l'épée", "qu'est-ce", "j'attaque").
var elided = map[string]bool{"l": true, "d": true, "j": true, "qu": true, "c": true, "s": true, "n": true, "m": true, "t": true,
	"jusqu": true, "lorsqu": true, "puisqu": true, "quoiqu": true}

// glossTokens splits lower-case text into words, an elided word keeping
// its apostrophe ("j'"), hyphens splitting ("dessine-moi"), and the marks
// that end a sentence or clause as tokens of their own.
func glossTokens(text string) []string {
	var out []string
	var w strings.Builder
	flush := func() {
		if w.Len() > 0 {
			out = append(out, w.String())
			w.Reset()
		}
	}
	for _, r := range text {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			w.WriteRune(r)
		case r == '\'' || r == '’':
			if elided[w.String()] {
				w.WriteRune('\'')
				flush()
				continue
			}
			flush()
		case strings.ContainsRune(".,!?;:", r):
			flush()
			out = append(out, string(r))
		default:
			flush()
		}
	}
	flush()
	return out
}

// glossWord is a word of a prompt as the gloss reads it: lower case,
// and whether it was written as a name.
type glossWord struct {
	word string
	name bool
}

// glossLatin reads the words of text in a language written in Latin
// letters; it returns the English and the share of words (names aside) it
// knew.
func glossLatin(t *glossTable, text string) (string, float64) {
	ws := latinWords(text)
	var out []string
	words, known := 0, 0
	for i := 0; i < len(ws); {
		w := ws[i].word
		if strings.ContainsAny(w, ".,!?;:") {
			out = append(out, w)
			i++
			continue
		}
		if english, n := t.phrase(ws[i:]); n > 0 {
			out = append(out, english)
			words += n
			known += n
			i += n
			continue
		}
		words++
		if english, ok := t.word(w); ok {
			out = append(out, english)
			known++
		} else if ws[i].name && !t.nouns {
			out = append(out, nameCase(w))
			words--
		}
		i++
	}
	if words == 0 {
		return "", 0
	}
	return joinGloss(out), float64(known) / float64(words)
}

// latinWords splits text into glossTokens, saying which were written as
// names: capitalised, not the first word of a sentence.
func latinWords(text string) []glossWord {
	lower := glossTokens(strings.ToLower(text))
	cased := glossTokens(text)
	out := make([]glossWord, len(lower))
	start := true
	for i, w := range lower {
		out[i].word = w
		if i < len(cased) && !start {
			r, _ := utf8.DecodeRuneInString(cased[i])
			out[i].name = unicode.IsUpper(r)
		}
		start = strings.ContainsAny(w, ".!?:")
	}
	return out
}

// nameCase writes a word as a name.
func nameCase(w string) string {
	r, n := utf8.DecodeRuneInString(w)
	return string(unicode.ToUpper(r)) + w[n:]
}

// phrase looks up the longest set phrase starting at ws[0]; it returns
// its English and its length in words, 0 when none starts there.
func (t *glossTable) phrase(ws []glossWord) (string, int) {
	for n := min(t.longest, len(ws)); n >= 2; n-- {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = ws[i].word
		}
		key := strings.Join(parts, " ")
		if english, ok := t.exact[key]; ok {
			return english, n
		}
		if english, ok := t.folded[fold(key)]; ok {
			return english, n
		}
	}
	return "", 0
}

// word looks a word up: as written, without accents, by the start of it,
// then by the end of it (minimum four letters of stem).
func (t *glossTable) word(w string) (string, bool) {
	if english, ok := t.exact[w]; ok {
		return english, true
	}
	f := fold(w)
	if english, ok := t.folded[f]; ok {
		return english, true
	}
	for _, s := range t.prefixes {
		if strings.HasPrefix(f, s.stem) {
			return s.english, true
		}
	}
	for _, s := range t.suffixes {
		if strings.HasSuffix(f, s.stem) {
			return s.english, true
		}
	}
	return "", false
}

// joinGloss writes the gloss's words as a sentence: words spaced, marks
// against the word before.
func joinGloss(parts []string) string {
	var b strings.Builder
	for _, p := range parts {
		if p == "" {
			continue
		}
		if b.Len() > 0 && !strings.ContainsAny(p[:1], ".,!?;:") {
			b.WriteByte(' ')
		}
		b.WriteString(p)
	}
	return b.String()
}

// glossJapanese reads Japanese, which writes no spaces: the longest
// table entry found at each place is read and the characters it does not
// know are skipped; a negation after a verb ("攻撃しない") is read before
// it. It returns the English and the share of the text's characters
// (punctuation aside) it knew.
func glossJapanese(t *glossTable, text string) (string, float64) {
	out := []string{"I"}
	rs := []rune(text)
	chars, known := 0, 0
	for i := 0; i < len(rs); {
		r := rs[i]
		if mark, ok := japaneseMarks[r]; ok {
			out = append(out, mark)
			i++
			continue
		}
		if unicode.IsSpace(r) || unicode.IsPunct(r) {
			i++
			continue
		}
		n, english := t.japanese(rs[i:])
		if n == 0 {
			chars++
			i++
			continue
		}
		chars += n
		known += n
		i += n
		if english == "?" && i < len(rs) && !unicode.IsPunct(rs[i]) && japaneseMarks[rs[i]] == "" {
			continue // か asks only at the end of a sentence
		}
		if english == "not" && len(out) > 1 && !strings.ContainsAny(out[len(out)-1], ".,!?;:") {
			out = append(out[:len(out)-1], english, out[len(out)-1])
			continue
		}
		out = append(out, english)
	}
	if chars == 0 {
		return "", 0
	}
	return joinGloss(out), float64(known) / float64(chars)
}

// japaneseMarks are the Japanese marks read as English punctuation.
var japaneseMarks = map[rune]string{'。': ".", '？': "?", '?': "?", '！': "!", '!': "!", '、': ",", ',': ","}

// japanese finds the longest entry of the table at the start of rs: its
// length in characters (0 when none) and its English.
func (t *glossTable) japanese(rs []rune) (int, string) {
	for n := min(len(rs), 8); n >= 1; n-- {
		if english, ok := t.exact[string(rs[:n])]; ok {
			return n, english
		}
	}
	return 0, ""
}

// gloss reads text in lang into English; ok is false when lang is not read
// through a gloss or the gloss knows too few of its words.
func gloss(lang, text string) (english string, ok bool) {
	t := glossTables[lang]
	if t == nil {
		return "", false
	}
	var share float64
	if lang == "ja" {
		english, share = glossJapanese(t, text)
	} else {
		english, share = glossLatin(t, text)
	}
	if len(english) > glossMaxBytes {
		english = english[:max(0, strings.LastIndexByte(english[:glossMaxBytes], ' '))]
	}
	return english, share >= glossMinKnown && english != ""
}
