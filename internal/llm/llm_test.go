package llm_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/llm"
	"github.com/narratoria/runtime/internal/llm/llmtest"
	"github.com/narratoria/runtime/pkg/messages"
)

// client is a client of srv with a meter of its own, and the meter.
func client(t *testing.T, srv *llmtest.Server, cfg llm.Config, budget *llm.Budget) (*llm.Client, *llm.Meter) {
	t.Helper()
	cfg.BaseURL, cfg.Model = srv.URL, "m"
	m := llm.NewMeter(prometheus.NewRegistry())
	return llm.New(cfg, llm.Options{Meter: m, Budget: budget}), m
}

// pieces collects what a stream hands over, with when each came.
type pieces struct {
	mu   sync.Mutex
	text []string
	at   []time.Time
}

func (p *pieces) add(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.text, p.at = append(p.text, s), append(p.at, time.Now())
}

func (p *pieces) joined() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.text, "")
}

func tokens(m *llm.Meter, component, kind, tenant string) float64 {
	return testutil.ToFloat64(llm.TokensCounter(m).WithLabelValues(component, kind, tenant))
}

func failures(m *llm.Meter, component, kind string) float64 {
	return testutil.ToFloat64(llm.FailuresCounter(m).WithLabelValues(component, kind))
}

// TestStreamRecordedServers: the event streams llama.cpp's llama-server,
// Ollama's /v1 and OpenAI send (testdata/*.sse: each server's documented
// chunk format, usage in the finish chunk or a chunk of its own, comment
// lines, null contents) are read piece by piece, as they come, and the
// usage the server reported is counted.
func TestStreamRecordedServers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		file             string
		prompt, complete int64
	}{{"llamacpp.sse", 212, 6}, {"ollama.sse", 207, 7}, {"openai.sse", 198, 8}} {
		raw, err := os.ReadFile("testdata/" + c.file)
		require.NoError(t, err)
		srv := llmtest.Start(t, func(llmtest.Call) llmtest.Reply { return llmtest.Reply{Raw: string(raw), Every: 20 * time.Millisecond} })
		cl, m := client(t, srv, llm.Config{}, nil)
		var got pieces
		a, err := cl.Stream(context.Background(), llm.Request{Component: llm.ComponentProse, Tenant: "acme", System: "s", User: "u"}, got.add)
		require.NoError(t, err, c.file)
		require.Equal(t, "The lock gives with a click.", a.Content, c.file)
		require.Equal(t, a.Content, got.joined())
		require.GreaterOrEqual(t, len(got.text), 2, "%s: pieces handed over as they came", c.file)
		require.Equal(t, "stop", a.Finish)
		require.Equal(t, llm.Usage{Prompt: c.prompt, Completion: c.complete}, a.Usage, c.file)
		require.Equal(t, float64(c.complete), tokens(m, "prose", "completion", "acme"), c.file)
		require.Equal(t, float64(c.prompt), tokens(m, "prose", "prompt", "acme"), c.file)
		calls := srv.Calls()
		require.Len(t, calls, 1)
		require.True(t, calls[0].Stream)
		require.Equal(t, map[string]any{"include_usage": true}, calls[0].Body["stream_options"], "the usage chunk is asked for")
	}
}

