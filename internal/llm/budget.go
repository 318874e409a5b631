package llm

import (
	"sync"
	"time"

	"github.com/narratoria/runtime/pkg/messages"
)

// Budget keeps the tokens each tenant spent in the last hour and refuses a
// call once they reach its limit. It is this process's: N narrators let a
// tenant spend up to N times its budget, spread over the sessions each
// owns (as the prompt rate, narrator.tenantPromptRate). A nil *Budget
// refuses nothing.
type Budget struct {
	// limit is a tenant's tokens per hour (0 or less: no limit).
	limit func(tenant messages.Tenant) int64
	now   func() time.Time

	mu      sync.Mutex
	tenants map[messages.Tenant]*spending
}

// spending is one tenant's tokens by minute of the last hour.
type spending struct {
	minute [60]int64 // unix minute of each slot
	tokens [60]int64
	// refused counts refusals not yet logged; reported is when the last were.
	refused  int
	reported time.Time
}

// NewBudget returns a budget with limit as each tenant's tokens per hour,
// looked up at each call (so a limit changed while running applies at once).
func NewBudget(limit func(tenant messages.Tenant) int64) *Budget {
	return &Budget{limit: limit, now: time.Now, tenants: map[messages.Tenant]*spending{}}
}

// used is what s spent in the hour before now.
func (s *spending) used(now int64) int64 {
	var n int64
	for i, m := range s.minute {
		if now-m < 60 {
			n += s.tokens[i]
		}
	}
	return n
}

func (b *Budget) of(tenant messages.Tenant) *spending {
	s := b.tenants[tenant]
	if s == nil {
		s = &spending{}
		b.tenants[tenant] = s
	}
	return s
}

// Allow returns nil when tenant may call the model now, else a
// *BudgetError, with how many refusals to log now (at most one report a
// second per tenant, so a flood is one line, not one per prompt).
func (b *Budget) Allow(tenant messages.Tenant) (report int, err error) {
	if b == nil {
		return 0, nil
	}
	limit := b.limit(tenant)
	if limit <= 0 {
		return 0, nil
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.of(tenant)
	used := s.used(now.Unix() / 60)
	if used < limit {
		return 0, nil
	}
	s.refused++
	if now.Sub(s.reported) >= time.Second {
		report, s.refused, s.reported = s.refused, 0, now
	}
	return report, &BudgetError{Tenant: tenant, Limit: limit, Used: used}
}

// Spend adds tokens to what tenant spent this minute.
func (b *Budget) Spend(tenant messages.Tenant, tokens int64) {
	if b == nil || tokens <= 0 {
		return
	}
	m := b.now().Unix() / 60
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.of(tenant)
	i := m % 60
	if s.minute[i] != m {
		s.minute[i], s.tokens[i] = m, 0
	}
	s.tokens[i] += tokens
}

// Used is what tenant spent in the last hour.
func (b *Budget) Used(tenant messages.Tenant) int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.of(tenant).used(b.now().Unix() / 60)
}
