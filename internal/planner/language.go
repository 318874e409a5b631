package planner

import (
	"strings"
	"unicode"
)

// The rule planner reads English: its examples, concepts and lexicon are
// English. A prompt in French, Spanish, German, Portuguese or Japanese is
// read through a gloss into English (gloss.go). A prompt in another
// language, or one the gloss knows too few words of, is planned
// storyteller-only (every skill dropped) and said so: UnreadLanguage names
// its language, Explanation.Language shows it, and the narrator logs and
// counts it. The language is told by the script of its letters (Japanese, Chinese,
// Korean, Cyrillic, Greek, Arabic, Hebrew...) or, for Latin letters, by
// its function words and accents (French, Spanish, German, Portuguese,
// Italian, Dutch), English winning ties; Latin text with few English
// function words and mostly words the lexicon does not know is in another
// language ("other"). With a model configured, the LLM
// planner plans such prompts like any other.

// Languages UnreadLanguage names besides the ISO 639-1 codes of
// languageWords and scripts: "other" for a language it does not tell.
const (
	languageEnglish = "en"
	languageOther   = "other"
)

// languageWords are frequent function words of each language told by
// words. A word several languages share counts for each, less.
var languageWords = map[string]string{
	languageEnglish: `the a an i you to of and in on at is are was it my me what how who where do does can with for this that
		i'm don't just he she they we his her be have not will from about up into your our their them there then when
		try want going get let please now some any would could should did has had been am were its`,
	"fr": `le la les un une des je tu il elle nous vous ils elles est et dans sur avec pour pas que qui du au aux mon ma mes
		ton ta tes ce cette ces moi toi se sa son ses suis es sont ai as ne mais ou où très peux veux faire quoi comment pourquoi
		c'est j'ai s'il plaît merci oui non voir leur leurs par chez vers sans puis vais veux aussi encore maintenant qu'est-ce`,
	"es": `el la los las un una unos unas yo tú él ella es y en con por para no qué que mi mis del al se lo le su sus muy cómo
		como está estoy soy hay pero o me te nos puedo quiero intento hacia sobre ahora dónde quién cuál tengo tiene voy vamos
		hago mí ti usted ellos ellas esto este esta eso ese esa también`,
	"de": `der die das ein eine einen einem einer ich du er sie es wir ihr ist und nicht mit auf für zu im den dem mein meine
		meinen mich mir was wie wo bitte kann will habe hat sind bin noch auch an aus bei nach von vor über zum zur schon jetzt
		hier dich dir uns euch möchte werde wird oder aber sich ob dass`,
	"pt": `o a os as um uma eu você ele ela nós é e em com para não que do da dos das no na nos nas meu minha se ao à pelo pela
		mas ou como posso quero estou sou está isso este esta agora onde quem tenho tem vou vamos fazer também muito lhe`,
	"it": `il lo la gli le un uno una io tu lui lei noi voi è e in con per non che di del della dei delle al alla mi ti ci si
		mio mia sono ho ha cosa come perché ma o questo questa anche ora adesso posso voglio dove chi sto sei siamo hanno fare`,
	"nl": `de het een ik jij je hij zij wij is en niet met op voor van naar dat die wat hoe mijn zijn ben heb kan wil er om
		langs bij ook maar nog naar ons jullie waar wie`,
}

// languageAccents are letters that say a language (each letter, every
// language it counts for).
var languageAccents = map[rune][]string{
	'ñ': {"es"}, '¿': {"es"}, '¡': {"es"}, 'ß': {"de"}, 'ä': {"de"}, 'ö': {"de"}, 'ü': {"de"}, 'ã': {"pt"}, 'õ': {"pt"},
	'ç': {"fr", "pt"}, 'ê': {"fr", "pt"}, 'â': {"fr", "pt"}, 'ô': {"fr", "pt"}, 'î': {"fr"}, 'û': {"fr"}, 'ë': {"fr", "nl"},
	'ï': {"fr", "nl"}, 'œ': {"fr"}, 'è': {"fr", "it"}, 'ù': {"fr", "it"}, 'ò': {"it"}, 'ì': {"it"}, 'à': {"fr", "it", "pt"},
	'é': {"fr", "es", "pt", "it"}, 'á': {"es", "pt"}, 'í': {"es", "pt"}, 'ó': {"es", "pt", "it"}, 'ú': {"es", "pt"},
}

// elisions start French and Italian words ("l'orc", "dell'oste").
var elisions = map[string][]string{"l": {"fr", "it"}, "d": {"fr"}, "j": {"fr"}, "qu": {"fr"}, "c": {"fr"}, "s": {"fr"},
	"n": {"fr"}, "m": {"fr"}, "t": {"fr"}, "dell": {"it"}, "all": {"it"}, "nell": {"it"}, "un": {"it"}, "sull": {"it"}}

// wordLanguages maps each word of languageWords to its languages.
var wordLanguages = func() map[string][]string {
	m := map[string][]string{}
	for lang, ws := range languageWords {
		for _, w := range strings.Fields(ws) {
			m[w] = append(m[w], lang)
		}
	}
	return m
}()

