package llm

import (
	"time"

	"github.com/narratoria/runtime/pkg/messages"
	"github.com/prometheus/client_golang/prometheus"
)

// Components: the component label of the metrics.
const (
	// ComponentPlanner is the LLM planner's calls.
	ComponentPlanner = "planner"
	// ComponentProse is the prose's calls.
	ComponentProse = "prose"
)

// Meter counts model calls on a Prometheus registerer. A nil *Meter
// counts nothing.
type Meter struct {
	tokens     *prometheus.CounterVec
	seconds    *prometheus.HistogramVec
	firstToken *prometheus.HistogramVec
	failures   *prometheus.CounterVec
	repairs    *prometheus.CounterVec
	refusals   *prometheus.CounterVec
}

// NewMeter makes the collectors and registers them on reg (nil: none).
func NewMeter(reg prometheus.Registerer) *Meter {
	m := &Meter{
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_llm_tokens_total",
			Help: "Model tokens spent, from the server's usage (estimated at 4 characters a token when it reports none), by component (planner, prose), kind (prompt, completion) and tenant (empty without tenants).",
		}, []string{"component", "kind", "tenant"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "narratoria_llm_call_seconds",
			Help:    "Model calls from request to the answer's end (failed ones included), by component.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}, []string{"component"}),
		firstToken: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "narratoria_llm_first_token_seconds",
			Help:    "Streamed model calls from request to the first words, by component.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}, []string{"component"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_llm_failures_total",
			Help: "Model calls that failed, by component and kind (http, rate_limited, server_error, timeout, cut, json, budget, invalid_plan); each fell back to the rule planner or the template prose.",
		}, []string{"component", "kind"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_llm_repairs_total",
			Help: "Answers to a structured request repaired before use, by component and kind (fence, prose, truncated, keys).",
		}, []string{"component", "kind"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_llm_budget_refusals_total",
			Help: "Model calls refused because their tenant's hourly token budget was spent, by tenant (empty without tenants).",
		}, []string{"tenant"}),
	}
	if reg != nil {
		reg.MustRegister(m.tokens, m.seconds, m.firstToken, m.failures, m.repairs, m.refusals)
	}
	return m
}

// spent counts a call's tokens.
func (m *Meter) spent(component string, tenant messages.Tenant, u Usage) {
	if m == nil {
		return
	}
	m.tokens.WithLabelValues(component, "prompt", string(tenant)).Add(float64(u.Prompt))
	m.tokens.WithLabelValues(component, "completion", string(tenant)).Add(float64(u.Completion))
}

// took observes a call's latency (and its first token's, when it streamed one).
func (m *Meter) took(component string, d, first time.Duration) {
	if m == nil {
		return
	}
	m.seconds.WithLabelValues(component).Observe(d.Seconds())
	if first > 0 {
		m.firstToken.WithLabelValues(component).Observe(first.Seconds())
	}
}

// Failed counts a failed call of component by kind: the client counts its
// own; callers count the answers they could not use (json, invalid_plan).
func (m *Meter) Failed(component, kind string) {
	if m == nil {
		return
	}
	m.failures.WithLabelValues(component, kind).Inc()
}

// Repaired counts an answer repaired before use, by kind.
func (m *Meter) Repaired(component, kind string) {
	if m == nil {
		return
	}
	m.repairs.WithLabelValues(component, kind).Inc()
}

// refused counts a call refused for tenant's budget.
func (m *Meter) refused(tenant messages.Tenant) {
	if m == nil {
		return
	}
	m.refusals.WithLabelValues(string(tenant)).Inc()
}
