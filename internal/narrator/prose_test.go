package narrator

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/llm"
	"github.com/narratoria/runtime/internal/llm/llmtest"
	"github.com/narratoria/runtime/internal/planner"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// startMetered starts a narrator with its metrics on a registry of its own.
func (e *env) startMetered(t *testing.T, cfg Config) (*Narrator, *prometheus.Registry) {
	t.Helper()
	cfg.PlanTimeoutMs = 10_000
	cfg.LeaseTTL = 2 * time.Second
	reg := prometheus.NewRegistry()
	nar, err := New(e.srv.Connect(t), cfg, Options{Logger: e.log.With("component", "narrator"), Bus: e.srv.Bus, Registerer: reg})
	require.NoError(t, err)
	require.NoError(t, nar.Start(context.Background()))
	t.Cleanup(nar.Stop)
	return nar, reg
}

// proseLog records the prose chunks of a session as the game sees them.
type proseLog struct {
	mu     sync.Mutex
	chunks []messages.ProseChunk
	at     []time.Time
}

func followProse(t *testing.T, nc *nats.Conn, session string) *proseLog {
	t.Helper()
	l := &proseLog{}
	schema, err := messages.CompiledSchema(messages.SchemaProseChunk)
	require.NoError(t, err)
	sub, err := nc.Subscribe("narratoria.prose."+session, func(m *nats.Msg) {
		var c messages.ProseChunk
		var doc any
		if json.Unmarshal(m.Data, &c) != nil || json.Unmarshal(m.Data, &doc) != nil || schema.Validate(doc) != nil {
			t.Errorf("a prose chunk that does not match its schema: %s", m.Data)
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.chunks, l.at = append(l.chunks, c), append(l.at, time.Now())
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	return l
}

func (l *proseLog) all() []messages.ProseChunk {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]messages.ProseChunk(nil), l.chunks...)
}

// TestModelProse: with prose: llm, a successful plan's narration is
// rewritten by the model from the template draft (the player's words, the
// draft, what the skills found), each piece streamed on
// narratoria.prose.<session> as it is written (in order, matching its
// schema, the first well before the narration), and the narration carries
// the whole text; the prose's tokens are counted.
func TestModelProse(t *testing.T) {
	t.Parallel()
	pieces := []string{"The bones ", "clatter ", "across the table ", "and settle on twelve."}
	srv := llmtest.Start(t, func(c llmtest.Call) llmtest.Reply {
		return llmtest.Reply{Chunks: pieces, Every: 150 * time.Millisecond, Usage: &llmtest.Usage{Prompt: 250, Completion: 17}}
	})
	e := newPipeline(t, testSkills)
	_, reg := e.startMetered(t, Config{Prose: "llm", LLM: planner.LLMConfig{BaseURL: srv.URL, Model: "m"}})
	prose := followProse(t, e.srv.NC, "mp")
	n, _ := e.narrate(t, `{"sessionId":"mp","text":"I roll the bones","promptId":"p1"}`)
	done := time.Now()
	require.Equal(t, strings.Join(pieces, ""), n.Text)
	require.Equal(t, messages.ProseByModel, n.Prose)
	chunks := prose.all()
	require.Len(t, chunks, len(pieces)+1)
	for i, c := range chunks {
		require.Equal(t, i+1, c.Seq)
		require.Equal(t, "p1", c.PromptID)
		require.Equal(t, n.PlanID, c.PlanID)
		if i < len(pieces) {
			require.Equal(t, pieces[i], c.Text)
		}
	}
	require.True(t, chunks[len(pieces)].Done)
	require.False(t, chunks[len(pieces)].Fallback)
	prose.mu.Lock()
	early := done.Sub(prose.at[0])
	prose.mu.Unlock()
	require.Greater(t, early, 300*time.Millisecond, "the first piece came as it was written, not with the narration")

	calls := srv.Calls()
	require.Len(t, calls, 1, "the rule planner planned; only the prose asked the model")
	require.True(t, calls[0].Stream)
	require.Contains(t, calls[0].User, "I roll the bones")
	require.Contains(t, calls[0].User, "The die shows 12.", "the template narration is the draft")
	require.Contains(t, calls[0].User, `"total":12`, "what the skills found")
	require.Contains(t, calls[0].User, "Roll again", "the choices offered")
	require.Equal(t, 17.0, testlog.CounterSum(t, reg, "narratoria_llm_tokens_total", map[string]string{"component": "prose", "kind": "completion"}))
	require.Equal(t, 250.0, testlog.CounterSum(t, reg, "narratoria_llm_tokens_total", map[string]string{"component": "prose", "kind": "prompt"}))
}

// TestModelProseFallsBack: a model that answers 500 or 429, stalls past
// the first-token timeout, or is cut off mid-stream leaves the narration
// its template prose (never an error to the player); a stream that had
// begun ends with a chunk saying the prose fell back; each is counted by
// kind.
func TestModelProseFallsBack(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	reply := llmtest.Reply{}
	srv := llmtest.Start(t, func(llmtest.Call) llmtest.Reply { mu.Lock(); defer mu.Unlock(); return reply })
	e := newPipeline(t, testSkills)
	_, reg := e.startMetered(t, Config{Prose: "llm", LLM: planner.LLMConfig{BaseURL: srv.URL, Model: "m", FirstTokenTimeout: 300 * time.Millisecond}})
	for i, c := range []struct {
		kind  string
		reply llmtest.Reply
	}{
		{llm.KindServer, llmtest.Reply{Status: http.StatusInternalServerError, Body: "model exploded"}},
		{llm.KindRateLimited, llmtest.Reply{Status: http.StatusTooManyRequests}},
		{llm.KindTimeout, llmtest.Reply{Chunks: []string{"Too late."}, FirstDelay: 3 * time.Second}},
		{llm.KindCut, llmtest.Reply{Chunks: []string{"The bones ", "clat"}, Every: 50 * time.Millisecond, Cut: true}},
	} {
		mu.Lock()
		reply = c.reply
		mu.Unlock()
		session := "fb" + string(rune('a'+i))
		prose := followProse(t, e.srv.NC, session)
		t0 := time.Now()
		n, _ := e.narrate(t, `{"sessionId":"`+session+`","text":"I roll the bones","promptId":"p1"}`)
		require.False(t, n.Fallback, c.kind)
		require.Contains(t, n.Text, "The die shows 12.", "%s: the template prose", c.kind)
		require.Empty(t, n.Prose, c.kind)
		require.Less(t, time.Since(t0), testlog.Budget(5*time.Second), "%s: the player is not kept waiting for the model", c.kind)
		require.Equal(t, 1.0, testlog.CounterSum(t, reg, "narratoria_llm_failures_total", map[string]string{"component": "prose", "kind": c.kind}), c.kind)
		require.True(t, e.rec.Contains("the template prose stands", "kind="+c.kind), c.kind)
		chunks := prose.all()
		if c.kind == llm.KindCut {
			require.Len(t, chunks, 3, "two pieces, then the end")
			require.True(t, chunks[2].Done && chunks[2].Fallback, "the stream says the prose fell back")
		} else {
			require.Empty(t, chunks, c.kind)
		}
	}
}

// TestTokenBudget: past narrator.llm.maxTokensPerHour the model is not
// called: the prose is the template's, the refusal logged and counted;
// a tenant's own budget is read from its state stream's metadata, where
// `narratoria tenant add --max-tokens-per-hour` puts it.
func TestTokenBudget(t *testing.T) {
	t.Parallel()
	srv := llmtest.Start(t, func(llmtest.Call) llmtest.Reply {
		return llmtest.Reply{Chunks: []string{"The bones clatter."}, Usage: &llmtest.Usage{Prompt: 60, Completion: 5}}
	})
	e := newPipeline(t, testSkills)
	_, reg := e.startMetered(t, Config{Prose: "llm", LLM: planner.LLMConfig{BaseURL: srv.URL, Model: "m", MaxTokensPerHour: 50}})
	n, _ := e.narrate(t, `{"sessionId":"b1","text":"I roll the bones"}`)
	require.Equal(t, "The bones clatter.", n.Text, "under the budget: the model's prose")
	n, _ = e.narrate(t, `{"sessionId":"b1","text":"I roll the bones again"}`)
	require.Contains(t, n.Text, "The die shows 12.", "over the budget: the template prose")
	require.Len(t, srv.Calls(), 1, "no call past the budget")
	require.Equal(t, 1.0, testlog.CounterSum(t, reg, "narratoria_llm_budget_refusals_total", map[string]string{"tenant": ""}))
	require.Equal(t, 1.0, testlog.CounterSum(t, reg, "narratoria_llm_failures_total", map[string]string{"component": "prose", "kind": "budget"}))
	require.True(t, e.rec.Contains("token budget is spent"))

	// A tenant's own budget, kept with its state stream.
	require.NoError(t, bus.ProvisionTenant(context.Background(), e.srv.JS, e.srv.Bus, "acme", bus.TenantLimits{MaxTokensPerHour: 1234}))
	b := &tenantBudgets{js: e.srv.JS, def: 50, log: e.log, cache: map[messages.Tenant]tenantBudget{}}
	require.Equal(t, int64(1234), b.limit("acme"))
	require.Equal(t, int64(50), b.limit("globex"), "a tenant without a budget of its own gets the narrator's")
	require.Equal(t, int64(50), b.limit(""))
	l, found, err := bus.TenantLimitsOf(context.Background(), e.srv.JS, "acme")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, bus.TenantLimits{StateMaxBytes: bus.TenantStateMaxDefault, MaxTokensPerHour: 1234, Weight: 1}, l, "the weight read back is the default 1")
}

