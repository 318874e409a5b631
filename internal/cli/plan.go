package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/internal/narrator"
	"github.com/narratoria/runtime/internal/plancheck"
	"github.com/narratoria/runtime/internal/planner"
	"github.com/narratoria/runtime/internal/skills"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

func newPlanCmd(s Streams, o *clientOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Work with plans: validate and run Plan JSON documents; watch, cancel and approve plans in flight",
	}
	cmd.AddCommand(newPlanValidateCmd(s), newPlanRunCmd(s, o), newPlanRerunCmd(s, o), newPlanStatusCmd(s, o), newPlanListCmd(s, o),
		newPlanHistoryCmd(s, o), newPlanCancelCmd(s, o),
		newPlanDecideCmd(s, o, true), newPlanDecideCmd(s, o, false), newPlanExplainCmd(s, o))
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
		Long: `Check a Plan JSON file against the Plan schema and every rule of docs/spec.md §3:
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

// planControl runs fn with a client, turning "no scheduler" into a clear
// message.
func planControl(cmd *cobra.Command, o *clientOptions, fn func(ctx context.Context, c *client.Client) error) error {
	nc, c, err := o.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
	defer cancel()
	return controlErr(fn(ctx, c))
}

// planControlConn is planControl for a command that also reads JetStream
// itself (the approvals stream).
func planControlConn(cmd *cobra.Command, o *clientOptions, fn func(ctx context.Context, c *client.Client, js jetstream.JetStream) error) error {
	nc, c, err := o.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return failErr("jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
	defer cancel()
	return controlErr(fn(ctx, c, js))
}

// controlErr turns a plan control error into the CLI's message: a
// scheduler's refusal in its own words (they name the plan, the tool and
// why), exit 1.
func controlErr(err error) error {
	var se *client.ServiceError
	var ee *exitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		return err
	case errors.Is(err, client.ErrNoResponders):
		return failErr("no active scheduler answers plan control — is `narratoria up` running?")
	case errors.As(err, &se):
		return failErr("%s", se.Message)
	default:
		return failErr("%v", err)
	}
}

func onePlan(command string, n int) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			if n == 1 {
				return usageErr("%s takes one PLAN argument", command)
			}
			return usageErr("%s takes PLAN and TOOL", command)
		}
		if err := messages.CheckPlanID(args[0]); err != nil {
			return usageErr("%v", err)
		}
		if n == 2 && !messages.ValidToken(args[1]) {
			return usageErr("tool %q must match ^[A-Za-z0-9_-]{1,64}$", args[1])
		}
		return nil
	}
}

func newPlanStatusCmd(s Streams, o *clientOptions) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status PLAN",
		Short: "Show a plan: in flight, each tool's state, attempt and timings (a tool waiting for approval with the input it would run with) and the plan's versions; finished, how it ended, from its stored result",
		Long: `Show a plan's status. A plan in flight is answered by the scheduler running it:
each tool's state, attempt, run time and transitions, a tool waiting for approval
with the input it would run with (its references to earlier tools' outputs
resolved), and the plan's versions. A finished plan is answered from its stored
result: how it ended (state, failure reason), and each tool's end state, run
time and error.

