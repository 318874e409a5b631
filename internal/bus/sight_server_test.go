package bus_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/bus"
	"github.com/narratoria/runtime/internal/natstest"
	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestSightAfterARealOutage: nats-server is down longer than the workers'
// TTL. Right after the observer reconnects, a worker heard just before the
// outage is still alive to it (the TTL alone would call it dead); a TTL
// later, if still silent, it is dead.
func TestSightAfterARealOutage(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	s := bus.NewSight(nc, ttl)
	heard := time.Now()
	e := &messages.RegistryEntry{Workers: map[string]messages.WorkerInfo{"w": {ID: "w", LastSeen: heard}}}
	require.Len(t, s.LiveWorkers(e, time.Now()), 1)

	srv.RestartAfter(t, 2*ttl) // an outage longer than the TTL
	require.Eventually(t, nc.IsConnected, testlog.Budget(10*time.Second), 10*time.Millisecond)
	now := time.Now()
	require.Empty(t, e.LiveWorkers(now, ttl), "by the TTL alone the worker is dead")
	require.Len(t, s.LiveWorkers(e, now), 1, "silence while the observer could not see is not death")
	require.True(t, s.Blind(now))
	time.Sleep(ttl + 100*time.Millisecond)
	require.Empty(t, s.LiveWorkers(e, time.Now()), "still silent a TTL after the reconnect: dead")
}
