package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/skills"
	"github.com/narratoria/runtime/internal/tenancy"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/health"
	"github.com/narratoria/runtime/pkg/messages"
)

// clientOptions are the flags every client command shares: where the
// deployment is, how to authenticate, and its subject prefix.
type clientOptions struct {
	bus     bus.Config
	timeout time.Duration
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func (o *clientOptions) bind(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&o.bus.URL, "nats-url", envOr("NARRATORIA_NATS_URL", bus.URLDefault), "NATS server URL(s) (env NARRATORIA_NATS_URL)")
	f.StringVar(&o.bus.Prefix, "prefix", envOr("NARRATORIA_NATS_PREFIX", messages.SubjectPrefixDefault), "subject prefix of the deployment (env NARRATORIA_NATS_PREFIX)")
	f.StringVar(&o.bus.CredsFile, "creds", os.Getenv("NARRATORIA_NATS_CREDSFILE"), "NATS credentials file (env NARRATORIA_NATS_CREDSFILE)")
	f.StringVar(&o.bus.NKeyFile, "nkey", os.Getenv("NARRATORIA_NATS_NKEYFILE"), "NATS nkey seed file (env NARRATORIA_NATS_NKEYFILE)")
	f.StringVar(&o.bus.User, "user", os.Getenv("NARRATORIA_NATS_USER"), "NATS user (env NARRATORIA_NATS_USER)")
	f.StringVar(&o.bus.Password, "password", os.Getenv("NARRATORIA_NATS_PASSWORD"), "NATS password (env NARRATORIA_NATS_PASSWORD)")
	f.StringVar(&o.bus.TLSCA, "tls-ca", os.Getenv("NARRATORIA_NATS_TLSCA"), "CA file to trust (env NARRATORIA_NATS_TLSCA)")
	f.StringVar(&o.bus.TLSCert, "tls-cert", os.Getenv("NARRATORIA_NATS_TLSCERT"), "client certificate (env NARRATORIA_NATS_TLSCERT)")
	f.StringVar(&o.bus.TLSKey, "tls-key", os.Getenv("NARRATORIA_NATS_TLSKEY"), "client key (env NARRATORIA_NATS_TLSKEY)")
	f.StringVar(&o.bus.InboxPrefix, "inbox-prefix", os.Getenv("NARRATORIA_NATS_INBOXPREFIX"), "reply subject prefix, e.g. _INBOX_game under the shipped accounts (env NARRATORIA_NATS_INBOXPREFIX)")
	f.DurationVar(&o.timeout, "timeout", 90*time.Second, "how long to wait for an answer")
}

// upDataDirDefault is where `narratoria up` keeps its data, and so the
// credentials it issues to its clients, by default.
const upDataDirDefault = "./data"

