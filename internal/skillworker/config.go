// Package skillworker is the skill worker (docs/spec.md §5, §6): it discovers the
// skills on disk, registers them in KV narratoria_skills with a heartbeat,
// pulls tool jobs for the skills it serves from the NARRATORIA_JOBS work
// queue (one durable consumer per skill, shared by every worker serving that
// skill), runs each script as a process through a runner, streams its events
// live on narratoria.events.<session>.<plan>.<tool> and publishes the
// outcome before acknowledging the job, so a worker dying at any instruction
// means redelivery, never loss.
package skillworker

import (
	"cmp"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/narratoria/runtime/internal/runner"
	"github.com/narratoria/runtime/pkg/messages"
)

// Defaults of Config.
const (
	// SkillsDirDefault is where skills are looked for.
	SkillsDirDefault = "./skills"
	// HeartbeatDefault is how often the worker refreshes its registry entries.
	HeartbeatDefault = 2 * time.Second
	// WorkerTTLDefault is how long a worker stays "live" in the registry
	// without a heartbeat.
	WorkerTTLDefault = 10 * time.Second
	// AckWaitDefault is how long JetStream waits for a job's ack before
	// redelivering it; running jobs send InProgress every AckWait/3, so this
	// is also how quickly the job of a dead worker goes to another one.
	AckWaitDefault = 15 * time.Second
	// MaxDeliverDefault bounds how often one job is delivered (a job that
	// kills every worker it reaches is dropped after that; the scheduler's
	// own timers then fail the tool).
	MaxDeliverDefault = 5
	// MaxAckPendingDefault bounds the un-acked jobs of one skill across all
	// its workers. Each worker bounds itself by its concurrency.
	MaxAckPendingDefault = 10_000
	// ShutdownGraceDefault is how long in-flight scripts may finish on stop.
	ShutdownGraceDefault = 5 * time.Second
	// WatchIntervalDefault is how often the skills folder is checked for changes.
	WatchIntervalDefault = time.Second
	// PullWaitDefault is how long one pull request waits for jobs.
	PullWaitDefault = 5 * time.Second
	// SkillRemovalGraceDefault is how long a skill whose files are gone
	// stays in the registry, without workers, before it leaves it with its
	// consumer (unless a worker serves it again).
	SkillRemovalGraceDefault = 5 * time.Minute
)

// Config configures a worker.
type Config struct {
	// ID identifies the worker in the registry. Default host-pid-random.
	ID string `yaml:"id"`
	// SkillsDir is the skills folder. Default "./skills".
	SkillsDir string `yaml:"skillsDir"`
	// Skills restricts the worker to these skills. Default: every skill in SkillsDir.
	Skills []string `yaml:"skills"`
	// Concurrency is how many scripts run at once. Default: number of CPU cores.
	Concurrency int `yaml:"concurrency"`
	// Heartbeat is the registry refresh period. Default 2s.
	Heartbeat time.Duration `yaml:"heartbeat"`
	// WorkerTTL is how long a worker counts as live after its last heartbeat. Default 10s.
	WorkerTTL time.Duration `yaml:"workerTTL"`
	// AckWait is the JetStream ack wait of the job consumers. Default 15s.
	AckWait time.Duration `yaml:"ackWait"`
	// MaxDeliver bounds deliveries of one job. Default 5.
	MaxDeliver int `yaml:"maxDeliver"`
	// ScriptUser is who scripts run as. "" (the default): a worker that
	// runs as root gives each attempt a user of its own, an ID no account
	// has (from ScriptUIDBase; runner.UserPool), and a worker that does not
	// runs them as its own user. "self": as the worker's own user even as
	// root, an explicit choice logged as an error at every start. A user
	// name or numeric ID: that one user for every script, with its primary
	// group only (the worker must be able to switch to it). A script then
	// cannot read the worker's files, environment or memory. Default "".
	ScriptUser string `yaml:"scriptUser"`
	// ScriptUIDBase is the first of the user IDs a root worker gives its
	// attempts; their group is its ID too. Default 59000.
	ScriptUIDBase int `yaml:"scriptUIDBase"`
	// Landlock confines each script's file access with the kernel's
	// Landlock (Linux 5.13+, no privileges needed): its skill folder, the
	// skills' shared .bin folder and the system's programs and libraries
	// to read, its data/ folder and a temporary folder of its own to
	// write; another skill's files, the worker's, the store, credentials
	// and home folders are refused, and so is ptrace of (and /proc access
	// to the environment of) any process outside the script's own. Where
	// the kernel has no Landlock, scripts run unconfined and every start
	// says so. false turns it off (logged as an error). Default true.
	Landlock *bool `yaml:"landlock"`
	// AttemptLimits are the kernel limits (setrlimit) of every attempt
	// whose manifest sets none: memoryMB (1024), cpuSeconds (the larger of
	// 60 and twice the timeout), processes (64), fileSizeMB (256),
	// openFiles (1024). A limit hit fails the attempt with a named error
	// (limit_memory, limit_cpu, limit_processes, limit_file_size,
	// limit_open_files).
	AttemptLimits messages.ResourceLimits `yaml:"attemptLimits"`
	// AttemptLimitsMax is the operator's maximum of every attempt limit: a
	// manifest (or AttemptLimits) asking for more gets this, with a
	// warning. Default memoryMB 8192, cpuSeconds 3600, processes 1024,
	// fileSizeMB 4096, openFiles 65536.
	AttemptLimitsMax messages.ResourceLimits `yaml:"attemptLimitsMax"`
	// ShutdownGrace lets in-flight scripts finish on stop. Default 5s.
	ShutdownGrace time.Duration `yaml:"shutdownGrace"`
	// WatchInterval is the skills folder poll period; negative disables watching. Default 1s.
	WatchInterval time.Duration `yaml:"watchInterval"`
	// SkillRemovalGrace is how long a skill whose files are gone stays in
	// the registry (listed without workers) before the worker that served
	// it removes its entry and its durable consumer, unless a worker serves
	// it again by then; negative keeps it listed. Default 5m.
	SkillRemovalGrace time.Duration `yaml:"skillRemovalGrace"`
	// Limits bound what one script may produce (§5). Defaults: see runner.Limits.
	Limits runner.Limits `yaml:"limits"`
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	if c.ID == "" {
		host, _ := os.Hostname()
		host = sanitize(cmp.Or(host, "worker"))
		if len(host) > 40 {
			host = host[:40]
		}
		c.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8])
	}
	c.SkillsDir = cmp.Or(c.SkillsDir, SkillsDirDefault)
	c.Concurrency = cmp.Or(c.Concurrency, runtime.NumCPU())
	c.Heartbeat = cmp.Or(c.Heartbeat, HeartbeatDefault)
	c.WorkerTTL = cmp.Or(c.WorkerTTL, WorkerTTLDefault)
	c.AckWait = cmp.Or(c.AckWait, AckWaitDefault)
	c.MaxDeliver = cmp.Or(c.MaxDeliver, MaxDeliverDefault)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, ShutdownGraceDefault)
	c.WatchInterval = cmp.Or(c.WatchInterval, WatchIntervalDefault)
	c.SkillRemovalGrace = cmp.Or(c.SkillRemovalGrace, SkillRemovalGraceDefault)
	c.Limits = c.Limits.WithDefaults()
	c.ScriptUIDBase = cmp.Or(c.ScriptUIDBase, runner.ScriptUIDBaseDefault)
	if c.Landlock == nil {
		on := true
		c.Landlock = &on
	}
	c.AttemptLimitsMax = c.AttemptLimitsMax.Over(runner.AttemptLimitsMaxDefault)
	return c
}

