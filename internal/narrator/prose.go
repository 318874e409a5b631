package narrator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/narratoria/runtime/internal/llm"
	"github.com/narratoria/runtime/internal/tracing"
	"github.com/narratoria/runtime/pkg/messages"
)

// proseSystem tells the model what prose to write.
const proseSystem = `You are the storyteller of an interactive story. Rewrite the draft below into the prose the player reads:
second person, present tense, vivid and concise (two to five sentences). Keep every fact of the draft — dice results,
remembered events, names, standings, choices offered — and add no outcome of your own. Do not quote the player's words
back, write no headings, lists, notes or questions to the player: only the prose.`

// proseWriter has a model write the prose of a successful plan's
// narration (docs/spec.md §13), streaming each piece to the game on
// <prefix>.prose.<session> as it is written (core NATS, live only). The
// narration built from the template is its draft and its fallback.
type proseWriter struct {
	client *llm.Client
	nc     *nats.Conn
	subj   messages.Subjects
}

// write has the model rewrite nar's text, streamed, and sets nar.Text and
// nar.Prose when it succeeds. When the model fails, stalls, is cut off or
// the tenant's budget is spent, nar keeps the template prose: the failure
// is logged and counted (narratoria_llm_failures_total), and a stream
// that had begun ends with a chunk saying so. work is the narrator's work
// context (a stop cancels the call); ctx carries the prompt's trace.
func (w *proseWriter) write(work, ctx context.Context, p *messages.Prompt, res *messages.ExecutionResult, nar *messages.Narration, log *slog.Logger) {
	if strings.TrimSpace(nar.Text) == "" {
		return
	}
	subject, err := w.subj.Prose(p.SessionID)
	if err != nil {
		return
	}
	cfg := w.client.Config()
	pctx, cancel := context.WithTimeout(work, cfg.ProseTimeout)
	defer cancel()
	pctx, span := tracing.Tracer("narrator").Start(oteltrace.ContextWithSpan(pctx, oteltrace.SpanFromContext(ctx)), "narrator.prose")
	seq := 0
	send := func(c messages.ProseChunk) {
		c.PromptID, c.PlanID, c.Seq = p.PromptID, nar.PlanID, seq+1
		seq++
		data, _ := json.Marshal(c)
		_ = w.nc.Publish(subject, data) // live only: a lost piece is in the narration
	}
	a, err := w.client.Stream(pctx, llm.Request{Component: llm.ComponentProse, Tenant: messages.TenantOf(p.SessionID), System: proseSystem,
		User: proseDraft(p, res, nar), Temperature: cfg.ProseTemperature, MaxTokens: cfg.ProseMaxTokens},
		func(s string) { send(messages.ProseChunk{Text: s}) })
	text := ""
	if err == nil {
		text = wholeSentences(strings.TrimSpace(a.Content))
		span.SetAttributes(attribute.Int64("narratoria.completion_tokens", a.Usage.Completion))
	}
	if text == "" {
		if err == nil {
			err = fmt.Errorf("the model wrote no prose")
			w.client.Meter().Failed(llm.ComponentProse, llm.KindJSON)
		}
		if seq > 0 {
			send(messages.ProseChunk{Done: true, Fallback: true})
		}
		log.Warn("narrator: the model's prose failed; the template prose stands", slog.String("kind", llm.KindOf(err)), slog.Any("error", err))
		tracing.End(span, err)
		return
	}
	send(messages.ProseChunk{Done: true})
	tracing.End(span, nil)
	nar.Text, nar.Prose = text, messages.ProseByModel
}

// proseDraft is what the model gets: the player's words, the template
// narration as the draft, what the skills found and the choices offered.
func proseDraft(p *messages.Prompt, res *messages.ExecutionResult, nar *messages.Narration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "The player: %s\n\nDraft:\n%s\n", clip(p.Text, 1000), clip(nar.Text, 3000))
	found := map[string]json.RawMessage{}
	for _, tr := range res.ToolResults {
		if tr.State == messages.ToolSuccess && len(tr.Output) > 0 {
			found[tr.ToolID] = tr.Output
		}
	}
	if len(found) > 0 {
		out, _ := json.Marshal(found)
		fmt.Fprintf(&b, "\nWhat the skills found: %s\n", clip(string(out), 2000))
	}
	if len(nar.Choices) > 0 {
		out, _ := json.Marshal(nar.Choices)
		fmt.Fprintf(&b, "\nChoices offered to the player: %s\n", clip(string(out), 1000))
	}
	return b.String()
}

// wholeSentences cuts text after its last full sentence when it ends in
// the middle of one (the model reached its token limit); text without any
// full sentence is kept as it is.
func wholeSentences(text string) string {
	t := strings.TrimRight(text, " \t\n")
	if last, _ := utf8.DecodeLastRuneInString(t); t == "" || strings.ContainsRune(".!?\"'”’…)", last) {
		return t
	}
	if i := strings.LastIndexAny(t, ".!?…"); i > 0 {
		_, n := utf8.DecodeRuneInString(t[i:])
		return t[:i+n]
	}
	return t
}
