package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/internal/plancheck"
	"github.com/narratoria/runtime/internal/skills"
	"github.com/narratoria/runtime/pkg/messages"
)

func newPlanCmd(s Streams, o *clientOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Work with Plan JSON documents",
	}
	cmd.AddCommand(newPlanValidateCmd(s), newPlanRunCmd(s, o))
	return cmd
}

// validateSummary is what `plan validate --json` prints.
type validateSummary struct {
	Valid        bool               `json:"valid"`
	PlanID       string             `json:"planId,omitempty"`
	Tools        int                `json:"tools"`
	Levels       int                `json:"levels"`
	CriticalPath int                `json:"criticalPath"`
	Order        []string           `json:"order,omitempty"`
	Reason       string             `json:"reason,omitempty"`
	Problems     []messages.Problem `json:"problems,omitempty"`
}

func newPlanValidateCmd(s Streams) *cobra.Command {
	var skillsDir string
	var asJSON bool
	var limits messages.PlanLimits
	cmd := &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a Plan JSON file (- for stdin) without running it",
		Long: `Check a Plan JSON file against the Plan schema and every rule of SPEC §3:
field types and ranges, toolPath form, unique tool IDs, known dependencies, no
cycles, references to ancestors only, disabled skills, size limits. With
--skills-dir, every toolPath must also name a script of a skill on disk.

Exit status: 0 valid, 1 invalid (every problem on stderr, one per line), 2 usage error.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("plan validate takes one FILE argument (- for stdin), got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := readInput(args[0], s.In)
			if err != nil {
				return usageErr("%v", err)
			}
			var resolver plancheck.Resolver
			if skillsDir != "" {
				dr, err := newDiskResolver(skillsDir)
				if err != nil {
					return usageErr("%v", err)
				}
				resolver = dr
			}
			checked, err := plancheck.Check(b, limits, resolver)
			var perr *messages.PlanError
			if err != nil && !errors.As(err, &perr) {
				return failErr("%v", err)
			}
			if perr != nil {
				if asJSON {
					writeJSON(s.Out, validateSummary{Valid: false, PlanID: perr.PlanID, Reason: perr.Reason, Problems: perr.Problems})
				} else {
					for _, p := range perr.Problems {
						fmt.Fprintln(s.Err, p.String())
					}
					fmt.Fprintf(s.Err, "invalid plan (%s): %d problem(s)\n", perr.Reason, len(perr.Problems))
				}
				return silentFailure
			}
			g := checked.Graph
			sum := validateSummary{Valid: true, PlanID: checked.Plan.RequestID, Tools: g.Len(),
				Levels: len(g.Levels()), CriticalPath: g.CriticalPathLen(), Order: g.Order()}
			if asJSON {
				writeJSON(s.Out, sum)
				return nil
			}
			fmt.Fprintf(s.Out, "valid plan %s: %d tools, %d dependency levels, critical path %d tools\n",
				sum.PlanID, sum.Tools, sum.Levels, sum.CriticalPath)
			return nil
		},
	}
	cmd.Flags().StringVar(&skillsDir, "skills-dir", "", "also check every toolPath against the skills in this folder")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the summary or the problems as JSON on stdout")
	cmd.Flags().IntVar(&limits.MaxTools, "max-tools", messages.MaxPlanToolsDefault, "most tools a plan may have")
	cmd.Flags().IntVar(&limits.MaxBytes, "max-bytes", messages.MaxPlanBytesDefault, "largest plan document in bytes")
	return cmd
}

// maxInputBytes bounds what the CLI reads from a file or stdin.
const maxInputBytes = 256 << 20

func readInput(name string, stdin io.Reader) ([]byte, error) {
	var r io.Reader
	if name == "-" {
		r = stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("cannot read plan file: %w", err)
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.IsDir() {
			return nil, fmt.Errorf("cannot read plan file: %s is a directory", name)
		}
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxInputBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read plan: %w", err)
	}
	if len(b) > maxInputBytes {
		return nil, fmt.Errorf("plan input is larger than %d bytes", maxInputBytes)
	}
	return b, nil
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// diskResolver resolves toolPaths against the skills in a folder.
type diskResolver struct {
	dir    string
	skills map[string]*skills.Skill
}

func newDiskResolver(dir string) (*diskResolver, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("--skills-dir: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("--skills-dir: %s is not a directory", dir)
	}
	l := &skills.Loader{Dir: dir}
	sk, _ := l.Load()
	return &diskResolver{dir: dir, skills: sk}, nil
}

func (d *diskResolver) Resolve(ref messages.ToolRef) (plancheck.Script, error) {
	sk, ok := d.skills[ref.Skill]
	if !ok {
		return plancheck.Script{}, fmt.Errorf("%w: no valid skill %q in %s", plancheck.ErrUnknownSkill, ref.Skill, d.dir)
	}
	sc, err := sk.Resolve(ref.String())
	if err != nil {
		return plancheck.Script{}, fmt.Errorf("%w: %v", plancheck.ErrUnknownSkill, err)
	}
	var timeout time.Duration = sc.Timeout
	return plancheck.Script{Skill: sk.Name, Name: sc.Spec.Name, Timeout: timeout}, nil
}
