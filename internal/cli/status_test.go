package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
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
