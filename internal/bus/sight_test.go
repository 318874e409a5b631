package bus

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/pkg/messages"
)

// TestSightSilenceIsNotDeath: a worker last heard before the observer
// lost sight stays alive while the observer is disconnected and for a TTL
// after it reconnects; then the TTL alone judges again.
func TestSightSilenceIsNotDeath(t *testing.T) {
	const ttl = 10 * time.Second
	t0 := time.Unix(1000, 0)
	connected, reconnects := true, uint64(0)
	s := newSight(func() (bool, uint64) { return connected, reconnects }, ttl)
	e := &messages.RegistryEntry{Workers: map[string]messages.WorkerInfo{"w": {ID: "w", LastSeen: t0}}}
	live := func(at time.Duration) int { return len(s.LiveWorkers(e, t0.Add(at))) }

	require.Equal(t, 1, live(5*time.Second))
	// The observer's connection drops at +6 s; a 45 s outage.
	connected = false
	require.Equal(t, 1, live(20*time.Second), "blind: no verdict of death")
	require.Equal(t, 1, live(50*time.Second))
	// Back at +51 s: a reconnect. The worker was heard at +0, within a TTL
	// of the moment sight was lost (+5 s, the last time it was seen up).
	connected, reconnects = true, 1
	require.Equal(t, 1, live(51*time.Second), "grace after the observer's reconnect")
	require.Equal(t, 1, live(60*time.Second))
	// A TTL after the reconnect, silence counts again.
	require.Equal(t, 0, live(62*time.Second), "a worker still silent a TTL after the reconnect is dead")
	// A worker heard recently is alive.
	e.Workers["w"] = messages.WorkerInfo{ID: "w", LastSeen: t0.Add(61 * time.Second)}
	require.Equal(t, 1, live(63*time.Second))
}

// TestSightDeathWithoutOutage: with the observer connected all along, a
// worker silent for longer than the TTL is dead, as before.
func TestSightDeathWithoutOutage(t *testing.T) {
	const ttl = 10 * time.Second
	t0 := time.Unix(1000, 0)
	s := newSight(func() (bool, uint64) { return true, 3 }, ttl)
	e := &messages.RegistryEntry{Workers: map[string]messages.WorkerInfo{"w": {ID: "w", LastSeen: t0}}}
	s.Observe(t0)
	require.Len(t, s.LiveWorkers(e, t0.Add(9*time.Second)), 1)
	require.Empty(t, s.LiveWorkers(e, t0.Add(11*time.Second)))
	require.False(t, s.Blind(t0.Add(11*time.Second)))
}
