// Package scheduler is the scheduler (docs/spec.md §4): it takes plans from
// NARRATORIA_PLANS, validates them, and runs each in-flight plan as one
// actor that alone owns the plan's state. The actor dispatches ready tools
// as jobs to the skill workers, retries with backoff, enforces timeouts,
// merges state patches into the session state, feeds skill health and
// publishes progress and the Execution Result. Every transition is
// persisted in KV. Every scheduler is active on its share of the session
// partitions (partitions.go): each partition has one owner at a time, held
// by a lease and fenced on the server, and a partition that moves takes its
// plans with it — the new owner finishes them from KV.
package scheduler

import (
	"github.com/narratoria/runtime/internal/planfsm"

	"cmp"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/google/uuid"

	"github.com/narratoria/runtime/pkg/messages"
)

// Defaults of Config.
const (
	// LeaseTTLDefault is how long a scheduler's partition leases last
	// without renewal; another scheduler takes them over after they lapse.
	// On replicated streams the default is partition.ReplicatedTTL.
	LeaseTTLDefault = 3 * time.Second
	// LostGraceDefault is added to a tool attempt's timeout (twice) before
	// the scheduler gives the attempt up as lost (no outcome ever came).
	LostGraceDefault = 30 * time.Second
	// WorkerTTLDefault is how recent a worker's heartbeat must be for its
	// skills to count as served.
	WorkerTTLDefault = 10 * time.Second
	// ContextTimeoutDefault bounds the wait for a context answer (§9.1).
	ContextTimeoutDefault = 5 * time.Second
	// MaxContextIterationsDefault bounds context re-planning per plan.
	MaxContextIterationsDefault = 2
	// MaxPlansDefault bounds the plans in flight; intake pauses beyond it.
	MaxPlansDefault = 100_000
	// ResultMaxEventsBytesDefault bounds the events kept per result before
	// they are left out (they stay on the events stream).
	ResultMaxEventsBytesDefault = 4 << 20
	// MaxStateBytesDefault bounds a session's state: a commit that would
	// make it larger fails its plan (storage_refused).
	MaxStateBytesDefault = 1 << 20
	// HealthCooldownDefault is how long a skill stays in permanentFailure
	// before a probe may try it again.
	HealthCooldownDefault = 5 * time.Minute
)

// Config configures a scheduler.
type Config struct {
	// ID identifies this scheduler among those sharing the partitions.
	// Default host-pid-random.
	ID string `yaml:"id"`
	// Concurrency is how many async tools of one parallel plan run at once.
	// Default: number of CPU cores.
	Concurrency int `yaml:"concurrency"`
	// PlanTimeout overrides the timeout of plans that do not set timeoutMs.
	// Default 60s.
	PlanTimeout time.Duration `yaml:"planTimeout"`
	// ApprovalTimeout bounds the wait for an approval decision (§9.3). Default 5m.
	ApprovalTimeout time.Duration `yaml:"approvalTimeout"`
	// LeaseTTL is the lease of each partition it owns. Default 3s, or
	// partition.ReplicatedTTL (24s) on replicated streams.
	LeaseTTL time.Duration `yaml:"leaseTTL"`
	// LostGrace is the slack before an attempt with no outcome is lost. Default 30s.
	LostGrace time.Duration `yaml:"lostGrace"`
	// WorkerTTL is how recent a worker heartbeat must be. Default 10s.
	WorkerTTL time.Duration `yaml:"workerTTL"`
	// MaxPlans bounds plans in flight. Default 100000.
	MaxPlans int `yaml:"maxPlans"`
	// MaxPlanTools bounds tools per plan. Default 10000.
	MaxPlanTools int `yaml:"maxPlanTools"`
	// MaxPlanBytes bounds a plan document. Default 8 MiB.
	MaxPlanBytes int `yaml:"maxPlanBytes"`
	// ContextTimeout bounds the wait for a planner's answer to a context
	// request (§9.1). Default 5s.
	ContextTimeout time.Duration `yaml:"contextTimeout"`
	// MaxContextIterations bounds context re-planning per plan (§9.1).
	// Default 2.
	MaxContextIterations int `yaml:"maxContextIterations"`
	// SkipRegistryCheck accepts tools of skills no live worker serves
	// instead of failing the plan with unknown_skill. Default false.
	SkipRegistryCheck bool `yaml:"skipRegistryCheck"`
	// FairDispatch admits a skill's jobs to the work queue by fair share
	// when its workers are saturated (§12, fair.go): priority first, then
	// the tenant (weighted) and the session with the least service.
	// false publishes every job as soon as its tool is ready, first in,
	// first out (a benchmark's baseline). Default true.
	FairDispatch *bool `yaml:"fairDispatch"`
	// MaxStateBytes bounds one session's state, as stored; a plan whose
	// patches would make it larger ends with failureReason
	// storage_refused and its patches are not committed. Default 1 MiB.
	MaxStateBytes int `yaml:"maxStateBytes"`
	// HealthCooldown is how long a skill stays in permanentFailure in a
	// session before it is probed (half-open, as a circuit breaker): from
	// then on planners may choose it again; a success makes it healthy, a
	// failure starts another cool-down. Negative: never (it waits for a
	// session reset). Default 5m.
	HealthCooldown time.Duration `yaml:"healthCooldown"`
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	if c.ID == "" {
		host, _ := os.Hostname()
		if len(host) > 40 {
			host = host[:40]
		}
		c.ID = fmt.Sprintf("%s-%d-%s", cmp.Or(host, "scheduler"), os.Getpid(), uuid.NewString()[:8])
	}
	c.Concurrency = cmp.Or(c.Concurrency, runtime.NumCPU())
	c.PlanTimeout = cmp.Or(c.PlanTimeout, messages.PlanTimeoutDefault)
	c.ApprovalTimeout = cmp.Or(c.ApprovalTimeout, messages.ApprovalTimeoutDefault)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, LeaseTTLDefault)
	c.LostGrace = cmp.Or(c.LostGrace, LostGraceDefault)
	c.WorkerTTL = cmp.Or(c.WorkerTTL, WorkerTTLDefault)
	c.MaxPlans = cmp.Or(c.MaxPlans, MaxPlansDefault)
	c.MaxPlanTools = cmp.Or(c.MaxPlanTools, messages.MaxPlanToolsDefault)
	c.MaxPlanBytes = cmp.Or(c.MaxPlanBytes, messages.MaxPlanBytesDefault)
	c.ContextTimeout = cmp.Or(c.ContextTimeout, ContextTimeoutDefault)
	c.MaxContextIterations = cmp.Or(c.MaxContextIterations, MaxContextIterationsDefault)
	c.MaxStateBytes = cmp.Or(c.MaxStateBytes, MaxStateBytesDefault)
	c.HealthCooldown = cmp.Or(c.HealthCooldown, HealthCooldownDefault)
	return c
}

