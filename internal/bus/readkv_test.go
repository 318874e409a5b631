package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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

// TestReadKVThroughManyPurgeMarkers: a bucket holding many purged keys (a
// finished plan leaves a purge marker per key for an hour) takes longer
// than the read's idle time to deliver them before a live key. The read
// counts them as progress and completes; one that counted only live keys
// took the markers for a stall and started again for ever (a scheduler's
// recovery never ended, so its partitions took no plan).
func TestReadKVThroughManyPurgeMarkers(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	kv, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "markers"})
	require.NoError(t, err)
	const purged = 30000
	for i := range purged { // what a purge writes: a marker that rolls its key up
		m := nats.NewMsg(fmt.Sprintf("$KV.markers.t.%d", i))
		m.Header.Set("KV-Operation", "PURGE")
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		_, err := srv.JS.PublishMsgAsync(m)
		require.NoError(t, err)
	}
	select {
	case <-srv.JS.PublishAsyncComplete():
	case <-time.After(testlog.Budget(30 * time.Second)):
		t.Fatal("the purge markers were not stored")
	}
	_, err = kv.Put(ctx, "t.live", []byte("live"))
	require.NoError(t, err)
	rctx, cancel := context.WithTimeout(ctx, testlog.Budget(60*time.Second))
	defer cancel()
	entries, err := bus.ReadKV(rctx, kv, []string{"t.>"}, 10*time.Millisecond)
	require.NoError(t, err, "the read completes")
	require.Len(t, entries, 1)
	require.Equal(t, "t.live", entries[0].Key())
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
