package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
)

// TestScanSubjectGivesUpOnALostRequest: a direct get the server took and
// never answered (its responder died in a leader change) ends in an error
// even when the caller's context has no deadline. Without the per-request
// wait, a narrator checking whether a redelivered prompt's narration was
// out blocked that session's queue for good (a cluster run lost 31
// prompts of one session that way).
func TestScanSubjectGivesUpOnALostRequest(t *testing.T) {
	srv := natstest.Start(t)
	old := *bus.DirectGetTimeout
	*bus.DirectGetTimeout = 100 * time.Millisecond
	t.Cleanup(func() { *bus.DirectGetTimeout = old })
	// A responder that takes every request and answers none.
	sub, err := srv.NC.Subscribe("$JS.API.DIRECT.GET.LOST", func(m *nats.Msg) {})
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, srv.NC.Flush())

	done := make(chan error, 1)
	go func() {
		done <- bus.ScanSubject(context.Background(), srv.NC, "LOST", "x.y", time.Now().Add(-time.Minute), func([]byte) bool { return true })
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(30 * time.Second):
		t.Fatal("ScanSubject still waiting for an answer that will never come")
	}
}