// TestPlanRequest: <prefix>.planner.plan answers the plan the configured
// planner makes, checked, with its planning time, never run; a model's
// failure is the answer (not the rule planner's plan); a bad request is
// refused.
func TestPlanRequest(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	status := 0
	srv := llmtest.Start(t, func(llmtest.Call) llmtest.Reply {
		mu.Lock()
		defer mu.Unlock()
		return llmtest.Reply{Status: status, Content: `{"narrative":"You roll.","tools":[{"toolId":"r","toolPath":"dice/roll"}]}`}
	})
	e := newPipeline(t, testSkills)
	rules, _ := e.startMetered(t, Config{})
	ask := func(body string) messages.PlanReply {
		t.Helper()
		m, err := e.srv.NC.Request("narratoria.planner.plan", []byte(body), 10*time.Second)
		require.NoError(t, err)
		require.Empty(t, m.Header.Get("Nats-Service-Error-Code"), m.Header.Get("Nats-Service-Error"))
		var r messages.PlanReply
		require.NoError(t, json.Unmarshal(m.Data, &r))
		return r
	}
	require.Eventually(t, func() bool { return len(rules.cat.Catalogue("eval", nil).Skills) >= 3 }, testlog.Budget(10*time.Second), 20*time.Millisecond)
	r := ask(`{"text":"I roll the dice"}`)
	require.Equal(t, "rules", r.Planner)
	require.True(t, r.Valid, r.Error)
	require.Equal(t, []string{"teller"}, r.NarrationSkills)
	require.Contains(t, planSkills(r.Plan), "dice")
	require.Greater(t, r.Ms, 0.0)
	require.Empty(t, e.published.of("eval"), "the plan is not published")

	m, err := e.srv.NC.Request("narratoria.planner.plan", []byte(`{"text":"  "}`), 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "400", m.Header.Get("Nats-Service-Error-Code"))
	rules.Stop()

	e.startMetered(t, Config{Planner: "llm", LLM: planner.LLMConfig{BaseURL: srv.URL, Model: "m"}})
	require.Eventually(t, func() bool { return ask(`{"text":"I roll the dice"}`).Valid }, testlog.Budget(10*time.Second), 50*time.Millisecond)
	r = ask(`{"text":"I roll the dice"}`)
	require.Equal(t, "llm", r.Planner)
	require.Equal(t, "You roll.", r.Plan.Narrative)
	mu.Lock()
	status = http.StatusInternalServerError
	mu.Unlock()
	r = ask(`{"text":"I roll the dice"}`)
	require.False(t, r.Valid)
	require.Equal(t, llm.KindServer, r.ErrorKind)
	require.Nil(t, r.Plan, "the model's failure is the answer")
}
