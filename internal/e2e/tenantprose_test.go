package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/llm/llmtest"
	"github.com/narratoria/runtime/internal/narrator"
	"github.com/narratoria/runtime/internal/planner"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/client"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestTenantProseAndBudget: in the shipped multi-tenant deployment with a
// model writing the prose, each tenant's game server gets its own prose as
// it streams (the account imports carry narratoria.prose like the
// narrations) and never another's; a tenant's token budget, set with
// `narratoria tenant add --max-tokens-per-hour`, refuses its next model
// call — the template prose answers, the refusal counted under its name —
// while the other tenant, without a budget, keeps the model.
func TestTenantProseAndBudget(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	fake := llmtest.Start(t, func(c llmtest.Call) llmtest.Reply {
		said, _, _ := strings.Cut(strings.TrimPrefix(c.User, "The player: "), "\n")
		return llmtest.Reply{Chunks: []string{"You say ", "'" + said + "'."}, Every: 20 * time.Millisecond, Usage: &llmtest.Usage{Prompt: 60, Completion: 5}}
	})
	mt := startMultiTenant(t, narrator.Config{Prose: "llm", LLM: planner.LLMConfig{BaseURL: fake.URL, Model: "m"}}, nil, "acme", "globex")
	runCLI(t, "tenant", "add", "acme", "--auth-dir", mt.auth.Dir(), "--nats-url", mt.url, "--max-tokens-per-hour", "50")
	_, acme := mt.tenant(t, mt.creds["acme"])
	globexNC, globex := mt.tenant(t, mt.creds["globex"])
	globexSaw := collect(t, globexNC, ">")
	ctx, cancel := context.WithTimeout(t.Context(), testlog.Budget(60*time.Second))
	defer cancel()

	narrate := func(c *client.Client, text string) (*messages.Narration, string) {
		t.Helper()
		var streamed strings.Builder
		n, err := c.Narrate(ctx, messages.Prompt{SessionID: "s1", Text: text}, client.WithProse(func(ch messages.ProseChunk) { streamed.WriteString(ch.Text) }))
		require.NoError(t, err)
		return n, streamed.String()
	}
	n, streamed := narrate(acme, "hello from acme")
	require.Equal(t, "You say 'hello from acme'.", n.Text)
	require.Equal(t, n.Text, streamed, "acme's game server got its prose as it streamed")
	n, streamed = narrate(globex, "hello from globex")
	require.Equal(t, "You say 'hello from globex'.", n.Text)
	require.Equal(t, n.Text, streamed)

	n, streamed = narrate(acme, "hello again from acme")
	require.Contains(t, n.Text, "An echo answers.", "over its budget, acme gets the template prose")
	require.Empty(t, streamed)
	require.Equal(t, 1.0, refusals(t, mt, "acme"))
	n, _ = narrate(globex, "hello again from globex")
	require.Equal(t, "You say 'hello again from globex'.", n.Text, "globex has no budget")
	for _, m := range globexSaw() {
		require.NotContains(t, m, "from acme", "globex saw nothing of acme's prose")
	}
}

// refusals is the budget refusals counted for tenant on the deployment's registry.
func refusals(t *testing.T, mt *multiTenant, tenant string) float64 {
	t.Helper()
	mfs, err := mt.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "narratoria_llm_budget_refusals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == tenant {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
