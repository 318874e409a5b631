package scheduler

import "github.com/prometheus/client_golang/prometheus"

// metrics are the scheduler's Prometheus collectors.
type metrics struct {
	plans        *prometheus.CounterVec
	planDuration prometheus.Histogram
	dispatch     prometheus.Histogram
	retries      *prometheus.CounterVec
	inFlight     prometheus.Gauge
	tools        *prometheus.CounterVec
	health       *prometheus.CounterVec
	badMessages  *prometheus.CounterVec
	partitions   prometheus.Gauge
	purged       prometheus.Counter
	resurrected  prometheus.Counter
	reused       prometheus.Counter
	refused      *prometheus.CounterVec
	forged       prometheus.Counter
	unverified   *prometheus.CounterVec
	refusals     *prometheus.CounterVec
	intake       *prometheus.CounterVec
	// Fair dispatch (fair.go), by tenant and skill.
	jobWait      *prometheus.HistogramVec
	jobsWaiting  *prometheus.GaugeVec
	jobsInFlight *prometheus.GaugeVec
	decisions    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		plans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_scheduler_plans_total",
			Help: "Plans finished, by outcome (succeeded, failed, timeout, invalid, unrecoverable).",
		}, []string{"outcome"}),
		planDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "narratoria_scheduler_plan_duration_seconds",
			Help:    "Time from a plan's acceptance to its result.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}),
		dispatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "narratoria_scheduler_dispatch_to_start_seconds",
			Help:    "Time from a job's dispatch to its script's start on a worker.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14),
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_scheduler_retries_total",
			Help: "Tool attempts retried, by skill.",
		}, []string{"skill"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "narratoria_scheduler_plans_in_flight",
			Help: "Plans being executed now.",
		}),
		tools: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_scheduler_tools_total",
			Help: "Tools finished, by end state (success, failed, skipped, timeout).",
		}, []string{"state"}),
		health: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_scheduler_health_transitions_total",
			Help: "Skill health transitions, by from and to state.",
		}, []string{"from", "to"}),
		badMessages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_scheduler_bad_messages_total",
			Help: "Messages rejected as malformed, by kind (plan, outcome, approval, reset).",
		}, []string{"kind"}),
		partitions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "narratoria_scheduler_partitions_owned",
			Help: "Partitions this scheduler owns now (it runs the plans of their sessions).",
		}),
		reused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "narratoria_scheduler_outcomes_reused_total",
			Help: "Tools answered with an earlier attempt's outcome of the same prompt instead of running again.",
		}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "narratoria_scheduler_plans_purged_total",
			Help: "Finished plans whose state was removed from KV narratoria_plans.",
		}),
		resurrected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "narratoria_scheduler_plans_resurrected_total",
			Help: "Finished plans whose purged state the store brought back (a purge forgotten by a killed nats-server); purged again, never run again.",
		}),
		forged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "narratoria_scheduler_outcomes_refused_total",
			Help: "Outcomes refused because their token is not their attempt's: not from the worker that took the job (forged or replayed).",
		}),
		unverified: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_scheduler_unverified_total",
			Help: "Progress reports and read-back events refused because they lack their attempt's token: not from the worker that took the job, by kind (progress, event).",
		}, []string{"kind"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_scheduler_machine_refusals_total",
			Help: "Events the plan machine refused, by kind: request (a decision or cancel that cannot be done; its sender is told) or own_move (a move its rules forbid: a defect).",
		}, []string{"kind"}),
		intake: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_scheduler_intake_total",
			Help: "Plan messages settled by intake (planfsm.DecideIntake), by move (start, ack, nak, nak_later, wait_for_worker, term, leave) and why (started, duplicate, finished, recovered, invalid, unaddressable, refused, not_owner, read_failed, answer_failed, recover_failed, write_failed, wait_for_worker).",
		}, []string{"move", "why"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_scheduler_decisions_total",
			Help: "Approval decisions published on <prefix>.approvals.<plan>.<tool> and checked by this scheduler, by outcome (stored; refused: invalid, unknown_plan — not in flight, or another tenant's —, not_waiting — no tool of the plan waits for approval under that ID —, busy, store).",
		}, []string{"outcome"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_scheduler_store_refusals_total",
			Help: "Writes the store refused for good (write: state, result, plan_state: a plan's own record or tool log in a full plans bucket, plan: a new plan refused because the plans bucket is full past its reserve, or record: a new plan whose record is more than one message of the store may hold), each ending its plan with storage_refused, by tenant (empty in a single-tenant deployment; a tenant's full session bucket counts here); the logs carry the server's words.",
		}, []string{"write", "tenant"}),
		jobWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "narratoria_scheduler_job_wait_seconds",
			Help:    "Time from a job's dispatch (its tool ready) to its script's start on a worker, by tenant (empty in a single-tenant deployment) and skill: the wait fair dispatch shares out when the skill's workers are saturated.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 16),
		}, []string{"tenant", "skill"}),
		jobsWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "narratoria_scheduler_job_queue_depth",
			Help: "Jobs ready and held back by fair dispatch because their skill's workers are saturated, by tenant and skill (this scheduler's).",
		}, []string{"tenant", "skill"}),
		jobsInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "narratoria_scheduler_jobs_admitted",
			Help: "Jobs admitted to the work queue and not ended yet (queued there or running), by tenant and skill (this scheduler's).",
		}, []string{"tenant", "skill"}),
	}
	if reg != nil {
		reg.MustRegister(m.plans, m.planDuration, m.dispatch, m.retries, m.inFlight, m.tools, m.health, m.badMessages, m.partitions, m.purged, m.reused, m.resurrected,
			m.refused, m.forged, m.unverified, m.refusals, m.intake, m.jobWait, m.jobsWaiting, m.jobsInFlight, m.decisions)
	}
	return m
}
