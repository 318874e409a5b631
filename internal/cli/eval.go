package cli

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/internal/eval"
	"github.com/narratoria/runtime/internal/llm"
	"github.com/narratoria/runtime/internal/planner"
)

// evalOptions are the flags of `narratoria eval`.
type evalOptions struct {
	planner, compare string
	skillsDir        string
	llmURL, llmModel string
	session          string
	asJSON           bool
	min              float64
	concurrency      int
}

func newEvalCmd(s Streams, o *clientOptions) *cobra.Command {
	e := &evalOptions{}
	cmd := &cobra.Command{
		Use:   "eval FILE...",
		Short: "Measure a planner on labelled prompts: valid plans, right skills, precision and recall per skill, planning time, every miss",
		Long: `Measure how well a planner picks skills for your prompts. Each FILE holds labelled
prompts, one a line: JSONL as testdata/planning/*.jsonl ({"text": "...", "tools":
["dice-roller/roll-dice"], "kind": "paraphrase"}: the tools the plan must call besides
the narration skill, and no others; "<skill>" alone accepts any of its scripts), or
TSV (text, tools separated by commas, kind) for a file ending in .tsv.

--planner live (the default) asks the running deployment's narrators, through NATS,
for the plan they would make (<prefix>.planner.plan; nothing runs), with their
skills, their health and their planner, rules or model. --planner rules or llm
plans in this process on --skills-dir (llm with --llm-url and --llm-model).
--compare rules,llm (or any list of the three) runs each and prints them side by
side. It prints valid %, right skills % (the plan calls exactly the labelled
tools), each tool's precision and recall, the share right by kind, the planning
time's p50 and p99, and every miss; --json prints the same as JSON. It exits 1
when a planner's right skills % is under --min.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr("eval needs a labelled file, e.g. narratoria eval testdata/planning/prompts.jsonl")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runEval(cmd, s, o, e, args) },
	}
	f := cmd.Flags()
	f.StringVar(&e.planner, "planner", "live", "the planner to measure: live (the deployment's, through NATS), rules or llm (in this process)")
	f.StringVar(&e.compare, "compare", "", "measure several planners side by side, e.g. rules,llm or rules,live")
	f.StringVar(&e.skillsDir, "skills-dir", "./skills", "the skills an in-process planner chooses from")
	f.StringVar(&e.llmURL, "llm-url", "", "the OpenAI-compatible server of --planner llm (e.g. http://127.0.0.1:8080/v1)")
	f.StringVar(&e.llmModel, "llm-model", "", "the model of --planner llm")
	f.StringVar(&e.session, "session", "eval", "the session whose skill health a live deployment plans with")
	f.BoolVar(&e.asJSON, "json", false, "print the reports as JSON")
	f.Float64Var(&e.min, "min", 0, "exit 1 when a planner's right skills % is under this")
	f.IntVar(&e.concurrency, "concurrency", 1, "prompts planned at once (a model server may take more; timings are truest at 1)")
	return cmd
}

func runEval(cmd *cobra.Command, s Streams, o *clientOptions, e *evalOptions, files []string) error {
	var cases []eval.Case
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return usageErr("%v", err)
		}
		cs, err := eval.ReadCases(f, name)
		f.Close()
		if err != nil {
			return usageErr("%v", err)
		}
		cases = append(cases, cs...)
	}
	if len(cases) == 0 {
		return usageErr("no labelled prompt in %s", strings.Join(files, ", "))
	}
	names := []string{e.planner}
	if e.compare != "" {
		names = strings.Split(e.compare, ",")
	}
	ctx, cancel := signalContext(cmd.Context())
	defer cancel()
	var reports []eval.Report
	for _, name := range names {
		src, closeSrc, err := e.source(strings.TrimSpace(name), o)
		if err != nil {
			return err
		}
		outs, err := eval.Run(ctx, src, cases, e.concurrency)
		closeSrc()
		if err != nil {
			return failErr("%v", err)
		}
		reports = append(reports, eval.Score(src.Name(), outs))
	}
	if e.asJSON {
		writeJSON(s.Out, map[string]any{"reports": reports})
	} else {
		eval.WriteText(s.Out, reports)
	}
	for _, r := range reports {
		if r.RightPct < e.min {
			fmt.Fprintf(s.Err, "narratoria eval: %s picks the right skills for %.1f%% of the prompts, under --min %g\n", r.Source, r.RightPct, e.min)
			return silentFailure
		}
	}
	return nil
}

// source builds the planner named: live through NATS, or rules or llm in
// this process; closeSrc releases what it holds.
func (e *evalOptions) source(name string, o *clientOptions) (src eval.Source, closeSrc func(), err error) {
	if !slices.Contains([]string{"live", "rules", "llm"}, name) {
		return nil, nil, usageErr("--planner/--compare: %q must be live, rules or llm", name)
	}
	if name == "live" {
		nc, _, err := o.connect()
		if err != nil {
			return nil, nil, err
		}
		return &eval.Remote{NC: nc, Subjects: o.subjects(), Session: e.session}, nc.Close, nil
	}
	cat, warnings := planner.CatalogueFromDir(e.skillsDir)
	if len(cat.Skills) == 0 {
		return nil, nil, usageErr("--skills-dir %s holds no skill (%s)", e.skillsDir, strings.Join(warnings, "; "))
	}
	if name == "rules" {
		planner.Fit(cat) // the learned model is fitted once, before the clock runs, as a narrator fits it
		return &eval.InProcess{Planner: planner.RulePlanner{}, Catalogue: cat}, func() {}, nil
	}
	if e.llmURL == "" || e.llmModel == "" {
		return nil, nil, usageErr("--planner llm needs --llm-url and --llm-model")
	}
	pl := planner.NewLLMPlannerOn(llm.New(llm.Config{BaseURL: e.llmURL, Model: e.llmModel}, llm.Options{}))
	return &eval.InProcess{Planner: pl, Catalogue: cat}, func() {}, nil
}
