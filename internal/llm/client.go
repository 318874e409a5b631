package llm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/narratoria/runtime/pkg/messages"
)

// maxResponse bounds the body read from the model server.
const maxResponse = 4 << 20

// Options are a Client's collaborators; every field is optional.
type Options struct {
	// HTTP sends the requests. Default http.DefaultClient.
	HTTP *http.Client
	// Meter counts the calls. Default: none.
	Meter *Meter
	// Budget refuses calls over a tenant's tokens per hour. Default: none.
	Budget *Budget
	// Logger receives the budget refusals. Default: discard.
	Logger *slog.Logger
}

// Client calls one OpenAI-compatible chat-completions server. It is safe
// for concurrent use.
type Client struct {
	cfg    Config
	http   *http.Client
	meter  *Meter
	budget *Budget
	log    *slog.Logger
}

// New returns a client of the server cfg names.
func New(cfg Config, opts Options) *Client {
	c := &Client{cfg: cfg.WithDefaults(), http: opts.HTTP, meter: opts.Meter, budget: opts.Budget, log: opts.Logger}
	if c.http == nil {
		c.http = http.DefaultClient
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c
}

// Config is the client's configuration, with its defaults.
func (c *Client) Config() Config { return c.cfg }

// Meter is the client's meter (nil when it has none).
func (c *Client) Meter() *Meter { return c.meter }

// Request is one chat completion: a system and a user message.
type Request struct {
	// Component ("planner", "prose") and Tenant label the call's metrics;
	// Tenant's budget applies.
	Component string
	Tenant    messages.Tenant
	// System and User are the two messages.
	System, User string
	// Temperature of sampling; 0: the configuration's (planner's).
	Temperature float64
	// MaxTokens bounds the answer (max_tokens); 0: the server's default.
	MaxTokens int
	// ResponseFormat (OpenAI, llama-server, vLLM) and Format (Ollama)
	// carry a JSON Schema for constrained decoding.
	ResponseFormat, Format json.RawMessage
}

// Usage is what a call spent, in tokens.
type Usage struct {
	// Prompt and Completion come from the server's usage.
	Prompt, Completion int64
	// Estimated says the server reported none: both are the text's length
	// over 4.
	Estimated bool
}

// Answer is a model's answer.
type Answer struct {
	// Content is the answer's text, as the model wrote it.
	Content string
	// Usage is what it spent.
	Usage Usage
	// Took is the call's duration; FirstToken the wait for the first words
	// of a streamed answer.
	Took, FirstToken time.Duration
	// Finish is the server's finish_reason (stop, length…), when it gave one.
	Finish string
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatRequest is the body sent to /chat/completions.
type chatRequest struct {
	Model          string          `json:"model"`
	Messages       []chatMessage   `json:"messages"`
	Temperature    float64         `json:"temperature"`
	MaxTokens      int             `json:"max_tokens,omitempty"`
	ResponseFormat json.RawMessage `json:"response_format,omitempty"`
	// Format is Ollama's structured output: the JSON Schema itself.
	Format        json.RawMessage `json:"format,omitempty"`
	Stream        bool            `json:"stream,omitempty"`
	StreamOptions *streamOptions  `json:"stream_options,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// usage is the server's usage object.
type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

type chatResponse struct {
	Choices []struct {
		Message      chatMessage `json:"message"`
		FinishReason string      `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

// Complete sends req and returns the whole answer.
func (c *Client) Complete(ctx context.Context, req Request) (*Answer, error) {
	t0 := time.Now()
	a, err := c.complete(ctx, req)
	return c.account(req, a, err, t0)
}

func (c *Client) complete(ctx context.Context, req Request) (*Answer, error) {
	resp, err := c.post(ctx, req, false)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, transportError(ctx, err)
	}
	return decodeCompletion(raw)
}

// decodeCompletion reads a whole (not streamed) chat completion.
func decodeCompletion(raw []byte) (*Answer, error) {
	var cr chatResponse
	if err := json.Unmarshal(raw, &cr); err != nil || len(cr.Choices) == 0 {
		return nil, &Error{Kind: KindJSON, Err: fmt.Errorf("not a chat completion: %s", clip(string(raw), 200))}
	}
	a := &Answer{Content: cr.Choices[0].Message.Content, Finish: cr.Choices[0].FinishReason}
	if cr.Usage != nil {
		a.Usage = Usage{Prompt: cr.Usage.PromptTokens, Completion: cr.Usage.CompletionTokens}
	}
	return a, nil
}

// post checks the budget, sends the request and returns the response of a
// 200; any other status is an *Error of its kind.
func (c *Client) post(ctx context.Context, req Request, stream bool) (*http.Response, error) {
	if report, err := c.budget.Allow(req.Tenant); err != nil {
		c.meter.refused(req.Tenant)
		if report > 0 {
			c.log.Warn("llm: model calls refused: the token budget is spent; the rule planner or the template prose answers",
				slog.String("tenant", string(req.Tenant)), slog.String("component", req.Component), slog.Int("refused", report), slog.Any("error", err))
		}
		return nil, &Error{Kind: KindBudget, Err: err}
	}
	body, err := json.Marshal(c.body(req, stream))
	if err != nil {
		return nil, &Error{Kind: KindJSON, Err: fmt.Errorf("encode request: %w", err)}
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.cfg.BaseURL, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, &Error{Kind: KindHTTP, Err: err}
	}
	hreq.Header.Set("Content-Type", "application/json")
	if stream {
		hreq.Header.Set("Accept", "text/event-stream")
	}
	if key := os.Getenv(c.cfg.APIKeyEnv); key != "" {
		hreq.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		return nil, transportError(ctx, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	kind := KindHTTP
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		kind = KindRateLimited
	case resp.StatusCode >= 500:
		kind = KindServer
	}
	return nil, &Error{Kind: kind, Status: resp.StatusCode, Err: fmt.Errorf("status %d: %s", resp.StatusCode, clip(strings.TrimSpace(string(raw)), 200))}
}

// body is the JSON body of req.
func (c *Client) body(req Request, stream bool) chatRequest {
	b := chatRequest{Model: c.cfg.Model, Temperature: cmp.Or(req.Temperature, c.cfg.Temperature), MaxTokens: req.MaxTokens,
		ResponseFormat: req.ResponseFormat, Format: req.Format,
		Messages: []chatMessage{{Role: "system", Content: req.System}, {Role: "user", Content: req.User}}}
	if stream {
		b.Stream, b.StreamOptions = true, &streamOptions{IncludeUsage: true}
	}
	return b
}

// transportError classifies an error sending the request or reading the
// answer: the context's end is a timeout.
func transportError(ctx context.Context, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return &Error{Kind: KindTimeout, Err: err}
	}
	return &Error{Kind: KindHTTP, Err: err}
}

// account counts a finished call — its latency, its tokens (estimated
// when the server reported none and an answer, even a partial one, came),
// its failure — and spends its tokens from the tenant's budget.
func (c *Client) account(req Request, a *Answer, err error, t0 time.Time) (*Answer, error) {
	if a != nil {
		a.Took = time.Since(t0)
		if a.Usage == (Usage{}) && a.Content != "" {
			a.Usage = Usage{Prompt: estimate(len(req.System) + len(req.User)), Completion: estimate(len(a.Content)), Estimated: true}
		}
		c.meter.spent(req.Component, req.Tenant, a.Usage)
		c.budget.Spend(req.Tenant, a.Usage.Prompt+a.Usage.Completion)
		c.meter.took(req.Component, a.Took, a.FirstToken)
	} else if KindOf(err) != KindBudget {
		c.meter.took(req.Component, time.Since(t0), 0)
	}
	if err != nil {
		c.meter.Failed(req.Component, cmp.Or(KindOf(err), KindHTTP))
		return a, err
	}
	return a, nil
}

// estimate is the tokens of n characters of text when the server says
// nothing: 4 characters a token, rounded up.
func estimate(n int) int64 { return int64(n+3) / 4 }

// clip cuts s to n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
