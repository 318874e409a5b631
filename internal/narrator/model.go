package narrator

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/llm"
	"github.com/narratoria/runtime/pkg/messages"
)

// model is the narrator's model server: one client for the LLM planner and
// the prose, its calls counted on the narrator's registerer and refused
// past each tenant's hourly token budget.
type model struct {
	client *llm.Client
	meter  *llm.Meter
	budget *llm.Budget
}

// newModel builds the narrator's model client (whether or not a model is
// configured: the metrics are there either way).
func newModel(cfg llm.Config, js jetstream.JetStream, reg prometheus.Registerer, log *slog.Logger) *model {
	limits := &tenantBudgets{js: js, def: cfg.MaxTokensPerHour, log: log, cache: map[messages.Tenant]tenantBudget{}}
	m := &model{meter: llm.NewMeter(reg), budget: llm.NewBudget(limits.limit)}
	m.client = llm.New(cfg, llm.Options{Meter: m.meter, Budget: m.budget, Logger: log})
	return m
}

// budgetTTL is how long a tenant's budget, read from its state stream, is
// used before it is read again.
const budgetTTL = 30 * time.Second

// tenantBudgets are the tenants' token budgets per hour: each tenant's own,
// kept in its state stream's metadata (`narratoria tenant add
// --max-tokens-per-hour`), else def (narrator.llm.maxTokensPerHour),
// which is also the budget of a deployment without tenants.
type tenantBudgets struct {
	js  jetstream.JetStream
	def int64
	log *slog.Logger

	mu    sync.Mutex
	cache map[messages.Tenant]tenantBudget
}

type tenantBudget struct {
	limit int64
	at    time.Time
}

// limit is tenant's tokens per hour (0: no limit). A budget that cannot be
// read keeps the last one read (def the first time), so a NATS hiccup
// neither blocks nor lifts a budget.
func (b *tenantBudgets) limit(tenant messages.Tenant) int64 {
	if tenant == "" {
		return b.def
	}
	b.mu.Lock()
	c, ok := b.cache[tenant]
	b.mu.Unlock()
	if ok && time.Since(c.at) < budgetTTL {
		return c.limit
	}
	if !ok {
		c.limit = b.def
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l, _, err := bus.TenantLimitsOf(ctx, b.js, tenant)
	switch {
	case err != nil:
		b.log.Warn("narrator: the tenant's token budget could not be read; keeping the last one", slog.String("tenant", tenant.String()),
			slog.Int64("budget", c.limit), slog.Any("error", err))
	case l.MaxTokensPerHour > 0:
		c.limit = l.MaxTokensPerHour
	default:
		c.limit = b.def
	}
	c.at = time.Now()
	b.mu.Lock()
	b.cache[tenant] = c
	b.mu.Unlock()
	return c.limit
}
