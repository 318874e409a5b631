package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// publishAndWait publishes a plan (its ID planID, its JSON b) on the
// session's plans subject, shows its tools' progress as it happens (as
// `prompt` does; not with asJSON) and prints its Execution Result; a
// repeated plan ID is an error at once (duplicatePlanError). It waits as
// long as the plan is in flight: a plan waiting for approval says so and
// is waited for until its own deadline; only a plan no scheduler took
// within --timeout is blamed on the schedulers.
func publishAndWait(cmd *cobra.Command, s Streams, o *clientOptions, session, planID string, b []byte, asJSON bool) error {
	nc, js, err := o.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	resSubj, err := o.subjects().Results(session, planID)
	if err != nil {
		return usageErr("%v", err)
	}
	plansSubj, err := o.subjects().Plans(session)
	if err != nil {
		return usageErr("%v", err)
	}
	sub, err := nc.SubscribeSync(resSubj)
	if err != nil {
		return failErr("subscribe to the result: %v", err)
	}
	ctx, cancel := signalContext(cmd.Context())
	defer cancel()
	c, err := client.New(nc, client.WithPrefix(o.bus.Prefix))
	if err != nil {
		return usageErr("%v", err)
	}
	if _, err := c.Result(ctx, planID); err == nil {
		return failErr("%v", &duplicatePlanError{PlanID: planID, Finished: true})
	}
	var live *liveProgress
	if !asJSON {
		if live, err = followPlan(c, s.Out, session, planID); err != nil {
			return failErr("follow progress: %v", err)
		}
		defer live.stop()
	}
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	ack, err := js.Publish(pctx, plansSubj, b, jetstream.WithMsgID(planID))
	pcancel()
	if err != nil {
		return failErr("publish plan: %v", err)
	}
	if ack.Duplicate {
		return failErr("%v", &duplicatePlanError{PlanID: planID})
	}
	data, err := awaitResult(ctx, c, sub, planID, o.timeout)
	if err != nil {
		return err
	}
	var res messages.ExecutionResult
	if err := json.Unmarshal(data, &res); err != nil {
		return failErr("unreadable result: %v", err)
	}
	if asJSON {
		_, _ = s.Out.Write(append(data, '\n'))
	} else {
		live.stop()
		printResult(s.Out, &res)
	}
	if !res.Success {
		return silentFailure
	}
	return nil
}

// deadlineSlack is how long past a plan's own deadline `plan run` waits
// for its result before it asks the scheduler again.
const deadlineSlack = 5 * time.Second

// awaitResult waits for the plan's result on sub. Every time its wait
// ends (first accept, the --timeout for a scheduler to take the plan;
// then the plan's deadline, pushed back by approval waits), it asks the
// plan's status: a plan in flight is waited for until its new deadline;
// a finished one's result is read from the stream (it came while the
// connection was away); a plan no scheduler knows fails, and only then
// are the schedulers blamed.
func awaitResult(ctx context.Context, c *client.Client, sub *nats.Subscription, planID string, accept time.Duration) ([]byte, error) {
	wait := accept
	for {
		wctx, cancel := context.WithTimeout(ctx, wait)
		msg, err := sub.NextMsgWithContext(wctx)
		cancel()
		if err == nil {
			return msg.Data, nil
		}
		if ctx.Err() != nil {
			return nil, failErr("stopped waiting for the result of plan %s (%v); it runs on: narratoria plan status %s", planID, ctx.Err(), planID)
		}
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := c.PlanStatus(sctx, planID)
		scancel()
		switch {
		case errors.Is(err, client.ErrNoResponders):
			return nil, failErr("no result for plan %s after %s, and no scheduler answers plan control — is a scheduler running?", planID, wait.Round(time.Second))
		case errors.Is(err, client.ErrUnknownPlan):
			return nil, failErr("no scheduler took plan %s within %s — is a scheduler running? (--timeout waits longer)", planID, wait.Round(time.Second))
		case err != nil:
			return nil, failErr("no result for plan %s yet, and its status cannot be read: %v", planID, err)
		case st.Result != nil:
			res, err := c.Result(ctx, planID)
			if err != nil {
				return nil, failErr("plan %s finished, but its result cannot be read: %v", planID, err)
			}
			return json.Marshal(res)
		}
		wait = max(time.Until(planWaitsUntil(st))+deadlineSlack, time.Second)
	}
}

// planWaitsUntil is when a plan in flight ends at the latest: its
// deadline, or the end of a tool's wait for approval if that is later.
func planWaitsUntil(st *messages.PlanStatus) time.Time {
	until := st.Deadline
	for _, t := range st.Tools {
		if t.State == messages.ToolAwaitingApproval && t.WaitUntil.After(until) {
			until = t.WaitUntil
		}
	}
	return until
}

// liveProgress prints a plan's progress as it comes, as `prompt` does:
// one line per change, on a terminal rewritten in place while tools run.
type liveProgress struct {
	mu      sync.Mutex
	out     io.Writer
	tty     bool
	planID  string
	stopped bool
	w       *client.Watcher
}

// followPlan watches the session for planID's progress and prints it.
func followPlan(c *client.Client, out io.Writer, session, planID string) (*liveProgress, error) {
	lp := &liveProgress{out: out, tty: isTerminal(out), planID: planID}
	w, err := c.Watch(session, func(u client.Update) {
		if u.Progress != nil && u.Progress.PlanID == planID {
			lp.show(*u.Progress)
		}
	})
	if err != nil {
		return nil, err
	}
	lp.w = w
	return lp, nil
}

// show prints one progress event; a tool that starts to wait for approval
// says what it waits for and how to decide.
func (lp *liveProgress) show(p messages.Progress) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.stopped {
		return
	}
	line := formatProgress(p)
	if p.State == string(messages.ToolAwaitingApproval) {
		line += fmt.Sprintf(" — waiting for a decision: narratoria plan approve %s %s (or deny)", lp.planID, p.ToolID)
		if len(p.Input) > 0 {
			line += "\n      input: " + inputLine(p.Input)
		}
	}
	if lp.tty && !strings.Contains(line, "\n") && p.State == string(messages.ToolRunning) {
		fmt.Fprintf(lp.out, "\r\033[K%s", line)
		return
	}
	if lp.tty {
		fmt.Fprint(lp.out, "\r\033[K")
	}
	fmt.Fprintln(lp.out, line)
}

// stop ends the watch; nothing is printed after it returns.
func (lp *liveProgress) stop() {
	if lp == nil {
		return
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.stopped {
		return
	}
	lp.stopped = true
	_ = lp.w.Stop()
	if lp.tty {
		fmt.Fprint(lp.out, "\r\033[K")
	}
}
