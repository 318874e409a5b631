package eval

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/pkg/messages"
)

// scripted is a source answering each prompt's tools (by text) after a
// planning time of its own; "broken" has no valid plan; "down" fails.
type scripted map[string][]string

func (scripted) Name() string { return "scripted" }

func (s scripted) Plan(_ context.Context, text string) (Planned, error) {
	switch text {
	case "down":
		return Planned{}, errors.New("unreachable")
	case "broken":
		return Planned{Error: "tools[0].toolPath: unknown skill", ErrorKind: "invalid_plan", Took: 9 * time.Millisecond}, nil
	}
	p := &messages.Plan{Tools: []messages.Tool{{ToolID: "tell", ToolPath: "teller/narrate"}}}
	for i, tp := range s[text] {
		p.Tools = append(p.Tools, messages.Tool{ToolID: string(rune('a' + i)), ToolPath: tp})
	}
	return Planned{Plan: p, Valid: true, Took: time.Duration(len(text)) * time.Millisecond, NarrationSkills: []string{"teller"}}, nil
}

// TestScore: right means exactly the labelled tools (narration left out,
// a skill label taking any of its scripts, a tool twice counted once);
// each label's precision and recall, the share right by kind, the
// planning time's percentiles and every miss come out as counted by hand.
func TestScore(t *testing.T) {
	t.Parallel()
	cases, err := ReadCases(strings.NewReader(strings.Join([]string{
		`{"text":"a","tools":["dice/roll"],"kind":"k1"}`,
		`{"text":"bb","tools":["dice/roll","mem/recall"],"kind":"k1"}`,
		`{"text":"ccc","tools":[],"kind":"k2"}`,
		`{"text":"dddd","tools":["art"],"kind":"k2"}`,
		`{"text":"broken","tools":["dice/roll"],"kind":"k2"}`,
	}, "\n")), "set.jsonl")
	require.NoError(t, err)
	src := scripted{
		"a":    {"dice/roll", "dice/roll"},                    // right: the same tool twice
		"bb":   {"dice/roll"},                                 // miss: mem/recall not called
		"ccc":  {"mem/recall"},                                // miss: a tool not labelled
		"dddd": {"art/sketch", "skills/art/scripts/paint.sh"}, // right: any script of art
	}
	outs, err := Run(context.Background(), src, cases, 3)
	require.NoError(t, err)
	r := Score("scripted", outs)
	require.Equal(t, 5, r.Cases)
	require.Equal(t, 80.0, r.ValidPct)
	require.Equal(t, 2, r.Right)
	require.Equal(t, 40.0, r.RightPct)
	require.Equal(t, 3.0, r.P50Ms, "a, bb, ccc, dddd, broken take 1, 2, 3, 4, 9 ms")
	require.Equal(t, 9.0, r.P99Ms)
	byLabel := map[string]SkillScore{}
	for _, s := range r.Skills {
		byLabel[s.Skill] = s
	}
	dice := byLabel["dice/roll"]
	require.Equal(t, []int{3, 2, 2}, []int{dice.Labelled, dice.Chosen, dice.Both})
	require.Equal(t, 100.0, *dice.Precision)
	require.Equal(t, 66.7, *dice.Recall)
	mem := byLabel["mem/recall"]
	require.Equal(t, []int{1, 1, 0}, []int{mem.Labelled, mem.Chosen, mem.Both})
	require.Equal(t, 0.0, *mem.Precision)
	require.Equal(t, 0.0, *mem.Recall)
	require.Equal(t, 100.0, *byLabel["art"].Recall)
	require.Equal(t, []KindScore{{Kind: "k2", Cases: 3, Right: 1, RightPct: 33.3}, {Kind: "k1", Cases: 2, Right: 1, RightPct: 50}}, r.Kinds)
	require.Len(t, r.Misses, 3)
	require.Equal(t, Miss{Where: "set.jsonl:2", Kind: "k1", Text: "bb", Want: []string{"dice/roll", "mem/recall"}, Got: []string{"dice/roll"}}, r.Misses[0])
	require.Equal(t, "tools[0].toolPath: unknown skill", r.Misses[2].Error)

	_, err = Run(context.Background(), src, []Case{{Text: "down", Where: "x:1"}}, 1)
	require.ErrorContains(t, err, "x:1: unreachable", "a source that cannot answer stops the run")
	_, err = ReadCases(strings.NewReader(`{"tools":[]}`), "bad.jsonl")
	require.ErrorContains(t, err, "bad.jsonl:1")
}
