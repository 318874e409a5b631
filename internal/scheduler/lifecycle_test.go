package scheduler

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/lifecycle"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/partition"
)

// TestLifecycle: the scheduler starts once, a Stop before Start keeps it
// from starting, Stop is idempotent, and Ready follows.
func TestLifecycle(t *testing.T) {
	srv := natstest.Start(t)
	never, err := New(srv.Connect(t), Config{}, Options{Bus: srv.Bus})
	require.NoError(t, err)
	never.Stop()
	require.EqualError(t, never.Start(context.Background()), "scheduler: cannot start: stopped")
	require.EqualError(t, never.Ready(), "stopped")

	s, err := New(srv.Connect(t), Config{}, Options{Bus: srv.Bus})
	require.NoError(t, err)
	require.EqualError(t, s.Ready(), "not started")
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(s.Stop)
	require.NoError(t, s.Ready())
	err = s.Start(context.Background())
	var se *lifecycle.StateError
	require.ErrorAs(t, err, &se)
	require.EqualError(t, err, "scheduler: cannot start: running")
	s.Stop()
	s.Stop()
	require.EqualError(t, s.Ready(), "stopped")
	require.ErrorIs(t, errNotOwner, partition.ErrNotOwner)
}
