package bus_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestBucketUpdateFromAStaleRead (issue 44): components started together
// each read the plans bucket's settings, compare and update them. One that
// read them before another turned per-message TTLs on updates from that
// read: the server refuses to turn them off again ("message TTL status can
// not be disabled"), and the component died at start. An update of the
// plans bucket never turns them off, whatever it read.
func TestBucketUpdateFromAStaleRead(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	kc := srv.Bus.WithDefaults().BucketConfigs()
	var plans jetstream.KeyValueConfig
	for _, c := range kc {
		if c.Bucket == messages.BucketPlans {
			plans = c
		}
	}
	require.NotEmpty(t, plans.Bucket)
	require.NoError(t, bus.Provision(ctx, srv.JS, srv.Bus))
	info, err := srv.JS.Stream(ctx, "KV_"+messages.BucketPlans)
	require.NoError(t, err)
	require.True(t, info.CachedInfo().Config.AllowMsgTTL)
	// What a start that read the bucket before another turned its TTLs on
	// holds (and a budget that differs, so it updates).
	stale := info.CachedInfo().Config
	stale.AllowMsgTTL, stale.AllowAtomicPublish = false, false
	plans.MaxBytes /= 2
	_, err = bus.UpdateBucketStream(ctx, srv.JS, stale, plans)
	require.NoError(t, err, "an update from a stale read does not turn the TTLs off")
	info, err = srv.JS.Stream(ctx, "KV_"+messages.BucketPlans)
	require.NoError(t, err)
	require.True(t, info.CachedInfo().Config.AllowMsgTTL)
}
