package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/internal/history"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// historyFlags are the filters of `plan history` (and `plan ls --all`):
// the console's history search.
type historyFlags struct {
	session, state, skill, reason, plan, from, to string
	before                                        uint64
	limit                                         int
}

// bind adds the filter flags to cmd; withSession and withState are false
// where the command has those flags already.
func (h *historyFlags) bind(cmd *cobra.Command, withSessionAndState bool) {
	f := cmd.Flags()
	if withSessionAndState {
		f.StringVar(&h.session, "session", "", "only this session's plans")
		f.StringVar(&h.state, "state", "", "only plans that ended so: succeeded, failed, timeout or cancelled")
		f.StringVar(&h.skill, "skill", "", "only plans with a tool of this skill")
	}
	f.StringVar(&h.reason, "reason", "", "only plans that failed for this reason (e.g. tool_failure, timeout, approval_denied)")
	f.StringVar(&h.plan, "plan", "", "only plans whose ID starts with this")
	f.StringVar(&h.from, "from", "", "only plans that finished at or after this time (RFC 3339, or a duration ago: 1h)")
	f.StringVar(&h.to, "to", "", "only plans that finished before this time (RFC 3339, or a duration ago)")
	f.Uint64Var(&h.before, "before", 0, "the page before this sequence (the next page's --before, printed under a full page)")
	f.IntVar(&h.limit, "limit", messages.HistoryPageMax, fmt.Sprintf("plans per page, 1..%d", messages.HistoryPageMax))
}

// request is the history request the flags describe, checked.
func (h *historyFlags) request(now time.Time) (messages.HistoryRequest, error) {
	req := messages.HistoryRequest{SessionID: h.session, State: h.state, Skill: h.skill, FailureReason: h.reason, PlanID: h.plan,
		Before: h.before, Limit: h.limit}
	if h.session != "" && !messages.ValidToken(h.session) {
		return req, usageErr("--session %q must match ^[A-Za-z0-9_-]{1,64}$", h.session)
	}
	for _, t := range []struct {
		flag, v string
		to      *time.Time
	}{{"--from", h.from, &req.From}, {"--to", h.to, &req.To}} {
		if t.v == "" {
			continue
		}
		at, err := timeArg(t.v, now)
		if err != nil {
			return req, usageErr("%s: %v", t.flag, err)
		}
		*t.to = at
	}
	if h.limit < 1 || h.limit > messages.HistoryPageMax {
		return req, usageErr("--limit must be 1..%d, got %d", messages.HistoryPageMax, h.limit)
	}
	if err := history.CheckQuery(req); err != nil {
		return req, usageErr("%v", err)
	}
	return req, nil
}

// timeArg reads an RFC 3339 time, or a duration meaning that long before
// now.
func timeArg(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-11-26T10:00:00Z) nor a duration (90m)", v)
}

func newPlanHistoryCmd(s Streams, o *clientOptions) *cobra.Command {
	var h historyFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "history",
		Short: "Page the finished plans, newest first (filter with --session, --state, --skill, --reason, --plan, --from, --to)",
		Long: `List the finished plans the results stream holds (the history window, 7 days by
default), newest first, a page at a time, with the console's history filters.
A scheduler answers from its index of the stream (<prefix>.control.history), so
a tenant's credentials list that tenant's plans only. 'plan status PLAN' shows
one of them whole.

Exit status: 0, 1 when no scheduler answers, 2 usage error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := h.request(time.Now())
			if err != nil {
				return err
			}
			return planControl(cmd, o, func(ctx context.Context, c *client.Client) error {
				page, err := c.History(ctx, req)
				if err != nil {
					return err
				}
				if asJSON {
					writeJSON(s.Out, page)
					return nil
				}
				printHistory(s.Out, page, time.Now())
				return nil
			})
		},
	}
	h.bind(cmd, true)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the page as JSON (plans, total, next, loading)")
	return cmd
}

// printHistory prints a page of finished plans as a table, then how many
// match and the flag for the next page.
func printHistory(w io.Writer, page *messages.HistoryPage, now time.Time) {
	if len(page.Plans) == 0 {
		fmt.Fprintln(w, "no finished plan matches")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PLAN\tSESSION\tSTATE\tREASON\tMS\tFINISHED\tSKILLS\tPROMPT")
		for _, p := range page.Plans {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s ago\t%s\t%s\n", p.PlanID, p.SessionID, p.State, dash(p.FailureReason), p.ExecutionTimeMs,
				age(p.FinishedAt, now), dash(strings.Join(p.Skills, ",")), oneLine(p.Prompt, 60))
		}
		_ = tw.Flush()
	}
	more := ""
	if page.Next != 0 {
		more = fmt.Sprintf("; older: --before %d", page.Next)
	}
	if page.Loading {
		more += " (the index is still reading the results stream: older plans may be missing)"
	}
	fmt.Fprintf(w, "%d of %d matching plan(s)%s\n", len(page.Plans), page.Total, more)
}

// dash is s, or "-" when empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine is s on one line, cut at n runes ("-" when empty).
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return dash(s)
}