// Validate names the first bad key.
func (c Config) Validate() error {
	switch {
	case c.Concurrency < 1 || c.Concurrency > 10_000:
		return fmt.Errorf("scheduler.concurrency: must be 1..10000, got %d", c.Concurrency)
	case c.LeaseTTL < 500*time.Millisecond:
		return fmt.Errorf("scheduler.leaseTTL: must be at least 500ms, got %s", c.LeaseTTL)
	case c.PlanTimeout < time.Millisecond:
		return fmt.Errorf("scheduler.planTimeout: must be positive, got %s", c.PlanTimeout)
	case c.ApprovalTimeout < time.Millisecond:
		return fmt.Errorf("scheduler.approvalTimeout: must be positive, got %s", c.ApprovalTimeout)
	case c.MaxPlans < 1:
		return fmt.Errorf("scheduler.maxPlans: must be positive, got %d", c.MaxPlans)
	case c.MaxPlanTools < 1:
		return fmt.Errorf("scheduler.maxPlanTools: must be positive, got %d", c.MaxPlanTools)
	case c.MaxPlanBytes < 1024:
		return fmt.Errorf("scheduler.maxPlanBytes: must be at least 1024, got %d", c.MaxPlanBytes)
	case c.ContextTimeout < time.Millisecond:
		return fmt.Errorf("scheduler.contextTimeout: must be positive, got %s", c.ContextTimeout)
	case c.MaxContextIterations < 1 || c.MaxContextIterations > 10:
		return fmt.Errorf("scheduler.maxContextIterations: must be 1..10, got %d", c.MaxContextIterations)
	case c.MaxStateBytes < 1024:
		return fmt.Errorf("scheduler.maxStateBytes: must be at least 1024, got %d", c.MaxStateBytes)
	case c.LostGrace < 0:
		return fmt.Errorf("scheduler.lostGrace: must not be negative, got %s", c.LostGrace)
	}
	return nil
}

// machine is the part of the configuration the plan state machine follows.
func (c Config) machine() planfsm.Config {
	return planfsm.Config{Concurrency: c.Concurrency, ApprovalTimeout: c.ApprovalTimeout, LostGrace: c.LostGrace,
		ContextTimeout: c.ContextTimeout, MaxContextIterations: c.MaxContextIterations}
}

func (c Config) limits() messages.PlanLimits {
	return messages.PlanLimits{MaxTools: c.MaxPlanTools, MaxBytes: c.MaxPlanBytes}
}
