package e2e

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// TestDeployNATSConfigs parses the cluster configs with nats-server's own
// parser and checks the game role cannot publish plans or tool jobs.
func TestDeployNATSConfigs(t *testing.T) {
	for _, v := range []string{"GAME_PASSWORD", "NARRATOR_PASSWORD", "SCHEDULER_PASSWORD", "SKILLWORKER_PASSWORD", "OPERATOR_PASSWORD"} {
		t.Setenv(v, "secret")
	}
	for _, f := range []string{"nats-1.conf", "nats-2.conf", "nats-3.conf"} {
		opts, err := server.ProcessConfigFile("../../deploy/nats/" + f)
		require.NoError(t, err, f)
		require.True(t, opts.JetStream, f)
		require.EqualValues(t, 8<<20, opts.MaxPayload, f)
		require.Len(t, opts.Routes, 3, f)
		var game *server.User
		for _, u := range opts.Users {
			if u.Username == "game" {
				game = u
			}
		}
		require.NotNil(t, game, f)
		require.NotContains(t, game.Permissions.Publish.Allow, "narratoria.plans.>")
		require.NotContains(t, game.Permissions.Publish.Allow, "narratoria.jobs.>")
		require.Contains(t, game.Permissions.Publish.Allow, "narratoria.prompts.>")
	}
}