// withUpCreds is c with the credentials `narratoria up` wrote into its
// data folder (./data/narratoria.creds, from the folder up was started
// in) when c names none: the README's commands work beside a running up
// as they are, and nothing connects without credentials.
func withUpCreds(c bus.Config) bus.Config {
	if c.CredsFile != "" || c.NKeyFile != "" || c.User != "" || c.Token != "" {
		return c
	}
	if f := filepath.Join(upDataDirDefault, tenancy.ClientCredsFile); fileExists(f) {
		c.CredsFile = f
	}
	return c
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// subjects are the deployment's subjects with the chosen prefix.
func (o *clientOptions) subjects() messages.Subjects { return messages.Subjects{Prefix: o.bus.Prefix} }

// connect dials NATS once with the flags' credentials and says clearly when
// it cannot.
func (o *clientOptions) connect() (*nats.Conn, jetstream.JetStream, error) {
	return o.connectWithin(5 * time.Second)
}

// connectWithin is connect, giving up after d.
func (o *clientOptions) connectWithin(d time.Duration) (*nats.Conn, jetstream.JetStream, error) {
	cfg := withUpCreds(o.bus)
	cfg.Name = "narratoria-cli"
	if cfg.InboxPrefix == "" && cfg.CredsFile != "" {
		// A least-privilege user (up's game.creds, a worker pool's) may
		// read its replies on one inbox only: use it.
		cfg.InboxPrefix = tenancy.CredsInboxPrefix(cfg.CredsFile)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	nc, err := bus.Connect(ctx, cfg, slog.New(slog.DiscardHandler))
	if errors.Is(err, nats.ErrAuthorization) || err != nil && strings.Contains(err.Error(), "Authorization Violation") {
		as := "no credentials"
		if cfg.CredsFile != "" {
			as = "credentials " + cfg.CredsFile
		}
		return nil, nil, failErr("%v: the server refused %s — pass --creds (narratoria up writes %s into its --data-dir; run from the folder up was started in, or give the path)", err, as, tenancy.ClientCredsFile)
	}
	if err != nil {
		return nil, nil, failErr("%v — is `narratoria up` running?", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, failErr("jetstream: %v", err)
	}
	return nc, js, nil
}

// client dials NATS and returns a pkg/client Client on it.
func (o *clientOptions) client(opts ...client.Option) (*nats.Conn, *client.Client, error) {
	nc, _, err := o.connect()
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(nc, append([]client.Option{client.WithPrefix(o.bus.Prefix)}, opts...)...)
	if err != nil {
		nc.Close()
		return nil, nil, usageErr("%v", err)
	}
	return nc, c, nil
}

func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newPromptCmd(s Streams, o *clientOptions) *cobra.Command {
	var session string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "prompt TEXT",
		Short: "Send a prompt and print its narration, showing each tool's progress live",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr("prompt needs the player's words, e.g. narratoria prompt \"I look around\"")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !messages.ValidToken(session) {
				return usageErr("--session %q must match ^[A-Za-z0-9_-]{1,64}$", session)
			}
			nc, c, err := o.client()
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			tty := isTerminal(s.Out) && !asJSON
			var outMu sync.Mutex      // progress lines come from the subscription's goroutine
			done := false             // under outMu: a progress line that comes after the narration is not written
			var shown strings.Builder // under outMu: the prose printed as it streamed
			var w *client.Watcher
			if !asJSON {
				w, err = c.Watch(session, func(u client.Update) {
					if u.Progress == nil {
						return
					}
					outMu.Lock()
					defer outMu.Unlock()
					if done || shown.Len() > 0 {
						return // the narration (its prose streaming) has the screen
					}
					line := formatProgress(*u.Progress)
					if tty {
						fmt.Fprintf(s.Out, "\r\033[K%s", line)
						if u.Progress.ToolID == "" && u.Progress.State != messages.PlanStarted {
							fmt.Fprintln(s.Out)
						}
						return
					}
					fmt.Fprintln(s.Out, line)
				})
				if err != nil {
					return failErr("follow progress: %v", err)
				}
				defer func() { _ = w.Stop() }()
			}
			rctx, rcancel := context.WithTimeout(ctx, o.timeout)
			defer rcancel()
			var opts []client.NarrateOption
			if !asJSON {
				opts = append(opts, client.WithProse(func(ch messages.ProseChunk) {
					outMu.Lock()
					defer outMu.Unlock()
					showProse(s.Out, ch, &shown, tty)
				}))
			}
			n, err := c.Narrate(rctx, messages.Prompt{Text: strings.Join(args, " "), SessionID: session}, opts...)
			if err != nil {
				if errors.Is(err, client.ErrNoResponders) || strings.Contains(err.Error(), "no responders") {
					return failErr("no narrator answers on %s — is `narratoria up` running? (%v)", o.subjects().Narrate(), err)
				}
				return failErr("no narration: %v", err)
			}
			if asJSON {
				writeJSON(s.Out, n)
				return nil
			}
			if w != nil {
				_ = w.Stop()
			}
			outMu.Lock()
			defer outMu.Unlock()
			done = true
			if tty {
				fmt.Fprint(s.Out, "\r\033[K")
			}
			if shown.Len() > 0 && shown.String() == n.Text {
				fmt.Fprintln(s.Out)
				printNarrationFooter(s.Out, n) // its text has been printed as it streamed
				return nil
			}
			printNarration(s.Out, n)
			return nil
		},
	}
	cmd.Flags().StringVar(&session, "session", "demo", "session ID")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw Narration JSON")
	return cmd
}

func formatProgress(p messages.Progress) string {
	if p.ToolID == "" {
		line := fmt.Sprintf("plan %s %s", short(p.PlanID), p.State)
		if p.Error != "" {
			line += ": " + p.Error
		}
		return line
	}
	line := fmt.Sprintf("  %-24s %s", p.ToolID, p.State)
	if p.Progress != nil {
		line += fmt.Sprintf(" %3d%%", *p.Progress)
		if p.Message != "" {
			line += " " + p.Message
		}
	}
	if p.Attempt > 1 {
		line += fmt.Sprintf(" (attempt %d)", p.Attempt)
	}
	if p.Error != "" {
		line += " — " + p.Error
	}
	return line
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// showProse prints a piece of streamed prose where the narration will
// be: the first piece after a blank line, each next one after the last;
// a stream that falls back says so (the narration then prints in full).
func showProse(w io.Writer, ch messages.ProseChunk, shown *strings.Builder, tty bool) {
	if ch.Seq == 1 && shown.Len() > 0 {
		fmt.Fprintln(w, "\n(the prose starts over)")
		shown.Reset()
	}
	if shown.Len() == 0 && ch.Text != "" {
		if tty {
			fmt.Fprint(w, "\r\033[K")
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, ch.Text)
	shown.WriteString(ch.Text)
	if ch.Fallback && shown.Len() > 0 {
		fmt.Fprintln(w, "\n(the model's prose failed; the narration below replaces it)")
		shown.Reset()
	}
}

func printNarration(w io.Writer, n *messages.Narration) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, n.Text)
	printNarrationFooter(w, n)
}

// printNarrationFooter prints what follows a narration's text: choices,
// assets, and the plan's summary.
func printNarrationFooter(w io.Writer, n *messages.Narration) {
	fmt.Fprintln(w)
	if len(n.Choices) > 0 {
		fmt.Fprintln(w, "Choices:")
		for _, c := range n.Choices {
			var choice struct {
				ID    string `json:"id"`
				Label string `json:"label"`
			}
			if json.Unmarshal(c, &choice) == nil && choice.Label != "" {
				fmt.Fprintf(w, "  - %s\n", choice.Label)
			} else {
				fmt.Fprintf(w, "  - %s\n", string(c))
			}
		}
	}
	for _, a := range n.Assets {
		if a.Object != "" {
			fmt.Fprintf(w, "Asset %s (%s): %s — narratoria asset get %s -o FILE\n", a.AssetID, a.MediaType, a.Object, a.Object)
			continue
		}
		// Not stored as an object (the worker logged why): only its path
		// on the worker's disk is known.
		fmt.Fprintf(w, "Asset %s (%s): not in the asset store; on the worker's disk at %s\n", a.AssetID, a.MediaType, a.Path)
	}
	extra := ""
	if n.Fallback {
		extra = ", fallback narration"
	}
	if n.Cancelled {
		extra += ", plan cancelled"
	}
	if len(n.DisabledSkills) > 0 {
		extra += ", disabled: " + strings.Join(n.DisabledSkills, ", ")
	}
	fmt.Fprintf(w, "(plan %s, %d attempt(s), %d ms%s)\n", short(n.PlanID), n.Attempts, n.DurationMs, extra)
}

func newWatchCmd(s Streams, o *clientOptions) *cobra.Command {
	var session string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Follow narrations, progress and script events as they happen (Ctrl-C to stop)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tok := "*"
			if session != "" {
				if !messages.ValidToken(session) {
					return usageErr("--session %q must match ^[A-Za-z0-9_-]{1,64}$", session)
				}
				tok = session
			}
			nc, c, err := o.client()
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			// The connection's handlers write beside this goroutine: one
			// lock for both streams (a test gives both the same buffer).
			var mu sync.Mutex
			sout, serr := &lockedWriter{w: s.Out, mu: &mu}, &lockedWriter{w: s.Err, mu: &mu}
			closed := reportConnection(nc, serr)
			updates := make(chan client.Update, 1024)
			w, err := c.Watch(session, func(u client.Update) {
				select {
				case updates <- u:
				case <-ctx.Done():
				}
			})
			if err != nil {
				return failErr("watch: %v", err)
			}
			defer func() { _ = w.Stop() }()
			fmt.Fprintf(serr, "watching session %s on %s (Ctrl-C to stop)\n", tok, o.bus.URL)
			for {
				select {
				case <-ctx.Done():
					return nil
				case err := <-closed:
					return failErr("watch ended: %v", err)
				case u := <-updates:
					if asJSON {
						fmt.Fprintf(sout, "{\"subject\":%q,\"data\":%s}\n", u.Subject, u.Data)
						continue
					}
					fmt.Fprintln(sout, formatWatch(u))
				}
			}
		},
	}
	cmd.Flags().StringVar(&session, "session", "", "only this session (default: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each message as {subject, data} JSON")
	return cmd
}

