package skillworker

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the worker's Prometheus collectors. Labels are skill names
// (bounded by the skills folder) and fixed outcome/kind sets.
type metrics struct {
	jobs           *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	inFlight       prometheus.Gauge
	protocolErrors *prometheus.CounterVec
	secondRuns     *prometheus.CounterVec
	startLatency   prometheus.Histogram
	badJobs        prometheus.Counter
	redelivered    *prometheus.CounterVec
	assets         *prometheus.CounterVec
	direct         *prometheus.CounterVec

	mu       sync.Mutex
	count    int64
	errCount int64
	total    time.Duration
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_skillworker_jobs_total",
			Help: "Tool jobs run, by skill and outcome (success, failed, timeout, cancelled, rejected; repeated: a job of an attempt this worker already took, not run again).",
		}, []string{"skill", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "narratoria_skillworker_job_duration_seconds",
			Help:    "Time from a job's start to its outcome, by skill.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 14),
		}, []string{"skill"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "narratoria_skillworker_jobs_in_flight",
			Help: "Scripts running now.",
		}),
		protocolErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_skillworker_protocol_errors_total",
			Help: "Scripts stopped for breaking the protocol or a limit, by kind.",
		}, []string{"kind"}),
		secondRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_skillworker_second_runs_total",
			Help: "Attempts this worker ran although another worker may have run them already, by skill and cause (delivered_again: the job came back while its scheduler still waited, the worker that took it before being silent).",
		}, []string{"skill", "cause"}),
		startLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "narratoria_skillworker_process_start_seconds",
			Help:    "Time to start a script's process.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12),
		}),
		badJobs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "narratoria_skillworker_bad_jobs_total",
			Help: "Job messages that could not be decoded (terminated, not redelivered).",
		}),
		redelivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_skillworker_redelivered_jobs_total",
			Help: "Jobs received more than once (e.g. after a worker died), by skill.",
		}, []string{"skill"}),
		assets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_skillworker_assets_total",
			Help: "Asset files put in the asset object store, by outcome (stored; present: already there, checked; tampered: other content under its name, left for an operator; too_large; changed: not the file listed; failed: the store refused or did not answer).",
		}, []string{"outcome"}),
		direct: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "narratoria_skillworker_direct_outcomes_total",
			Help: "Outcomes sent to their scheduler as requests, by result (taken: stored by the scheduler, not put on the outcomes stream; declined or unanswered: put on the stream).",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.jobs, m.duration, m.inFlight, m.protocolErrors, m.secondRuns, m.startLatency, m.badJobs, m.redelivered, m.assets, m.direct)
	}
	return m
}

func (m *metrics) observe(skill, outcome string, d time.Duration) {
	m.jobs.WithLabelValues(skill, outcome).Inc()
	m.duration.WithLabelValues(skill).Observe(d.Seconds())
	m.mu.Lock()
	m.count++
	if outcome != "success" {
		m.errCount++
	}
	m.total += d
	m.mu.Unlock()
}

// Stats is what `nats micro stats narratoria-skillworker` shows for a worker.
type Stats struct {
	// Jobs run since start.
	Jobs int64 `json:"jobs"`
	// Errors are jobs that did not succeed.
	Errors int64 `json:"errors"`
	// AverageMs is the mean job duration.
	AverageMs float64 `json:"averageMs"`
	// InFlight are scripts running now.
	InFlight int `json:"inFlight"`
	// Skills served.
	Skills []string `json:"skills"`
}

func (m *metrics) stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Stats{Jobs: m.count, Errors: m.errCount}
	if m.count > 0 {
		s.AverageMs = float64(m.total.Microseconds()) / float64(m.count) / 1000
	}
	return s
}

// queueDepth reports, at each scrape, the jobs waiting in each served
// skill's work queue (its consumer's pending count): what KEDA or an
// operator scales workers on. The queue is the skill's, shared by every
// worker serving it, so each of them reports the same figure: aggregate
// it with max by skill, never sum (the Grafana dashboard does).
type queueDepth struct {
	w    *Worker
	desc *prometheus.Desc
}

func newQueueDepth(w *Worker) *queueDepth {
	return &queueDepth{w: w, desc: prometheus.NewDesc("narratoria_skillworker_queue_depth",
		"Jobs waiting in each skill's work queue (not yet delivered to a worker), read from its consumer at scrape time: the skill's figure, the same on every worker serving it (aggregate with max by skill, not sum).",
		[]string{"skill"}, nil)}
}

// Describe implements prometheus.Collector.
func (q *queueDepth) Describe(ch chan<- *prometheus.Desc) { ch <- q.desc }

// Collect implements prometheus.Collector.
func (q *queueDepth) Collect(ch chan<- prometheus.Metric) {
	q.w.mu.Lock()
	cons := make(map[string]jetstream.Consumer, len(q.w.served))
	for name, s := range q.w.served {
		cons[name] = s.cons
	}
	q.w.mu.Unlock()
	for name, c := range cons {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		info, err := c.Info(ctx)
		cancel()
		if err != nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(q.desc, prometheus.GaugeValue, float64(info.NumPending), name)
	}
}
