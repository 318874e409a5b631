package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/runner"
	"github.com/narratoria/runtime/internal/skillworker"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestPlanWaitsForALiveWorker: a plan whose skill is registered but has no
// worker proven live — as after an outage, before heartbeats resume — waits
// for one instead of failing unknown_skill at once, and runs when a worker
// comes; with none within its own timeout it is rejected, naming why.
func TestPlanWaitsForALiveWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{WorkerTTL: 2 * time.Second})
	e.wk.Stop() // it leaves the registry: the skill stays registered, unserved
	ref, err := messages.ParseToolPath("test/step")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := e.sch.registry.Resolve(ref)
		return errors.Is(err, errNoLiveWorker)
	}, testlog.Budget(10*time.Second), 20*time.Millisecond, "the scheduler sees the skill unserved")

	done := e.startPlan(t, "wait", plan(tool("a", nil, stepInput{})))
	require.Eventually(t, func() bool { return e.rec.Contains("no live worker serves a skill of the plan yet; waiting for one") },
		testlog.Budget(10*time.Second), 20*time.Millisecond)
	ip := runner.NewInProcess()
	ip.Register("test", "step", stepFunc(e.log))
	wk, err := skillworker.New(e.srv.Connect(t), skillworker.Config{SkillsDir: e.dir, Concurrency: 4, WatchInterval: -1},
		skillworker.Options{Logger: e.logs.With("component", "worker2"), Runner: ip, Bus: e.srv.Bus})
	require.NoError(t, err)
	require.NoError(t, wk.Start(context.Background()))
	res := <-done
	require.True(t, res.Success, "ran once a worker came: %s", res.Message)
	wk.Stop()
	require.Eventually(t, func() bool {
		_, err := e.sch.registry.Resolve(ref)
		return errors.Is(err, errNoLiveWorker)
	}, testlog.Budget(10*time.Second), 20*time.Millisecond, "the scheduler sees the skill unserved again")

	p := plan(tool("a", nil, stepInput{}))
	p.TimeoutMs = 1500
	res = e.runPlan(t, "none", p)
	require.False(t, res.Success)
	require.Equal(t, messages.ReasonUnknownSkill, res.FailureReason)
	require.Contains(t, res.Message, "no live worker serves skill")
}

// TestRegistryTellsDeadFromUnheard: the scheduler's registry judges a
// skill whose workers went quiet as the narrator does (bus.Evidence):
// while the registry took no write after the skill's last heartbeat, its
// listed workers still count (a job for them waits in the stream), so a
// plan is not held or rejected for an election's silence; once the
// registry took another skill's heartbeats a TTL later, they do not.
func TestRegistryTellsDeadFromUnheard(t *testing.T) {
	const ttl = 10 * time.Second
	r := newRegistry(ttl, slog.New(slog.DiscardHandler))
	long := time.Now().Add(-time.Hour)
	entry := func(name string, at time.Time) *messages.RegistryEntry {
		return &messages.RegistryEntry{Name: name, Scripts: []messages.RegistryScript{{Name: "step"}},
			Workers: map[string]messages.WorkerInfo{"w": {ID: "w", LastSeen: at}}}
	}
	quiet := entry("quiet", long)
	r.entries["quiet"] = quiet
	r.evidence.Put("quiet", quiet, long)
	ref, err := messages.ParseToolPath("quiet/step")
	require.NoError(t, err)
	_, err = r.Resolve(ref)
	require.NoError(t, err, "silent for an hour, but nothing else was written either")
	r.evidence.Put("other", entry("other", long.Add(2*ttl)), long.Add(2*ttl))
	_, err = r.Resolve(ref)
	require.ErrorIs(t, err, errNoLiveWorker, "others were heard a TTL after it went quiet")
}
