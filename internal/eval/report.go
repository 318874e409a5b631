package eval

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"time"
)

// Report is what a planner scored on a prompt set.
type Report struct {
	// Source names the planner measured.
	Source string `json:"source"`
	// Cases counts the prompts.
	Cases int `json:"cases"`
	// ValidPct is the share of valid plans; RightPct the share of plans
	// calling exactly the labelled tools (Right of Cases), in percent;
	// Right counts them.
	ValidPct float64 `json:"validPct"`
	RightPct float64 `json:"rightPct"`
	Right    int     `json:"right"`
	// P50Ms and P99Ms are the planning time's percentiles, in ms.
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	// Skills are each label's precision and recall, by label.
	Skills []SkillScore `json:"skills"`
	// Kinds are the share right of each kind of prompt.
	Kinds []KindScore `json:"kinds"`
	// Misses are the prompts not right, in the files' order.
	Misses []Miss `json:"misses"`
}

// SkillScore is one label's precision and recall over the set.
type SkillScore struct {
	// Skill is the label ("<skill>/<script>" or "<skill>").
	Skill string `json:"skill"`
	// Labelled counts the prompts labelled with it; Chosen those whose
	// plan called it; Both those both.
	Labelled int `json:"labelled"`
	Chosen   int `json:"chosen"`
	Both     int `json:"both"`
	// Precision is Both of Chosen, Recall Both of Labelled, in percent;
	// nil when there is nothing to divide by.
	Precision *float64 `json:"precisionPct"`
	Recall    *float64 `json:"recallPct"`
}

// KindScore is how one kind of prompt fared.
type KindScore struct {
	// Kind is the cases' kind ("" for cases without one).
	Kind string `json:"kind"`
	// Cases counts its prompts, Right those right, RightPct the share.
	Cases    int     `json:"cases"`
	Right    int     `json:"right"`
	RightPct float64 `json:"rightPct"`
}

// Miss is a prompt the planner did not get right.
type Miss struct {
	// Where (file:line), Kind and Text are the case's.
	Where string `json:"where"`
	Kind  string `json:"kind,omitempty"`
	Text  string `json:"text"`
	// Want are the labelled tools, Got the plan's (narration aside).
	Want []string `json:"want"`
	Got  []string `json:"got"`
	// Error says why the plan was not valid.
	Error string `json:"error,omitempty"`
}

// Score makes the report of a run.
func Score(source string, outs []Outcome) Report {
	r := Report{Source: source, Cases: len(outs), Skills: []SkillScore{}, Kinds: []KindScore{}, Misses: []Miss{}}
	if len(outs) == 0 {
		return r
	}
	valid := 0
	took := make([]time.Duration, 0, len(outs))
	skills := map[string]*SkillScore{}
	kinds := map[string]*KindScore{}
	score := func(s string) *SkillScore {
		if skills[s] == nil {
			skills[s] = &SkillScore{Skill: s}
		}
		return skills[s]
	}
	for _, o := range outs {
		took = append(took, o.Planned.Took)
		if o.Planned.Valid {
			valid++
		}
		k := kinds[o.Case.Kind]
		if k == nil {
			k = &KindScore{Kind: o.Case.Kind}
			kinds[o.Case.Kind] = k
		}
		k.Cases++
		for _, w := range uniq(o.Case.Tools) {
			s := score(w)
			s.Labelled++
			if slices.Contains(o.Got, w) {
				s.Both++
			}
		}
		for _, g := range o.Got {
			score(g).Chosen++
		}
		if o.Right {
			r.Right++
			k.Right++
			continue
		}
		r.Misses = append(r.Misses, Miss{Where: o.Case.Where, Kind: o.Case.Kind, Text: o.Case.Text, Want: uniq(o.Case.Tools), Got: o.Got,
			Error: o.Planned.Error})
	}
	r.ValidPct, r.RightPct = pct(valid, len(outs)), pct(r.Right, len(outs))
	slices.Sort(took)
	r.P50Ms, r.P99Ms = ms(quantile(took, 0.50)), ms(quantile(took, 0.99))
	for _, s := range skills {
		s.Precision, s.Recall = ratio(s.Both, s.Chosen), ratio(s.Both, s.Labelled)
		r.Skills = append(r.Skills, *s)
	}
	sort.Slice(r.Skills, func(i, j int) bool { return r.Skills[i].Skill < r.Skills[j].Skill })
	for _, k := range kinds {
		k.RightPct = pct(k.Right, k.Cases)
		r.Kinds = append(r.Kinds, *k)
	}
	sort.Slice(r.Kinds, func(i, j int) bool {
		return cmp.Or(cmp.Compare(r.Kinds[j].Cases, r.Kinds[i].Cases), cmp.Compare(r.Kinds[i].Kind, r.Kinds[j].Kind)) < 0
	})
	return r
}

// uniq is labels sorted, each once, never nil.
func uniq(labels []string) []string {
	out := append([]string{}, labels...)
	slices.Sort(out)
	return slices.Compact(out)
}

func pct(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return math.Round(float64(n)/float64(of)*1000) / 10
}

func ratio(n, of int) *float64 {
	if of == 0 {
		return nil
	}
	p := pct(n, of)
	return &p
}

// quantile is the q-th quantile of sorted durations (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return math.Round(float64(d.Microseconds())/10) / 100 }
