// Package narrator is the narrator (docs/spec.md §8): it takes prompts from
// NARRATORIA_PROMPTS and on the narratoria.narrate request/reply endpoint,
// asks a planner for a Plan JSON, publishes it, waits for the Execution
// Result, replans with the failed skills disabled (at most 5 attempts),
// falls back to a template narration, and publishes the Narration.
// Prompts of one session are narrated one at a time, in order; sessions
// run concurrently. Every narrator instance is active: each owns a share
// of the session partitions and narrates their prompts (partitions.go).
package narrator

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/narratoria/runtime/internal/llm"
	"github.com/narratoria/runtime/internal/planner"
)

// Defaults of Config.
const (
	// MaxAttemptsDefault is the replan loop's bound (§8.2).
	MaxAttemptsDefault = 5
	// SessionsDefault bounds sessions narrated at once.
	SessionsDefault = 64
	// ResultMarginDefault is added to a plan's timeout before its result is given up.
	ResultMarginDefault = 5 * time.Second
	// WorkerTTLDefault is how recent a worker heartbeat must be for its skill to be offered.
	WorkerTTLDefault = 10 * time.Second
	// AckWaitDefault is the prompt consumer's ack wait; queued and running
	// prompts are kept alive with InProgress.
	AckWaitDefault = 30 * time.Second
	// LLMTemperatureDefault is the sampling temperature of the LLM planner.
	LLMTemperatureDefault = llm.TemperatureDefault
	// ShutdownGraceDefault is how long prompts being narrated may finish on stop.
	ShutdownGraceDefault = 5 * time.Second
	// LeaseTTLDefault is how long a narrator's partition leases last
	// without renewal; another narrator takes a dead one's partitions over
	// after it lapses. On replicated streams the default is
	// partition.ReplicatedTTL.
	LeaseTTLDefault = 3 * time.Second
)

// Config configures a narrator.
type Config struct {
	// ID identifies this narrator among those sharing the partitions.
	// Default host-pid-random.
	ID string `yaml:"id"`
	// LeaseTTL is how long its partition leases last without renewal.
	// Default 3s, or partition.ReplicatedTTL (24s) on replicated streams.
	LeaseTTL time.Duration `yaml:"leaseTTL"`
	// Planner is "rules" (default) or "llm".
	Planner string `yaml:"planner"`
	// Prose is "template" (default: the storyteller's template prose) or
	// "llm": a model rewrites a successful plan's narration, streamed to
	// the game on <prefix>.prose.<session> as it is written, the template
	// prose its fallback (docs/spec.md §13).
	Prose string `yaml:"prose"`
	// LLM configures the model server of the LLM planner and of the prose.
	LLM planner.LLMConfig `yaml:"llm"`
	// MaxAttempts bounds the replan loop. Default 5.
	MaxAttempts int `yaml:"maxAttempts"`
	// Sessions bounds how many sessions are narrated at once. Default 64.
	Sessions int `yaml:"sessions"`
	// ResultMargin is the slack after a plan's timeout. Default 5s.
	ResultMargin time.Duration `yaml:"resultMargin"`
	// WorkerTTL is how recent a worker heartbeat must be. Default 10s.
	WorkerTTL time.Duration `yaml:"workerTTL"`
	// AckWait of the prompt consumer. Default 30s.
	AckWait time.Duration `yaml:"ackWait"`
	// PlanTimeoutMs is set on generated plans (0: the scheduler's default).
	PlanTimeoutMs int64 `yaml:"planTimeoutMs"`
	// TenantPromptRate is each tenant's prompt rate limit in prompts per
	// second, per narrator, in a multi-tenant deployment (nats.tenants).
	// A prompt over it is answered with a refusal (a narration whose
	// "refused" says why; 429 on narrate) and counted in
	// narratoria_narrator_tenant_prompts_refused_total. Default 0: no limit.
	TenantPromptRate float64 `yaml:"tenantPromptRate"`
	// TenantPromptBurst is how many prompts a tenant may send at once
	// above the rate. Default 1.
	TenantPromptBurst int `yaml:"tenantPromptBurst"`
	// ShutdownGrace lets the prompts being narrated finish on stop; the
	// ones still running after it are left unacknowledged and resumed from
	// their durable attempt record by the next narrator. Default 5s.
	ShutdownGrace time.Duration `yaml:"shutdownGrace"`
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	if c.ID == "" {
		host, _ := os.Hostname()
		if len(host) > 40 {
			host = host[:40]
		}
		c.ID = fmt.Sprintf("%s-%d-%s", cmp.Or(host, "narrator"), os.Getpid(), uuid.NewString()[:8])
	}
	c.LeaseTTL = cmp.Or(c.LeaseTTL, LeaseTTLDefault)
	c.Planner = cmp.Or(c.Planner, "rules")
	c.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
	c.Sessions = cmp.Or(c.Sessions, SessionsDefault)
	c.ResultMargin = cmp.Or(c.ResultMargin, ResultMarginDefault)
	c.WorkerTTL = cmp.Or(c.WorkerTTL, WorkerTTLDefault)
	c.AckWait = cmp.Or(c.AckWait, AckWaitDefault)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, ShutdownGraceDefault)
	c.Prose = cmp.Or(c.Prose, "template")
	c.LLM = c.LLM.WithDefaults()
	return c
}