// TestStreamConformance: each behaviour of a model server the prose meets
// — a normal stream with its usage chunk, one without usage, a slow first
// token (in time, and past the first-token timeout), a stream cut
// mid-way (cleanly, or the connection dropped), an error event, 429 and
// 500, a server that ignores "stream" — ends as it should and is counted.
func TestStreamConformance(t *testing.T) {
	t.Parallel()
	words := []string{"The ", "door ", "creaks ", "open."}
	for _, c := range []struct {
		name      string
		reply     llmtest.Reply
		firstWait time.Duration
		kind      string // "" for success
		content   string
		usage     llm.Usage
	}{
		{"normal", llmtest.Reply{Chunks: words, Every: 10 * time.Millisecond, Usage: &llmtest.Usage{Prompt: 40, Completion: 4}}, 0, "",
			"The door creaks open.", llm.Usage{Prompt: 40, Completion: 4}},
		{"no usage chunk", llmtest.Reply{Chunks: words}, 0, "", "The door creaks open.", llm.Usage{Prompt: 1, Completion: 6, Estimated: true}},
		{"slow first token", llmtest.Reply{Chunks: words, FirstDelay: 300 * time.Millisecond, Usage: &llmtest.Usage{Prompt: 40, Completion: 4}}, 2 * time.Second, "",
			"The door creaks open.", llm.Usage{Prompt: 40, Completion: 4}},
		{"first token too slow", llmtest.Reply{Chunks: words, FirstDelay: 2 * time.Second}, 200 * time.Millisecond, llm.KindTimeout, "", llm.Usage{}},
		{"cut mid-way", llmtest.Reply{Chunks: words[:2], Cut: true}, 0, llm.KindCut, "The door ", llm.Usage{Prompt: 1, Completion: 3, Estimated: true}},
		{"connection dropped", llmtest.Reply{Chunks: words[:2], Reset: true}, 0, llm.KindCut, "The door ", llm.Usage{Prompt: 1, Completion: 3, Estimated: true}},
		{"error event", llmtest.Reply{Raw: "data: {\"choices\":[{\"delta\":{\"content\":\"The \"}}]}\n\ndata: {\"error\":{\"message\":\"out of memory\"}}\n\n"}, 0,
			llm.KindServer, "The ", llm.Usage{Prompt: 1, Completion: 1, Estimated: true}},
		{"429", llmtest.Reply{Status: http.StatusTooManyRequests, Body: "slow down"}, 0, llm.KindRateLimited, "", llm.Usage{}},
		{"500", llmtest.Reply{Status: http.StatusInternalServerError, Body: "model exploded"}, 0, llm.KindServer, "", llm.Usage{}},
		{"not streamed", llmtest.Reply{Raw: llmtest.Completion("The door creaks open.", &llmtest.Usage{Prompt: 40, Completion: 5}) + "\n"}, 0, "",
			"The door creaks open.", llm.Usage{Prompt: 40, Completion: 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.Start(t, func(llmtest.Call) llmtest.Reply { return c.reply })
			cl, m := client(t, srv, llm.Config{FirstTokenTimeout: c.firstWait}, nil)
			var got pieces
			t0 := time.Now()
			a, err := cl.Stream(context.Background(), llm.Request{Component: llm.ComponentProse, System: "sy", User: "us"}, got.add)
			if c.kind == "" {
				require.NoError(t, err)
				require.Equal(t, c.content, a.Content)
				require.Equal(t, c.usage, a.Usage)
				require.Equal(t, 0.0, failures(m, "prose", llm.KindTimeout)+failures(m, "prose", llm.KindCut))
				if c.reply.FirstDelay > 0 {
					require.GreaterOrEqual(t, a.FirstToken, c.reply.FirstDelay)
				}
			} else {
				require.Error(t, err)
				require.Equal(t, c.kind, llm.KindOf(err), "%v", err)
				require.Equal(t, 1.0, failures(m, "prose", c.kind))
				if c.content == "" {
					require.Nil(t, a)
				} else {
					require.Equal(t, c.content, a.Content, "the answer so far comes with the error")
					require.Equal(t, c.usage, a.Usage)
				}
				if c.kind == llm.KindTimeout {
					require.Less(t, time.Since(t0), time.Second, "the first-token timeout ends the wait")
				}
			}
			require.Equal(t, float64(c.usage.Completion), tokens(m, "prose", "completion", ""))
			require.Equal(t, c.content, got.joined())
		})
	}
}

