package sampleskills

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/narratoria/runtime/pkg/skillkit"
)

// memoryRecord is one stored memory, a line of data/<session>.jsonl.
type memoryRecord struct {
	Text string    `json:"text"`
	Tags []string  `json:"tags,omitempty"`
	At   time.Time `json:"at"`
}

// maxMemories bounds the memories kept per session (oldest dropped).
const maxMemories = 1000

func memoryFile(in *skillkit.Invocation) (string, error) {
	dir := filepath.Join(in.Dir, "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create data folder: %w", err)
	}
	return filepath.Join(dir, in.SessionID+".jsonl"), nil
}

func readMemories(path string) ([]memoryRecord, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []memoryRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r memoryRecord
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Text != "" {
			out = append(out, r)
		}
	}
	return out, sc.Err()
}

// StoreMemory stores an event in the skill's data folder: input {"text",
// "tags"?}; output {"stored": n, "narration"}.
func StoreMemory(_ context.Context, in *skillkit.Invocation, out *skillkit.Emitter) error {
	var input struct {
		Text string   `json:"text"`
		Tags []string `json:"tags"`
	}
	if err := in.DecodeInput(&input); err != nil {
		return fmt.Errorf("%w: input: %v", skillkit.ErrUsage, err)
	}
	input.Text = strings.TrimSpace(strings.TrimPrefix(input.Text, "$"))
	if input.Text == "" {
		return fmt.Errorf("%w: text must not be empty", skillkit.ErrUsage)
	}
	path, err := memoryFile(in)
	if err != nil {
		return err
	}
	mems, err := readMemories(path)
	if err != nil {
		return fmt.Errorf("read memories: %w", err)
	}
	mems = append(mems, memoryRecord{Text: input.Text, Tags: input.Tags, At: time.Now().UTC()})
	if len(mems) > maxMemories {
		mems = mems[len(mems)-maxMemories:]
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("write memories: %w", err)
	}
	w := bufio.NewWriter(f)
	for _, m := range mems {
		b, _ := json.Marshal(m)
		_, _ = w.Write(append(b, '\n'))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write memories: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write memories: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write memories: %w", err)
	}
	_ = out.Patch(map[string]any{"memory": map[string]any{"count": len(mems)}})
	return out.Done(true, "memory stored", map[string]any{"stored": len(mems), "narration": "You commit the moment to memory."})
}

// RecallMemory ranks stored memories by the words they share with the
// query: input {"query", "limit"?}; output {"memories": [{text, score}]}.
func RecallMemory(_ context.Context, in *skillkit.Invocation, out *skillkit.Emitter) error {
	var input struct {
		Query string `json:"query"`
		Limit int    `json:"limit"`
	}
	if err := in.DecodeInput(&input); err != nil {
		return fmt.Errorf("%w: input: %v", skillkit.ErrUsage, err)
	}
	if input.Limit <= 0 || input.Limit > 20 {
		input.Limit = 3
	}
	path, err := memoryFile(in)
	if err != nil {
		return err
	}
	mems, err := readMemories(path)
	if err != nil {
		return fmt.Errorf("read memories: %w", err)
	}
	q := wordSet(input.Query)
	type scored struct {
		Text  string  `json:"text"`
		Score float64 `json:"score"`
		i     int
	}
	var ranked []scored
	for i, m := range mems {
		score := 0.0
		for w := range wordSet(m.Text + " " + strings.Join(m.Tags, " ")) {
			if q[w] {
				score++
			}
		}
		if score > 0 {
			// recent memories win ties
			ranked = append(ranked, scored{Text: m.Text, Score: score, i: i})
		}
	}
	sort.SliceStable(ranked, func(a, b int) bool {
		if ranked[a].Score != ranked[b].Score {
			return ranked[a].Score > ranked[b].Score
		}
		return ranked[a].i > ranked[b].i
	})
	if len(ranked) > input.Limit {
		ranked = ranked[:input.Limit]
	}
	if ranked == nil {
		ranked = []scored{}
	}
	narr := "Nothing comes to mind."
	if len(ranked) > 0 {
		narr = "A memory surfaces: " + ranked[0].Text
	}
	return out.Done(true, fmt.Sprintf("%d memories recalled", len(ranked)), map[string]any{"memories": ranked, "narration": narr})
}

var stopWords = map[string]bool{"the": true, "a": true, "an": true, "and": true, "or": true, "to": true, "of": true, "i": true, "you": true, "in": true, "on": true, "at": true, "my": true, "is": true, "it": true}

func wordSet(s string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}) {
		if len(w) > 1 && !stopWords[w] {
			out[w] = true
		}
	}
	return out
}
