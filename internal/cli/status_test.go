package cli

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestStatusSaysWhenAWindowShortens: a discard-old store full to its
// budget whose oldest message is younger than its age limit (the prompt
// dedupe bucket above about 1 prompt/s) is marked, with how much it keeps;
// the same store with room, or whose oldest message has reached its age
// limit, is not; a discard-new store is marked near its limit instead.
func TestStatusSaysWhenAWindowShortens(t *testing.T) {
	now := time.Now()
	info := func(discard jetstream.DiscardPolicy, bytes uint64, oldest time.Duration) *jetstream.StreamInfo {
		return &jetstream.StreamInfo{
			Config: jetstream.StreamConfig{MaxBytes: 256 << 20, MaxAge: 24 * time.Hour, Discard: discard, MaxMsgSize: 8 << 20},
			State:  jetstream.StreamState{Bytes: bytes, Msgs: 1000, FirstTime: now.Add(-oldest)},
		}
	}
	full := storeUse("KV narratoria_prompts", info(jetstream.DiscardOld, 250<<20, 3*time.Hour), now)
	require.True(t, full.Shortened)
	require.Equal(t, "3h0m0s", full.Oldest)
	require.False(t, storeUse("KV narratoria_prompts", info(jetstream.DiscardOld, 100<<20, 3*time.Hour), now).Shortened, "room left")
	require.False(t, storeUse("KV narratoria_prompts", info(jetstream.DiscardOld, 250<<20, 25*time.Hour), now).Shortened, "the whole window kept")
	require.False(t, storeUse("KV narratoria_sessions", info(jetstream.DiscardNew, 250<<20, 3*time.Hour), now).Shortened)

	var out bytes.Buffer
	printStorage(&out, []StoreUse{full, storeUse("KV narratoria_sessions", info(jetstream.DiscardNew, 250<<20, 3*time.Hour), now)})
	require.Contains(t, out.String(), "FULL: keeps only the last 3h0m0s (age limit 24h0m0s)")
	require.Contains(t, out.String(), "NEAR ITS LIMIT")
}

// TestStatusCountsFenceMarkersApart (issue 47): the fence markers the
// partitions' owners keep on the jobs and plans streams (and the plans
// bucket) are not counted as messages: a jobs stream holding only
// markers shows 0 messages, and the markers apart.
func TestStatusCountsFenceMarkersApart(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	for p := range 5 {
		_, err := srv.JS.Publish(t.Context(), fmt.Sprintf("narratoria.jobs._fence.%d", p), []byte("owner"))
		require.NoError(t, err)
	}
	_, err := srv.JS.Publish(t.Context(), "narratoria.jobs.dice-roller."+uuid.NewString()+".roll", []byte(`{}`))
	require.NoError(t, err)
	us, err := storage(t.Context(), srv.JS, "narratoria")
	require.NoError(t, err)
	i := slices.IndexFunc(us, func(u StoreUse) bool { return u.Name == messages.StreamJobs })
	require.GreaterOrEqual(t, i, 0)
	require.Equal(t, uint64(1), us[i].Messages, "the one job")
	require.Equal(t, uint64(5), us[i].Markers, "the fence markers, apart")
	var out bytes.Buffer
	printStorage(&out, us)
	require.Regexp(t, `NARRATORIA_JOBS\s+\d+ bytes\s+1 msgs \(\+5 fence markers\)`, out.String())
}