// ScriptUserSelf is the ScriptUser that runs scripts as the worker's own
// user, root included.
const ScriptUserSelf = "self"

// Validate names the first bad key.
func (c Config) Validate() error {
	switch {
	case !messages.ValidToken(c.ID):
		return fmt.Errorf("worker.id: %q must match ^[A-Za-z0-9_-]{1,64}$", c.ID)
	case c.Concurrency < 1 || c.Concurrency > 4096:
		return fmt.Errorf("worker.concurrency: must be 1..4096, got %d", c.Concurrency)
	case c.Heartbeat < 100*time.Millisecond:
		return fmt.Errorf("worker.heartbeat: must be at least 100ms, got %s", c.Heartbeat)
	case c.WorkerTTL < 2*c.Heartbeat:
		return fmt.Errorf("worker.workerTTL: must be at least twice worker.heartbeat (%s), got %s", 2*c.Heartbeat, c.WorkerTTL)
	case c.AckWait < time.Second:
		return fmt.Errorf("worker.ackWait: must be at least 1s, got %s", c.AckWait)
	case c.MaxDeliver < 1:
		return fmt.Errorf("worker.maxDeliver: must be at least 1, got %d", c.MaxDeliver)
	case c.ShutdownGrace < 0:
		return fmt.Errorf("worker.shutdownGrace: must not be negative, got %s", c.ShutdownGrace)
	case c.ScriptUIDBase < 1000 || c.ScriptUIDBase > 1<<31-1-4096:
		return fmt.Errorf("worker.scriptUIDBase: must be 1000..%d, got %d", 1<<31-1-4096, c.ScriptUIDBase)
	}
	for _, l := range []struct {
		key string
		v   messages.ResourceLimits
	}{{"worker.attemptLimits", c.AttemptLimits}, {"worker.attemptLimitsMax", c.AttemptLimitsMax}} {
		if l.v.MemoryMB < 0 || l.v.CPUSeconds < 0 || l.v.Processes < 0 || l.v.FileSizeMB < 0 || l.v.OpenFiles < 0 {
			return fmt.Errorf("%s: limits must not be negative, got %+v", l.key, l.v)
		}
	}
	for _, s := range c.Skills {
		if s == "" || strings.ContainsAny(s, "./ *>") {
			return fmt.Errorf("worker.skills: %q is not a skill name", s)
		}
	}
	return nil
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '-'
		}
	}
	return string(b)
}
