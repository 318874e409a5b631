package e2e

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// TestDeployNATSConfigs parses the cluster configs with nats-server's own
// parser: JetStream, routes to the three nodes, the payload limit, the
// system account. What the users may do is proven against a running
// server by TestPermissions.
func TestDeployNATSConfigs(t *testing.T) {
	for _, v := range []string{"GAME_PASSWORD", "NARRATOR_PASSWORD", "SCHEDULER_PASSWORD", "WORKER_STORY_PASSWORD", "WORKER_ART_PASSWORD", "OPERATOR_PASSWORD", "SYS_PASSWORD"} {
		t.Setenv(v, "secret")
	}
	for _, f := range []string{"nats-1.conf", "nats-2.conf", "nats-3.conf"} {
		opts, err := server.ProcessConfigFile("../../deploy/nats/" + f)
		require.NoError(t, err, f)
		require.True(t, opts.JetStream, f)
		require.EqualValues(t, 8<<20, opts.MaxPayload, f)
		require.Len(t, opts.Routes, 3, f)
		require.Equal(t, "SYS", opts.SystemAccount, f)
		require.Len(t, opts.Users, 7, f) // game, narrator, scheduler, two worker pools, operator, sys
	}
}