// TestCompleteConformance: a whole completion's usage is counted; 429,
// 500, a body that is no completion and a server too slow for the
// deadline fail by kind.
func TestCompleteConformance(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		reply llmtest.Reply
		kind  string
	}{
		{"ok", llmtest.Reply{Content: "{}", Usage: &llmtest.Usage{Prompt: 300, Completion: 42}}, ""},
		{"429", llmtest.Reply{Status: http.StatusTooManyRequests}, llm.KindRateLimited},
		{"500", llmtest.Reply{Status: http.StatusInternalServerError}, llm.KindServer},
		{"404", llmtest.Reply{Status: http.StatusNotFound}, llm.KindHTTP},
		{"not a completion", llmtest.Reply{Body: `{"choices":[]}`}, llm.KindJSON},
		{"slow", llmtest.Reply{Chunks: []string{"{}"}, FirstDelay: 3 * time.Second, Raw: "data: {}\n\n"}, llm.KindTimeout},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.Start(t, func(llmtest.Call) llmtest.Reply {
				if c.name == "slow" {
					time.Sleep(500 * time.Millisecond)
				}
				return c.reply
			})
			cl, m := client(t, srv, llm.Config{}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			a, err := cl.Complete(ctx, llm.Request{Component: llm.ComponentPlanner, Tenant: "t", System: "s", User: "u"})
			if c.kind == "" {
				require.NoError(t, err)
				require.Equal(t, "{}", a.Content)
				require.Equal(t, 42.0, tokens(m, "planner", "completion", "t"))
				require.Equal(t, 300.0, tokens(m, "planner", "prompt", "t"))
				return
			}
			require.Equal(t, c.kind, llm.KindOf(err), "%v", err)
			require.Equal(t, 1.0, failures(m, "planner", c.kind))
			require.Equal(t, 0.0, tokens(m, "planner", "completion", "t"))
		})
	}
}

// TestBudgetRefuses: once a tenant spent its tokens of the hour, its next
// call is refused before it is sent (ErrBudget, counted), other tenants'
// are not, and the spending ages out after an hour.
func TestBudgetRefuses(t *testing.T) {
	t.Parallel()
	srv := llmtest.Start(t, func(llmtest.Call) llmtest.Reply {
		return llmtest.Reply{Content: "ok", Usage: &llmtest.Usage{Prompt: 80, Completion: 40}}
	})
	limits := map[messages.Tenant]int64{"acme": 100, "globex": 0}
	b := llm.NewBudget(func(tenant messages.Tenant) int64 { return limits[tenant] })
	now := time.Now()
	llm.SetBudgetClock(b, func() time.Time { return now })
	cl, m := client(t, srv, llm.Config{}, b)
	req := llm.Request{Component: llm.ComponentProse, Tenant: "acme", System: "s", User: "u"}
	_, err := cl.Complete(context.Background(), req)
	require.NoError(t, err, "under the budget")
	require.Equal(t, int64(120), b.Used("acme"))
	_, err = cl.Complete(context.Background(), req)
	require.ErrorIs(t, err, llm.ErrBudget)
	require.Equal(t, llm.KindBudget, llm.KindOf(err))
	var be *llm.BudgetError
	require.ErrorAs(t, err, &be)
	require.Equal(t, llm.BudgetError{Tenant: "acme", Limit: 100, Used: 120}, *be)
	require.Len(t, srv.Calls(), 1, "a refused call is not sent")
	require.Equal(t, 1.0, failures(m, "prose", llm.KindBudget))
	require.Equal(t, 1.0, testutil.ToFloat64(llm.RefusalsCounter(m).WithLabelValues("acme")))
	_, err = cl.Complete(context.Background(), llm.Request{Component: llm.ComponentProse, Tenant: "globex", System: "s", User: "u"})
	require.NoError(t, err, "another tenant, without a limit")
	now = now.Add(61 * time.Minute)
	_, err = cl.Complete(context.Background(), req)
	require.NoError(t, err, "an hour later the tokens spent have aged out")
	require.False(t, errors.Is(err, llm.ErrBudget))
}