// scripts name the languages told by their letters.
var scripts = []struct {
	table *unicode.RangeTable
	lang  string
}{
	{unicode.Hiragana, "ja"}, {unicode.Katakana, "ja"}, {unicode.Hangul, "ko"}, {unicode.Han, "zh"}, {unicode.Cyrillic, "ru"},
	{unicode.Greek, "el"}, {unicode.Arabic, "ar"}, {unicode.Hebrew, "he"}, {unicode.Devanagari, "hi"}, {unicode.Thai, "th"},
}

// language returns the language text is written in: "en", an ISO 639-1
// code, "other" for a language it does not tell, or "" for text without
// letters.
func language(text string) string {
	letters, latin, nonASCII := 0, 0, 0
	byScript := map[string]int{}
	for _, r := range text {
		if !unicode.IsLetter(r) {
			continue
		}
		letters++
		switch {
		case unicode.Is(unicode.Latin, r):
			latin++
			if r >= 128 {
				nonASCII++
			}
		default:
			for _, s := range scripts {
				if unicode.Is(s.table, r) {
					byScript[s.lang]++
					break
				}
			}
		}
	}
	if letters == 0 {
		return ""
	}
	if 2*latin < letters {
		// Kana make Japanese of text with Han characters.
		if byScript["ja"] > 0 {
			return "ja"
		}
		best, n := languageOther, 0
		for _, s := range scripts {
			if byScript[s.lang] > n {
				best, n = s.lang, byScript[s.lang]
			}
		}
		return best
	}
	score := map[string]float64{}
	for _, r := range strings.ToLower(text) {
		for _, l := range languageAccents[r] {
			score[l] += 1.5 / float64(len(languageAccents[r]))
		}
	}
	for _, w := range words(text) {
		if ls := wordLanguages[w]; len(ls) > 0 {
			for _, l := range ls {
				score[l] += 1 / float64(len(ls))
			}
			continue
		}
		if pre, _, ok := strings.Cut(w, "'"); ok {
			for _, l := range elisions[pre] {
				score[l] += 1 / float64(len(elisions[pre]))
			}
		}
	}
	best, top := languageEnglish, score[languageEnglish]
	for _, l := range []string{"fr", "es", "de", "pt", "it", "nl"} {
		if score[l] > top {
			best, top = l, score[l]
		}
	}
	if best == languageEnglish && (float64(nonASCII) >= 0.15*float64(letters) || top < 1.5 && unknownWords(text)) {
		return languageOther
	}
	return best
}

// unknownWords says whether text (chat words written out) has three words
// of three letters or more and under a quarter of them are English ones
// the planner knows (a function word or a word of the lexicon): another
// language, or nonsense.
func unknownWords(text string) bool {
	long, known := 0, 0
	for _, w := range words(expandChat(text)) {
		if len(w) < 3 {
			continue
		}
		long++
		if stopwords[w] || moodWords[w] || wordLanguages[w] != nil || lexiconFeatures(w) != nil {
			known++
		}
	}
	return long >= 3 && 4*known < long
}

// languageNames name the languages read through a gloss.
var languageNames = map[string]string{"fr": "French", "es": "Spanish", "de": "German", "pt": "Portuguese", "ja": "Japanese"}

// readLanguage tells text's language and, for one read through a gloss,
// the English it reads as ("" when it is English, has no letters, or no
// gloss reads it).
func readLanguage(text string) (lang, glossed string) {
	lang = language(text)
	if g, ok := gloss(lang, text); ok {
		return lang, g
	}
	return lang, ""
}

// UnreadLanguage names the language of a prompt the rule planner does not
// read (it reads English, and French, Spanish, German, Portuguese and
// Japanese through a gloss): an ISO 639-1 code ("it", "nl", "zh", "ko",
// "ru", "el", "ar", "he", "hi", "th"; "fr", "es", "de", "pt" or "ja" when
// the gloss knows too few of its words) or "other". It is "" for a prompt
// the planner reads or without letters. The rule planner plans such a
// prompt storyteller-only; the narrator counts it.
func UnreadLanguage(text string) string {
	unread, _, _ := PromptLanguage(text)
	return unread
}

// GlossOf returns the English the rule planner reads a prompt in another
// language as, and that language's ISO 639-1 code; both "" for a prompt
// in English or one it does not read.
func GlossOf(text string) (english, lang string) {
	_, lang, english = PromptLanguage(text)
	return english, lang
}

// PromptLanguage tells, reading text once, what UnreadLanguage and GlossOf
// tell: the language of a prompt the rule planner does not read, or the
// language and English gloss of one it reads through a gloss (all "" for
// English or text without letters).
func PromptLanguage(text string) (unread, glossLang, glossed string) {
	switch l, g := readLanguage(markup.ReplaceAllString(text, " ")); {
	case g != "":
		return "", l, g
	case l == languageEnglish || l == "":
		return "", "", ""
	default:
		return l, "", ""
	}
}