// lockedWriter writes to w under mu, which other lockedWriters may share.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// reportConnection says on w when the connection is lost and found
// again (what was published meanwhile is missed: watch reads live
// subjects), and when the server refuses the credentials (revoked,
// expired); the channel gets why once the connection is closed for good
// (the client gives up after the server refused the credentials twice).
func reportConnection(nc *nats.Conn, w io.Writer) <-chan error {
	closed := make(chan error, 1)
	var mu sync.Mutex // the handlers run on the connection's goroutines
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, time.Now().Format("15:04:05.000")+" watch: "+format+"\n", args...)
	}
	nc.SetDisconnectErrHandler(func(_ *nats.Conn, err error) {
		if err != nil {
			say("lost the connection to NATS (%v); reconnecting — updates published meanwhile are missed", err)
		}
	})
	nc.SetReconnectHandler(func(c *nats.Conn) {
		say("reconnected to %s; following again", c.ConnectedUrlRedacted())
	})
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		switch {
		case errors.Is(err, nats.ErrAuthRevoked), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthorization):
			say("the server refused these credentials (%v): revoked or expired? (narratoria tenant rotate issues new ones)", err)
		default:
			say("%v", err)
		}
	})
	nc.SetClosedHandler(func(c *nats.Conn) {
		err := c.LastError()
		if err == nil {
			return // our own Close
		}
		if errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthorization) {
			err = fmt.Errorf("the server refused these credentials: %w", err)
		}
		closed <- fmt.Errorf("connection closed: %w", err)
	})
	return closed
}

