package narrator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTenantQuota: a burst, then the rate; tenants do not share a bucket;
// a flood of refusals is reported once a second, with its count.
func TestTenantQuota(t *testing.T) {
	require.Nil(t, newTenantQuota(0, 5), "no rate, no limit")
	q := newTenantQuota(2, 3)
	now := time.Unix(1000, 0)
	for range 3 {
		_, err := q.take("acme", now)
		require.NoError(t, err, "the burst")
	}
	report, err := q.take("acme", now)
	require.ErrorContains(t, err, `tenant "acme" is over its prompt rate (2 per second, bursts of 3)`)
	require.Equal(t, 1, report, "the first refusal is logged")
	for range 5 {
		report, err = q.take("acme", now.Add(100*time.Millisecond))
		require.Error(t, err)
		require.Zero(t, report, "refusals within the second are counted, not logged")
	}
	_, err = q.take("globex", now)
	require.NoError(t, err, "another tenant has its own bucket")
	_, err = q.take("acme", now.Add(time.Second))
	require.NoError(t, err, "the rate refills: 2 a second")
	_, err = q.take("acme", now.Add(1100*time.Millisecond))
	require.NoError(t, err)
	report, err = q.take("acme", now.Add(1100*time.Millisecond))
	require.Error(t, err)
	require.Equal(t, 6, report, "the next line reports every refusal since the last")
	_, err = q.take("", now)
	require.NoError(t, err, "prompts of a single-tenant deployment are never limited")
}