// Validate names the first bad key.
func (c Config) Validate() error {
	switch {
	case strings.ContainsAny(c.ID, ".*> \t"):
		return fmt.Errorf("narrator.id: %q must be one subject token", c.ID)
	case c.LeaseTTL < 500*time.Millisecond:
		return fmt.Errorf("narrator.leaseTTL: must be at least 500ms, got %s", c.LeaseTTL)
	case c.Planner != "rules" && c.Planner != "llm":
		return fmt.Errorf("narrator.planner: %q must be rules or llm", c.Planner)
	case c.Planner == "llm" && c.LLM.BaseURL == "":
		return fmt.Errorf("narrator.llm.baseURL: required with planner: llm")
	case c.Planner == "llm" && c.LLM.Model == "":
		return fmt.Errorf("narrator.llm.model: required with planner: llm")
	case c.Prose != "template" && c.Prose != "llm":
		return fmt.Errorf("narrator.prose: %q must be template or llm", c.Prose)
	case c.Prose == "llm" && (c.LLM.BaseURL == "" || c.LLM.Model == ""):
		return fmt.Errorf("narrator.llm.baseURL, narrator.llm.model: both required with prose: llm")
	case !slices.Contains([]string{"response_format", "format", "both", "none"}, c.LLM.StructuredOutput):
		return fmt.Errorf("narrator.llm.structuredOutput: %q must be response_format, format, both or none", c.LLM.StructuredOutput)
	case c.MaxAttempts < 1 || c.MaxAttempts > 20:
		return fmt.Errorf("narrator.maxAttempts: must be 1..20, got %d", c.MaxAttempts)
	case c.Sessions < 1:
		return fmt.Errorf("narrator.sessions: must be positive, got %d", c.Sessions)
	case c.AckWait < time.Second:
		return fmt.Errorf("narrator.ackWait: must be at least 1s, got %s", c.AckWait)
	case c.LLM.Temperature < 0 || c.LLM.Temperature > 2:
		return fmt.Errorf("narrator.llm.temperature: must be 0..2, got %v", c.LLM.Temperature)
	case c.LLM.ProseTemperature < 0 || c.LLM.ProseTemperature > 2:
		return fmt.Errorf("narrator.llm.proseTemperature: must be 0..2, got %v", c.LLM.ProseTemperature)
	case c.LLM.MaxTokensPerHour < 0:
		return fmt.Errorf("narrator.llm.maxTokensPerHour: must not be negative, got %d", c.LLM.MaxTokensPerHour)
	case c.LLM.ProseTimeout < 100*time.Millisecond || c.LLM.FirstTokenTimeout < 100*time.Millisecond:
		return fmt.Errorf("narrator.llm.proseTimeout, firstTokenTimeout: must be at least 100ms, got %s and %s", c.LLM.ProseTimeout, c.LLM.FirstTokenTimeout)
	case c.LLM.ProseMaxTokens < 1:
		return fmt.Errorf("narrator.llm.proseMaxTokens: must be positive, got %d", c.LLM.ProseMaxTokens)
	case c.PlanTimeoutMs < 0:
		return fmt.Errorf("narrator.planTimeoutMs: must not be negative, got %d", c.PlanTimeoutMs)
	case c.ShutdownGrace < 0:
		return fmt.Errorf("narrator.shutdownGrace: must not be negative, got %s", c.ShutdownGrace)
	}
	return nil
}
