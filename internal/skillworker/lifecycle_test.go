package skillworker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/natstest"
)

// TestLifecycle: the worker starts once, a Stop before Start keeps it
// from starting, Stop is idempotent, and Ready follows.
func TestLifecycle(t *testing.T) {
	srv := natstest.Start(t)
	cfg := Config{SkillsDir: t.TempDir(), WatchInterval: -1}
	never, err := New(srv.Connect(t), cfg, Options{Bus: srv.Bus})
	require.NoError(t, err)
	never.Stop()
	require.EqualError(t, never.Start(context.Background()), "skillworker: cannot start: stopped")
	require.EqualError(t, never.Ready(), "stopped")

	w, err := New(srv.Connect(t), cfg, Options{Bus: srv.Bus})
	require.NoError(t, err)
	require.EqualError(t, w.Ready(), "not started")
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(w.Stop)
	require.NoError(t, w.Ready())
	require.EqualError(t, w.Start(context.Background()), "skillworker: cannot start: running")
	w.Stop()
	require.Error(t, w.fetchCtx.Err(), "no job is pulled after Stop")
	w.Stop()
	require.EqualError(t, w.Ready(), "stopped")

	// A failed start: Stop still runs the worker's steps, and with no job
	// running it does not sit out the grace (an hour here).
	cfg.ShutdownGrace = time.Hour
	failed, err := New(srv.Connect(t), cfg, Options{Bus: srv.Bus})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, failed.Start(ctx))
	require.EqualError(t, failed.Ready(), "failed to start")
	require.EqualError(t, failed.Start(context.Background()), "skillworker: cannot start: failed to start")
	failed.Stop()
	require.EqualError(t, failed.Ready(), "stopped")
}
