package narrator

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/narratoria/runtime/internal/testlog"
	"github.com/narratoria/runtime/pkg/messages"
)

// TestSilenceIsNotDeathThroughTheRegistry is TestQuietWorkerIsNotDead
// through a real registry: two skills whose only workers are heard once.
// While the registry takes no other write, both stay offered for three
// worker TTLs (the narrator cannot tell a dead worker from a registry
// that refuses writes); once one of them is heard again and again, the
// registry is proven writable and the silent one leaves the catalogue.
func TestSilenceIsNotDeathThroughTheRegistry(t *testing.T) {
	t.Parallel()
	const ttl = 400 * time.Millisecond
	e := newPipeline(t, nil)
	n := e.startNarrator(t, Config{WorkerTTL: ttl}, nil)
	kv, err := e.srv.JS.KeyValue(t.Context(), messages.BucketSkills)
	require.NoError(t, err)
	beat := func(skill string) {
		entry := messages.RegistryEntry{Name: skill, Version: "1.0.0", Description: skill,
			Scripts: []messages.RegistryScript{{Name: "run.sh"}},
			Workers: map[string]messages.WorkerInfo{"w-" + skill: {ID: "w-" + skill, LastSeen: time.Now().UTC()}}}
		b, err := json.Marshal(entry)
		require.NoError(t, err)
		_, err = kv.Put(t.Context(), skill, b)
		require.NoError(t, err)
	}
	offered := func() []string {
		var names []string
		for _, s := range n.cat.Catalogue("", nil).Skills {
			names = append(names, s.Entry.Name)
		}
		slices.Sort(names)
		return names
	}
	beat("ghost")
	beat("living")
	require.Eventually(t, func() bool { return slices.Equal(offered(), []string{"ghost", "living"}) },
		testlog.Budget(5*time.Second), 10*time.Millisecond, "both offered once heard")
	time.Sleep(3 * ttl)
	require.Equal(t, []string{"ghost", "living"}, offered(), "silence of the whole registry is not death")
	require.Eventually(t, func() bool {
		beat("living")
		return slices.Equal(offered(), []string{"living"})
	}, testlog.Budget(10*time.Second), ttl/4, "the registry took other heartbeats a TTL after ghost's last: ghost is dead")
}