Exit status: 0 with the status, 1 when no scheduler runs the plan and no result
of it is stored (or none answers), 2 usage error.`,
		Args: onePlan("plan status", 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return planControlConn(cmd, o, func(ctx context.Context, c *client.Client, js jetstream.JetStream) error {
				st, err := c.PlanStatus(ctx, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					writeJSON(s.Out, st)
					return nil
				}
				printStatus(s.Out, st, storedDecisions(ctx, js, o.subjects(), st), time.Now())
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the PlanStatus JSON")
	return cmd
}

// storedDecisions reads, for each tool of st that waits for approval, the
// decision stored on the approvals stream (<prefix>.decisions.<plan>.<tool>), if any: a decision the
// scheduler has not applied yet (it is on its way, or the scheduler holds
// it until the tool's dependencies end) means the tool no longer waits for
// anyone. A reader without the right to look (a tenant's account) gets no
// decision.
func storedDecisions(ctx context.Context, js jetstream.JetStream, subj messages.Subjects, st *messages.PlanStatus) map[string]messages.Approval {
	var stream jetstream.Stream
	out := map[string]messages.Approval{}
	for _, t := range st.Tools {
		if t.State != messages.ToolAwaitingApproval {
			continue
		}
		if stream == nil {
			var err error
			if stream, err = js.Stream(ctx, messages.StreamApprovals); err != nil {
				return out
			}
		}
		name, err := subj.Decisions(st.PlanID, t.ToolID)
		if err != nil {
			continue
		}
		m, err := stream.GetLastMsgForSubject(ctx, name)
		if err != nil {
			continue
		}
		var a messages.Approval
		if json.Unmarshal(m.Data, &a) == nil {
			out[t.ToolID] = a
		}
	}
	return out
}

// toolEnded reports whether a tool is in a final state.
func toolEnded(s messages.ToolState) bool {
	switch s {
	case messages.ToolSuccess, messages.ToolFailed, messages.ToolSkipped, messages.ToolTimeout, messages.ToolCancelled:
		return true
	case messages.ToolPending, messages.ToolRunning, messages.ToolRetrying, messages.ToolAwaitingApproval:
		return false
	}
	return false
}

// toolsDone counts a plan's tools in a final state.
func toolsDone(st *messages.PlanStatus) int {
	n := 0
	for _, t := range st.Tools {
		if toolEnded(t.State) {
			n++
		}
	}
	return n
}

// ranFor is how long a tool's attempts ran, from its history: the time
// from each move to running to the transition that followed it (now for an
// attempt still running). ok is false when the history shows no attempt
// (the tool never ran, or its history no longer reaches back that far).
func ranFor(t messages.ToolStatus, now time.Time) (d time.Duration, ok bool) {
	for k, h := range t.History {
		if h.State != messages.ToolRunning {
			continue
		}
		end := now
		if k+1 < len(t.History) {
			end = t.History[k+1].At
		}
		if end.After(h.At) {
			d += end.Sub(h.At)
		}
		ok = true
	}
	return d, ok
}

// printStatus prints a plan's status: its header, each tool, its versions.
func printStatus(w io.Writer, st *messages.PlanStatus, decisions map[string]messages.Approval, now time.Time) {
	if r := st.Result; r != nil {
		how := r.State
		if r.FailureReason != "" && r.FailureReason != r.State {
			how += " (" + r.FailureReason + ")"
		}
		fmt.Fprintf(w, "plan %s (session %s) finished: %s at %s after %d ms, attempt %d\n", st.PlanID, st.SessionID, how,
			r.FinishedAt.Format(time.RFC3339), r.ExecutionTimeMs, st.AttemptNumber)
		if r.Message != "" {
			fmt.Fprintf(w, "  %s\n", r.Message)
		}
	} else {
		fmt.Fprintf(w, "plan %s (session %s) %s, attempt %d, accepted %s, deadline %s\n", st.PlanID, st.SessionID, st.Phase,
			st.AttemptNumber, st.AcceptedAt.Format(time.RFC3339), st.Deadline.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "  %d/%d tools done\n", toolsDone(st), len(st.Tools))
	for _, t := range st.Tools {
		fmt.Fprintln(w, toolLine(t, decisions, now))
		if t.State == messages.ToolAwaitingApproval && len(t.Input) > 0 {
			fmt.Fprintln(w, "      input: "+inputLine(t.Input))
		}
		if len(t.History) > 0 {
			steps := make([]string, len(t.History))
			for k, h := range t.History {
				steps[k] = fmt.Sprintf("%s %s (%s)", h.At.Format("15:04:05.000"), h.State, h.Cause)
			}
			fmt.Fprintln(w, "      "+strings.Join(steps, " → "))
		}
	}
	for _, v := range st.Versions {
		line := fmt.Sprintf("  version %d %s: %s", v.Version, v.State, strings.Join(v.ToolIDs, ", "))
		if v.AskedBy != "" {
			line += fmt.Sprintf(" (asked by %s: %q)", v.AskedBy, v.Suggestion)
		}
		if v.Reason != "" {
			line += " — " + v.Reason
		}
		fmt.Fprintln(w, line)
	}
}

// inputShownMax bounds the input `plan status` prints of a waiting tool
// (--json prints all of it).
const inputShownMax = 2000

// inputLine is a tool's input on one line, compact, cut at inputShownMax.
func inputLine(in json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, in); err != nil {
		b.Reset()
		b.Write(in)
	}
	s := b.String()
	if len(s) > inputShownMax {
		s = s[:inputShownMax] + fmt.Sprintf("… (%d bytes; --json shows all)", len(s))
	}
	return s
}

// toolLine is one tool of printStatus: its state, attempt, run time, a
// waiting tool's wait or the decision on its way, and its error.
func toolLine(t messages.ToolStatus, decisions map[string]messages.Approval, now time.Time) string {
	line := fmt.Sprintf("  %-24s %-18s attempt %d", t.ToolID, t.State, t.Attempt)
	d, ran := ranFor(t, now)
	switch {
	case ran && toolEnded(t.State):
		// The history keeps a tool's last transitions only: an early
		// attempt it no longer shows still counts in the scripts' sum.
		line += fmt.Sprintf(", ran %d ms", max(d.Milliseconds(), t.ExecMs))
		if t.ExecMs > 0 {
			line += fmt.Sprintf(" (script %d ms)", t.ExecMs)
		}
	case ran && t.State == messages.ToolRunning:
		line += fmt.Sprintf(", running for %d ms", d.Milliseconds())
	case ran:
		line += fmt.Sprintf(", ran %d ms so far", d.Milliseconds())
	case t.ExecMs > 0:
		line += fmt.Sprintf(", ran %d ms", t.ExecMs)
	}
	if t.State == messages.ToolAwaitingApproval {
		if a, ok := decisions[t.ToolID]; ok {
			verb := "denied"
			if a.Approved {
				verb = "approved"
			}
			if a.By != "" {
				verb += " by " + a.By
			}
			line += ", " + verb + " (the scheduler is applying the decision)"
		} else if !t.WaitUntil.IsZero() {
			line += ", waiting for approval until " + t.WaitUntil.Format(time.RFC3339)
		}
	}
	if t.Error != nil {
		line += " — " + t.Error.Message
	}
	return line
}

// planRow is one plan of `plan ls`: its summary and what its status says.
type planRow struct {
	PlanID    string `json:"planId"`
	SessionID string `json:"sessionId"`
	// State is the plan's: running, awaiting_approval (a tool waits for a
	// decision), finished (its result is being published), or unknown when
	// its status could not be read (Error says why).
	State string `json:"state"`
	// ToolsDone of Tools have ended.
	ToolsDone int `json:"toolsDone"`
	Tools     int `json:"tools"`
	// Skills are the skills of the plan's tools, in plan order, once each.
	Skills     []string  `json:"skills"`
	AcceptedAt time.Time `json:"acceptedAt,omitzero"`
	Error      string    `json:"error,omitempty"`
}

// planState is one word for where a plan is.
func planState(st *messages.PlanStatus) string {
	if st.Phase != "running" {
		return st.Phase
	}
	for _, t := range st.Tools {
		if t.State == messages.ToolAwaitingApproval {
			return string(messages.ToolAwaitingApproval)
		}
	}
	return "running"
}

// newPlanRow fills a row from a plan's status.
func newPlanRow(p messages.PlanSummary, st *messages.PlanStatus) planRow {
	r := planRow{PlanID: p.PlanID, SessionID: p.SessionID, State: planState(st), ToolsDone: toolsDone(st),
		Tools: len(st.Tools), AcceptedAt: st.AcceptedAt, Skills: []string{}}
	for _, t := range st.Tools {
		if t.Skill != "" && !slices.Contains(r.Skills, t.Skill) {
			r.Skills = append(r.Skills, t.Skill)
		}
	}
	return r
}

// age is how long ago t was, to the second ("-" when unknown).
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Second).String()
}

func newPlanListCmd(s Streams, o *clientOptions) *cobra.Command {
	var session, state, skill string
	var asJSON, all bool
	var h historyFlags
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the plans in flight with their state, tools done, skills and age (filter with --session, --state, --skill); --all adds the finished ones",
		Long: `List the plans in flight with their state (running, awaiting_approval, finished
while its result goes out), tools done, skills and age. With --all, the finished
plans follow, newest first, a page at a time, as 'plan history' lists them (its
filters apply: --state succeeded, failed, timeout or cancelled; --reason, --plan,
--from, --to, --before, --limit).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if session != "" && !messages.ValidToken(session) {
				return usageErr("--session %q must match ^[A-Za-z0-9_-]{1,64}$", session)
			}
			live, ended := lsStates(state, all)
			if !live && !ended {
				want := "running, awaiting_approval, finished or unknown"
				if all {
					want += "; with --all also succeeded, failed, timeout or cancelled"
				}
				return usageErr("--state %q: want %s", state, want)
			}
			h.session, h.skill = session, skill
			if ended {
				h.state = state
			}
			req, err := h.request(time.Now())
			if err != nil {
				return err
			}
			return planControl(cmd, o, func(ctx context.Context, c *client.Client) error {
				rows := []planRow{}
				if live || state == "" {
					if rows, err = inFlightRows(ctx, c, session, state, skill); err != nil {
						return err
					}
				}
				if !all {
					if asJSON {
						writeJSON(s.Out, rows)
					} else {
						printPlanRows(s.Out, rows, "no plan in flight")
					}
					return nil
				}
				if ended || state == "" {
					page, err := c.History(ctx, req)
					if err != nil {
						return err
					}
					if asJSON {
						writeJSON(s.Out, map[string]any{"inFlight": rows, "finished": page})
						return nil
					}
					printPlanRows(s.Out, rows, "no plan in flight")
					fmt.Fprintln(s.Out, "\nfinished:")
					printHistory(s.Out, page, time.Now())
					return nil
				}
				if asJSON {
					writeJSON(s.Out, map[string]any{"inFlight": rows})
				} else {
					printPlanRows(s.Out, rows, "no plan in flight")
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&session, "session", "", "only this session's plans")
	cmd.Flags().StringVar(&state, "state", "", "only plans in this state: running, awaiting_approval or finished (with --all also succeeded, failed, timeout or cancelled)")
	cmd.Flags().StringVar(&skill, "skill", "", "only plans with a tool of this skill")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON (with --all: {inFlight, finished})")
	cmd.Flags().BoolVar(&all, "all", false, "also list the finished plans (plan history)")
	h.bind(cmd, false)
	return cmd
}

// lsStates says whether --state names a state of plans in flight (live)
// or, with --all, one of finished plans (ended); "" is both.
func lsStates(state string, all bool) (live, ended bool) {
	switch state {
	case "":
		return true, all
	case "running", string(messages.ToolAwaitingApproval), "finished", "unknown":
		return true, false
	case messages.PlanSucceeded, messages.PlanFailed, messages.PlanTimeout, messages.PlanCancelled:
		return false, all
	}
	return false, false
}

// inFlightRows lists the plans in flight, each with what its status says,
// filtered by state and skill.
func inFlightRows(ctx context.Context, c *client.Client, session, state, skill string) ([]planRow, error) {
	plans, err := c.ListPlans(ctx, session)
	if err != nil {
		return nil, err
	}
	rows := []planRow{}
	for _, p := range plans {
		st, err := c.PlanStatus(ctx, p.PlanID)
		var row planRow
		switch {
		case errors.Is(err, client.ErrNotInFlight):
			continue // it ended since the list was made
		case err == nil && st.Result != nil:
			continue // likewise, answered from its result
		case err == nil:
			row = newPlanRow(p, st)
		default:
			row = planRow{PlanID: p.PlanID, SessionID: p.SessionID, State: "unknown", Skills: []string{}, Error: err.Error()}
		}
		if state != "" && row.State != state {
			continue
		}
		if skill != "" && !slices.Contains(row.Skills, skill) {
			continue
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// printPlanRows prints the plans in flight as a table (none: empty).
func printPlanRows(w io.Writer, rows []planRow, empty string) {
	if len(rows) == 0 {
		fmt.Fprintln(w, empty)
		return
	}
	now := time.Now()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PLAN\tSESSION\tSTATE\tDONE\tAGE\tSKILLS")
	for _, r := range rows {
		skills := strings.Join(r.Skills, ",")
		if r.Error != "" {
			skills = r.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\n", r.PlanID, r.SessionID, r.State, r.ToolsDone, r.Tools, age(r.AcceptedAt, now), skills)
	}
	_ = tw.Flush()
}

func newPlanCancelCmd(s Streams, o *clientOptions) *cobra.Command {
	var by, reason string
	cmd := &cobra.Command{
		Use:   "cancel PLAN",
		Short: "Cancel a plan in flight: its scripts are stopped and it is not replanned",
		Args:  onePlan("plan cancel", 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return planControl(cmd, o, func(ctx context.Context, c *client.Client) error {
				if err := c.Cancel(ctx, args[0], by, reason); err != nil {
					return err
				}
				fmt.Fprintf(s.Out, "plan %s cancelled\n", args[0])
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&by, "by", os.Getenv("USER"), "who cancels (kept in the result)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (kept in the result)")
	return cmd
}

func newPlanDecideCmd(s Streams, o *clientOptions, approve bool) *cobra.Command {
	var by, reason string
	verb, done := "deny", "denied"
	short := "Deny a tool waiting for approval (it is skipped; its dependents fail)"
	if approve {
		verb, done = "approve", "approved"
		short = "Approve a tool waiting for approval"
	}
	cmd := &cobra.Command{
		Use:   verb + " PLAN TOOL",
		Short: short + "; the decision is stored durably, so it holds through a scheduler failover",
		Long: short + `.

The scheduler running the plan is asked first whether the tool takes a decision
now. An unknown plan, a tool the plan does not have, a tool that does not wait for
approval (it needs none, was decided, or ended) and a finished plan are refused,
with the reason, and nothing is stored. A scheduler stores the decision once it
checked it (no client writes the approvals stream); when none answers (none runs
now) the decision is sent again until one takes it or --timeout passes, and then
nothing is stored and the command says so.

Exit status: 0 stored, 1 refused (or not stored), 2 usage error.`,
		Args: onePlan("plan "+verb, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return planControl(cmd, o, func(ctx context.Context, c *client.Client) error {
				_, err := c.Decide(ctx, args[0], args[1], messages.Approval{Approved: approve, By: by, Reason: reason})
				if err != nil {
					return err
				}
				fmt.Fprintf(s.Out, "%s/%s %s\n", args[0], args[1], done)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&by, "by", os.Getenv("USER"), "who decides (kept with the decision)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (kept with the decision)")
	return cmd
}

func newPlanExplainCmd(s Streams, o *clientOptions) *cobra.Command {
	var skillsDir string
	var fromRegistry, asJSON bool
	cmd := &cobra.Command{
		Use:   "explain TEXT",
		Short: "Show how the rule-based planner reads a prompt: each skill's score, why it was chosen or not, and the plan",
		Long: `Score every skill against the prompt the way the rule-based planner does —
similarity to the manifest's examples, keywords found, negative examples — and
print, for each skill, its score, the threshold, the closest example and why it
was chosen or not, then the plan that results. Skills come from --skills-dir
(default ./skills, as on disk now) or, with --registry, from a running
deployment's registry. Use it to tune a manifest's examples and keywords.
Without --skills-dir it asks the running deployment's registry first (the skills
its workers serve now) and reads ./skills only when none answers within a second.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr("plan explain needs the player's words, e.g. narratoria plan explain \"I swing my axe at the troll\"")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var cat *planner.Catalogue
			// The running system's registry when it can be reached (and no
			// --skills-dir is given); --registry insists on it.
			if fromRegistry || !cmd.Flags().Changed("skills-dir") {
				var err error
				cat, err = registryCatalogue(cmd.Context(), o, fromRegistry)
				switch {
				case err != nil && fromRegistry:
					return err
				case err != nil:
					fmt.Fprintf(s.Err, "no running deployment reached (%v): skills from %s\n", err, skillsDir)
				case len(cat.Skills) == 0 && !fromRegistry:
					fmt.Fprintf(s.Err, "the registry at %s has no skill: skills from %s\n", o.bus.URL, skillsDir)
					cat = nil
				default:
					fmt.Fprintf(s.Err, "skills from the registry of the deployment at %s\n", o.bus.URL)
				}
			}
			if cat == nil {
				var warnings []string
				cat, warnings = planner.CatalogueFromDir(skillsDir)
				for _, w := range warnings {
					fmt.Fprintln(s.Err, "warning:", w)
				}
			}
			if len(cat.Skills) == 0 {
				return failErr("no skill found (--skills-dir %s)", skillsDir)
			}
			ex, err := planner.Explain(cat, strings.Join(args, " "))
			if err != nil {
				return failErr("%v", err)
			}
			if asJSON {
				writeJSON(s.Out, ex)
				return nil
			}
			printExplanation(s.Out, ex)
			return nil
		},
	}
	cmd.Flags().StringVar(&skillsDir, "skills-dir", "./skills", "skills folder to read the manifests from")
	cmd.Flags().BoolVar(&fromRegistry, "registry", false, "read the skills from the running deployment's registry instead")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the explanation as JSON")
	return cmd
}

// registryCatalogue reads the skills of the running deployment's
// registry; without insist it gives up after a second.
func registryCatalogue(ctx context.Context, o *clientOptions, insist bool) (*planner.Catalogue, error) {
	within := time.Second
	if insist {
		within = 5 * time.Second
	}
	nc, js, err := o.connectWithin(within)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cat, err := narrator.CatalogueFromRegistry(ctx, js)
	if err != nil {
		return nil, failErr("%v", err)
	}
	return cat, nil
}

func printExplanation(w io.Writer, ex *planner.Explanation) {
	switch {
	case ex.Language != "":
		fmt.Fprintf(w, "The prompt reads as another language (%s) the rule planner does not read (English, and French, Spanish, German, Portuguese, Japanese through a gloss): the narration skill answers alone.\n", ex.Language)
	case ex.Gloss != "":
		fmt.Fprintf(w, "The prompt is in %s, read through its gloss as: %s\n", ex.GlossLanguage, ex.Gloss)
	case !ex.English:
		fmt.Fprintln(w, "The prompt does not read as English: the narration skill answers alone.")
	}
	for _, sc := range ex.Skills {
		mark := "  "
		if sc.Chosen {
			mark = "✔ "
		}
		if sc.Narration {
			fmt.Fprintf(w, "%s%-16s %s\n", "▸ ", sc.Skill, sc.Why)
			continue
		}
		fmt.Fprintf(w, "%s%-16s score %.3f (threshold %.2f, similarity %.3f)", mark, sc.Skill, sc.Score, sc.Threshold, sc.Similarity)
		if sc.Chosen {
			fmt.Fprintf(w, " -> %s/%s", sc.Skill, sc.Script)
		}
		fmt.Fprintf(w, "\n      %s", sc.Why)
		if sc.Example != "" {
			fmt.Fprintf(w, "; closest example: %q", sc.Example)
		}
		if len(sc.Keywords) > 0 {
			fmt.Fprintf(w, "; keywords: %s", strings.Join(sc.Keywords, ", "))
		}
		if len(sc.Features) > 0 {
			fmt.Fprintf(w, "; weighing most: %s", strings.Join(sc.Features, ", "))
		}
		if sc.Negative != "" {
			fmt.Fprintf(w, "; negative example: %q", sc.Negative)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "\nSteps:")
	for i, st := range ex.Steps {
		fmt.Fprintf(w, "%d. %s\n", i+1, st.Name)
		for _, said := range st.Said {
			fmt.Fprintf(w, "     %s\n", said)
		}
	}
	fmt.Fprintln(w, "\nPlan:")
	writeJSON(w, ex.Plan)
}
