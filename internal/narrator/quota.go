package narrator

import (
	"fmt"
	"sync"
	"time"

	"github.com/narratoria/runtime/pkg/messages"
)

// tenantQuota is the prompt rate limit of each tenant (docs/decisions/,
// "Tenants"): a token bucket per tenant, refilled at rate prompts per
// second up to burst. It is this narrator's: with several narrators a
// tenant may send up to that many times the rate, spread over the
// partitions they own.
type tenantQuota struct {
	rate  float64
	burst float64

	mu      sync.Mutex
	buckets map[messages.Tenant]*tokenBucket
}

type tokenBucket struct {
	tokens float64
	at     time.Time
	// refused counts refusals not yet logged; reported is when the last
	// were (a flood is logged once a second, not once a prompt).
	refused  int
	reported time.Time
}

// newTenantQuota returns nil (no limit) when rate is not positive.
func newTenantQuota(rate float64, burst int) *tenantQuota {
	if rate <= 0 {
		return nil
	}
	return &tenantQuota{rate: rate, burst: max(float64(burst), 1), buckets: map[messages.Tenant]*tokenBucket{}}
}

// take spends one prompt of tenant's quota at now, or returns an error
// saying what the quota is with how many refusals to log now (0: none,
// the next report counts this one).
func (q *tenantQuota) take(tenant messages.Tenant, now time.Time) (int, error) {
	if q == nil || tenant == "" {
		return 0, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.buckets[tenant]
	if b == nil {
		b = &tokenBucket{tokens: q.burst, at: now}
		q.buckets[tenant] = b
	}
	b.tokens = min(q.burst, b.tokens+now.Sub(b.at).Seconds()*q.rate)
	b.at = now
	if b.tokens < 1 {
		b.refused++
		report := 0
		if now.Sub(b.reported) >= time.Second {
			report, b.refused, b.reported = b.refused, 0, now
		}
		return report, fmt.Errorf("tenant %q is over its prompt rate (%g per second, bursts of %g); send the prompt again later", tenant, q.rate, q.burst)
	}
	b.tokens--
	return 0, nil
}
