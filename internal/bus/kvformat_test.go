package bus_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
)

// TestKVFormat: the messages built with the key-value format are what
// nats.go's KeyValue reads — a value on KVSubject is the key's value, a
// KVPurgeMsg removes the key and its history (KVDeleted says so) and goes
// after its TTL — and LastSeq finds the last message of a key, its marker
// included, 0 for a key never written.
func TestKVFormat(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ctx := t.Context()
	kv, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "fmt", History: 5})
	require.NoError(t, err)
	st, err := srv.JS.Stream(ctx, bus.KVStream("fmt"))
	require.NoError(t, err, "KVStream names the bucket's stream")
	cfg := st.CachedInfo().Config
	cfg.AllowMsgTTL = true
	_, err = srv.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)

	_, err = srv.JS.Publish(ctx, bus.KVSubject("fmt", "a.b"), []byte("one"))
	require.NoError(t, err)
	_, err = kv.Put(ctx, "a.b", []byte("two"))
	require.NoError(t, err)
	e, err := kv.Get(ctx, "a.b")
	require.NoError(t, err)
	require.Equal(t, "two", string(e.Value()))
	seq, err := bus.LastSeq(ctx, srv.NC, bus.KVStream("fmt"), bus.KVSubject("fmt", "a.b"))
	require.NoError(t, err)
	require.Equal(t, e.Revision(), seq)

	ack, err := srv.JS.PublishMsg(ctx, bus.KVPurgeMsg("fmt", "a.b", time.Second))
	require.NoError(t, err)
	_, err = kv.Get(ctx, "a.b")
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound)
	m, err := st.GetLastMsgForSubject(ctx, bus.KVSubject("fmt", "a.b"))
	require.NoError(t, err)
	require.True(t, bus.KVDeleted(m.Header), "the marker is a delete")
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs, "the purge rolled the key's history up")
	seq, err = bus.LastSeq(ctx, srv.NC, bus.KVStream("fmt"), bus.KVSubject("fmt", "a.b"))
	require.NoError(t, err)
	require.Equal(t, ack.Sequence, seq, "the marker is the key's last message")
	require.Eventually(t, func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 0
	}, testlog.Budget(10*time.Second), 100*time.Millisecond, "the marker goes after its TTL")

	seq, err = bus.LastSeq(ctx, srv.NC, bus.KVStream("fmt"), bus.KVSubject("fmt", "never"))
	require.NoError(t, err)
	require.Zero(t, seq)
}
