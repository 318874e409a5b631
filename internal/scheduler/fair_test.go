package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/skillworker"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// fairEnv is a scheduler and one worker of two slots serving the skill
// "slow", whose script (a real process) sleeps a tenth of a second: two
// jobs run at once, the rest wait.
type fairEnv struct {
	srv *natstest.Server
	bus bus.Config
	sch *Scheduler
	// mu guards order: the plans whose result came, in the order they came.
	mu    sync.Mutex
	order []string
}

func newFairEnv(t *testing.T, tenants bool) *fairEnv {
	t.Helper()
	srv := natstest.Start(t)
	e := &fairEnv{srv: srv, bus: srv.Bus}
	if tenants {
		e.bus.Tenants = true
		ctx, cancel := context.WithTimeout(context.Background(), testlog.Budget(20*time.Second))
		defer cancel()
		require.NoError(t, bus.Provision(ctx, srv.JS, e.bus))
	}
	dir := t.TempDir()
	// A root worker runs each script as a user of its own, who must reach
	// the skill's folder.
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	sd := filepath.Join(dir, "slow")
	require.NoError(t, os.MkdirAll(filepath.Join(sd, "scripts"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(sd, "skill.json"),
		[]byte(`{"name":"slow","version":"1.0.0","description":"a slow skill","scripts":[{"name":"run","path":"scripts/run"}]}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(sd, "scripts", "run"),
		[]byte("#!/bin/sh\ncat > /dev/null\nsleep 0.1\necho '{\"version\":\"0\",\"type\":\"done\",\"ok\":true}'\n"), 0o755))
	log, _ := testlog.New(t)
	wk, err := skillworker.New(srv.Connect(t), skillworker.Config{SkillsDir: dir, Concurrency: 2, WatchInterval: -1},
		skillworker.Options{Logger: log.With("component", "worker"), Bus: e.bus})
	require.NoError(t, err)
	require.NoError(t, wk.Start(context.Background()))
	t.Cleanup(wk.Stop)
	e.sch, err = New(srv.Connect(t), Config{LeaseTTL: time.Second}, Options{Logger: log.With("component", "scheduler"), Bus: e.bus})
	require.NoError(t, err)
	require.NoError(t, e.sch.Start(context.Background()))
	t.Cleanup(e.sch.Stop)
	require.Eventually(t, e.sch.OwnsAll, testlog.Budget(10*time.Second), 10*time.Millisecond)
	require.Eventually(t, func() bool { return e.sch.registry.capacity("slow") == 2 }, testlog.Budget(10*time.Second), 10*time.Millisecond)
	sub, err := srv.Connect(t).Subscribe("narratoria.results.>", func(m *nats.Msg) {
		var r struct {
			PlanID  string `json:"planId"`
			Success bool   `json:"success"`
		}
		_ = json.Unmarshal(m.Data, &r)
		e.mu.Lock()
		defer e.mu.Unlock()
		if !r.Success {
			r.PlanID = "failed:" + r.PlanID
		}
		e.order = append(e.order, r.PlanID)
	})
	require.NoError(t, err)
	require.NoError(t, sub.SetPendingLimits(-1, -1))
	return e
}

// results waits for n results and returns the plans in the order their
// results came; it fails the test on a failed plan or a second result.
func (e *fairEnv) results(t *testing.T, n int) []string {
	t.Helper()
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.order) >= n
	}, testlog.Budget(2*time.Minute), 20*time.Millisecond, "results")
	time.Sleep(100 * time.Millisecond) // a second result would come now
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := map[string]bool{}
	for _, id := range e.order {
		require.NotContains(t, id, "failed:", "a plan failed")
		require.False(t, seen[id], "plan %s has two results", id)
		seen[id] = true
	}
	require.Len(t, e.order, n)
	return append([]string(nil), e.order...)
}

// dispatched is how many jobs of the skill are held or admitted now.
func (e *fairEnv) dispatched(skill string) int {
	e.sch.gate.mu.Lock()
	defer e.sch.gate.mu.Unlock()
	sg := e.sch.gate.skills[skill]
	if sg == nil {
		return 0
	}
	return len(sg.inflight) + sg.q.Len()
}

// done is how many results came.
func (e *fairEnv) done() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.order)
}

// count is how many of ids are among the first n of order.
func count(order []string, n int, ids []string) int {
	in := map[string]bool{}
	for _, id := range ids {
		in[id] = true
	}
	c := 0
	for _, id := range order[:min(n, len(order))] {
		if in[id] {
			c++
		}
	}
	return c
}

// finishedBefore is how many of ids finished before the last of last.
func finishedBefore(order, ids, last []string) int {
	end := 0
	for i, id := range order {
		for _, l := range last {
			if id == l {
				end = max(end, i)
			}
		}
	}
	return count(order, end, ids)
}

// TestFairSessions: one session floods a saturated skill with 40 plans,
// then another session sends 6. With the work queue alone (first in,
// first out) the 6 finish after all 40; with fair dispatch the sessions
// take turns, so the 6 are done while most of the flood still waits. Every
// plan gets exactly one result.
func TestFairSessions(t *testing.T) {
	e := newFairEnv(t, false)
	flood := e.publish(t, "flood", 40)
	// The flood's jobs are all dispatched (held, in the work queue, or
	// done) before the paced session sends anything.
	require.Eventually(t, func() bool { return e.dispatched("slow")+e.done() >= 40 }, testlog.Budget(time.Minute), 10*time.Millisecond)
	paced := e.publish(t, "paced", 6)
	order := e.results(t, 46)
	before := finishedBefore(order, flood, paced)
	t.Logf("flood plans finished before the paced session's last: %d of 40", before)
	require.Less(t, before, 20, "the paced session waited behind the flood")
}

// TestFairTenantWeights: two tenants flood a saturated skill at once;
// heavy has weight 3 (its state stream's metadata, as `narratoria tenant
// add --weight 3` sets it), light weight 1. While both wait, heavy is
// served about three jobs for one of light's.
func TestFairTenantWeights(t *testing.T) {
	e := newFairEnv(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), testlog.Budget(20*time.Second))
	defer cancel()
	require.NoError(t, bus.ProvisionTenant(ctx, e.srv.JS, e.bus, "heavy", bus.TenantLimits{Weight: 3}))
	require.NoError(t, bus.ProvisionTenant(ctx, e.srv.JS, e.bus, "light", bus.TenantLimits{Weight: 1}))
	// The scheduler reads a tenant's weight when it first dispatches for
	// it: one plan each first, then the floods.
	e.publish(t, "heavy.warm", 1)
	e.publish(t, "light.warm", 1)
	e.results(t, 2)
	require.Eventually(t, func() bool { return e.sch.weights.get("heavy") == 3 }, testlog.Budget(10*time.Second), 10*time.Millisecond)
	heavy := e.publish(t, "heavy.s", 40)
	light := e.publish(t, "light.s", 40)
	order := e.results(t, 82)[2:]
	// The window: while both still wait (light alone at the end).
	h, l := count(order, 40, heavy), count(order, 40, light)
	t.Logf("of the first 40 results: heavy %d, light %d", h, l)
	require.Greater(t, h, 2*l, "weight 3 against 1")
	require.Less(t, h, 5*l, "weight 3 against 1")
}

// publish sends n one-tool plans of a session at once and returns their
// IDs; each result is noted in e.order as it comes.
func (e *fairEnv) publish(t *testing.T, session string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		p := &messages.Plan{RequestID: uuid.NewString(), DisabledSkills: []string{}, Metadata: messages.PlanMetadata{GenerationAttempt: 1},
			Tools: []messages.Tool{{ToolID: "t", ToolPath: "slow/run", Input: json.RawMessage(`{}`), Dependencies: []string{}, Required: true}}}
		ids[i] = p.RequestID
		b, _ := json.Marshal(p)
		_, err := e.srv.JS.PublishAsync("narratoria.plans."+session, b)
		require.NoError(t, err)
	}
	select {
	case <-e.srv.JS.PublishAsyncComplete():
	case <-time.After(testlog.Budget(20 * time.Second)):
		t.Fatal("plans not stored")
	}
	return ids
}

func TestHeadroom(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		slots   int
		unknown bool
		rate    float64
		want    int
	}{
		{slots: 2, unknown: true, want: 1},
		{slots: 2, rate: 6.6, want: 0},      // 300 ms jobs on 2 slots: the round trip is a few % of a job
		{slots: 2, rate: 40, want: 1},       // 50 ms jobs
		{slots: 64, rate: 10_000, want: 64}, // in-process jobs: as many again as the slots
		{slots: 16, rate: 400, want: 8},
	} {
		if got := headroom(tc.slots, tc.unknown, tc.rate); got != tc.want {
			t.Errorf("headroom(%d, %v, %.1f) = %d, want %d", tc.slots, tc.unknown, tc.rate, got, tc.want)
		}
	}
}

// TestFairFloodSchedulerKilled: the scheduler process holding a flood's
// jobs back (80 plans against 16 slots) is killed with SIGKILL mid-flood
// and another starts. The jobs it held were never stored: the new owner's
// probes find neither job nor outcome and send them; the jobs it had
// admitted are found stored and not sent again. Every plan gets exactly
// one result, a success, and every script ran exactly once.
func TestFairFloodSchedulerKilled(t *testing.T) {
	testlog.Long(t, "builds the scheduler binary and kills it mid-flood")
	t.Parallel()
	e := newEnv(t, Config{})
	e.sch.Stop() // the in-process scheduler steps aside for the binary
	bin := schedulerBinary(t)
	first := startSchedulerProcess(t, bin, e.srv.URL())
	var dones []<-chan *messages.ExecutionResult
	var ids []string
	for i := range 88 {
		session := fmt.Sprintf("flood%d", i%4)
		if i >= 80 {
			session = "calm"
		}
		p := plan(tool("t", nil, stepInput{SleepMs: 100}))
		ids = append(ids, p.RequestID)
		dones = append(dones, e.startPlan(t, session, p))
	}
	require.Eventually(t, func() bool { return len(e.log.all()) >= 20 }, testlog.Budget(time.Minute), 10*time.Millisecond)
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	_, _ = first.Process.Wait()
	ranBeforeKill := len(e.log.all())
	startSchedulerProcess(t, bin, e.srv.URL())
	for i, done := range dones {
		res := <-done
		require.NotNil(t, res, "no result for plan %d", i)
		require.True(t, res.Success, res.Message)
	}
	runs := map[string]int{}
	for _, r := range e.log.all() {
		runs[r.plan+"/"+r.tool]++
	}
	for _, id := range ids {
		require.Equal(t, 1, runs[id+"/t"], "plan %s: its script ran once", id)
	}
	t.Logf("%d of 88 scripts had run when the scheduler was killed", ranBeforeKill)
	require.Less(t, ranBeforeKill, 80, "the kill came while jobs were held back")
}
