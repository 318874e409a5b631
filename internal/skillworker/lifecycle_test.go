package skillworker

import (
	"context"
	"testing"

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
}
