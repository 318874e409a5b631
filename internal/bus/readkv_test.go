package bus_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
)

// TestReadKV returns the current values of the matching keys, deleted
// ones left out, and leaves the caller's filters as they were (the KV
// watcher rewrites the keys it is given, which broke a read started
// again after a stall). The stall itself is TestLoadAllWhilePlansFinish
// in internal/scheduler (make test-long).
func TestReadKV(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	kv, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "readkv"})
	require.NoError(t, err)
	for _, k := range []string{"p.a", "p.b", "t.a.x", "other"} {
		_, err := kv.Put(ctx, k, []byte(k))
		require.NoError(t, err)
	}
	_, err = kv.Put(ctx, "p.a", []byte("again"))
	require.NoError(t, err)
	require.NoError(t, kv.Delete(ctx, "p.b"))
	filters := []string{"p.>", "t.>"}
	for range 2 {
		entries, err := bus.ReadKV(ctx, kv, filters, time.Second)
		require.NoError(t, err)
		got := map[string]string{}
		for _, e := range entries {
			got[e.Key()] = string(e.Value())
		}
		require.Equal(t, map[string]string{"p.a": "again", "t.a.x": "t.a.x"}, got)
		require.Equal(t, []string{"p.>", "t.>"}, filters)
	}
	empty, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "empty"})
	require.NoError(t, err)
	entries, err := bus.ReadKV(ctx, empty, []string{"p.>"}, time.Second)
	require.NoError(t, err)
	require.Empty(t, entries)
}

// TestStopWatchLeavesNoGoroutine: a watch whose reader stopped reading
// with its channel full (more than 256 updates behind) leaves nothing
// running once StopWatch stopped it; Stop alone leaks the client's
// delivery goroutine, blocked on its send.
func TestStopWatchLeavesNoGoroutine(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	kv, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "stopwatch"})
	require.NoError(t, err)
	for i := range 300 {
		_, err := kv.Put(ctx, fmt.Sprintf("k%d", i), []byte("v"))
		require.NoError(t, err)
	}
	before := goleak.IgnoreCurrent()
	w, err := kv.WatchAll(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(w.Updates()) == cap(w.Updates()) }, testlog.Budget(5*time.Second), 10*time.Millisecond,
		"the watch's channel fills")
	bus.StopWatch(w)
	goleak.VerifyNone(t, before)
}
