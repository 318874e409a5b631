package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
)

// TestIsConflictOnR1AndR3: a stale-revision update and a create of an
// existing key are conflicts on a single node (error 10071) and on a
// replicated R3 bucket (10164) alike.
func TestIsConflictOnR1AndR3(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	single := natstest.Start(t)
	cluster := natstest.StartCluster(t, 3)
	js3, err := jetstream.New(cluster.Connect(t))
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		js       jetstream.JetStream
		replicas int
	}{"R1": {single.JS, 1}, "R3": {js3, 3}} {
		var kv jetstream.KeyValue
		require.Eventually(t, func() bool {
			kv, err = tc.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "conflicts", Replicas: tc.replicas})
			return err == nil
		}, testlog.Budget(30*time.Second), 100*time.Millisecond, "%s bucket: %v", name, err)
		var rev uint64
		require.Eventually(t, func() bool { // an R3 bucket's stream elects its leader first
			rev, err = kv.Create(ctx, "k", []byte("1"))
			return err == nil
		}, testlog.Budget(30*time.Second), 100*time.Millisecond, "%s first write: %v", name, err)
		_, err = kv.Update(ctx, "k", []byte("2"), rev)
		require.NoError(t, err)
		_, err = kv.Update(ctx, "k", []byte("3"), rev)
		require.True(t, bus.IsConflict(err), "%s: stale update is a conflict: %v", name, err)
		_, err = kv.Create(ctx, "k", []byte("4"))
		require.True(t, bus.IsConflict(err), "%s: create of an existing key is a conflict: %v", name, err)
	}
}

// TestProvisionedDuplicateWindow: every stream remembers message IDs for
// the configured window (10 minutes by default), not the server's 2.
func TestProvisionedDuplicateWindow(t *testing.T) {
	srv := natstest.Start(t)
	for _, sc := range srv.Bus.StreamConfigs() {
		st, err := srv.JS.Stream(t.Context(), sc.Name)
		require.NoError(t, err)
		require.Equal(t, bus.DuplicateWindowDefault, st.CachedInfo().Config.Duplicates, sc.Name)
	}
}
