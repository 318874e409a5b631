package llm

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TokensCounter, FailuresCounter and RefusalsCounter are the meter's
// collectors, for tests.
func TokensCounter(m *Meter) *prometheus.CounterVec   { return m.tokens }
func FailuresCounter(m *Meter) *prometheus.CounterVec { return m.failures }
func RefusalsCounter(m *Meter) *prometheus.CounterVec { return m.refusals }

// RepairsCounter is the meter's repairs, for tests.
func RepairsCounter(m *Meter) *prometheus.CounterVec { return m.repairs }

// SetBudgetClock sets b's clock.
func SetBudgetClock(b *Budget, now func() time.Time) { b.now = now }
