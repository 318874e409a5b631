package narrator

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/pkg/messages"
)

// TestQuietWorkerIsNotDead: a skill whose only worker has not been heard
// for two TTLs (its heartbeats could not reach the registry) stays in the
// catalogue — the scheduler holds a plan naming it until the worker is
// heard again — and one silent for more than staleGrace TTLs leaves it.
func TestQuietWorkerIsNotDead(t *testing.T) {
	const ttl = 10 * time.Second
	c := newCatalogueSource(ttl, slog.New(slog.DiscardHandler))
	now := time.Now()
	entry := func(name string, quiet time.Duration) *messages.RegistryEntry {
		return &messages.RegistryEntry{Name: name, Workers: map[string]messages.WorkerInfo{"w-" + name: {ID: "w-" + name, LastSeen: now.Add(-quiet)}}}
	}
	c.skills["live"] = entry("live", ttl/2)
	c.skills["quiet"] = entry("quiet", 2*ttl)
	c.skills["gone"] = entry("gone", (staleGrace+1)*ttl)
	var names []string
	for _, s := range c.Catalogue("s", nil).Skills {
		names = append(names, s.Entry.Name)
	}
	require.ElementsMatch(t, []string{"live", "quiet"}, names)
}
