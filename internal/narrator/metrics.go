package narrator

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	prompts        *prometheus.CounterVec
	attempts       prometheus.Histogram
	fallbacks      prometheus.Counter
	plannerLatency *prometheus.HistogramVec
	llmErrors      *prometheus.CounterVec
	latency        prometheus.Histogram
	resumed        prometheus.Counter
	contexts       *prometheus.CounterVec
	partitions     prometheus.Gauge
	forwarded      prometheus.Counter
	modelFits      prometheus.Histogram
	refused        prometheus.Counter
	overQuota      *prometheus.CounterVec
	unreadLanguage *prometheus.CounterVec
	glossed        *prometheus.CounterVec
	intake         *prometheus.CounterVec
	intakeRefused  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		overQuota: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_narrator_tenant_prompts_refused_total",
			Help: "Prompts refused because their tenant was over its prompt rate (narrator.tenantPromptRate), by tenant.",
		}, []string{"tenant"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "narratoria_narrator_store_refusals_total",
			Help: "Prompts answered with the template narration because the store refused, for good, a write they needed (a stream or bucket full, a message over its limit); the logs carry the server's words.",
		}),
		prompts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_narrator_prompts_total",
			Help: "Prompts handled, by outcome (narrated, fallback, duplicate, invalid, error).",
		}, []string{"outcome"}),
		attempts: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "narratoria_narrator_attempts_per_prompt",
			Help:    "Plan attempts used per prompt.",
			Buckets: []float64{1, 2, 3, 4, 5},
		}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "narratoria_narrator_fallbacks_total",
			Help: "Prompts answered with a template narration after every attempt failed.",
		}),
		plannerLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "narratoria_narrator_planner_seconds",
			Help:    "Plan generation time, by planner.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 3, 12),
		}, []string{"planner"}),
		llmErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_narrator_llm_errors_total",
			Help: "LLM planner failures that fell back to the rule-based planner, by kind (http, rate_limited, server_error, timeout, cut, json, budget, invalid_plan).",
		}, []string{"kind"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "narratoria_narrator_prompt_seconds",
			Help:    "Prompt to narration, end to end.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}),
		resumed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "narratoria_narrator_resumed_attempts_total",
			Help: "Attempts taken over from the durable attempt record (a redelivered prompt, a retried request, another narrator's attempt) instead of being planned again.",
		}),
		contexts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_narrator_context_requests_total",
			Help: "Requests for more context (§9.1) answered, by outcome (added, nothing, error, invalid).",
		}, []string{"outcome"}),
		partitions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "narratoria_narrator_partitions_owned",
			Help: "Partitions this narrator owns now (it narrates the prompts of their sessions).",
		}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "narratoria_narrator_forwarded_requests_total",
			Help: "Narrate requests for sessions another narrator owns, handed to it through the prompt stream.",
		}),
		unreadLanguage: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_narrator_prompts_unread_language_total",
			Help: "Prompts in a language the rule planner does not read (it reads English, and French, Spanish, German, Portuguese and Japanese through a gloss), planned storyteller-only, by language (an ISO 639-1 code or other).",
		}, []string{"language"}),
		glossed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_narrator_prompts_glossed_total",
			Help: "Prompts the rule planner read through a gloss into English, by language (fr, es, de, pt, ja).",
		}, []string{"language"}),
		intake: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_narrator_intake_total",
			Help: "Prompts game servers published on <prefix>.prompts.<session>, taken by this narrator, by outcome (stored; invalid, share, store: refused at intake, see narratoria_narrator_intake_refused_total).",
		}, []string{"outcome"}),
		intakeRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_narrator_intake_refused_total",
			Help: "Prompts refused at intake, by reason (invalid: a subject naming no session, such as a literal wildcard, or a body that is no prompt; share: the tenant's prompts waiting reached nats.promptsPerTenant; store: the stream refused it, e.g. nats.promptsPerSession) and tenant (empty without tenants).",
		}, []string{"reason", "tenant"}),
		modelFits: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "narratoria_narrator_model_fit_seconds",
			Help:    "Fits of the rule planner's model of the live skills, done when the registry changes (before any prompt needs it).",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 10),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.prompts, m.attempts, m.fallbacks, m.plannerLatency, m.llmErrors, m.latency, m.resumed, m.contexts,
			m.partitions, m.forwarded, m.modelFits, m.refused, m.overQuota, m.unreadLanguage, m.glossed, m.intake, m.intakeRefused)
	}
	return m
}
