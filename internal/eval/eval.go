// Package eval measures a planner on a labelled prompt set (docs/spec.md
// §13, `narratoria eval`): how many of its plans are valid, how many call
// exactly the skills labelled, each skill's precision and recall, the
// planning time, and every miss. The planner is the live deployment's
// (through NATS, Remote) or one built in this process (InProcess: the rule
// planner or a model, on a skills folder).
package eval

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/narratoria/runtime/pkg/messages"
)

// Case is one labelled prompt: a line of a JSONL file (the format of
// testdata/planning/*.jsonl) or of a TSV file (text, tools separated by
// commas, kind).
type Case struct {
	// Text is the player's words.
	Text string `json:"text"`
	// Tools are the tools the plan must call besides the narration skill,
	// and no others: "<skill>/<script>", or "<skill>" for any of its
	// scripts. Empty: only the narration.
	Tools []string `json:"tools"`
	// Kind groups prompts in the report (paraphrase, multi, negation…).
	Kind string `json:"kind,omitempty"`
	// Where is file:line.
	Where string `json:"where"`
}

// ReadCases reads the cases of one file: JSONL, or TSV when name ends in
// .tsv. Blank lines and lines starting with # are skipped.
func ReadCases(r io.Reader, name string) ([]Case, error) {
	tsv := strings.EqualFold(filepath.Ext(name), ".tsv")
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []Case
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		c, err := parseCase(line, tsv)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		c.Where = fmt.Sprintf("%s:%d", filepath.Base(name), n)
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return out, nil
}

func parseCase(line string, tsv bool) (Case, error) {
	var c Case
	if tsv {
		f := strings.Split(line, "\t")
		c.Text = f[0]
		if len(f) > 1 {
			for _, t := range strings.Split(f[1], ",") {
				if t = strings.TrimSpace(t); t != "" {
					c.Tools = append(c.Tools, t)
				}
			}
		}
		if len(f) > 2 {
			c.Kind = strings.TrimSpace(f[2])
		}
	} else if err := json.Unmarshal([]byte(line), &c); err != nil {
		return c, fmt.Errorf("not a labelled prompt {\"text\", \"tools\", \"kind\"}: %w", err)
	}
	c.Text = strings.TrimSpace(c.Text)
	if c.Text == "" {
		return c, fmt.Errorf("a labelled prompt needs its text")
	}
	return c, nil
}

// Planned is what a planner made of one prompt.
type Planned struct {
	// Plan is the plan made; nil when the planner made none.
	Plan *messages.Plan
	// Valid says the plan passed the narrator's checks.
	Valid bool
	// Error and ErrorKind say why there is no valid plan.
	Error, ErrorKind string
	// Took is the planning time.
	Took time.Duration
	// NarrationSkills are the skills left out of the comparison (the
	// storyteller every plan ends with).
	NarrationSkills []string
}

// Source is a planner to measure.
type Source interface {
	// Name names it in the report ("rules", "llm", "live").
	Name() string
	// Plan plans one prompt. An error means the source could not answer
	// at all (the deployment is unreachable): the run stops.
	Plan(ctx context.Context, text string) (Planned, error)
}

// Outcome is one case and what the planner made of it.
type Outcome struct {
	// Case is the labelled prompt; Planned what the planner made of it.
	Case    Case
	Planned Planned
	// Got are the tools the plan calls, narration left out, in the
	// labels' form, sorted.
	Got []string
	// Right says Got is exactly the case's tools and the plan is valid.
	Right bool
}

// Run plans every case with src, concurrency at a time (at least 1), and
// judges each.
func Run(ctx context.Context, src Source, cases []Case, concurrency int) ([]Outcome, error) {
	out := make([]Outcome, len(cases))
	next := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var failed error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range max(concurrency, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				p, err := src.Plan(ctx, cases[i].Text)
				if err != nil {
					once.Do(func() { failed = fmt.Errorf("%s: %s: %w", src.Name(), cases[i].Where, err); cancel() })
					continue
				}
				out[i] = judge(cases[i], p)
			}
		}()
	}
feed:
	for i := range cases {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if failed != nil {
		return nil, failed
	}
	return out, ctx.Err()
}

// judge compares what was planned with the case's labels.
func judge(c Case, p Planned) Outcome {
	o := Outcome{Case: c, Planned: p, Got: []string{}}
	if p.Plan != nil && p.Valid {
		o.Got = labelsOf(p.Plan, p.NarrationSkills, c.Tools)
	}
	want := slices.Clone(c.Tools)
	slices.Sort(want)
	want = slices.Compact(want)
	o.Right = p.Valid && slices.Equal(want, o.Got)
	return o
}

// labelsOf names the plan's tools as the labels do: "<skill>/<script>",
// or "<skill>" where the case labels the skill alone; the narration
// skills are left out; each once, sorted.
func labelsOf(p *messages.Plan, narration, labels []string) []string {
	got := []string{}
	for i := range p.Tools {
		ref, err := messages.ParseToolPath(p.Tools[i].ToolPath)
		if err != nil || slices.Contains(narration, ref.Skill) {
			continue
		}
		key := ref.Skill + "/" + ref.Script
		if ref.Script == "" {
			key = ref.Skill + "/" + strings.TrimSuffix(ref.File, filepath.Ext(ref.File))
		}
		if slices.Contains(labels, ref.Skill) {
			key = ref.Skill
		}
		got = append(got, key)
	}
	slices.Sort(got)
	return slices.Compact(got)
}
