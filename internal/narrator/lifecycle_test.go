package narrator

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/partition"
)

// TestLifecycle: the narrator starts once, a Stop before Start keeps it
// from starting, Stop is idempotent, and Ready follows.
func TestLifecycle(t *testing.T) {
	srv := natstest.Start(t)
	never, err := New(srv.Connect(t), Config{}, Options{Bus: srv.Bus})
	require.NoError(t, err)
	never.Stop()
	require.EqualError(t, never.Start(context.Background()), "narrator: cannot start: stopped")
	require.EqualError(t, never.Ready(), "stopped")

	n, err := New(srv.Connect(t), Config{}, Options{Bus: srv.Bus})
	require.NoError(t, err)
	require.EqualError(t, n.Ready(), "not started")
	require.NoError(t, n.Start(context.Background()))
	t.Cleanup(n.Stop)
	require.NoError(t, n.Ready())
	require.EqualError(t, n.Start(context.Background()), "narrator: cannot start: running")
	n.Stop()
	require.True(t, n.stopping(), "no prompt starts after Stop")
	n.Stop()
	require.EqualError(t, n.Ready(), "stopped")

	// A failed start: Stop still runs the narrator's steps, and with no
	// prompt queued it does not sit out the grace (an hour here).
	failed, err := New(srv.Connect(t), Config{ShutdownGrace: time.Hour}, Options{Bus: srv.Bus})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, failed.Start(ctx))
	require.EqualError(t, failed.Ready(), "failed to start")
	failed.Stop()
	require.EqualError(t, failed.Ready(), "stopped")
	require.ErrorIs(t, errNotOwner, partition.ErrNotOwner)
}
