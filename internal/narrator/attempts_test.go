package narrator

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestAttemptRecordAfterForget: a record deleted when its prompt was
// narrated loads as none with its delete's revision; a narrator that saw
// it so may record an attempt, but not once another narrator recorded one
// since (its save is a conflict), and a save as if the key were never
// written (revision 0, what a create did) is refused too: a prompt
// another narrator finished meanwhile is never planned a second time.
func TestAttemptRecordAfterForget(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	log, _ := testlog.New(t)
	kv, err := srv.JS.KeyValue(ctx, messages.BucketInflight)
	require.NoError(t, err)
	s := &attemptStore{kv: kv, js: srv.JS}
	rec := &messages.PromptAttempt{Attempt: 1, PlanID: "p1", Plan: []byte(`{"requestId":"p1"}`)}

	got, rev, err := s.load(ctx, "s.a", log)
	require.NoError(t, err)
	require.Nil(t, got)
	require.Zero(t, rev, "never written")
	rev, err = s.save(ctx, "s.a", rec, rev)
	require.NoError(t, err)
	s.forget(ctx, "s.a", log)

	got, deleted, err := s.load(ctx, "s.a", log)
	require.NoError(t, err)
	require.Nil(t, got)
	require.Greater(t, deleted, rev, "a deleted record reads with its delete's revision")
	_, err = s.save(ctx, "s.a", rec, 0)
	require.True(t, bus.IsConflict(err), "a save as if never written is refused after a delete: %v", err)

	// Another narrator records an attempt after our load: ours conflicts.
	_, err = s.save(ctx, "s.a", rec, deleted)
	require.NoError(t, err)
	_, err = s.save(ctx, "s.a", rec, deleted)
	require.True(t, bus.IsConflict(err), "%v", err)
}