func formatWatch(u client.Update) string {
	now := time.Now().Format("15:04:05.000")
	switch {
	case u.Narration != nil:
		line := fmt.Sprintf("%s [%s] narration: %s", now, u.SessionID, strings.ReplaceAll(u.Narration.Text, "\n", " "))
		if u.Narration.Cancelled {
			line += " (plan cancelled)"
		}
		return line
	case u.Prose != nil:
		line := fmt.Sprintf("%s [%s] prose %d: %s", now, u.SessionID, u.Prose.Seq, strings.ReplaceAll(u.Prose.Text, "\n", " "))
		if u.Prose.Fallback {
			line += "(failed: the template prose is the narration's)"
		}
		return line
	case u.Progress != nil:
		return fmt.Sprintf("%s [%s] %s", now, u.SessionID, strings.TrimSpace(formatProgress(*u.Progress)))
	case u.Event != nil:
		return fmt.Sprintf("%s [%s] event %s/%s: %s", now, u.SessionID, short(u.PlanID), u.ToolID, u.Event)
	case u.Health != nil:
		h := u.Health
		return fmt.Sprintf("%s [%s] health %s: %s -> %s (%s)", now, h.SessionID, h.Skill, h.From, h.To, h.Reason)
	}
	return fmt.Sprintf("%s %s %s", now, u.Subject, u.Data)
}

