package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/narrator"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/scheduler"
	"github.com/narratoria/runtime/internal/skillworker"
	"github.com/narratoria/runtime/internal/testlog"
)

// TestConcurrentColdStarts (issue 44): a scheduler, a narrator and a skill
// worker started at the same moment on a server with nothing provisioned
// (provision: auto) all come up, ten times over: each creates or updates
// the streams and buckets it needs while the others do, and an update made
// from a settings read the others made stale is taken again from a fresh
// read (once, the plans bucket's "message TTL status can not be disabled"
// stopped a narrator).
func TestConcurrentColdStarts(t *testing.T) {
	testlog.Long(t, "ten servers started at once")
	t.Parallel()
	for round := range 10 {
		srv := natstest.Start(t)
		log, _ := testlog.New(t)
		skills := writeEchoSkill(t)
		type starter struct {
			name  string
			start func(context.Context) error
			stop  func()
		}
		sch, err := scheduler.New(srv.Connect(t), scheduler.Config{}, scheduler.Options{Logger: log.With("component", "scheduler"), Bus: srv.Bus})
		require.NoError(t, err)
		nar, err := narrator.New(srv.Connect(t), narrator.Config{}, narrator.Options{Logger: log.With("component", "narrator"), Bus: srv.Bus})
		require.NoError(t, err)
		wk, err := skillworker.New(srv.Connect(t), skillworker.Config{SkillsDir: skills, WatchInterval: -1}, skillworker.Options{Logger: log.With("component", "worker"), Bus: srv.Bus})
		require.NoError(t, err)
		all := []starter{{"scheduler", sch.Start, sch.Stop}, {"narrator", nar.Start, nar.Stop}, {"worker", wk.Start, wk.Stop}}
		var wg sync.WaitGroup
		errs := make([]error, len(all))
		for i, s := range all {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), testlog.Budget(60*time.Second))
				defer cancel()
				errs[i] = s.start(ctx)
			})
		}
		wg.Wait()
		for i, s := range all {
			t.Cleanup(s.stop)
			require.NoError(t, errs[i], fmt.Sprintf("round %d: the %s came up", round, s.name))
		}
		require.Eventually(t, func() bool { return sch.Ready() == nil && nar.Ready() == nil && wk.Ready() == nil }, testlog.Budget(30*time.Second), 50*time.Millisecond,
			"round %d: every component ready", round)
		for _, s := range all {
			s.stop()
		}
	}
}
