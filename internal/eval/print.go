package eval

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText prints the reports: the figures side by side (one column a
// source), each label's precision and recall, the share right by kind,
// then every source's misses.
func WriteText(w io.Writer, reports []Report) {
	if len(reports) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name string, cell func(Report) string) {
		cells := []string{name}
		for _, r := range reports {
			cells = append(cells, cell(r))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	row("", func(r Report) string { return r.Source })
	row("prompts", func(r Report) string { return fmt.Sprint(r.Cases) })
	row("valid plans", func(r Report) string { return fmt.Sprintf("%.1f%%", r.ValidPct) })
	row("right skills", func(r Report) string { return fmt.Sprintf("%.1f%% (%d)", r.RightPct, r.Right) })
	row("planning p50", func(r Report) string { return fmt.Sprintf("%.2f ms", r.P50Ms) })
	row("planning p99", func(r Report) string { return fmt.Sprintf("%.2f ms", r.P99Ms) })
	fmt.Fprintln(tw, "\t")
	fmt.Fprintln(tw, "precision / recall\t"+strings.Repeat("\t", len(reports)))
	for _, skill := range labels(reports) {
		row(skill, func(r Report) string {
			for _, s := range r.Skills {
				if s.Skill == skill {
					return fmt.Sprintf("%s / %s (%d)", pctOf(s.Precision), pctOf(s.Recall), s.Labelled)
				}
			}
			return "-"
		})
	}
	fmt.Fprintln(tw, "\t")
	fmt.Fprintln(tw, "right, by kind\t"+strings.Repeat("\t", len(reports)))
	for _, kind := range kinds(reports) {
		row(kind, func(r Report) string {
			for _, k := range r.Kinds {
				if k.Kind == kind {
					return fmt.Sprintf("%.1f%% of %d", k.RightPct, k.Cases)
				}
			}
			return "-"
		})
	}
	_ = tw.Flush()
	for _, r := range reports {
		writeMisses(w, r)
	}
}

// writeMisses lists a report's misses: what was labelled, what was chosen.
func writeMisses(w io.Writer, r Report) {
	fmt.Fprintf(w, "\n%s: %d misses\n", r.Source, len(r.Misses))
	for _, m := range r.Misses {
		kind := ""
		if m.Kind != "" {
			kind = " [" + m.Kind + "]"
		}
		fmt.Fprintf(w, "  %s%s %q\n      want %s\n", m.Where, kind, m.Text, list(m.Want))
		if m.Error != "" {
			fmt.Fprintf(w, "      no valid plan: %s\n", clip(m.Error, 300))
			continue
		}
		fmt.Fprintf(w, "      got  %s\n", list(m.Got))
	}
}

func list(labels []string) string {
	if len(labels) == 0 {
		return "(narration only)"
	}
	return strings.Join(labels, ", ")
}

func pctOf(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", *p)
}

// labels are every label of the reports, sorted, each once.
func labels(reports []Report) []string {
	var out []string
	for _, r := range reports {
		for _, s := range r.Skills {
			out = append(out, s.Skill)
		}
	}
	return uniq(out)
}

// kinds are every kind of the reports, in the first report's order.
func kinds(reports []Report) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range reports {
		for _, k := range r.Kinds {
			if !seen[k.Kind] {
				seen[k.Kind] = true
				out = append(out, k.Kind)
			}
		}
	}
	return out
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
