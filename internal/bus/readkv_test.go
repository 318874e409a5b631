package bus_test

import (
	"context"
	"errors"
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
	// Filters that overlap give each key once.
	entries, err := bus.ReadKV(ctx, kv, []string{"p.>", ">"}, time.Second)
	require.NoError(t, err)
	var keys []string
	for _, e := range entries {
		keys = append(keys, e.Key())
	}
	require.ElementsMatch(t, []string{"p.a", "t.a.x", "other"}, keys)
	empty, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "empty"})
	require.NoError(t, err)
	entries, err = bus.ReadKV(ctx, empty, []string{"p.>"}, time.Second)
	require.NoError(t, err)
	require.Empty(t, entries)
}

// TestReadKVThroughManyPurgeMarkers: a bucket holding many purged keys (a
// finished plan leaves a purge marker per key for a minute) takes longer
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
	var subjects []string
	for i := range purged {
		subjects = append(subjects, fmt.Sprintf("$KV.markers.t.%d", i))
	}
	purgeAll(t, srv.JS, subjects, false)
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

// TestReadKVFiltersThroughManyPurgeMarkers: a read of two filters over a
// bucket of many purged keys completes about as fast as a read of each.
// One watcher of both filters made the server take seconds once the purged
// writes left gaps in the stream (10 s for 12,000 keys written and purged
// on nats-server 2.15.2, 28 ms for each filter alone; markers alone, with
// no gaps, read fast either way), so a
// scheduler taking partitions over an hour after a busy spell waited
// minutes before it ran a plan. The budget is a hundredfold of what the
// read takes; a watcher of both filters misses it.
func TestReadKVFiltersThroughManyPurgeMarkers(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	kv, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "filters"})
	require.NoError(t, err)
	const plans = 10000
	var subjects []string
	for i := range plans {
		subjects = append(subjects, fmt.Sprintf("$KV.filters.p.%d", i), fmt.Sprintf("$KV.filters.t.%d.a", i))
	}
	purgeAll(t, srv.JS, subjects, true)
	_, err = kv.Put(ctx, "t.live.a", []byte("live"))
	require.NoError(t, err)
	rctx, cancel := context.WithTimeout(ctx, testlog.Budget(2*time.Second))
	defer cancel()
	entries, err := bus.ReadKV(rctx, kv, []string{"p.>", "t.>"}, time.Second)
	require.NoError(t, err, "the read completes within its budget")
	require.Len(t, entries, 1)
	require.Equal(t, "t.live.a", entries[0].Key())
}

// purgeAll writes what a purge of each subject's key writes: a marker that
// rolls the key up; written first, each key's value leaves a gap in the
// stream once the marker removed it.
func purgeAll(t *testing.T, js jetstream.JetStream, subjects []string, written bool) {
	t.Helper()
	// On a busy machine the server falls behind the asynchronous
	// publishes (nats.go then stalls them, and gives up after a moment):
	// wait for it, then go on.
	publish := func(m *nats.Msg) {
		for {
			_, err := js.PublishMsgAsync(m)
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				require.NoError(t, err)
				return
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(testlog.Budget(30 * time.Second)):
				t.Fatal("the server took none of the pending messages")
			}
		}
	}
	for _, subj := range subjects {
		if written {
			publish(&nats.Msg{Subject: subj, Data: []byte("record")})
		}
		m := nats.NewMsg(subj)
		m.Header.Set("KV-Operation", "PURGE")
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		publish(m)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(testlog.Budget(30 * time.Second)):
		t.Fatal("the purge markers were not stored")
	}
}
