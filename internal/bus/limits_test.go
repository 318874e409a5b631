package bus_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/natstest"
)

// TestStreamsRefuseOversizedMessages: a 1 MB prompt is refused by the
// prompts stream with an error to its publisher, before it takes any
// space; a prompt of the largest size the narrator takes is stored. The
// same holds for decisions and events at their own limits.
func TestStreamsRefuseOversizedMessages(t *testing.T) {
	srv := natstest.Start(t)
	ctx := context.Background()
	big := []byte(`{"text":"` + strings.Repeat("x", 1<<20) + `"}`)
	_, err := srv.JS.Publish(ctx, "narratoria.prompts.s1", big)
	require.Error(t, err, "a 1 MB prompt is refused")
	require.Contains(t, err.Error(), "maximum")
	_, err = srv.JS.Publish(ctx, "narratoria.prompts.s1", []byte(`{"text":"`+strings.Repeat("é", 4000)+`"}`))
	require.NoError(t, err, "the largest prompt the narrator takes is stored")
	_, err = srv.JS.Publish(ctx, "narratoria.approvals.00000000-0000-4000-8000-000000000001.t", make([]byte, 64<<10))
	require.Error(t, err, "a 64 KiB decision is refused")
	_, err = srv.JS.Publish(ctx, "narratoria.events.s1.00000000-0000-4000-8000-000000000001.t", make([]byte, 2<<20))
	require.Error(t, err, "a 2 MiB event is refused")
}