func newPlanRunCmd(s Streams, o *clientOptions) *cobra.Command {
	var session string
	var asJSON, newID bool
	cmd := &cobra.Command{
		Use:   "run FILE",
		Short: "Publish a Plan JSON file (- for stdin), show its tools' progress as they run, and print its Execution Result",
		Long: `Publish a Plan JSON file (- for stdin) on the session's plans subject, show each
tool's state and progress as it happens (as prompt does), and print the
Execution Result. A tool waiting for approval says so, with the input it would
run with and the command that decides; the plan is waited for until its own
deadline (approval waits push it back). --timeout bounds only how long a
scheduler may take to accept the plan.

Exit status: 0 the plan succeeded, 1 it failed (or was not run), 2 usage error.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("plan run takes one FILE argument (- for stdin)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !messages.ValidToken(session) {
				return usageErr("--session %q must match ^[A-Za-z0-9_-]{1,64}$", session)
			}
			b, err := readInput(args[0], s.In)
			if err != nil {
				return usageErr("%v", err)
			}
			if newID {
				if b, err = withNewPlanID(b); err != nil {
					return failErr("%v", err)
				}
			}
			var probe struct {
				RequestID string `json:"requestId"`
			}
			if err := json.Unmarshal(b, &probe); err != nil {
				return failErr("plan is not valid JSON: %v", err)
			}
			if err := messages.CheckPlanID(probe.RequestID); err != nil {
				return failErr("requestId: %v", err)
			}
			if newID {
				fmt.Fprintf(s.Err, "running the plan as %s\n", probe.RequestID)
			}
			return publishAndWait(cmd, s, o, session, probe.RequestID, b, asJSON)
		},
	}
	cmd.Flags().StringVar(&session, "session", "demo", "session ID")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw Execution Result JSON")
	cmd.Flags().BoolVar(&newID, "new-id", false, "give the plan a fresh requestId (a random UUID) before running it, to run a plan file again")
	return cmd
}

// errDuplicatePlan is what `plan run` fails with when the plan's ID was
// already published: the plans stream drops a repeated ID (its message ID)
// as a duplicate, so the plan would never run and no result would come.
var errDuplicatePlan = errors.New("duplicate plan ID")

// duplicatePlanError names the plan ID that was already published and how
// to run the plan again.
type duplicatePlanError struct {
	PlanID string
	// Finished says the plan's result is already stored (it ran to its
	// end); otherwise the plans stream dropped this copy as a duplicate.
	Finished bool
}

func (e *duplicatePlanError) Error() string {
	how := "the plans stream dropped this copy as a duplicate of the one published before"
	if e.Finished {
		how = "it already ran: its result is stored"
	}
	return fmt.Sprintf("%s: plan %s was already published (%s); a plan ID runs once — run it again with --new-id, or give it another requestId",
		errDuplicatePlan, e.PlanID, how)
}

func (e *duplicatePlanError) Unwrap() error { return errDuplicatePlan }

// withNewPlanID returns the plan document with a fresh requestId (a random
// UUID), its other fields as they were.
func withNewPlanID(b []byte) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("plan is not a JSON object: %v", err)
	}
	id, _ := json.Marshal(uuid.NewString())
	doc["requestId"] = id
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the plan: %v", err)
	}
	return out, nil
}

func printResult(w io.Writer, r *messages.ExecutionResult) {
	status := "succeeded"
	if !r.Success {
		status = "failed (" + r.FailureReason + ")"
	}
	fmt.Fprintf(w, "plan %s %s in %d ms\n", r.PlanID, status, r.ExecutionTimeMs)
	if r.Message != "" {
		fmt.Fprintf(w, "  %s\n", r.Message)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  - %s\n", p.String())
	}
	for _, tr := range r.ToolResults {
		took := fmt.Sprintf("%5d ms", tr.ExecutionTimeMs)
		if tr.ExecutionTimeMs == 0 && (tr.State == messages.ToolCancelled || tr.State == messages.ToolTimeout) {
			// The result carries the scripts' own run times only: a script
			// stopped by a cancel (or a job lost) reported none.
			took = "    ? ms (run time not recorded)"
		}
		line := fmt.Sprintf("  %-24s %-8s %s", tr.ToolID, tr.State, took)
		if tr.RetryCount > 0 {
			line += fmt.Sprintf(" retries=%d", tr.RetryCount)
		}
		if tr.Error != nil {
			line += " — " + tr.Error.Message
		}
		fmt.Fprintln(w, line)
	}
	if len(r.DisabledSkills) > 0 {
		fmt.Fprintf(w, "  disabled skills: %s\n", strings.Join(r.DisabledSkills, ", "))
	}
}

func newSkillsCmd(s Streams, o *clientOptions) *cobra.Command {
	var session, check string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "skills",
		Short: "List registered skills, their scripts, live workers and (with --session) health; --check DIR checks skills on disk",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if check != "" {
				return checkSkills(s, check)
			}
			nc, js, err := o.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			kv, err := js.KeyValue(ctx, messages.BucketSkills)
			if err != nil {
				return failErr("no skill registry on %s (%v) — has a skill worker started?", o.bus.URL, err)
			}
			keys, err := kv.Keys(ctx)
			if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
				return failErr("list skills: %v", err)
			}
			sort.Strings(keys)
			var healthKV jetstream.KeyValue
			if session != "" {
				healthKV, _ = js.KeyValue(ctx, messages.BucketHealth)
			}
			var entries []messages.RegistryEntry
			for _, k := range keys {
				e, err := kv.Get(ctx, k)
				if err != nil {
					continue
				}
				var re messages.RegistryEntry
				if json.Unmarshal(e.Value(), &re) == nil {
					entries = append(entries, re)
				}
			}
			if asJSON {
				writeJSON(s.Out, entries)
				return nil
			}
			if len(entries) == 0 {
				fmt.Fprintln(s.Out, "no skills registered")
				return nil
			}
			for _, re := range entries {
				var scripts []string
				for _, sc := range re.Scripts {
					scripts = append(scripts, sc.Name)
				}
				live := re.LiveWorkers(time.Now(), 10*time.Second)
				line := fmt.Sprintf("%-16s %-8s workers=%d  scripts: %s", re.Name, re.Version, len(live), strings.Join(scripts, ", "))
				if healthKV != nil {
					state := "healthy"
					if e, err := healthKV.Get(ctx, session+"."+re.Name); err == nil {
						var st health.Status
						if json.Unmarshal(e.Value(), &st) == nil && st.State != "" {
							state = string(st.State)
							switch {
							case st.State != health.PermanentFailure:
							case st.ProbeAt.IsZero():
								state += " (until a session reset)"
							case st.Selectable(time.Now()):
								state += " (cool-down over: the next plan probes it)"
							default:
								state += fmt.Sprintf(" (probed again from %s, in %s)", st.ProbeAt.Local().Format(time.TimeOnly),
									time.Until(st.ProbeAt).Round(time.Second))
							}
						}
					}
					line += "  health: " + state
				}
				fmt.Fprintln(s.Out, line)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&session, "session", "", "also show each skill's health in this session")
	cmd.Flags().StringVar(&check, "check", "", "load the skills of this folder as a worker would and report every problem (no NATS needed)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the registry entries as JSON")
	return cmd
}

func newStateCmd(s Streams, o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "state SESSION",
		Short: "Print a session's state",
		Args:  oneSession("state"),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, js, err := o.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			value, err := readState(ctx, js, o.bus.Prefix, args[0])
			if err != nil {
				return failErr("read state of %s on %s: %v", args[0], o.bus.URL, err)
			}
			var v any
			if json.Unmarshal(value, &v) != nil {
				_, _ = s.Out.Write(append(value, '\n'))
				return nil
			}
			writeJSON(s.Out, v)
			return nil
		},
	}
}

// readState reads a session's state: from the sessions bucket, or for a
// tenant's session (<tenant>.<session>) from the tenant's state stream.
// A session with no state yet reads {}.
func readState(ctx context.Context, js jetstream.JetStream, prefix, session string) ([]byte, error) {
	if tenant := messages.TenantOf(session); tenant != "" {
		st, err := js.Stream(ctx, tenant.StateStream())
		if err != nil {
			return nil, err
		}
		subj, err := messages.Subjects{Prefix: prefix, Tenants: true}.State(session)
		if err != nil {
			return nil, err
		}
		m, err := st.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return []byte("{}"), nil
		}
		if err != nil {
			return nil, err
		}
		return m.Data, nil
	}
	kv, err := js.KeyValue(ctx, messages.BucketSessions)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, session)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return []byte("{}"), nil
	}
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}

func newSessionCmd(s Streams, o *clientOptions) *cobra.Command {
	var clear bool
	reset := &cobra.Command{
		Use:   "reset SESSION",
		Short: "Make every skill of a session healthy again (--clear-state also empties its state)",
		Args:  oneSession("session reset"),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, c, err := o.client()
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			r, err := c.ResetSession(ctx, args[0], clear)
			if err != nil {
				if errors.Is(err, client.ErrNoResponders) {
					return failErr("no active scheduler answers resets — is `narratoria up` running?")
				}
				return failErr("reset refused: %v", err)
			}
			fmt.Fprintf(s.Out, "session %s reset: %d skill(s) healthy again", args[0], r.ChangedSkills)
			if r.ClearedState {
				fmt.Fprint(s.Out, ", state cleared")
			}
			fmt.Fprintln(s.Out)
			return nil
		},
	}
	reset.Flags().BoolVar(&clear, "clear-state", false, "also empty the session state")
	cmd := &cobra.Command{Use: "session", Short: "Manage sessions"}
	cmd.AddCommand(reset)
	return cmd
}

// oneSession checks that a command got exactly one valid session ID.
func oneSession(command string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageErr("%s takes one SESSION argument", command)
		}
		if !messages.ValidSession(args[0]) {
			return usageErr("session %q must match ^[A-Za-z0-9_-]{1,64}$ (or <tenant>.<session> for an operator of a multi-tenant deployment)", args[0])
		}
		return nil
	}
}

// checkSkills loads a skills folder as a worker would: each skill that
// loads, and each one skipped with its problem (a script missing, not
// executable, or whose interpreter is not there; a bad manifest…).
func checkSkills(s Streams, dir string) error {
	loaded, warnings := (&skills.Loader{Dir: dir}).Load()
	names := make([]string, 0, len(loaded))
	for n := range loaded {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(s.Out, "ok       %s (%d script(s))\n", n, len(loaded[n].Scripts))
	}
	for _, w := range warnings {
		fmt.Fprintf(s.Out, "problem  %s\n", w.String())
	}
	if len(warnings) > 0 {
		return silentFailure
	}
	return nil
}

// newPlanRerunCmd is `plan rerun PLAN [--tool TOOL]`: run a finished plan
// again under a new ID, from the plan its result carries, or only one of
// its tools with the input it had.
func newPlanRerunCmd(s Streams, o *clientOptions) *cobra.Command {
	var tool string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "rerun PLAN",
		Short: "Run a finished plan again under a new ID (or, with --tool, only that tool, with the input it had)",
		Args:  onePlan("plan rerun", 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tool != "" && !messages.ValidToken(tool) {
				return usageErr("--tool %q must match ^[A-Za-z0-9_-]{1,64}$", tool)
			}
			nc, c, err := o.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			p, session, err := c.RerunPlan(ctx, args[0], tool)
			cancel()
			nc.Close()
			if err != nil {
				return failErr("%v", err)
			}
			b, err := json.Marshal(p)
			if err != nil {
				return failErr("encode the plan: %v", err)
			}
			fmt.Fprintf(s.Err, "running plan %s again as %s in session %s\n", args[0], p.RequestID, session)
			if !o.subjects().Tenants { // a tenant's client names its sessions without the tenant
				session = messages.LocalSession(session)
			}
			return publishAndWait(cmd, s, o, session, p.RequestID, b, asJSON)
		},
	}
	cmd.Flags().StringVar(&tool, "tool", "", "run only this tool of the plan, alone, with the input it had")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw Execution Result JSON")
	return cmd
}
